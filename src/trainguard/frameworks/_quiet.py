"""Keep TensorFlow's start-up log lines out of a worker's output without hiding real errors.

TensorFlow 2.21 prints, on ``import tensorflow``, before it has read ``TF_CPP_MIN_LOG_LEVEL``::

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795983069.685864   27655 port.cc:153] oneDNN custom operations are on. ...

(twice: two copies of absl). No environment variable silences them (measured with levels 0-3), so a
worker imports TensorFlow with fd 2 sent to a file, then writes that file back to its stderr without
the lines ``TF_CPP_MIN_LOG_LEVEL`` would have hidden: absl's pre-init notice and ``I`` lines at level
>= 1, ``W`` lines at >= 2, ``E`` lines at >= 3. Everything else (tracebacks, fatal ``F`` lines, what
other code prints) passes through. If the worker dies during the import, the supervisor writes the
file back when it reaps the worker (:func:`replay_capture`). With ``TF_CPP_MIN_LOG_LEVEL=0`` (or
unset) nothing is filtered. Imports nothing heavy.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["is_startup_noise", "filter_noise", "install_quiet_imports", "capture_path", "replay_capture"]

_ABSL_PREINIT = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# absl's line prefix: severity letter, MMDD, time, thread id, file:line]
_ABSL_LINE = re.compile(r"^([IWE])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.\-/]+:\d+\] ")
_LEVEL = {"I": 1, "W": 2, "E": 3}

#: Top-level modules whose first import is captured and filtered.
QUIET_MODULES = ("tensorflow",)


def min_log_level(environ: Any = None) -> int:
    """``TF_CPP_MIN_LOG_LEVEL`` as an int (0 when unset or not a number)."""
    value = (os.environ if environ is None else environ).get("TF_CPP_MIN_LOG_LEVEL", "0")
    try:
        return int(str(value).strip())
    except ValueError:
        return 0


def is_startup_noise(line: str, level: int) -> bool:
    """Whether TensorFlow's ``TF_CPP_MIN_LOG_LEVEL=level`` would have hidden this line had it been read."""
    if level < 1:
        return False
    text = line.rstrip("\r\n")
    if text == _ABSL_PREINIT:
        return True
    match = _ABSL_LINE.match(text)
    return bool(match) and _LEVEL[match.group(1)] <= level


def filter_noise(text: str, level: int) -> str:
    """``text`` without its start-up noise lines (see :func:`is_startup_noise`)."""
    return "".join(line for line in text.splitlines(keepends=True) if not is_startup_noise(line, level))


def capture_path(pid: int) -> str:
    """Where worker ``pid`` keeps its stderr while it imports a noisy framework."""
    return os.path.join(tempfile.gettempdir(), f"trainguard-worker-{pid}.stderr")


def replay_capture(pid: int, *, out_fd: int = 2, level: int | None = None) -> None:
    """Write what worker ``pid`` captured back to ``out_fd``, filtered, and remove the file (if any)."""
    path = capture_path(pid)
    try:
        with open(path, "rb") as fh:
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
def _stderr_to_file(level: int) -> Iterator[None]:
    path = capture_path(os.getpid())
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        os.unlink(path)
    except OSError:
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:  # no temp folder: let the lines through rather than fail the import
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
        replay_capture(os.getpid(), level=level)


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, level: int) -> None:
        self._loader = loader
        self._level = level

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        # the real loader goes back on the module first: importlib.resources and reloads use it
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        with _stderr_to_file(self._level):
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _QuietFinder(importlib.abc.MetaPathFinder):
    def __init__(self, modules: tuple[str, ...], level: int) -> None:
        self._modules = set(modules)
        self._level = level

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self._modules:
            return None
        self._modules.discard(fullname)  # first import only
        if not self._modules and self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _QuietLoader(spec.loader, self._level)
        return spec


def install_quiet_imports(modules: tuple[str, ...] = QUIET_MODULES) -> bool:
    """Capture and filter the first import of ``modules`` (not yet imported) in this process.

    Returns:
        False when there is nothing to do: ``TF_CPP_MIN_LOG_LEVEL`` is 0/unset, or all are imported.
    """
    level = min_log_level()
    pending = tuple(m for m in modules if m not in sys.modules)
    if level < 1 or not pending:
        return False
    sys.meta_path.insert(0, _QuietFinder(pending, level))
    return True
