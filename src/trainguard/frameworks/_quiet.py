"""Keep TensorFlow's start-up log lines out of a worker's output without hiding real errors.

TensorFlow 2.21 prints, on ``import tensorflow``, before it has read ``TF_CPP_MIN_LOG_LEVEL``::

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795983069.685864   27655 port.cc:153] oneDNN custom operations are on. ...

(twice: two copies of absl). No environment variable silences them (measured with levels 0-3), so a
worker imports TensorFlow with fd 2 sent to a file, then writes that file back to its stderr without
the lines ``TF_CPP_MIN_LOG_LEVEL`` would have hidden: absl's pre-init notice and ``I`` lines at level
>= 1, ``W`` lines at >= 2, ``E`` lines at >= 3. Everything else (tracebacks, fatal ``F`` lines, what
other code prints) passes through. If the worker dies during the import, the supervisor writes the
file back when it reaps the worker (:func:`replay_capture`). The file lives in a private (0700)
folder, the run's own or one made for the import, is created exclusively and is never opened
through a symbolic link, so nobody else can plant or read it. With ``TF_CPP_MIN_LOG_LEVEL=0`` (or
unset) nothing is filtered. Imports nothing heavy.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trainguard._wrapped_loader import WrappedLoader

__all__ = ["is_startup_noise", "filter_noise", "install_quiet_imports", "capture_path", "replay_capture"]

_ABSL_PREINIT = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# absl's line prefix: severity letter, MMDD, time, thread id, file:line]
_ABSL_LINE = re.compile(r"^([IWE])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.\-/]+:\d+\] ")
_LEVEL = {"I": 1, "W": 2, "E": 3}

#: Top-level modules whose first import is captured and filtered.
QUIET_MODULES = ("tensorflow",)


def min_log_level(environ: Any = None) -> int:
    """``TF_CPP_MIN_LOG_LEVEL`` as an int (0 when unset or not a number).

    Args:
        environ: the environment to read; None reads ``os.environ``.

    Returns:
        The level, 0 to 3.
    """
    value = (os.environ if environ is None else environ).get("TF_CPP_MIN_LOG_LEVEL", "0")
    try:
        return int(str(value).strip())
    except ValueError:
        return 0


def is_startup_noise(line: str, level: int) -> bool:
    """Whether TensorFlow's ``TF_CPP_MIN_LOG_LEVEL=level`` would have hidden this line had it been read.

    Args:
        line: one line TensorFlow's C++ side printed.
        level: the ``TF_CPP_MIN_LOG_LEVEL`` to judge it by.

    Returns:
        True when that level hides it.
    """
    if level < 1:
        return False
    text = line.rstrip("\r\n")
    if text == _ABSL_PREINIT:
        return True
    match = _ABSL_LINE.match(text)
    return match is not None and _LEVEL[match.group(1)] <= level


def filter_noise(text: str, level: int) -> str:
    """``text`` without its start-up noise lines (see :func:`is_startup_noise`)."""
    return "".join(line for line in text.splitlines(keepends=True) if not is_startup_noise(line, level))


def capture_path(pid: int, capture_dir: str) -> str:
    """Where worker ``pid`` keeps its stderr while it imports a noisy framework."""
    return os.path.join(capture_dir, f"worker-{pid}.stderr")


def replay_capture(pid: int, *, capture_dir: str | None, out_fd: int = 2, level: int | None = None) -> None:
    """Write what worker ``pid`` captured back to ``out_fd``, filtered, and remove the file (if any).

    A symbolic link in the file's place is neither followed nor removed.

    Args:
        pid: the worker whose capture to replay.
        capture_dir: the folder of the capture files, or None (nothing to replay).
        out_fd: where to write it (standard error by default).
        level: the log level to filter by; None reads ``TF_CPP_MIN_LOG_LEVEL``.
    """
    if capture_dir is None:
        return
    path = capture_path(pid, capture_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read()
    except OSError:
        return
    try:
        os.unlink(path)
    except OSError:
        pass
    text = filter_noise(data.decode("utf-8", "replace"), min_log_level() if level is None else level)
    if text:
        try:
            os.write(out_fd, text.encode("utf-8", "replace"))
        except OSError:
            pass


@contextmanager
def _stderr_to_file(level: int, capture_dir: str | None) -> Iterator[None]:
    own_dir = None
    if capture_dir is None:
        try:
            from trainguard._tempdirs import make_dir

            own_dir = capture_dir = make_dir("import")  # 0700, a fresh name that says whose it is
        except OSError:  # no temp folder: let the lines through rather than fail the import
            yield
            return
    path = capture_path(os.getpid(), capture_dir)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:  # the name is taken (never reuse what someone else made): let the lines through
        yield
        return
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass
        os.dup2(saved, 2)
        os.close(saved)
        replay_capture(os.getpid(), capture_dir=capture_dir, level=level)
        if own_dir is not None:
            try:
                os.rmdir(own_dir)
            except OSError:
                pass


class _QuietLoader(WrappedLoader):
    def __init__(self, loader: Any, level: int, capture_dir: str | None) -> None:
        super().__init__(loader)
        self._level = level
        self._capture_dir = capture_dir

    def exec_module(self, module: Any) -> None:
        # the real loader goes back on the module first: importlib.resources and reloads use it
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        with _stderr_to_file(self._level, self._capture_dir):
            self._loader.exec_module(module)


class _QuietFinder(importlib.abc.MetaPathFinder):
    def __init__(self, modules: tuple[str, ...], level: int, capture_dir: str | None) -> None:
        self._modules = set(modules)
        self._level = level
        self._capture_dir = capture_dir

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self._modules:
            return None
        self._modules.discard(fullname)  # first import only
        if not self._modules and self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _QuietLoader(spec.loader, self._level, self._capture_dir)
        return spec


def install_quiet_imports(
    modules: tuple[str, ...] = QUIET_MODULES, *, capture_dir: str | None = None
) -> bool:
    """Capture and filter the first import of ``modules`` (not yet imported) in this process.

    ``capture_dir`` is a private folder for the capture file (a runner's per-run folder, so the
    supervisor can replay what a worker that died mid-import printed); None makes one for the import.

    Returns:
        False when there is nothing to do: ``TF_CPP_MIN_LOG_LEVEL`` is 0/unset, or all are imported.

    Args:
        modules: the modules whose first import is captured.
        capture_dir: a private folder for the capture file, or None.
    """
    level = min_log_level()
    pending = tuple(m for m in modules if m not in sys.modules)
    if level < 1 or not pending:
        return False
    sys.meta_path.insert(0, _QuietFinder(pending, level, capture_dir))
    return True
