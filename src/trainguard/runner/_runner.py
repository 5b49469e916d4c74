"""``Runner``: many trainings in supervised, recycled worker processes.

Validation happens here, in the constructor and at the top of ``map``/``imap``, so every bad
argument is a one-line ``ConfigError`` before any worker starts or anything is stored.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainguard._envvars import THREAD_VARIABLES
from trainguard._text import require_utf8
from trainguard.exceptions import ConfigError, TrialError
from trainguard.probes.host import usable_cores, usable_memory_bytes
from trainguard.runner._config import RunConfig
from trainguard.runner._fnref import prepare
from trainguard.runner._params import check_params
from trainguard.runner._runner_store import RunnerStore
from trainguard.runner.backends.base import BaseBackend
from trainguard.runner.backends.typed import RayBackend, SlurmBackend, backend_name, resolve_backend
from trainguard.runner.policy import Policy
from trainguard.runner.session import RunProgress, Session, TrialResult, default_run_name
from trainguard.units import parse_duration, parse_size

if TYPE_CHECKING:
    from trainguard.runner.device import Device
    from trainguard.store import Store

__all__ = ["Runner", "KERAS_BACKENDS", "THREAD_ENV_VARS", "find_allocator"]

#: Keras 3 backends and the module each needs.
KERAS_BACKENDS = {
    "tensorflow": "tensorflow",
    "torch": "torch",
    "jax": "jax",
    "numpy": "numpy",
    "openvino": "openvino",
}

logger = logging.getLogger(__name__)

#: Variables that cap a worker's threads: the list ``doctor`` reports.
THREAD_ENV_VARS = THREAD_VARIABLES

_ALLOCATOR_LIBS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"),
    "tcmalloc": ("libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc.so", "libtcmalloc_minimal.so"),
}
_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
    "/opt/homebrew/lib",
)


def find_allocator(name: str) -> str:
    """The path of a ``jemalloc``/``tcmalloc`` shared library to LD_PRELOAD, or a given ``.so`` path.

    Raises:
        ConfigError: unknown allocator name, or it is not installed (names the package to install).

    Args:
        name: ``"jemalloc"``, ``"tcmalloc"`` or the path of a shared library.

    Returns:
        The library's path.
    """
    if name.endswith(".so") or ".so." in name or os.sep in name:
        if not Path(name).is_file():
            raise ConfigError(f"allocator library {name!r} does not exist: give the path of an installed .so")
        resolved = str(Path(name).resolve())
        if any(c in resolved for c in " :\t\n"):
            # the dynamic loader splits LD_PRELOAD at spaces and colons, with no way to quote them
            raise ConfigError(
                f"allocator library {resolved!r} has a space or colon in its path, which LD_PRELOAD cannot "
                "hold (the loader splits it there): link it from a path without one, e.g. "
                "ln -s 'my libs/libjemalloc.so.2' /tmp/libjemalloc.so.2"
            )
        return resolved
    if name not in _ALLOCATOR_LIBS:
        raise ConfigError(f"allocator={name!r} is unknown: use 'jemalloc', 'tcmalloc', a .so path, or None")
    dirs = [*_LIB_DIRS, os.path.join(sys.prefix, "lib")]
    for folder in dirs:
        for lib in _ALLOCATOR_LIBS[name]:
            path = os.path.join(folder, lib)
            if os.path.isfile(path):
                return path
    package = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}[name]
    raise ConfigError(
        f"allocator={name!r} is not installed (no {_ALLOCATOR_LIBS[name][0]} in the usual library folders): "
        f"install it (e.g. `apt-get install {package}`) or pass the library's path"
    )


def _warn_budget_above_memory(budget: int) -> None:
    """A budget above what the machine (or the cgroup) has is no budget: say so with both numbers."""
    import warnings

    from trainguard.exceptions import TrainguardWarning
    from trainguard.probes.host import cgroup_memory, system_memory
    from trainguard.units import format_bytes

    try:
        total = system_memory().total_bytes
        group = cgroup_memory()
    except Exception:  # noqa: BLE001 - nothing to compare with
        return
    limit = getattr(group, "limit_bytes", None) if group is not None else None
    if limit and limit < total and budget > limit:
        where = f"this cgroup's memory limit {format_bytes(limit)} (the machine has {format_bytes(total)})"
    elif budget > total:
        where = f"this machine's memory {format_bytes(total)}"
    else:
        return
    warnings.warn(
        TrainguardWarning(
            f"memory_budget={format_bytes(budget)} is above {where}: the OS will kill workers before the "
            "budget is reached; give a budget below it"
        ),
        stacklevel=3,
    )


def _check_flags(**flags: object) -> None:
    """Keyword arguments that must be True or False."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{name}={value!r} must be True or False")


