"""The local backend: workers are child processes of this process.

This is also what the Ray backend runs on each node: its actor starts the worker with
:func:`start_local_worker` and samples, kills and ends it through the same :class:`LocalWorker`.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

from trainguard import process as proctree
from trainguard.exceptions import ConfigError
from trainguard.frameworks import min_log_level, replay_capture
from trainguard.process import ProcessTree, TreeCgroup, popen_options, resolve_tracking, tier_tree
from trainguard.process.charge import MemorySplit, needs_split
from trainguard.process.oom_score import raise_oom_score
from trainguard.process.tmpfs import TmpfsFile, TmpfsWatch
from trainguard.runner._channel import SocketPair, inherit_options, make_channel, resolve_channel
from trainguard.runner._protocol import WORKER_CONFIG_ENV, PipePair
from trainguard.runner.backends.base import BaseBackend, BaseWorker, Inbox, WorkerSpec
from trainguard.runner.policy import EndCause, KillDecision, classify_end

__all__ = ["LocalBackend", "LocalWorker", "start_local_worker", "cgroup_oom_kills"]

logger = logging.getLogger(__name__)


def cgroup_oom_kills() -> int | None:
    """The ``oom_kill`` counter of this process's cgroup (None when unreadable)."""
    try:
        from trainguard.probes.host import cgroup_memory

        info = cgroup_memory()
    except Exception:  # noqa: BLE001 - cgroup files are optional evidence
        return None
    return None if info is None else info.oom_kill_count


def _stderr_fd() -> int:
    try:
        sys.stderr.flush()
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


def _make_cgroup(tree_tracking: str, worker_id: int) -> TreeCgroup | None:
    if tree_tracking in ("subreaper", "portable", "windows") or not sys.platform.startswith("linux"):
        return None
    group = TreeCgroup.create(f"trainguard-{os.getpid()}-w{worker_id}-{os.urandom(3).hex()}")
    if group is None and tree_tracking == "cgroup":
        raise ConfigError(
            "tree_tracking='cgroup' but no cgroup v2 can be made here (needs a writable cgroup2 "
            "hierarchy: root, or a delegated systemd scope): use tree_tracking='auto'"
        )
    return group


