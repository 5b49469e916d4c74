"""Command trials: any program as a trial (``trainguard.Command`` and ``trainguard run --cmd``).

A command trial runs the program once per trial, inside a light Python worker that is reused the
way any worker is: the worker writes the trial's params as JSON to the program's stdin and to a
file named in ``TRAINGUARD_PARAMS_FILE``, forwards the program's output, and reads the result
from the **last line that starts with** ``TRAINGUARD_RESULT `` (then one JSON value). The program's
process tree is the worker's, so the supervisor samples it from outside and holds it to
``memory_limit``, ``timeout`` and retries exactly as it does a Python trial, and its children die
with it. How the program ends maps onto the same causes as a Python worker's end:

- killed by a signal: the worker ends itself with the same signal, so the supervisor classifies
  the death as it does any worker's (``crashed`` with the signal's name; SIGKILL with the cgroup's
  ``oom_kill`` count risen is ``os_oom``);
- a non-zero exit code: ``exception``, with the code and the last lines the program wrote to stderr;
- exit 0 with no result line, or one that is not JSON: ``exception`` saying which;
- a result line longer than ``max_result_bytes``: ``result_too_large``.

The worker's own memory (about 20 MB of Python) is part of the tree it is held to.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainguard.exceptions import ConfigError

__all__ = ["Command", "RESULT_PREFIX", "PARAMS_FILE_ENV", "CommandTrial", "CommandFailed"]

#: A command trial's result line starts with this; the JSON value follows on the same line.
RESULT_PREFIX = "TRAINGUARD_RESULT "
#: The environment variable that names the JSON file holding the trial's params.
PARAMS_FILE_ENV = "TRAINGUARD_PARAMS_FILE"
#: Output a program writes besides its result line that is passed on to the terminal per trial;
#: past it the rest is counted and dropped (a flooding program must not flood the supervisor).
FORWARD_CAP_BYTES = 1 << 20
#: A command's first argument with one of these endings is a script that must exist.
_SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".py", ".sh", ".rb", ".pl", ".r", ".jl", ".lua")
#: How many of the program's last stderr lines a failure message keeps.
STDERR_TAIL_LINES = 20


@dataclass(frozen=True, slots=True)
class Command:
    """A program to run as a trial: ``Runner.map(trainguard.Command(["python", "other.py"]), params)``.

    Args:
        argv: the program and its arguments (a list, or one string split as a shell would).
        cwd: the folder it runs in (default: the caller's).
        env: variables added to its environment.

    The program reads its params as JSON from stdin or from the file named in
    ``TRAINGUARD_PARAMS_FILE``, and prints its result as one line
    ``TRAINGUARD_RESULT {"loss": 0.1}`` (the last such line counts).

    Raises:
        ConfigError: an empty command, or a program that is not found.
        MissingDependencyError: the program is ``node`` and Node.js is not installed.
    """

    argv: tuple[str, ...]
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __init__(
        self,
        argv: Sequence[str] | str,
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(argv, str):
            try:
                parts = tuple(shlex.split(argv))
            except ValueError as err:
                raise ConfigError(f"command {argv!r} does not parse ({err}): check its quotes") from None
        elif isinstance(argv, Sequence) and all(isinstance(a, (str, os.PathLike)) for a in argv):
            parts = tuple(os.fspath(a) for a in argv)
        else:
            raise ConfigError(
                f"a Command takes a list of strings such as ['python', 'train.py'], not {argv!r}"
            )
        if not parts or not parts[0]:
            raise ConfigError(
                "the command is empty: give the program and its arguments, e.g. ['python', 'train.py']"
            )
        if cwd is not None and not os.path.isdir(cwd):
            raise ConfigError(f"the command's cwd {os.fspath(cwd)!r} is not a folder")
        env_map = dict(env or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env_map.items()):
            raise ConfigError("a Command's env must map strings to strings, e.g. {'OMP_NUM_THREADS': '1'}")
        object.__setattr__(self, "argv", parts)
        object.__setattr__(self, "cwd", None if cwd is None else os.path.abspath(cwd))
        object.__setattr__(self, "env", env_map)
        self.check()

    def check(self) -> None:
        """The program exists, and so does the script it is given (before any work starts).

        Raises:
            ConfigError: the program or its script does not exist, or is not found on PATH.
        """
        self._check_program()
        script = self.argv[1] if len(self.argv) > 1 else ""
        if script.lower().endswith(_SCRIPT_SUFFIXES) and not script.startswith("-"):
            path = script if os.path.isabs(script) or self.cwd is None else os.path.join(self.cwd, script)
            if not os.path.isfile(path):
                raise ConfigError(
                    f"the command's script {script!r} does not exist (looked in {self.cwd or os.getcwd()})"
                )

    def _check_program(self) -> None:
        program = self.argv[0]
        if os.sep in program or "/" in program:
            path = program if os.path.isabs(program) or self.cwd is None else os.path.join(self.cwd, program)
            if not os.path.isfile(path):
                raise ConfigError(f"command {program!r} does not exist")
            if not os.access(path, os.X_OK):
                raise ConfigError(
                    f"command {program!r} is not executable: chmod +x it, or run it through its interpreter"
                )
            return
        if program == "node":
            from trainguard._node import find_node

            find_node()
            return
        if shutil.which(program) is None:
            raise ConfigError(f"command {program!r} is not found on PATH: install it or give its full path")

    @property
    def ref(self) -> str:
        return "cmd:" + shlex.join(self.argv)

    def payload(self) -> str:
        """The command as the worker receives it.

        Returns:
            JSON text of the argument list and options.
        """
        return json.dumps({"argv": list(self.argv), "cwd": self.cwd, "env": dict(self.env)})

    def version(self) -> str | None:
        """A hash of the script the command runs (its first argument that is a file), if any.

        Returns:
            The hash, or None when no argument is a file.
        """
        import hashlib

        for arg in self.argv[1:]:
            path = arg if os.path.isabs(arg) or self.cwd is None else os.path.join(self.cwd, arg)
            if os.path.isfile(path):
                try:
                    with open(path, "rb") as fh:
                        return hashlib.sha256(fh.read()).hexdigest()[:16]
                except OSError:
                    return None
        return None


class CommandFailed(Exception):
    """A command trial ended without a usable result; ``trial_status`` is the status reported."""

    def __init__(self, message: str, trial_status: str = "exception", detail: str = "") -> None:
        super().__init__(message)
        self.trial_status = trial_status
        self.detail = detail


class _Output:
    """Reads the program's stdout: finds the result line, forwards the rest within a cap."""

    def __init__(self, max_result_bytes: int) -> None:
        self.prefix = RESULT_PREFIX.encode()
        self.cap = max_result_bytes
        self.result: bytes | None = None
        self.too_large: int | None = None  # size of the largest over-long result line
        self.forwarded = 0
        self.dropped = 0
        self._skipping: int | None = None  # bytes of an over-long result line seen so far
        self._passing = False  # inside an over-long ordinary line, forwarded in pieces

    def _forward(self, data: bytes) -> None:
        room = FORWARD_CAP_BYTES - self.forwarded
        if room > 0:
            part = data[:room]
            try:
                sys.stdout.buffer.write(part)
                sys.stdout.buffer.flush()
            except (OSError, ValueError):
                pass
            self.forwarded += len(part)
            data = data[room:]
        self.dropped += len(data)

    def _line(self, line: bytes) -> None:
        if line.startswith(self.prefix):
            body = line[len(self.prefix) :]
            if len(body) > self.cap:  # the last result line counts: an over-long one replaces any before
                self.too_large = max(self.too_large or 0, len(body))
                self.result = None
            else:
                self.result = body
        else:
            self._forward(line + b"\n")

    def pump(self, stream: Any) -> None:
        pending = bytearray()
        limit = self.cap + len(self.prefix) + 2
        while True:
            try:
                chunk = stream.read1(1 << 16)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            pending += chunk
            while pending:
                nl = pending.find(b"\n")
                if self._skipping is not None:  # inside a result line already over the cap
                    end = len(pending) if nl < 0 else nl
                    self._skipping += end
                    del pending[: end + (0 if nl < 0 else 1)]
                    if nl >= 0:
                        self.too_large = max(self.too_large or 0, self._skipping)
                        self._skipping = None
                    continue
                if self._passing:  # the rest of a long ordinary line: never read as a result line
                    end = len(pending) if nl < 0 else nl + 1
                    self._forward(bytes(pending[:end]))
                    del pending[:end]
                    self._passing = nl < 0
                    continue
                if nl < 0:
                    if len(pending) > limit:
                        if pending.startswith(self.prefix):
                            self._skipping = len(pending) - len(self.prefix)
                            self.result = None
                        else:
                            self._forward(bytes(pending))
                            self._passing = True
                        pending.clear()
                    break
                line = bytes(pending[:nl])
                del pending[: nl + 1]
                self._line(line)
        if pending:
            self._line(bytes(pending))
        if self._skipping is not None:
            self.too_large = max(self.too_large or 0, self._skipping)


#: TF.js's start-up banner in Node (one console.warn between two rules of "="), which every
#: ``node`` trial printed; dropped from a command's stderr as js/trainguard/lib/quiet.js drops it in
#: trainguard's own Node processes. Everything else the program writes comes through.
TFJS_BANNER = b"looks like you are running TensorFlow.js in Node.js"


class _BannerFilter:
    """Drops TF.js's banner and the rules around it from a stream of lines: a rule line waits for
    the next line, and is passed on unless that line is the banner."""

    def __init__(self) -> None:
        self._rule: bytes | None = None
        self._after_banner = False

    @staticmethod
    def _is_rule(raw: bytes) -> bool:
        body = raw.strip()
        return len(body) >= 8 and set(body) == {ord("=")}

    def feed(self, raw: bytes) -> list[bytes]:
        if TFJS_BANNER in raw:
            self._rule, self._after_banner = None, True
            return []
        if self._is_rule(raw):
            if self._after_banner:
                self._after_banner = False
                return []
            held, self._rule = self._rule, raw
            return [held] if held is not None else []
        self._after_banner = False
        held, self._rule = self._rule, None
        return [held, raw] if held is not None else [raw]

    def flush(self) -> list[bytes]:
        held, self._rule = self._rule, None
        return [held] if held is not None else []


def _pump_stderr(stream: Any, tail: deque[str]) -> None:
    from trainguard.runner.worker.stderr_pump import StderrPump

    StderrPump(tail, FORWARD_CAP_BYTES, lines=_BannerFilter()).pump(stream)


def _wait_program(proc: subprocess.Popen[bytes]) -> tuple[int, int | None]:
    """The program's exit code and peak RSS in bytes. POSIX: ``os.wait4``'s rusage (the exact
    peak of the program's own process). Windows has no ``wait4``: the exit code alone (the
    worker's Job Object keeps the tree's peak)."""
    if sys.platform == "win32":
        return proc.wait(), None
    _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), int(usage.ru_maxrss) * 1024