def _check_sizing(
    workers: int | str,
    policy: Policy,
    memory_budget: str | int | None,
    backend: str,
    gpu_budgeted: bool = False,
) -> tuple[bool, int | None, int]:
    """``workers`` and ``memory_budget`` checked: ``(workers == "auto", the budget in bytes or None,
    the most workers at once)``; a GPU budget sizes ``workers="auto"`` as well."""
    auto = workers == "auto"
    if not auto and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers={workers!r} must be a whole number >= 1 such as 2, or 'auto'")
    budget = parse_size(memory_budget, name="memory_budget", allow_none=True)
    if backend in ("ray", "slurm") and (auto or budget is not None):
        raise ConfigError(
            f"workers='auto' and memory_budget= size a run to this machine's memory; with backend={backend!r} "
            "give workers=N (slots, spread over the nodes) and Policy(memory_limit=...) per trial"
        )
    if budget is not None and budget <= 0:
        raise ConfigError(f"memory_budget={memory_budget!r} must be a size above 0, such as '6GB'")
    if auto and budget is None and policy.memory_limit is None and not gpu_budgeted:
        raise ConfigError(
            "workers='auto' has nothing to size from: give memory_budget='6GB' (--memory-budget 6GB, "
            "the whole run's memory) or Policy(memory_limit=...) (--memory-limit, one trial's), or a "
            "number of workers"
        )
    if budget is not None:
        _warn_budget_above_memory(budget)
    max_workers = workers if not auto else usable_cores()
    if auto and budget is None and policy.memory_limit is not None and not gpu_budgeted:
        # sized from the per-trial limit: as many trials as the memory there is holds at their limit
        usable = usable_memory_bytes()
        max_workers = max(1, min(usable_cores(), usable // policy.memory_limit)) if usable else 1
    assert isinstance(max_workers, int)
    return auto, budget, max_workers


def _check_placement(
    keras_backend: str | None,
    gpus: Sequence[str | int] | str | None,
    device: Device | None,
    allocator: str | None,
    malloc_trim_threshold: str | int | None,
    env: Mapping[str, str] | None,
    preload: Sequence[str],
) -> tuple[tuple[str, ...] | None, str | None, int | None, tuple[str, ...]]:
    """What shapes a worker's process checked: ``(GPU slots, allocator library path, malloc trim
    threshold, preload modules)``."""
    if keras_backend is not None:
        if keras_backend not in KERAS_BACKENDS:
            raise ConfigError(
                f"keras_backend={keras_backend!r} is unknown: use one of {', '.join(KERAS_BACKENDS)}"
            )
        module = KERAS_BACKENDS[keras_backend]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"keras_backend={keras_backend!r} needs the package {module!r}, which is not installed"
            )
    if isinstance(gpus, str):
        gpu_slots: tuple[str, ...] | None = (gpus,)
    elif gpus is None:
        gpu_slots = None
    else:
        gpu_slots = tuple(str(g) for g in gpus)
        if not gpu_slots:
            raise ConfigError(
                "gpus=[] gives no device: pass None to leave CUDA_VISIBLE_DEVICES, or '' to hide GPUs"
            )
    if device is not None:
        from trainguard.runner.device import Device

        if not isinstance(device, Device):
            raise ConfigError(f"device must be a trainguard.Device(...), not {type(device).__name__}")
        if gpus is not None and device.visible_devices is not None:
            raise ConfigError(
                "gpus= and Device(visible_devices=) both set CUDA_VISIBLE_DEVICES: give only one"
            )
        device.check()
    from trainguard.process import refuse_linux_only

    if allocator is not None:
        refuse_linux_only(f"allocator={allocator!r}", "LD_PRELOAD of a glibc allocator")
    if malloc_trim_threshold is not None:
        refuse_linux_only("malloc_trim_threshold", "glibc's MALLOC_TRIM_THRESHOLD_")
    allocator_path = find_allocator(allocator) if allocator is not None else None
    trim = parse_size(malloc_trim_threshold, name="malloc_trim_threshold", allow_none=True)
    if env is not None and (
        not isinstance(env, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    ):
        raise ConfigError(
            "env must be a mapping of strings to strings, such as {'TF_CPP_MIN_LOG_LEVEL': '2'}"
        )
    if isinstance(preload, str):
        preload = (preload,)
    preload = tuple(preload)
    for name in preload:
        if not isinstance(name, str) or not all(p.isidentifier() for p in name.split(".")):
            raise ConfigError(f"preload entry {name!r} is not a module name such as 'tensorflow'")
        if importlib.util.find_spec(name.split(".")[0]) is None:
            raise ConfigError(f"preload module {name!r} is not installed")
    return gpu_slots, allocator_path, trim, preload


def _check_limits(
    sample_interval: str | float,
    start_timeout: str | float,
    max_result_bytes: str | int,
    tree_tracking: str,
    policy: Policy,
) -> tuple[float, float, int]:
    """The sampling interval, start timeout and result cap checked, as ``(seconds, seconds,
    bytes)``; ``tree_tracking`` and a GPU limit's need for NVML checked."""
    interval = parse_duration(sample_interval, name="sample_interval")
    assert interval is not None
    if interval <= 0 or interval > 60:
        raise ConfigError(f"sample_interval={sample_interval!r} must be between 1ms and 60s, such as '100ms'")
    start_timeout_s = parse_duration(start_timeout, name="start_timeout")
    assert start_timeout_s is not None
    result_cap = parse_size(max_result_bytes, name="max_result_bytes")
    if result_cap is None or result_cap < 1 or result_cap > 1 << 31:
        raise ConfigError(
            f"max_result_bytes={max_result_bytes!r} must be between 1 byte and 2GiB, such as '16MiB'"
        )
    from trainguard.process import resolve_tracking

    resolve_tracking(tree_tracking)  # an unknown tier, or one this platform lacks: one line
    if policy.gpu_memory_limit is not None:
        from trainguard.probes.nvml import nvml_available

        if not nvml_available():
            raise ConfigError(
                "gpu_memory_limit needs NVML (pip install -e '.[nvml]') and an NVIDIA driver; none is available"
            )
    return float(interval), float(start_timeout_s), int(result_cap)


def _warn_gpu_options(device: Device | None, gpus: Sequence[str | int] | str | None, backend: str) -> None:
    """GPU-only options where no GPU is seen: one warning (locally; elsewhere the nodes' GPUs count)."""
    if backend == "local":
        from trainguard.runner.gpu_presence import warn_gpu_options_without_gpu

        warn_gpu_options_without_gpu(device, gpus, stacklevel=4)


def _worker_env(
    threads: int | None,
    per_worker: int,
    keras_backend: str | None,
    trim: int | None,
    allocator_path: str | None,
    device: Device | None,
    env: Mapping[str, str] | None,
) -> tuple[dict[str, str], list[str]]:
    """The workers' base environment and the thread variables it sets (an explicit ``threads``
    overrides the environment; the default only fills variables not set)."""
    base_env = dict(os.environ)
    thread_vars = []
    for var in THREAD_ENV_VARS:
        if threads is not None or var not in base_env:
            base_env[var] = str(per_worker)
            thread_vars.append(var)
    # TF's INFO lines (oneDNN notice) on every worker start would bury the progress display
    base_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    if keras_backend is not None:
        base_env["KERAS_BACKEND"] = keras_backend
    if trim is not None:
        base_env["MALLOC_TRIM_THRESHOLD_"] = str(trim)
    if allocator_path is not None:
        previous = base_env.get("LD_PRELOAD", "")
        base_env["LD_PRELOAD"] = f"{allocator_path}:{previous}" if previous else allocator_path
    if device is not None:
        base_env.update(device.env())
    if env:
        base_env.update(env)
    base_env.pop("PYTHONSTARTUP", None)
    return base_env, thread_vars


def run_environment() -> dict[str, Any] | None:
    """Where this session runs (doctor's summary, host name), stored for reports; ~15 ms, no framework."""
    import platform

    from trainguard import __version__
    from trainguard.doctor import diagnose

    try:
        env = diagnose().to_dict()
    except Exception:  # noqa: BLE001 - a report's context must never stop a run
        logger.debug("could not read the environment for the store", exc_info=True)
        return None
    env["hostname"] = platform.node()
    env["trainguard"] = __version__
    return env


class Runner(RunnerStore):
    """Runs a function over many params in supervised worker processes that are recycled by policy.

    Each worker is a fresh ``python -m trainguard.runner.worker.process`` process (never a fork) whose
    environment is complete before any framework import: ``KERAS_BACKEND``, thread limits
    (``threads`` per worker, default cores // workers), ``CUDA_VISIBLE_DEVICES`` (``gpus``, one
    entry per worker slot, round robin), ``MALLOC_TRIM_THRESHOLD_`` and an ``LD_PRELOAD`` allocator.
    A worker is reused for the next trial until the policy recycles it. The supervisor samples each
    worker's process tree (RSS; USS with ``uss=True``; GPU memory by pid with NVML) every
    ``sample_interval`` and kills a tree at the policy's hard limits. Results go to the store, so
    running the same named run again resumes it.

    Args:
        workers: number of worker processes (>= 1).
        policy: a :class:`Policy`; default ``Policy()`` (predictive recycling that keeps each worker's
            peak under 1.2 x its first trial's).
        store: path of the SQLite store (``"trainguard.db"``), an open ``trainguard.store.Store``, or
            None to keep nothing (no resume).
        keras_backend: ``"tensorflow"``, ``"torch"``, ``"jax"``, ``"numpy"`` or ``"openvino"``; sets
            ``KERAS_BACKEND`` in the workers. None leaves the environment's choice.
        threads: threads per worker for OpenMP/BLAS/TF/torch; default ``max(1, cores // workers)``.
            An explicit value overrides the environment; the default only fills variables not set.
        gpus: device ids for ``CUDA_VISIBLE_DEVICES``, one per worker slot (``["0", "1"]``), or
            ``""`` to hide all GPUs. None leaves the environment's value.
        allocator: ``"jemalloc"``, ``"tcmalloc"`` or a ``.so`` path to ``LD_PRELOAD`` in the workers.
        malloc_trim_threshold: sets glibc's ``MALLOC_TRIM_THRESHOLD_`` (a size) in the workers.
        env: extra environment variables for the workers.
        preload: modules a fresh worker imports before its first trial (``("tensorflow",)``), so
            the import is timed apart from the trial.
        sample_interval: how often the supervisor samples each worker tree (default ``"100ms"``).
        uss: also sample USS (private memory; costs more than RSS).
        census: have workers report a live-object census by kind after each trial (stored as events).
        cleanup: have workers run ``trainguard.frameworks.cleanup()`` after each trial. Off by
            default: recycling bounds memory, and per-trial ``clear_session()`` costs ~0.4 s on TF.
        tf_custom_gradients: after each trial in which TensorFlow is imported, workers move the
            gradient functions ``tf.custom_gradient`` registered while tracing out of TensorFlow's
            global gradient registry onto their traced graphs, so that a finished Keras ``fit``'s
            graphs are freed (otherwise about 10 MiB a fit of the demo's model stays for good).
            A graph still in use keeps its gradient. On by default; False leaves TensorFlow as is.
        start_timeout: how long a new worker may take to import and load ``fn``.
        device: a :class:`trainguard.Device`: GPU visibility and framework memory settings applied in
            each worker before any framework initialises, read back and recorded as a ``device`` event.
        fresh: run every trial even when the store holds a run of the same name: that run is kept,
            renamed ``NAME.replaced-<time>``, and a new one starts. Without it, a run of the same
            name resumes and reuses its stored results (a :class:`FunctionChangedWarning` says so
            when the function's code changed since they were computed).
        max_result_bytes: the largest result a trial may return, as JSON (a size such as ``"16MiB"``,
            the default); a larger one fails that trial with ``result_too_large`` and its size,
            and never reaches the supervisor or the store.
        tree_tracking: how a worker keeps every process its trials start (double-forked and
            ``setsid`` ones included) in its tree, counted in its memory and killed with it:
            ``"auto"`` (default) gives each worker a cgroup v2 of its own where one can be made
            (root, or a delegated systemd scope) on top of making it a child subreaper;
            ``"subreaper"`` uses the subreaper alone; ``"cgroup"`` requires the cgroup (both Linux
            only); ``"portable"`` (what macOS gets by default) uses psutil and a process group per
            worker only (a daemon that leaves the group escapes); ``"windows"`` (Windows' default)
            a Job Object per worker. Which one a worker got is stored with it (``tree_tracking``
            in its config); ``trainguard doctor`` lists what each guarantees here.
        seed: the run's seed. Trial ``i`` gets its own seed derived from ``(seed, i)``, the same on
            every attempt and in any worker, and the worker seeds Python's ``random``, numpy, and
            torch, TensorFlow and Keras (those the trial imports) with it before the trial. None
            seeds nothing. The seed is stored with each trial and shown by ``trainguard show``.
        backend: where workers run: ``"local"`` (default: child processes of this one), a
            :class:`~trainguard.RayBackend` (on the nodes of a Ray cluster, one node-local supervisor
            actor per worker slot; ``pip install -e '.[ray]'``), a :class:`~trainguard.SlurmBackend`
            (in pilot jobs on a Slurm cluster, each a node-local supervisor of its workers;
            ``pip install -e '.[slurm]'``), the names ``"ray"`` and ``"slurm"`` for those with their
            defaults, or an object implementing ``trainguard.runner.backends.base.BaseBackend``.
        memory_budget: the memory of the whole run: the sum of every worker's process tree
            (``"8GB"``). With ``workers="auto"`` it sizes the pool from a fresh worker's measured
            peak; each trial is admitted only when its predicted peak fits beside the others, and
            when the sampled sum crosses it one worker is killed. None (default): no budget.
        gpu_memory_budget: the GPU memory of the whole run, per GPU (NVML's indices): one size for
            each GPU (``"70GB"``; of ``gpus=`` when given) or ``{0: "70GB", 1: "40GB"}``. Each GPU gets
            as many worker slots as its budget holds of a fresh worker's measured GPU peak (one
            until a trial is measured), each worker is pinned to its GPU, and the frameworks the
            workers are said to use (``keras_backend``, ``preload``, a ``Device`` setting) are capped
            at the slot's share (TensorFlow's logical device, PyTorch's per-process fraction, JAX's
            memory fraction). A trial starts only when its expected GPU peak fits beside the other
            workers on its GPU; the sampler kills a worker when a GPU's workers sum over its budget,
            and a trial predicted over every GPU's budget is not started. Needs NVML.
        address: deprecated: ``backend=RayBackend(address=...)`` (a DeprecationWarning says so).
        resources: deprecated: ``backend=RayBackend(resources=...)``.
        slurm: deprecated: ``backend=SlurmBackend(...)`` (``SlurmBackend.from_options(slurm)`` reads
            the old dict).

    Raises:
        ConfigError: any argument out of range, an unknown Keras backend or one not installed, an
            allocator not installed, a preload module that does not exist.
    """

    def __init__(
        self,
        workers: int | str = 1,
        policy: Policy | None = None,
        store: str | os.PathLike[str] | Store | None = "trainguard.db",
        *,
        keras_backend: str | None = None,
        threads: int | None = None,
        gpus: Sequence[str | int] | str | None = None,
        allocator: str | None = None,
        malloc_trim_threshold: str | int | None = None,
        env: Mapping[str, str] | None = None,
        preload: Sequence[str] = (),
        sample_interval: str | float = "100ms",
        uss: bool = False,
        census: bool = False,
        cleanup: bool = False,
        tf_custom_gradients: bool = True,
        start_timeout: str | float = "180s",
        fresh: bool = False,
        max_result_bytes: str | int = "16MiB",
        tree_tracking: str = "auto",
        seed: int | None = None,
        device: Device | None = None,
        backend: str | RayBackend | SlurmBackend | BaseBackend = "local",
        memory_budget: str | int | None = None,
        gpu_memory_budget: str | int | Mapping[int, str | int] | None = None,
        address: str | None = None,
        resources: Mapping[str, float] | str | None = None,
        slurm: Mapping[str, object] | Sequence[str] | None = None,
    ) -> None:
        from trainguard._nesting import refuse_nested

        refuse_nested("Runner")
        _check_flags(fresh=fresh, tf_custom_gradients=tf_custom_gradients)
        if policy is None:
            policy = Policy()
        if not isinstance(policy, Policy):
            raise ConfigError(f"policy must be a trainguard.Policy, not {type(policy).__name__}")
        kind = backend_name(backend)
        auto, budget, max_workers = _check_sizing(
            workers, policy, memory_budget, kind, gpu_budgeted=gpu_memory_budget is not None
        )
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ConfigError(
                f"threads={threads!r} must be a whole number >= 1, or None for cores // workers"
            )
        gpu_slots, allocator_path, trim, preload = _check_placement(
            keras_backend, gpus, device, allocator, malloc_trim_threshold, env, preload
        )
        from trainguard.runner._gpu_config import check_gpu_budget

        gpu_budget = check_gpu_budget(
            gpu_memory_budget,
            gpus=gpus,
            device=device,
            backend=kind,
            keras_backend=keras_backend,
            preload=preload,
        )
        interval, start_timeout_s, result_cap = _check_limits(
            sample_interval, start_timeout, max_result_bytes, tree_tracking, policy
        )
        _warn_gpu_options(device, gpus, kind)
        from trainguard.runner.worker.seeding import check_seed

        seed = check_seed(seed)

        self._backend = resolve_backend(backend, address=address, resources=resources, slurm=slurm)
        # with a budget the number of workers changes during the run: threads follow it (at each start);
        # on a cluster a worker gets the CPUs its slot reserves on its node
        first_workers = 1 if budget is not None else max_workers
        default_threads = getattr(self._backend, "threads", None) or max(1, usable_cores() // first_workers)
        per_worker = threads if threads is not None else default_threads
        base_env, thread_vars = _worker_env(
            threads, per_worker, keras_backend, trim, allocator_path, device, env
        )

        self.workers = workers
        self.memory_budget = budget
        self.gpu_memory_budget = gpu_budget.budgets if gpu_budget is not None else None
        self.policy = policy
        self._init_store(store)
        self._config = RunConfig(
            workers=max_workers,
            threads=per_worker,
            memory_budget_bytes=budget,
            auto_workers=auto,
            # on a cluster the slot's CPUs fix the threads: this machine's cores say nothing there
            threads_chosen=threads is None and getattr(self._backend, "threads", None) is None,
            thread_vars=tuple(thread_vars),
            cores=usable_cores(),
            base_env=base_env,
            gpu_slots=gpu_slots if gpu_budget is None else None,  # the budget places each worker
            gpu_budget=gpu_budget,
            preload=preload,
            sample_interval_s=float(interval),
            uss=bool(uss),
            census=bool(census),
            cleanup=bool(cleanup),
            start_timeout_s=float(start_timeout_s),
            fresh=bool(fresh),
            max_result_bytes=int(result_cap),
            tree_tracking=tree_tracking,
            seed=seed,
            keras_backend=keras_backend,
            allocator=allocator_path,
            malloc_trim_threshold=trim,
            tf_custom_gradients=tf_custom_gradients,
            device=device.worker_settings() if device is not None else None,
        )

    # -- running ----------------------------------------------------------------------------------

    def imap(
        self,
        fn: Callable[[dict[str, Any]], Any] | str,
        params_list: Iterable[Mapping[str, Any]],
        name: str | None = None,
        *,
        data: Any = None,
        predict_from: str | None = None,
    ) -> Iterator[TrialResult]:
        """Run ``fn(params)`` for every params in workers; yield each :class:`TrialResult` as it finishes.

        Results already stored by an earlier session of the same run come first.

        Args:
            fn: a callable (by reference when importable, else cloudpickled), ``"pkg.module:function"``
                or ``"path/file.py:function"``. It takes one dict and returns a JSON-serializable value.
                ``"path/train.js:train"`` runs an exported (async) JavaScript function in Node workers;
                a :class:`~trainguard.Command` runs a program once per trial.
            params_list: one dict per trial.
            name: the run's name in the store; default ``<function>-<hash of fn and params>``, so
                the same call resumes.
            data: data every trial reads, prepared once: a :class:`~trainguard.SharedData` from
                :func:`trainguard.share` (kept until you close it), or a numpy array or dict of them,
                shared for this run and removed when it ends. A trial ``def train(params, ctx)``
                reads it as ``ctx.data`` (read-only memory maps, no copy).
            predict_from: another run of this runner's store whose ``ok`` trials seed this run's
                peak model (``Policy(predict_peaks=...)``). None (default): the model learns from
                this run's own trials only, earlier sessions of it included, never from another
                run that ran the same function.

        Raises:
            ConfigError: a bad fn or params (before any worker starts; with ``on_oom``, a params
                without the shrink key or with a non-integer one), a ``predict_from`` that names no
                run of the store (or is given without a store, or with ``predict_peaks=False``),
                or fn fails to load in a worker.
            TrialError: a trial failed and the policy says ``on_error="stop"``.
            WorkerCrashedError: a worker died before it was ready.

        Returns:
            An iterator of the results, each as its trial finishes.
        """
        spec = prepare(fn)
        require_utf8(spec.ref, "function", "rename the file or folder to UTF-8 (the store keeps its path)")
        params = check_params(params_list)
        if data is not None:
            from trainguard.runner._shared import SharedData, _check_arrays

            if isinstance(data, SharedData):
                if data.closed:
                    raise ConfigError(f"data={data!r} is closed: share the arrays again")
            else:
                _check_arrays(data)
        if self.policy.on_oom is not None:
            for i, trial_params in enumerate(params):
                self.policy.on_oom.check_params(trial_params, f"params[{i}]")
        if name is None:
            name = default_run_name(spec.ref, params)
        elif not isinstance(name, str) or not name.strip():
            raise ConfigError(f"name must be a non-empty string such as 'sweep1', not {name!r}")
        require_utf8(name, "run name", "pass a UTF-8 name, e.g. --name sweep1")
        scope = self._prediction_scope(name, predict_from)
        if not params:
            return iter(())
        store = self._open_store()
        self._last_run = name
        bind_run = getattr(self._backend, "bind_run", None)
        if bind_run is not None:  # a backend that names its jobs after the run (Slurm's pilots)
            bind_run(name, store)  # and its store: a run is its store and its name
        self._backend.check(fn=spec, policy=self.policy, slots=self._config.workers, data=data)
        session = Session(
            self._config,
            self.policy,
            store,
            spec,
            params,
            name,
            data=data,
            backend=self._backend,
            environment=run_environment,
            scope=scope,
        )
        return self._drive(session)

    def _drive(self, session: Session) -> Iterator[TrialResult]:
        self._session = session
        try:
            yield from session.run()
        finally:
            session.close()
            if session.predictions.forecaster is not None:
                self._forecasts[session.fn.ref] = session.predictions.forecaster
            if self._session is session:
                self._session = None

    def map(
        self,
        fn: Callable[[dict[str, Any]], Any] | str,
        params_list: Iterable[Mapping[str, Any]],
        name: str | None = None,
        *,
        data: Any = None,
        predict_from: str | None = None,
    ) -> list[TrialResult]:
        """Like :meth:`imap`, but return all results in input order.

        Raises:
            TrialError: with ``on_error="stop"``; its ``results`` attribute holds what finished.

        Args:
            fn: the trial function, as :meth:`imap` takes it.
            params_list: one dict of params per trial.
            name: the run's name in the store (running a name again resumes it).
            data: data every trial reads, prepared once (:func:`~trainguard.share`).
            predict_from: another stored run whose trials seed the peak model, as :meth:`imap` takes it.

        Returns:
            One :class:`TrialResult` per params, in input order.
        """
        results: list[TrialResult] = []
        try:
            for result in self.imap(fn, params_list, name=name, data=data, predict_from=predict_from):
                results.append(result)
        except TrialError as err:
            err.results = sorted(results, key=lambda r: r.index)  # type: ignore[attr-defined]
            raise
        return sorted(results, key=lambda r: r.index)

    def progress(self) -> RunProgress | None:
        """A snapshot of the running ``map``/``imap`` (None when nothing runs); safe from any thread.

        Returns:
            The run's name, its trial counts (total, done, failed, running), elapsed time, ETA and
            each worker's state; None when nothing runs.
        """
        session = self._session
        return session.progress() if session is not None else None

    def _interrupt(self) -> bool:
        """Stop the running ``map``/``imap`` from another thread as Ctrl-C would (the iterating
        thread gets ``KeyboardInterrupt`` within the loop's poll; the run is recorded interrupted).
        False when nothing runs."""
        session = self._session
        if session is None:
            return False
        session.interrupt()
        return True
