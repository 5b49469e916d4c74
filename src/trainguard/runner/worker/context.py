"""The trial context: what a trial function ``def train(params, ctx)`` gets as its second argument.

``ctx.data`` is the run's shared data (``Runner.map(..., data=...)``), ``ctx.seed`` the trial's
seed, and ``ctx.checkpoint`` / ``ctx.restore`` make the trial *staged*: at each stage boundary (an
epoch, a fold) it commits a checkpoint, and when the policy wants the worker gone (its memory is
predicted to outgrow the budget in the next stage, or ``max_stages_per_worker``) the worker stops
there and a fresh worker resumes the same trial from that checkpoint.

Checkpoints are files. The trial writes whatever it needs into ``ctx.checkpoint_path`` (a folder:
``model.save(ctx.checkpoint_path + "/model.keras")``, ``torch.save(model.state_dict(), ...)``) and
calls ``ctx.checkpoint(state)``, where ``state`` is optional small picklable data (the epoch, the
history, numpy arrays); that folder is then committed atomically (renamed ``stage-N``) with a
manifest of its files. On a resume ``ctx.restore_path`` is the committed folder and
``ctx.restore()`` returns the state.

Layout of a trial's folder (kept under the store's folder, removed when the trial finishes)::

    <store>.checkpoints/run-<run_id>/trial-<index>/
        next/              ctx.checkpoint_path: being written
        stage-3/           the last committed checkpoint: the user's files, state.pkl, MANIFEST.json
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
from collections.abc import Callable
from typing import Any

from trainguard.exceptions import CheckpointError

__all__ = [
    "TrialContext",
    "wants_context",
    "latest_stage",
    "verify_stage",
    "MANIFEST",
    "STATE_FILE",
    "PRESSURE_SIGNAL",
    "install_pressure_handler",
    "current_context",
]

MANIFEST = "MANIFEST.json"
STATE_FILE = "state.pkl"
_STAGE_RE = re.compile(r"^stage-(\d+)$")
_MISSING = object()

#: the signal the supervisor sends a worker whose trial is under memory pressure (its soft limit).
#: The handler only sets a flag: the trial reads it at its own safe points.
PRESSURE_SIGNAL = getattr(signal, "SIGUSR1", None)
#: the worker's pressure flag (a list, not a lock-taking Event: it is set from a signal handler)
_PRESSURE = [False]
#: the context of the trial running in this worker, for integrations (Keras callback, torch helper)
_CURRENT: list[TrialContext | None] = [None]


def _on_pressure_signal(signum: int, frame: Any) -> None:
    _PRESSURE[0] = True


def install_pressure_handler() -> bool:
    """In a worker, before its first trial: the pressure signal sets the flag (never ends the
    process). False where the platform has no such signal."""
    if PRESSURE_SIGNAL is None:
        return False
    signal.signal(PRESSURE_SIGNAL, _on_pressure_signal)
    return True


def current_context() -> TrialContext | None:
    """The context of the staged trial running in this worker, or None (outside a Runner's worker,
    or a trial function of one argument).

    Returns:
        The running trial's context, or None.
    """
    return _CURRENT[0]


def end_current() -> None:
    """The trial is over: :func:`current_context` is None until the next trial's context is made
    (a later trial of one argument in this worker must not find this one's, and commit a
    ``MemoryCallback(action="checkpoint")`` to its folder)."""
    _CURRENT[0] = None


def wants_context(fn: Any) -> bool:
    """Whether a trial function takes a second positional argument (the context)."""
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True


def latest_stage(root: str) -> tuple[int, str] | None:
    """The highest committed ``stage-N`` folder under a trial's checkpoint folder, or None."""
    best: tuple[int, str] | None = None
    try:
        names = os.listdir(root)
    except OSError:
        return None
    for name in names:
        match = _STAGE_RE.match(name)
        if match and (best is None or int(match.group(1)) > best[0]):
            best = (int(match.group(1)), os.path.join(root, name))
    return best


def verify_stage(path: str, run_uuid: str | None = None) -> str | None:
    """None when a committed stage folder holds every file its manifest lists, with its size and
    content hash, and (given ``run_uuid``) was written by that run; else what differs, in words."""
    from trainguard.runner._checkpoint_safety import check_manifest

    try:
        with open(os.path.join(path, MANIFEST), encoding="utf-8") as fh:
            manifest = json.load(fh)
    except FileNotFoundError:
        return f"{path} has no {MANIFEST}" if os.path.isdir(path) else f"{path} does not exist"
    except (OSError, ValueError) as err:
        return f"{os.path.join(path, MANIFEST)} cannot be read: {err}"
    if not isinstance(manifest, dict):
        return f"{os.path.join(path, MANIFEST)} is not a manifest"
    return check_manifest(path, manifest, run_uuid)