class LocalWorker(BaseWorker):
    """A worker process started by this process, its two pipes and its sampled tree."""

    def __init__(
        self,
        spec: WorkerSpec,
        proc: subprocess.Popen[bytes],
        pipes: PipePair | SocketPair,
        cgroup: TreeCgroup | None,
        started_wall: float,
    ) -> None:
        self.worker_id = spec.worker_id
        self.slot = spec.slot
        self.pid = proc.pid
        self.started_wall = started_wall
        self.proc = proc
        self.pipes = pipes
        # the tier's tree (process/): the Linux one reads /proc, the portable one psutil alone
        self.tier = resolve_tracking(spec.tree_tracking)
        self.sampler: Any = (
            ProcessTree(proc.pid, cgroup=cgroup)
            if self.tier not in ("portable", "windows")
            else tier_tree(proc, self.tier, spec.memory_limit_bytes)
        )
        # what the trial holds in tmpfs (Linux): files no RSS shows
        self.tmpfs: TmpfsWatch | None = (
            TmpfsWatch(os.getuid(), cgroup_path=self._cgroup_path)
            if self.tier not in ("portable", "windows") and proctree.HAVE_PROC
            else None
        )
        self._tmpfs_removed: tuple[TmpfsFile, ...] = ()
        self.fn_kind = spec.fn_kind
        self.capture_dir = spec.capture_dir
        self.env = spec.env
        self.oom_kills_at_start = cgroup_oom_kills()
        if self.tier in ("portable", "windows"):
            self.tracking = self.tier
        elif spec.fn_kind != "node":
            self.tracking = "cgroup+subreaper" if cgroup is not None else "subreaper"
        else:
            self.tracking = "cgroup" if cgroup is not None else "process group"

    @property
    def inbox(self) -> Inbox:
        return self.pipes.from_worker

    def send(self, msg: dict[str, Any]) -> None:
        """Pickled for a Python worker; for a Node worker the same framing (a 4-byte big-endian
        length) around JSON, which is what ``send_bytes`` writes."""
        if self.fn_kind == "node":
            self.pipes.to_worker.send_bytes(json.dumps(msg).encode("utf-8"))
        else:
            self.pipes.to_worker.send(msg)

    def read(self, *, uss: bool = False, rediscover: bool = False) -> tuple[int, int | None] | None:
        reading: tuple[int, int | None] | None = self.sampler.read(uss=uss, rediscover=rediscover)
        return reading

    def pids(self) -> tuple[int, ...]:
        return tuple(self.sampler.pids())

    def _cgroup_path(self) -> str | None:
        cgroup = self.sampler.cgroup
        return None if cgroup is None else str(cgroup.path)

    def memory_split(
        self, rss_bytes: int, *, limit_bytes: int | None, sole: bool, private: bool
    ) -> MemorySplit | None:
        watch = self.tmpfs
        if watch is None:
            return None
        watch.tick(self.sampler.pids(), sole=sole)
        if private:
            # the USS given is what counts of the tree's pages (its private shmem pages too, so
            # not the cgroup's shmem): the tmpfs files it holds come on top of it
            if not needs_split(rss_bytes, watch.memory_bytes, limit_bytes):
                return None
            return MemorySplit(rss_bytes, 0, 0, watch.memory_bytes, None)
        if not needs_split(rss_bytes, max(watch.memory_bytes, watch.cgroup_shmem or 0), limit_bytes):
            return None
        split: MemorySplit | None = self.sampler.split(
            tmpfs_bytes=watch.memory_bytes, cgroup_shmem_bytes=watch.cgroup_shmem
        )
        return split

    def trial_started(self) -> None:
        if self.tmpfs is not None:
            self.tmpfs.begin()

    def trial_ended(self, *, remove: bool = True) -> tuple[TmpfsFile, ...]:
        if self.tmpfs is None:
            return ()
        # the worker ended before the session said the trial did (a kill): removed then, said now
        now = self.tmpfs.end(self.sampler.pids(), remove=remove)
        removed, self._tmpfs_removed = self._tmpfs_removed + tuple(now), ()
        return removed

    def kill(self) -> None:
        self.sampler.kill(started_after=self.started_wall)

    def signal_pressure(self) -> bool:
        from trainguard.runner.worker.context import PRESSURE_SIGNAL

        if self.fn_kind in ("node", "command") or PRESSURE_SIGNAL is None:
            return False  # a Node worker reads SIGUSR1 as "start the inspector"; a command cannot checkpoint
        try:
            os.kill(self.pid, PRESSURE_SIGNAL)  # the worker only, never its children
        except OSError:
            return False
        return True

    def on_ready(self, msg: dict[str, Any]) -> None:
        cgroup, tree = self.sampler.cgroup, msg.get("tree")
        if cgroup is not None and tree is not None and not tree.get("cgroup"):
            # the worker could not join the cgroup made for it: the subreaper alone keeps its tree
            logger.warning(
                "worker %d could not join its cgroup; tracking its tree as subreaper", self.worker_id
            )
            self.sampler.cgroup = None
            cgroup.remove()

    def wait(self, timeout_s: float | None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def end(self, grace_s: float) -> tuple[int | None, bool]:
        # what the tree holds now: a dead worker's orphans are no longer below it (the sampler's
        # last discovery and this walk still know them; the cgroup, when there is one, always does)
        portable = self.tier in ("portable", "windows")
        known = (
            set(self.sampler.pids())
            if portable
            else {*self.sampler.pids(), *proctree.descendants(self.proc.pid)}
        )
        killed = False
        rc = self.wait(grace_s)
        if rc is None:
            self.kill()
            rc = self.proc.wait()
            killed = True
        if portable:
            self.sampler.end_leftovers()  # its process group (or job) and every member seen
            return self._release(rc, killed)
        # nothing a worker started may outlive it: its cgroup, its process group (the kernel keeps a
        # pgid from being reused while the group exists) and every process seen in its tree, each
        # checked to be still the process seen (start time), since the worker's own pid is reaped
        proctree.kill_tree(
            self.proc.pid,
            cgroup=self.sampler.cgroup,
            known=known,
            started_after=self.started_wall,
            root_reaped=True,
        )
        return self._release(rc, killed)

    def _release(self, rc: int | None, killed: bool) -> tuple[int | None, bool]:
        # a worker that died while importing TensorFlow left its captured stderr behind: show it
        replay_capture(
            self.proc.pid,
            capture_dir=self.capture_dir,
            out_fd=_stderr_fd(),
            level=min_log_level(self.env),
        )
        if self.tmpfs is not None and self.tmpfs.active:
            # its trial's files in /dev/shm go with it, also when the run ends in the middle of one
            self._tmpfs_removed = tuple(self.tmpfs.end(self.sampler.pids()))
        self.sampler.close()
        if self.sampler.cgroup is not None:
            self.sampler.cgroup.remove()
        self.pipes.close()
        return rc, killed

    def classify(self, returncode: int | None, *, in_trial: bool, kill: KillDecision | None) -> EndCause:
        return classify_end(
            returncode,
            in_trial=in_trial,
            kill=kill,
            oom_kills_before=self.oom_kills_at_start,
            oom_kills_after=cgroup_oom_kills(),
        )


def start_local_worker(
    spec: WorkerSpec, *, parent_pid: int | None = None, channel: str | None = None
) -> LocalWorker:
    """Start one worker as a child of this process (its own session and process group).

    ``channel``: how its two channels reach it (:mod:`trainguard.runner._channel`): None for the
    platform's (pipes on POSIX, socket pairs on Windows).
    """
    channel = resolve_channel(channel)
    if channel == "sockets" and spec.fn_kind == "node":
        raise ConfigError(
            "a Node worker speaks over pipes only (POSIX): its socket channel is not written yet"
        )
    pipes = make_channel(channel, spec.max_message_bytes)
    cgroup = _make_cgroup(spec.tree_tracking, spec.worker_id)
    tier = resolve_tracking(spec.tree_tracking)
    env = dict(spec.env)
    env[WORKER_CONFIG_ENV] = json.dumps(
        {
            **spec.bootstrap,
            "parent_pid": parent_pid if parent_pid is not None else os.getpid(),
            "capture_dir": spec.capture_dir,
            "cgroup": cgroup.path if cgroup is not None else None,
            "tree_tracking": tier,
            **({"channel": channel} if channel != "pipes" else {}),
        }
    )
    try:
        stdout = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        stdout = None
    if spec.fn_kind == "node":
        from trainguard._node import find_node, js_script

        # a Node worker speaking the same protocol (js/trainguard/lib/worker.js)
        program = [find_node(env), js_script("worker.js")]
    else:
        program = [sys.executable, "-m", "trainguard.runner.worker.process"]
    started_wall = time.time()
    proc = subprocess.Popen(
        [*program, str(pipes.child_read_fd), str(pipes.child_write_fd)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        # POSIX: pass_fds; Windows: inheritable handles listed in STARTUPINFO (close_fds either way)
        **inherit_options((pipes.child_read_fd, pipes.child_write_fd)),
        # its own process group: whatever it starts can be killed with it, even after it crashed,
        # and a Ctrl-C at the terminal reaches only the supervisor, which then stops the workers
        # (on Windows: created suspended, put in its Job Object, then resumed)
        **popen_options(tier),
    )
    pipes.close_child_ends()
    raise_oom_score(proc.pid)  # the kernel's OOM killer takes this worker before its supervisor
    if spec.fn_kind == "node" and cgroup is not None and not cgroup.join(proc.pid):
        # a Python worker joins its cgroup itself before anything else; a Node worker is moved
        # here, while it starts (it forks nothing before its first trial)
        cgroup.remove()
        cgroup = None
    return LocalWorker(spec, proc, pipes, cgroup, started_wall)


class LocalBackend(BaseBackend):
    """Workers as child processes of the supervisor (the default)."""

    name = "local"

    def __init__(self, channel: str | None = None) -> None:
        """``channel``: ``"pipes"`` or ``"sockets"``, None for the platform's (sockets on Windows);
        ``"sockets"`` on POSIX runs the Windows-style channel here (the tests use it).

        Raises:
            ConfigError: an unknown channel, or ``"pipes"`` on Windows.
        """
        self.channel = resolve_channel(channel)

    def start(self, spec: WorkerSpec) -> BaseWorker:
        return start_local_worker(spec, channel=self.channel)