def _write_stdin(stream: Any, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except (OSError, ValueError):
        pass  # the program does not read its stdin: it has the params file


class CommandTrial:
    """Worker side: runs the program once per call (``fn(params)`` for the worker's trial loop)."""

    def __init__(self, spec: dict[str, Any], max_result_bytes: int | None = None) -> None:
        self.argv = list(spec["argv"])
        self.cwd = spec.get("cwd")
        self.env = dict(spec.get("env") or {})
        self.max_result_bytes = max_result_bytes or (16 << 20)
        #: the program's own peak RSS (ru_maxrss of its wait4), read by the worker for the trial's peak
        self.last_peak_bytes: int | None = None
        self.shown = shlex.join(self.argv)

    def __call__(self, params: Any) -> Any:
        self.last_peak_bytes = None
        data = json.dumps(params).encode()
        from trainguard._tempdirs import make_file

        fd, params_file = make_file("params", ".json")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        env = {**os.environ, **self.env, PARAMS_FILE_ENV: params_file}
        try:
            try:
                proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=self.cwd,
                    env=env,
                )
            except OSError as err:
                raise CommandFailed(f"command {self.shown!r} cannot start: {err}") from None
            output = _Output(self.max_result_bytes)
            tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
            threads = [
                threading.Thread(target=_write_stdin, args=(proc.stdin, data), daemon=True),
                threading.Thread(target=output.pump, args=(proc.stdout,), daemon=True),
                threading.Thread(target=_pump_stderr, args=(proc.stderr, tail), daemon=True),
            ]
            for t in threads:
                t.start()
            proc.returncode, self.last_peak_bytes = _wait_program(proc)
            # what the program left running would hold its pipes open and outlive the trial
            for t in threads[1:]:
                t.join(timeout=1.0)
            _end_children()
            for t in threads[1:]:
                t.join(timeout=5.0)
        finally:
            try:
                os.unlink(params_file)
            except OSError:
                pass
        rc = proc.returncode
        if rc < 0:
            self._die_like(-rc)
        if output.dropped:
            print(
                f"trainguard: {output.dropped} more bytes of output from {self.shown!r} not shown",
                file=sys.stderr,
                flush=True,
            )
        last = f": {tail[-1]}" if tail else ""
        if rc > 0:
            raise CommandFailed(f"{self.shown} exited with code {rc}{last}", detail="\n".join(tail))
        if output.too_large is not None and output.result is None:
            raise CommandFailed(
                f"{self.shown} printed a result line of {output.too_large} bytes, over max_result_bytes="
                f"{self.max_result_bytes}: print a summary (write large outputs to a file and print its path)",
                trial_status="result_too_large",
            )
        if output.result is None:
            raise CommandFailed(
                f"{self.shown} exited with code 0 but printed no result line: print one line "
                f"'{RESULT_PREFIX}<json>', e.g. {RESULT_PREFIX}{{\"loss\": 0.1}}"
            )
        try:
            return json.loads(output.result)
        except ValueError as err:
            head = output.result[:80].decode("utf-8", "replace")
            raise CommandFailed(
                f"{self.shown} printed a result line that is not JSON ({err}): {RESULT_PREFIX}{head}"
            ) from None

    def _die_like(self, sig: int) -> None:
        """The program was killed by ``sig``: end this worker by the same signal, so the supervisor
        tells the cause exactly as for a Python worker (its own kills, OS OOM killer, crashes)."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default action is not to end a process


def load(payload: str, max_result_bytes: int | None) -> CommandTrial:
    return CommandTrial(json.loads(payload), max_result_bytes)


def _end_children() -> None:
    """End what the program left running, by the worker's tier (psutil alone under ``portable``)."""
    from trainguard.runner.worker.process import _TIER

    if _TIER[0] in ("portable", "windows"):
        from trainguard.process.portable import kill_children_portable

        kill_children_portable()
    else:
        from trainguard.process import kill_descendants

        kill_descendants()
