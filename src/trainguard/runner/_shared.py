"""Data prepared once, shared by every worker: ``trainguard.share(arrays)``.

The arrays are written once as ``.npy`` files into a folder of their own, in ``/dev/shm`` when
``statvfs`` shows room there (memory-backed: no disk I/O), else in the temporary folder on disk.
The handle that ``share`` returns pickles as that folder's path, so it crosses to a worker in a
closure, a cloudpickled function or ``Runner.map(..., data=handle)`` at no cost; a worker opens
each array with ``np.load(mmap_mode="r")``: a read-only memory map, no copy, and pages shared with
every other worker (and counted once by the kernel).

Why files and not ``multiprocessing.shared_memory``: its resource tracker unlinks blocks that other
processes still use (cpython gh-82300) and ``track=False`` only exists from Python 3.13; a folder
of ``.npy`` files is readable by any process (a command trial too), survives a worker crash, and
its name says who owns it.

Lifetime: the process that called ``share`` owns the folder. It is removed by ``close()`` (or the
end of a ``with`` block, or when the handle is garbage-collected, or at interpreter exit), and, for
arrays given to ``Runner.map(data=...)`` directly, when that run ends. A folder's name carries its
owner's pid and start time (``trainguard-share-<pid>-<start ticks>-<token>``); every ``share`` and
every run first removes the folders whose owner is gone (a supervisor killed with SIGKILL).

Accounting: the owner keeps each file mapped with its pages populated, so in a worker every page of
shared data is mapped at least twice and counts as shared, not private; while shared data is in use
the supervisor charges workers their private memory (USS), so the data does not count once per
worker against ``memory_limit``.
"""

from __future__ import annotations

import atexit
import errno
import logging
import mmap
import os
import re
import secrets
import shutil
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from trainguard.exceptions import ConfigError, SharedDataError

__all__ = ["share", "SharedData", "sweep_stale", "active_shares", "SHM_FOLDER", "PREFIX"]

logger = logging.getLogger(__name__)

SHM_FOLDER = "/dev/shm"
PREFIX = "trainguard-share-"
_NAME_MAX = 100
_NAME_RE = re.compile(rf"^[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{_NAME_MAX - 1}}}$")
#: Room left free in a folder after the arrays are written (other users of /dev/shm need some).
_HEADROOM_BYTES = 16 << 20
_NPY_HEADER_BYTES = 4096

_active: weakref.WeakSet[SharedData] = weakref.WeakSet()
_active_lock = threading.Lock()


def _start_ticks(pid: int) -> int | None:
    from trainguard._tempdirs import start_ticks

    return start_ticks(pid)


def _candidate_folders() -> list[str]:
    from trainguard._tempdirs import default_folders

    return default_folders()


def sweep_stale(folders: list[str] | None = None) -> list[str]:
    """Remove shared-data folders (this user's) whose owner process is gone; return the paths removed."""
    from trainguard._tempdirs import sweep

    return sweep(folders, kinds=("share",))


def active_shares() -> list[SharedData]:
    """The shared-data handles this process owns and has not closed."""
    with _active_lock:
        return [s for s in _active if not s.closed]


def _free_bytes(folder: str) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _check_arrays(arrays: Any) -> tuple[dict[str, Any], bool]:
    import numpy as np

    if isinstance(arrays, np.ndarray):
        items, single = {"array": arrays}, True
    elif isinstance(arrays, Mapping):
        if not arrays:
            raise ConfigError("share({}) has nothing to share: pass a numpy array or a dict of them")
        items, single = dict(arrays), False
    else:
        kind = type(arrays).__name__
        hint = (
            ": convert it first (tensor.numpy(), np.asarray(x))"
            if kind in ("Tensor", "EagerTensor", "DataFrame", "list", "tuple")
            else ""
        )
        raise ConfigError(f"share() takes a numpy array or a dict of numpy arrays, not a {kind}{hint}")
    for name, value in items.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            shown = (
                f"{name[:20]!r}... ({len(name)} characters)"
                if isinstance(name, str) and len(name) > 40
                else repr(name)
            )
            raise ConfigError(
                f"share(): the key {shown} cannot name a file: use at most {_NAME_MAX} letters, digits, "
                "'_', '.', '-' such as 'x_train'"
            )
        if not isinstance(value, np.ndarray):
            raise ConfigError(
                f"share(): {name!r} is a {type(value).__name__}, not a numpy array: convert it with np.asarray(...)"
            )
        lost = _lost_in_sharing(value)
        if lost:
            raise ConfigError(f"share(): {name!r} {lost}")
        if value.dtype.hasobject:
            raise ConfigError(
                f"share(): {name!r} has dtype {value.dtype}, which holds Python objects and cannot be "
                "memory-mapped: convert it to a numeric or fixed-width string dtype first"
            )
    return items, single