def disk_full_note(ctx: TrialContext | None, exc: BaseException) -> dict[str, Any] | None:
    """What a trial's error says when it failed because the disk of its checkpoints filled up
    (``{"path", "free_bytes", "errno"}``), else None (see :mod:`trainguard._diskfull`)."""
    if ctx is None or ctx._root is None:
        return None
    from trainguard._diskfull import free_bytes, is_disk_full, write_failure

    failure = write_failure(exc)
    if failure is None:
        return None
    free = getattr(exc, "free_bytes", None) if isinstance(exc, CheckpointError) else None
    if not isinstance(free, int):
        free = free_bytes(ctx._root)
    if not is_disk_full(failure, free):
        return None
    return {"path": ctx._root, "free_bytes": free, "errno": failure["errno"]}


class TrialContext:
    """The second argument of ``def train(params, ctx)``.

    Attributes:
        index: the trial's index in the run.
        attempt: the attempt number (a staged trial's every worker is an attempt of its own).
        seed: the trial's seed (``Runner(seed=...)``), or None.
        data: the run's shared data (``Runner.map(..., data=...)``), or None.
        stage: checkpoints committed so far (0 at a fresh start; N after resuming from ``stage-N``).
        resumed: True when this worker resumed the trial from a checkpoint.
        restart_reason: why the trial started over although it had committed a checkpoint
            (the checkpoint's files were deleted), else None.
    """

    def __init__(
        self,
        *,
        index: int,
        attempt: int,
        seed: int | None = None,
        data: Any = None,
        checkpoint_root: str | None = None,
        restart_reason: str | None = None,
        boundary: Callable[[int, int | None, bool], None] | None = None,
        checkpoint_levels: int = 1,
        run_uuid: str | None = None,
    ) -> None:
        """The context of one trial attempt; made by the worker, not directly.

        Args:
            index: the trial's index in the run.
            attempt: the attempt number.
            seed: the trial's seed, or None.
            data: the run's shared data, or None.
            checkpoint_root: the trial's checkpoint folder, or None when the run has no store.
            restart_reason: why the trial started over from scratch, or None.
            boundary: the worker's call at each committed checkpoint (the policy may end the worker there).
            checkpoint_levels: how many folder levels of ``checkpoint_root`` trainguard made (each is
                checked to be private).
            run_uuid: the run's id, which the checkpoints' manifest names.
        """
        self.index = index
        self.attempt = attempt
        self.seed = seed
        self.data = data
        self.restart_reason = restart_reason
        self._root = checkpoint_root
        self._boundary = boundary
        self._run_uuid = run_uuid
        self._restore: tuple[int, str] | None = None
        if checkpoint_root is not None:
            from trainguard.runner._checkpoint_safety import ensure_private_dirs

            ensure_private_dirs(checkpoint_root, checkpoint_levels)
            found = latest_stage(checkpoint_root)
            if found is not None and verify_stage(found[1], run_uuid) is None:
                self._restore = found
        self.stage = self._restore[0] if self._restore else 0
        self.resumed = self._restore is not None
        self._next: str | None = None
        self._pressure_callbacks: list[Callable[[TrialContext], Any]] = []
        self._callbacks_ran = False
        _PRESSURE[0] = False  # a new trial starts without pressure
        _CURRENT[0] = self

    # -- memory pressure -------------------------------------------------------------------------

    @property
    def under_pressure(self) -> bool:
        """True once the supervisor saw this trial's tree cross ``Policy(soft_limit=...)`` (or
        predicted it to cross ``memory_limit`` within seconds): checkpoint now, with
        ``ctx.checkpoint(state)``, and a fresh worker carries the trial on from there."""
        return _PRESSURE[0]

    def on_pressure(self, callback: Callable[[TrialContext], Any]) -> None:
        """Run ``callback(ctx)`` at the next safe point after pressure is raised (the end of an
        epoch for ``trainguard.keras.MemoryCallback`` and ``trainguard.torch.Checkpointer``, or
        wherever the trial calls :meth:`safe_point`); typically it writes the model and calls
        ``ctx.checkpoint``.

        Args:
            callback: called with this context; it should write its files and call :meth:`checkpoint`.

        Raises:
            CheckpointError: ``callback`` is not callable.
        """
        if not callable(callback):
            raise CheckpointError(f"ctx.on_pressure() takes a callable, not {type(callback).__name__}")
        self._pressure_callbacks.append(callback)

    def safe_point(self) -> bool:
        """A point where the trial may be checkpointed: under pressure, run the ``on_pressure``
        callbacks (once). Returns whether the trial is under pressure.

        Returns:
            True when the trial is under memory pressure.
        """
        if not _PRESSURE[0]:
            return False
        if not self._callbacks_ran:
            self._callbacks_ran = True
            for callback in list(self._pressure_callbacks):
                callback(self)
        return True

    # -- paths -----------------------------------------------------------------------------------

    def _require_root(self, what: str) -> str:
        if self._root is None:
            raise CheckpointError(
                f"ctx.{what} needs a checkpoint folder, and this trial has none (a command trial, or a "
                "context made by hand): run it through Runner.map"
            )
        return self._root

    @property
    def checkpoint_path(self) -> str:
        """A folder to write the next checkpoint's files into (empty at the start of each stage);
        ``ctx.checkpoint()`` commits it. The path stays the same from stage to stage, so it may be
        kept in a variable."""
        root = self._require_root("checkpoint_path")
        if self._next is None:
            self._next = os.path.join(root, "next")
            shutil.rmtree(self._next, ignore_errors=True)
            os.mkdir(self._next, 0o700)
        return self._next

    @property
    def restore_path(self) -> str | None:
        """The folder of the checkpoint this trial resumes from (its files as written), or None."""
        return self._restore[1] if self._restore else None

    # -- checkpoint and restore ------------------------------------------------------------------

    def checkpoint(self, state: Any = None, *, remaining: int | None = None) -> None:
        """Commit a stage boundary: the files in :attr:`checkpoint_path` plus ``state`` (optional,
        picklable: numbers, dicts, numpy arrays).

        The policy may end the worker here (a fresh worker then resumes the trial from this
        checkpoint); otherwise it returns and the trial goes on. ``remaining`` (optional) is how
        many stages are left after this one: at 0 the worker is never ended here, since the trial
        is about to finish anyway.

        Raises:
            CheckpointError: ``state`` cannot be pickled (nothing is committed).

        Args:
            state: a picklable value restored by :meth:`restore` (numbers, dicts, numpy arrays).
            remaining: how many stages are left after this one, when known.
        """
        root = self._require_root("checkpoint()")
        folder = self.checkpoint_path
        if state is not None:
            try:
                payload = pickle.dumps(state, protocol=5)
            except Exception as err:  # noqa: BLE001 - pickling raises many kinds
                raise CheckpointError(
                    f"ctx.checkpoint(state): the state cannot be saved ({type(err).__name__}: {err}); pass "
                    "picklable values (numbers, lists, dicts, numpy arrays) or write files into "
                    "ctx.checkpoint_path (model.save(...), torch.save(...))"
                ) from None
        else:
            payload = None
        from trainguard.runner._checkpoint_safety import file_digests

        stage = self.stage + 1
        target = os.path.join(root, f"stage-{stage}")
        try:
            if payload is not None:
                with open(os.path.join(folder, STATE_FILE), "wb") as fh:
                    fh.write(payload)
            # before the manifest file exists; the hashes let a resume tell altered files from good ones
            manifest = {"stage": stage, "run_uuid": self._run_uuid, "files": file_digests(folder, MANIFEST)}
            with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8") as fh:
                json.dump(manifest, fh)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(folder, target)
        except OSError as err:
            # a full disk, a file over a size limit: nothing is committed, the earlier stage stays
            from trainguard._diskfull import free_bytes

            free = free_bytes(root)  # before the half-written files go: says whether the disk filled up
            shutil.rmtree(folder, ignore_errors=True)
            self._next = None
            kept = f"; stage {self.stage} is kept" if self._restore is not None else ""
            raise CheckpointError(
                f"ctx.checkpoint(): stage {stage} could not be written ({type(err).__name__}: {err}){kept}: "
                f"free space under {root} or write less",
                errno=err.errno,
                write_failed=True,
                free_bytes=free,
            ) from None
        previous = self._restore
        self._restore = (stage, target)
        self.stage = stage
        self._next = None
        self.checkpoint_path  # noqa: B018 - made again at once: a path kept from before still works
        if previous is not None and previous[1] != target:
            shutil.rmtree(previous[1], ignore_errors=True)
        if self._boundary is not None:
            self._boundary(stage, remaining, _PRESSURE[0])

    def restore(self, default: Any = _MISSING) -> Any:
        """The state of the checkpoint this trial resumes from.

        Args:
            default: returned when there is no checkpoint (a fresh start); without it, that raises.

        Raises:
            CheckpointError: no checkpoint to restore (and no ``default``), or its state file is
                unreadable.

        Returns:
            The state given to the last committed :meth:`checkpoint`, or ``default``.
        """
        if self._restore is None:
            if default is not _MISSING:
                return default
            why = f" ({self.restart_reason})" if self.restart_reason else ""
            raise CheckpointError(
                f"ctx.restore(): trial {self.index} has no checkpoint to restore{why}: check ctx.resumed "
                "first, or pass ctx.restore(default=...) for a fresh start"
            )
        path = os.path.join(self._restore[1], STATE_FILE)
        if not os.path.exists(path):
            return None if default is _MISSING else default
        try:
            with open(path, "rb") as fh:
                return pickle.load(fh)
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(
                f"ctx.restore(): the state of stage {self._restore[0]} ({path}) cannot be read: {err}"
            ) from None

    def __repr__(self) -> str:
        return (
            f"TrialContext(index={self.index}, attempt={self.attempt}, seed={self.seed}, stage={self.stage}, "
            f"resumed={self.resumed})"
        )
