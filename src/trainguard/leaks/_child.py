"""Run a leak check in a fresh Python process (``isolated=True`` and the CLI).

The parent writes a spec (what to run and the config) to a temporary file and starts
``python -m trainguard.leaks._child SPEC``. The child sends JSON lines on its original stdout:
``{"event": "progress", ...}`` while it runs, ``{"event": "reading", "row": {...}}`` after each
reading (so that a child that dies hard still leaves its series), then ``{"event": "report", "report": {...}}`` or
``{"event": "error", "type": ..., "message": ...}``. The user's own prints go to stderr (fd 1 is
pointed at fd 2), so that they can never corrupt the protocol or a ``--json`` output.

A target is either a file (``{"kind": "file", "path", "step", "setup"}``, loaded as a module
whose name is not ``__main__``, so its ``if __name__ == "__main__":`` block does not run) or
cloudpickled callables.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainguard._loadfile import import_file
from trainguard.exceptions import ConfigError, TrainguardError
from trainguard.process import kill_descendants, kill_tree, signal_name

if TYPE_CHECKING:
    from trainguard.leaks._report import LeakReport
    from trainguard.leaks._run import LeakCheckConfig

__all__ = ["run_isolated", "load_target", "main"]

logger = logging.getLogger(__name__)

_MODULE_NAME = "__trainguard_leakcheck_target__"
#: The one setup name whose absence is a warning, not an error (see :func:`load_target`).
DEFAULT_SETUP_NAME = "setup"


def load_target(
    path: str, step_name: str, setup_name: str | None
) -> tuple[Callable[..., Any], Callable[[], Any] | None]:
    """Import ``path`` as a module (not as ``__main__``) and return its step and setup callables.

    A missing function called ``setup`` (the conventional name, which tools pass to every file
    alike) is a warning on stderr and the step runs without setup; a missing setup of any other
    name, or a missing step, is an error.

    Raises:
        ConfigError: the file is missing, does not import, or lacks the names.
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{path}: no such file: give the path of a Python file, e.g. train.py:step")
    if file.suffix != ".py":
        raise ConfigError(f"{path}: not a .py file: give a Python file, e.g. train.py:step")
    try:
        module = import_file(file, _MODULE_NAME)
    except ConfigError as exc:
        if getattr(exc, "nested", False):  # the file starts a leak check or Runner at import
            raise
        raise ConfigError(
            f"{path}: importing it raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    except SystemExit as exc:
        raise ConfigError(
            f"{path}: importing it called sys.exit({exc.code}); move that under `if __name__ == '__main__':`"
        ) from None
    except BaseException as exc:
        raise ConfigError(
            f"{path}: importing it raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None

    def get(name: str, role: str) -> Callable[..., Any]:
        if not hasattr(module, name):
            public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise ConfigError(
                f"{path} has no {role} {name!r}"
                + (f" (it defines: {', '.join(public[:10])})" if public else "")
            )
        value = getattr(module, name)
        if not callable(value):
            raise ConfigError(
                f"{path}: {name!r} is a {type(value).__name__}, not a function: name a function as the {role}"
            )
        return value

    step = get(step_name, "step")
    if setup_name == DEFAULT_SETUP_NAME and not hasattr(module, setup_name):
        # `--setup setup` is what scripts and harnesses pass to every file alike; a file that needs
        # no setup should still be checked. A step that needs setup's value still fails below,
        # and any other name the user typed is a mistake worth stopping for.
        print(
            f"trainguard leakcheck: warning: {path} has no function {setup_name!r}; running the step without setup",
            file=sys.stderr,
        )
        return step, None
    setup = get(setup_name, "setup") if setup_name else None
    return step, setup


def _emit(stream: Any, event: dict[str, Any]) -> None:
    stream.write(json.dumps(event, default=str) + "\n")
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    """Child entry point: ``python -m trainguard.leaks._child SPEC_FILE``."""
    args = sys.argv[1:] if argv is None else argv
    proto_fd = os.dup(1)
    # user prints (Python and C level) go to stderr; the protocol keeps the real stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    proto = os.fdopen(proto_fd, "w", buffering=1)
    try:
        spec_path = args[0]
        with open(spec_path, "rb") as fh:
            raw = fh.read()
        import cloudpickle

        # TensorFlow's start-up banner, which no setting silences, is filtered from the first
        # import as in runner workers; errors and tracebacks still come through
        from trainguard.frameworks import install_quiet_imports

        install_quiet_imports()
        spec = cloudpickle.loads(raw)
        from trainguard._nesting import importing, set_role
        from trainguard.leaks._run import LeakCheckConfig, call_plan, run_loop

        set_role("leak-check process")
        config = LeakCheckConfig(**spec["config"])
        target = spec["target"]
        if target["kind"] == "file":
            with importing(target["path"]):
                step, setup = load_target(target["path"], target["step"], target.get("setup"))
        else:
            step, setup = target["step"], target.get("setup")
        if setup is None:
            call_plan(step, None, False)
        report = run_loop(
            step,
            setup,
            config,
            progress=lambda ev: _emit(proto, {"event": "progress", **ev}),
            isolated=True,
            on_reading=lambda row: _emit(proto, {"event": "reading", "row": row}),
        )
        _emit(proto, {"event": "report", "report": report.to_dict()})
        code = 0
    except TrainguardError as err:
        _emit(proto, {"event": "error", "type": type(err).__name__, "message": str(err)})
        code = 2
    except BaseException as err:  # setup raised, or something unexpected: report it in one line
        import traceback

        traceback.print_exc()
        _emit(
            proto,
            {
                "event": "error",
                "type": type(err).__name__,
                "message": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
            },
        )
        code = 2
    proto.flush()
    sys.stderr.flush()
    # processes the step started and left running (workers, servers) would hold our pipes open
    # and outlive the check: end them, the check is over
    kill_descendants()
    # skip interpreter teardown: frameworks can take seconds to unload and add nothing here
    os._exit(code)


def run_isolated(
    target: dict[str, Any],
    config: LeakCheckConfig,
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
    env: dict[str, str] | None = None,
) -> LeakReport:
    """Run the leak check of ``target`` in a fresh process and return its LeakReport.

    Raises:
        ConfigError: the target cannot be sent (not picklable), imported or found, or setup failed.
    """
    import cloudpickle

    try:
        payload = cloudpickle.dumps({"target": target, "config": config.to_dict()})
    except Exception as exc:
        raise ConfigError(
            f"the step or setup cannot be sent to a fresh process ({type(exc).__name__}: {exc}); "
            "use isolated=False or define them at module level"
        ) from None
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # as in runner workers: TF's info lines off
    # the child imports what the parent could: the same sys.path
    paths = [p for p in sys.path if p]
    child_env["PYTHONPATH"] = os.pathsep.join(paths + [child_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    from trainguard._tempdirs import owner_tag, sweep_once

    sweep_once()
    with tempfile.TemporaryDirectory(prefix=f"trainguard-leakcheck-{owner_tag()}-") as tmp:
        spec_path = os.path.join(tmp, "spec.pkl")
        with open(spec_path, "wb") as fh:
            fh.write(payload)
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainguard.leaks._child", spec_path],
            stdout=subprocess.PIPE,
            stderr=None,
            env=child_env,
            text=True,
        )
        watchdog = None
        if config.max_time_s is not None:
            # the check stops itself at max_time (or min_calls); this only catches a step that
            # never returns: re-armed at each event, so a slow step's min_calls can outlast it
            watchdog = Watchdog(config.max_time_s * 1.5 + 120, functools.partial(kill_tree, proc.pid))
        rows: list[dict[str, Any]] = []
        report = error = None
        try:
            report, error = _read_events(proc, rows, progress, None if watchdog is None else watchdog.arm)
        finally:
            if watchdog is not None:
                watchdog.cancel()
            try:
                proc.wait(
                    timeout=30
                    if report or error
                    else (None if watchdog is None else max(1.0, watchdog.deadline - time.monotonic()))
                )
            except subprocess.TimeoutExpired:
                kill_tree(proc.pid)
                proc.wait()
    if error is not None:
        raise ConfigError(error.get("message") or error.get("type", "the leak check failed"))
    if report is None:
        # not a usage error: the step (or a library under it) crashed the interpreter or was
        # killed; say how, and keep what was measured
        return died_report(proc.returncode, rows, config)
    return report


class Watchdog:
    """Calls ``expire`` when ``limit_s`` pass without an ``arm()``: a leak check's guard against
    a step that never returns (each reading re-arms it). Armed on creation."""

    def __init__(self, limit_s: float, expire: Callable[[], object]) -> None:
        self.limit_s, self._expire = limit_s, expire
        self._timer: threading.Timer | None = None
        self.deadline = 0.0
        self.arm()

    def arm(self) -> None:
        self.cancel()
        self.deadline = time.monotonic() + self.limit_s
        self._timer = threading.Timer(self.limit_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _read_events(
    proc: subprocess.Popen,
    rows: list[dict[str, Any]],
    progress: Callable[[dict[str, Any]], None] | None,
    on_event: Callable[[], None] | None = None,
) -> tuple[Any, dict[str, Any] | None]:
    """Read the child's JSON lines until its report or error: readings go to ``rows`` (kept when
    the child dies hard), progress events to ``progress``; ``on_event`` is called at each line.
    Returns (report or None, error or None)."""
    from trainguard.leaks._report import LeakReport

    assert proc.stdout is not None
    for line in proc.stdout:
        if on_event is not None:
            on_event()
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = event.pop("event", None)
        if kind == "reading":
            rows.append(event["row"])
        elif kind == "progress" and progress is not None:
            progress(event)
        elif kind == "report":
            return LeakReport.from_dict(event["report"]), None
        elif kind == "error":
            return None, event
    return None, None


def _death_cause(returncode: int | None) -> str:
    import signal

    if returncode is None:
        return "ended without a report"
    if returncode < 0:
        text = f"was killed by {signal_name(-returncode)}"
        if -returncode == signal.SIGKILL:
            text += " (the OS out-of-memory killer sends SIGKILL; see `dmesg`)"
        elif -returncode == signal.SIGSEGV:
            text += " (a segmentation fault in native code)"
        return text
    return f"exited with code {returncode} without a report"


def died_report(returncode: int | None, rows: list[dict[str, Any]], config: LeakCheckConfig) -> LeakReport:
    """The ``inconclusive`` report of a leak-check process that died without reporting.

    Args:
        returncode: the process's exit status (negative: the signal that killed it).
        rows: the readings it streamed before dying.
        config: the check's :class:`LeakCheckConfig`.

    Returns:
        A LeakReport with the cause in ``reason`` and ``extra["signal"]``, the series so far and,
        with enough readings, the slope over it.
    """

    from trainguard.leaks import stats
    from trainguard.leaks._report import LeakReport
    from trainguard.leaks.stats import Verdict

    iterations = int(rows[-1]["iteration"]) if rows else 0
    cause = _death_cause(returncode)
    reason = f"the leak-check process {cause} after {iterations} iterations"
    if not rows:
        reason = f"the leak-check process {cause} before the first reading (during import or setup)"
    slope = None
    tolerance = config.tolerance_bytes_per_iter or 0.0
    if len(rows) >= 4:
        xs = [r["iteration"] for r in rows]
        ys = [r["bytes"] for r in rows]
        d = stats.decide(ys, xs, alpha=config.alpha, tolerance=tolerance, final=True)
        slope = d.slope
        reason += f"; the series so far: {d.reason}"
    sig = None
    if returncode is not None and returncode < 0:
        sig = signal_name(-returncode)
    elapsed = float(rows[-1].get("elapsed_s", 0.0)) if rows else 0.0
    return LeakReport(
        verdict=Verdict.INCONCLUSIVE,
        reason=reason,
        metric=config.metric if config.metric != "auto" else "rss",
        slope_bytes_per_iter=slope.slope if slope else None,
        ci_low_bytes_per_iter=slope.ci_low if slope and math.isfinite(slope.ci_low) else None,
        ci_high_bytes_per_iter=slope.ci_high if slope and math.isfinite(slope.ci_high) else None,
        least_squares_bytes_per_iter=None,
        iterations=iterations,
        warmup_iterations=0,
        measurements=len(rows),
        calls_per_measurement=int(rows[1]["iteration"] - rows[0]["iteration"]) if len(rows) > 1 else 1,
        tolerance_bytes_per_iter=float(tolerance),
        elapsed_s=elapsed,
        step_time_s=None,
        series=tuple(rows),
        isolated=True,
        extra={"returncode": returncode, "signal": sig, "alpha": config.alpha},
    )


if __name__ == "__main__":
    main()