def _lost_in_sharing(value: Any) -> str | None:
    """What a worker would lose of ``value`` (a numpy subclass) reading it back as a plain array."""
    import numpy as np

    if isinstance(value, np.ma.MaskedArray):
        return (
            "is a masked array; workers would read it back without its mask: share its data and mask as "
            "two arrays, {'x': np.ma.getdata(x), 'x_mask': np.ma.getmaskarray(x)}, and rebuild it with "
            "np.ma.array(data['x'], mask=data['x_mask'])"
        )
    if isinstance(value, np.matrix):
        return (
            "is an np.matrix; workers would read it back as an ndarray, where * multiplies element-wise "
            "instead of as matrices: share np.asarray(x) and multiply with @"
        )
    return None


def _write_failure(err: OSError, needed: int, chosen: str) -> SharedDataError:
    """The module's own error for a write that failed (numpy reports a short write without errno)."""
    from trainguard.units import format_bytes

    free = _free_bytes(chosen)
    full = err.errno in (errno.ENOSPC, errno.EDQUOT) or (free is not None and free < _HEADROOM_BYTES)
    why = "ran out of space" if full else f"failed ({err.strerror or err})"
    return SharedDataError(
        f"share() {why} writing {format_bytes(needed)} to {chosen}"
        f"{f' ({format_bytes(free)} free now)' if free is not None else ''}: free some space "
        "or pass share(..., folder=...) on a larger file system",
        needed_bytes=needed,
    )


def _choose_folder(needed: int, folder: str | os.PathLike[str] | None) -> str:
    from trainguard.units import format_bytes

    if folder is not None:
        folder = os.fspath(folder)
        if not os.path.isdir(folder):
            raise ConfigError(f"share(folder={folder!r}): no such folder: give an existing folder")
        candidates = [folder]
    else:
        candidates = _candidate_folders()
    free: dict[str, int | None] = {}
    for candidate in candidates:
        free[candidate] = available = _free_bytes(candidate)
        if available is not None and available >= needed + _HEADROOM_BYTES:
            return candidate
    said = ", ".join(
        f"{name} has {format_bytes(value) if value is not None else 'unknown'} free"
        for name, value in free.items()
    )
    raise SharedDataError(
        f"share() needs {format_bytes(needed)} for the arrays and {said}: free some space, share less, "
        f"or pass share(..., folder=...) on a larger file system",
        needed_bytes=needed,
        free_bytes=free,
    )


def _remove_folder(path: str, maps: list[mmap.mmap]) -> None:
    for m in maps:
        try:
            m.close()
        except (BufferError, ValueError):
            pass  # a view still exports it; the mapping goes when the view does
    maps.clear()
    shutil.rmtree(path, ignore_errors=True)


class SharedData:
    """Arrays written once and memory-mapped read-only by every worker. Made by :func:`share`.

    In any process: ``data["x"]`` (or ``data.array`` for a single array) is a read-only
    ``np.memmap``; :meth:`as_torch` and :meth:`as_tf_dataset` view the arrays from torch and
    ``tf.data`` without copying them whole. The handle pickles as its folder's path.
    """

    def __init__(self, path: str, names: tuple[str, ...], single: bool, *, owner: bool = False) -> None:
        """A handle on a folder of shared arrays; made by :func:`~trainguard.share`, not directly.

        Args:
            path: the folder holding one ``.npy`` file per array.
            names: the arrays' names.
            single: the handle was made from one array (``data.array``) rather than a dict.
            owner: this process made the folder and removes it on :meth:`close`.
        """
        self.path = path
        self.names = names
        self.single = single
        self._owner = owner
        self._closed = False
        self._arrays: dict[str, Any] = {}
        self._cow: dict[str, Any] = {}
        self._maps: list[mmap.mmap] = []
        self._finalizer: weakref.finalize[Any, Any] | None = None
        #: seconds this process took to open every array's memory map (first access)
        self.attach_s: float | None = None

    # -- crossing to workers ------------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, ...]:
        return (_attach, (self.path, self.names, self.single))

    # -- reading -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def location(self) -> str:
        """``"shm"`` when the files live in /dev/shm (memory), ``"disk"`` otherwise."""
        return "shm" if self.path.startswith(SHM_FOLDER + os.sep) else "disk"

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name + ".npy")

    def _open(self, name: str, mode: Literal["r", "c"]) -> Any:
        import numpy as np

        if self._closed:
            raise ConfigError(f"shared data {self.path} is closed: share the arrays again")
        if name not in self.names:
            raise KeyError(f"no shared array {name!r}: the shared names are {', '.join(self.names)}")
        try:
            return np.load(self._file(name), mmap_mode=mode, allow_pickle=False)
        except FileNotFoundError:
            raise ConfigError(
                f"shared array {name!r} is gone ({self._file(name)} does not exist): its owner closed it or "
                "exited; keep the handle open (with share(...) as data:) while workers use it"
            ) from None

    def attach(self) -> dict[str, Any]:
        """Open every array's read-only memory map in this process (once); return them by name.

        Returns:
            The read-only ``np.memmap`` of each array, by name.
        """
        if len(self._arrays) < len(self.names):
            start = time.perf_counter()
            for name in self.names:
                if name not in self._arrays:
                    self._arrays[name] = self._open(name, "r")
            self.attach_s = time.perf_counter() - start
        return dict(self._arrays)

    def __getitem__(self, name: str) -> Any:
        if name not in self._arrays:
            self._arrays[name] = self._open(name, "r")
        return self._arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def keys(self) -> tuple[str, ...]:
        """The arrays' names.

        Returns:
            The names, in the order they were shared.
        """
        return self.names

    @property
    def array(self) -> Any:
        """The array of a handle made from a single array (``share(x)``)."""
        if not self.single:
            raise ConfigError(f"this shared data holds {', '.join(self.names)}: use data[name]")
        return self["array"]

    @property
    def nbytes(self) -> int:
        return sum(os.path.getsize(self._file(n)) for n in self.names)

    def as_torch(self, name: str | None = None) -> Any:
        """A torch tensor over the shared pages, without a copy.

        The tensor is made from a copy-on-write memory map (``mmap_mode="c"``): reading shares the
        pages with every worker, and a write in place copies only the pages it touches into this
        process (private, counted to it) instead of crashing on a read-only page or changing the
        data under the other workers. So torch's "non-writable array" warning does not apply.

        Args:
            name: the array; may be left out for a handle of one array.

        Returns:
            A ``torch.Tensor`` over the copy-on-write map.
        """
        import torch

        name = self._single_name(name)
        if name not in self._cow:
            self._cow[name] = self._open(name, "c")
        return torch.from_numpy(self._cow[name])

    def as_tf_dataset(
        self,
        *names: str,
        batch_size: int | None = None,
        shuffle: bool = False,
        seed: int | None = None,
    ) -> Any:
        """A ``tf.data.Dataset`` of the named arrays' rows (tuples when several), read from the
        memory maps one batch at a time: only the current batch is copied, never the whole array
        (``from_tensor_slices`` would copy it into the graph, and fails past 2 GB).

        Args:
            *names: the arrays to read, row by row in step; none names the array of a one-array handle.
            batch_size: rows per element; None gives batches of one row.
            shuffle: read the rows in a shuffled order (a new order each pass).
            seed: the shuffle's seed.

        Returns:
            A ``tf.data.Dataset``.

        Raises:
            ConfigError: arrays of different lengths, or a batch size that is not a whole number >= 1.
        """
        import numpy as np
        import tensorflow as tf

        chosen = list(names) or [self._single_name(None)]
        arrays = [self[n] for n in chosen]
        rows = len(arrays[0])
        if any(len(a) != rows for a in arrays):
            raise ConfigError(
                f"as_tf_dataset({', '.join(map(repr, chosen))}): the arrays have different numbers of rows "
                f"({', '.join(str(len(a)) for a in arrays)})"
            )
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ConfigError(f"batch_size={batch_size!r} must be a whole number >= 1, such as 32")
        index = tf.data.Dataset.range(rows)
        if shuffle:
            index = index.shuffle(rows, seed=seed, reshuffle_each_iteration=True)
        index = index.batch(batch_size or 1)

        def fetch(idx: Any) -> list[Any]:
            idx = np.sort(idx)
            if len(idx) and idx[-1] - idx[0] + 1 == len(idx):  # a contiguous run: a slice
                return [np.ascontiguousarray(a[idx[0] : idx[-1] + 1]) for a in arrays]
            return [a[idx] for a in arrays]

        dtypes = [tf.as_dtype(a.dtype) for a in arrays]

        def load(idx: Any) -> Any:
            out = tf.numpy_function(fetch, [idx], dtypes, stateful=False)
            for tensor, a in zip(out, arrays, strict=True):
                tensor.set_shape((None, *a.shape[1:]))
            if batch_size is None:
                out = [tf.squeeze(t, 0) for t in out]
            return tuple(out) if len(out) > 1 else out[0]

        return index.map(load, num_parallel_calls=1)

    def _single_name(self, name: str | None) -> str:
        if name is not None:
            return name
        if len(self.names) == 1:
            return self.names[0]
        raise ConfigError(f"this shared data holds {', '.join(self.names)}: name the array to view")

    # -- lifetime ------------------------------------------------------------------------------

    def _hold(self) -> None:
        """Owner only: keep every file mapped with its pages populated, so a worker's pages of it
        are never its alone (and count as shared, not private, in its USS)."""
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        for name in self.names:
            fd = os.open(self._file(name), os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                if size:
                    self._maps.append(mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ))
            finally:
                os.close(fd)

    def close(self) -> None:
        """Remove the files (owner) and forget the memory maps. Idempotent; workers already
        attached keep reading their maps until they exit."""
        if self._closed:
            return
        self._closed = True
        self._arrays.clear()
        self._cow.clear()
        if self._finalizer is not None:
            self._finalizer()
        else:
            for m in self._maps:
                try:
                    m.close()
                except (BufferError, ValueError):
                    pass

    def __enter__(self) -> SharedData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else self.location
        return f"SharedData({', '.join(self.names)} at {self.path}, {state})"


def _attach(path: str, names: tuple[str, ...], single: bool) -> SharedData:
    """Unpickling: a non-owning handle on the same folder (one per folder and process)."""
    with _active_lock:
        cached = _attached.get(path)
        if cached is None or cached.closed:
            cached = SharedData(path, tuple(names), bool(single))
            _attached[path] = cached
        return cached


_attached: dict[str, SharedData] = {}


def share(arrays: Any, *, folder: str | os.PathLike[str] | None = None) -> SharedData:
    """Write arrays once where every worker can memory-map them; return the handle to give them.

    Args:
        arrays: a numpy array, or a dict of them by name (``{"x": x, "y": y}``). Names become file
            names: letters, digits, ``_``, ``.``, ``-``.
        folder: where to write; default ``/dev/shm`` when it has room, else the temporary folder.

    Returns:
        A :class:`SharedData`. Keep it open while workers use it (``with share(...) as data:``).

    Raises:
        ConfigError: not a numpy array or a dict of them, an array of dtype object, a bad name.
        SharedDataError: neither folder has room; says how much is needed and free in each.
    """
    import numpy as np

    items, single = _check_arrays(arrays)
    sweep_stale()
    needed = sum(int(a.nbytes) + _NPY_HEADER_BYTES for a in items.values())
    chosen = _choose_folder(needed, folder)
    ticks = _start_ticks(os.getpid()) or 0
    path = os.path.join(chosen, f"{PREFIX}{os.getpid()}-{ticks}-{secrets.token_hex(4)}")
    os.mkdir(path, 0o700)
    maps: list[mmap.mmap] = []
    handle = SharedData(path, tuple(items), single, owner=True)
    handle._maps = maps
    handle._finalizer = weakref.finalize(handle, _remove_folder, path, maps)
    try:
        for name, value in items.items():
            target = os.path.join(path, name + ".npy")
            partial = target + ".partial"
            with open(partial, "wb") as fh:
                # asarray, not ascontiguousarray: that one turns a 0-d array into shape (1,)
                np.save(fh, np.asarray(value, order="C"), allow_pickle=False)
            os.replace(partial, target)
        handle._hold()
    except OSError as err:  # the space went while writing (ENOSPC, EDQUOT), a file size limit...
        handle.close()
        raise _write_failure(err, needed, chosen) from err
    with _active_lock:
        _active.add(handle)
    return handle


@atexit.register
def _close_all() -> None:
    for handle in active_shares():
        handle.close()
