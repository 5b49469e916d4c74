"""The worker process: ``python -m trainguard.runner.worker.process READ_FD WRITE_FD``.

The supervisor starts it with ``subprocess.Popen`` (never fork) and an environment that is already
complete (KERAS_BACKEND, thread counts, CUDA_VISIBLE_DEVICES, MALLOC_*, LD_PRELOAD), so every
framework imported here sees its settings. Bootstrap: become the child subreaper of everything it
will start (and join its cgroup when the supervisor made one), watch the supervisor so that its
death ends this worker's whole tree, pre-import the requested frameworks, say "ready"; then run
trials until told to exit or the pipe closes. Every exit first ends the worker's descendants, then
uses ``os._exit`` to skip the interpreter teardown (0.65 s with TensorFlow loaded). Messages to the
supervisor are JSON (``_protocol``); a ``Runner`` started in here is refused (``_nesting``).

This module imports nothing heavy at the top: a worker pays only for what its trials use.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from trainguard.outcomes import Failure
from trainguard.runner._channel import child_ends
from trainguard.runner._protocol import WORKER_CONFIG_ENV, write_message

#: ends what a trial started, at the trial's end (set at bootstrap)
_REAPER: list[Any] = [None]
#: the process tier this worker runs under ("portable": psutil only, no /proc, no subreaper)
_TIER = ["auto"]


def _end_tree_and_exit(code: int) -> None:
    """End every process this worker started (however it detached: the worker is their subreaper),
    then exit without the interpreter's teardown."""
    try:
        if _TIER[0] in ("portable", "windows"):
            from trainguard.process.portable import kill_children_portable

            kill_children_portable()
        else:
            from trainguard.process import kill_descendants

            kill_descendants()
    finally:
        os._exit(code)


def _watch_supervisor(inbox_fd: int, parent_pid: int, channel: str = "pipes") -> None:
    """End this worker's whole tree when the supervisor dies, even mid-trial.

    A thread waits for the hang-up of the supervisor's end of the inbox (the OS closes it when the
    supervisor dies, SIGKILL included: ``select.poll`` on the pipe, or ``select`` and a peek on the
    socket channel), and checks the parent every 0.5 s as well (its pid on POSIX, a process handle
    on Windows). PR_SET_PDEATHSIG is not used: its SIGKILL would end the worker before it could end
    its tree.
    """
    from trainguard.runner._channel import parent_alive_check, watch_hangup

    if os.getppid() != parent_pid:  # the parent died before we got here
        _end_tree_and_exit(70)
    try:
        parent_alive = parent_alive_check(parent_pid)
    except OSError:  # Windows: the parent's handle cannot be opened, it is gone
        _end_tree_and_exit(70)
    watch_hangup(channel, inbox_fd, parent_alive, lambda: _end_tree_and_exit(70))


def _status_kb(field: str) -> int | None:
    return _status_bytes((field,)).get(field)


def _status_bytes(fields: tuple[str, ...]) -> dict[str, int]:
    """The ``fields`` of ``/proc/self/status`` (kB lines) in bytes, read in one pass: a trial's end
    reads RSS and its peak from one read of the file (two reads cost about 0.13 ms a trial)."""
    wanted = {field.encode(): field for field in fields}
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                name = line[: line.find(b":") + 1]
                if name in wanted:
                    found[wanted[name]] = int(line.split()[1]) * 1024
                    if len(found) == len(wanted):
                        break
    except (OSError, ValueError, IndexError):
        pass
    return found


def _reset_peak() -> None:
    # "5" resets VmHWM (Linux >= 4.0), so the next read is this trial's own peak RSS
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _frameworks() -> list[str]:
    return [name for name in ("torch", "tensorflow", "keras", "jax") if name in sys.modules]


def _framework_stats() -> dict[str, Any]:
    """Cheap allocator figures of frameworks already imported; never imports one.

    ``fragmentation`` holds, where the framework reports it, what its allocator holds against what
    is in use: torch's reserved vs allocated bytes and inactive split blocks (``memory_stats``),
    TensorFlow's peak vs current bytes per device (``get_memory_info``; on the CPU only with
    ``TF_CPU_ALLOCATOR_USE_BFC=true``, the default CPU allocator reports zeros).
    """
    stats: dict[str, Any] = {}
    fragmentation: list[dict[str, Any]] = []
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                stats["torch_cuda_allocated_bytes"] = int(torch.cuda.memory_allocated())
                stats["torch_cuda_reserved_bytes"] = int(torch.cuda.memory_reserved())
                stats["torch_cuda_peak_bytes"] = int(torch.cuda.max_memory_allocated())
                for index in range(torch.cuda.device_count()):
                    raw = torch.cuda.memory_stats(index)
                    if not raw:
                        continue
                    fragmentation.append(
                        {
                            "framework": "torch",
                            "device": f"cuda:{index}",
                            "reserved_bytes": int(raw.get("reserved_bytes.all.current", 0)),
                            "allocated_bytes": int(raw.get("allocated_bytes.all.current", 0)),
                            "inactive_split_bytes": int(raw.get("inactive_split_bytes.all.current", 0)),
                            "peak_reserved_bytes": int(raw.get("reserved_bytes.all.peak", 0)),
                            "peak_allocated_bytes": int(raw.get("allocated_bytes.all.peak", 0)),
                        }
                    )
                torch.cuda.reset_peak_memory_stats()
        except Exception:  # noqa: BLE001 - stats are best effort and must never fail a trial
            pass
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "config"):
        try:
            devices = [d.name.split("device:")[-1] for d in tf.config.list_logical_devices("GPU")]
            if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() in ("1", "true"):
                devices.append("CPU:0")
            for name in devices:
                info = tf.config.experimental.get_memory_info(name)
                fragmentation.append(
                    {
                        "framework": "tensorflow",
                        "device": name,
                        "current_bytes": int(info.get("current", 0)),
                        "peak_bytes": int(info.get("peak", 0)),
                    }
                )
                tf.config.experimental.reset_memory_stats(name)
        except Exception:  # noqa: BLE001 - see above
            pass
    if fragmentation:
        stats["fragmentation"] = fragmentation
    return stats


def _census_totals() -> dict[str, Any] | None:
    try:
        from trainguard.probes.census import census
    except ImportError:
        return None
    try:
        result = census()
        return {
            "by_kind": {k: [int(c), int(b)] for k, (c, b) in result.by_kind().items()},
            "elapsed_s": float(result.elapsed_s),
        }
    except Exception as err:  # noqa: BLE001 - a census failure is reported, not fatal
        return {"error": f"{type(err).__name__}: {err}"}


def _cleanup() -> dict[str, float]:
    try:
        from trainguard.frameworks import cleanup
    except ImportError:
        start = time.perf_counter()
        gc.collect()
        return {"gc_collect": time.perf_counter() - start}
    return cleanup(tf_custom_gradients=_TF_CUSTOM_GRADIENTS[0])


#: set by main() from the worker config: release tf.custom_gradient's traced graphs after each trial
_TF_CUSTOM_GRADIENTS = [True]


def _release_tf_gradients() -> float | None:
    """Move the traced graphs' ``tf.custom_gradient`` functions out of TensorFlow's global
    registry (what keeps every finished Keras ``fit``'s graph alive); seconds it took, or None
    when it did not run (switched off, TensorFlow not imported)."""
    if not _TF_CUSTOM_GRADIENTS[0] or "tensorflow" not in sys.modules:
        return None
    start = time.perf_counter()
    try:
        from trainguard.frameworks import adapter

        ran = adapter("tensorflow").release_custom_gradients()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a failed release must never fail the trial
        return None
    return time.perf_counter() - start if ran else None


def _oom_framework(exc: BaseException) -> str | None:
    from trainguard.frameworks import is_oom

    try:
        return is_oom(exc)
    except Exception:  # noqa: BLE001 - fall through to the local check
        pass
    if isinstance(exc, MemoryError):
        return "python"
    name = type(exc).__name__
    if name == "ResourceExhaustedError":
        return "tensorflow"
    if name == "OutOfMemoryError" or "CUDA out of memory" in str(exc):
        return "torch"
    return None


def _json_default(obj: Any) -> Any:
    # numpy scalars (np.float32 loss values) are the one conversion users expect; arrays are not
    # converted, they can be huge and are rarely what a trial means to return
    item = getattr(obj, "item", None)
    if callable(item) and type(obj).__module__ == "numpy" and getattr(obj, "ndim", 1) == 0:
        return item()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _apply_torch_threads(threads: int | None, done: list[bool]) -> None:
    if threads and not done[0] and "torch" in sys.modules:
        try:
            sys.modules["torch"].set_num_threads(threads)
        except Exception:  # noqa: BLE001
            pass
        done[0] = True


def _preload(modules: list[str], threads: int | None) -> None:
    import importlib

    for name in modules:
        importlib.import_module(name)
    if threads and "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except Exception:  # noqa: BLE001 - TF refuses once its runtime is initialised; env vars cover it
            pass


def _set_mixed_precision() -> None:
    """Out-of-memory recovery's opt-in step: Keras's ``mixed_float16`` global policy (float16
    activations, about half their memory), set before the trial builds its model."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")


def run_trial(fn: Any, msg: dict[str, Any], max_result_bytes: int | None = None) -> dict[str, Any]:
    """Run one trial and build its result message (exceptions become statuses, never propagate).

    A result whose JSON is longer than ``max_result_bytes`` is not sent: the trial fails with
    ``result_too_large`` and its size, so the supervisor and the store never hold it."""
    params = msg["params"]
    _reset_peak()
    error: Failure | None = None
    value_json: str | None = None
    snapshot: str | None = None
    ctx = None
    start = time.perf_counter()
    try:
        if msg.get("mixed_precision"):
            _set_mixed_precision()
        from trainguard.runner.worker.seeding import seed_trial

        seed_trial(msg.get("seed"))
        ctx = _make_context(fn, msg, start)
        value = fn(params) if ctx is None else fn(params, ctx)
        status = "ok"
    except BaseException as exc:  # noqa: BLE001 - SystemExit/KeyboardInterrupt in a trial fail that trial only
        duration = time.perf_counter() - start
        framework = _oom_framework(exc)
        status = "framework_oom" if framework else "exception"
        # a command trial says which of the worker's statuses its program's end maps to
        trial_status = getattr(exc, "trial_status", None)
        if trial_status in ("exception", "result_too_large"):
            status = str(trial_status)
        error = _exception_error(exc, status, framework)
        from trainguard.runner.worker.context import disk_full_note

        full = disk_full_note(ctx, exc)
        if full is not None:  # the supervisor stops the run: every next write would fail too
            error = dataclasses.replace(error, disk_full=full)
        if framework == "torch":
            from trainguard.runner.device import dump_torch_memory_snapshot

            snapshot = dump_torch_memory_snapshot(_CAPTURE_DIR[0], msg["index"], msg["attempt"])
        del exc
    else:
        duration = time.perf_counter() - start
        try:
            value_json = json.dumps(value, default=_json_default)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            status = "not_serializable"
            error = Failure(
                status,
                f"the result is not JSON-serializable: {exc}; return plain numbers, strings, lists and dicts",
                exc_type=type(exc).__name__,
            )
        del value
        # json.dumps escapes non-ASCII by default: len() is the size in bytes
        if value_json is not None and max_result_bytes is not None and len(value_json) > max_result_bytes:
            size = len(value_json)
            value_json = None
            status = "result_too_large"
            error = Failure(
                status,
                f"the result is {size} bytes of JSON, over max_result_bytes={max_result_bytes}: "
                "return a summary (write large outputs to a file and return its path), or raise max_result_bytes",
                exc_type="ResultTooLarge",
                detail={"result_bytes": size},
            )
    from trainguard.runner.worker.context import end_current

    end_current()
    reaped = _REAPER[0].reap() if _REAPER[0] is not None else []
    stats = _after_trial(msg)
    if reaped:
        stats["reaped_pids"] = len(set(reaped))
    if snapshot is not None:
        stats["torch_memory_snapshot"] = snapshot
    return {
        "op": "result",
        "index": msg["index"],
        "attempt": msg["attempt"],
        "status": status,
        "value_json": value_json,
        "error": None if error is None else error.to_dict(),
        "duration_s": duration,
        **_memory_now(fn),
        "stats": stats,
    }


def _exception_error(exc: BaseException, status: str, framework: str | None) -> Failure:
    """The failure a trial's exception becomes (a command trial's carries its words and stderr)."""
    if getattr(exc, "trial_status", None) is not None:  # a command trial: its words, its stderr
        message = str(exc)[:2000]
        exc_type = "CommandFailed"
        trace = str(getattr(exc, "detail", "") or "")[-20000:]
    else:
        message = f"{type(exc).__name__}: {exc}"[:2000]
        exc_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
        trace = "".join(traceback.format_exception(exc))[-20000:]
    return Failure(
        status,
        message,
        exc_type=exc_type,
        # its classes, most derived first: the supervisor rebuilds a type a `catch=` names
        mro=tuple(f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__[:-1])[:16],
        traceback=trace,
        framework=framework or None,
    )


def _after_trial(msg: dict[str, Any]) -> dict[str, Any]:
    """What a worker does and reads after each trial: allocator figures, the cleanups asked for
    (else the release of TensorFlow's custom-gradient graphs, unless switched off), the C
    allocator's bytes in use after them and a ``gc.collect()``, a census."""
    stats = _framework_stats()
    if msg.get("cleanup"):
        stats["cleanup_s"] = _cleanup()
    elif (released_s := _release_tf_gradients()) is not None:
        stats["tf_custom_gradients_s"] = released_s
    _read_bytes_in_use(stats, collect=not msg.get("cleanup"))
    if msg.get("census"):
        totals = _census_totals()
        if totals is not None:
            stats["census"] = totals
    stats["frameworks"] = _frameworks()
    return stats


#: the C allocator's reader, bound at the first trial's end (None until then)
_ALLOCATOR: list[Any] = [None]


def _read_bytes_in_use(stats: dict[str, Any], *, collect: bool) -> None:
    """Put the C allocator's bytes in use (and its name) in ``stats``, where it counts them; with
    ``collect``, after a ``gc.collect()`` (``cleanup()`` has collected already), so that what the
    trial left in reference cycles is freed first. Nothing is read, nor collected, where the
    allocator has no such count (macOS, musl, mimalloc)."""
    probe = _ALLOCATOR[0]
    if probe is None:
        try:
            from trainguard.probes.allocator import AllocatorProbe

            probe = _ALLOCATOR[0] = AllocatorProbe()
        except Exception:  # noqa: BLE001 - evidence is best effort and must never fail a trial
            return
    if not probe.available:
        return
    if collect:
        gc.collect()
    value = probe.read()
    if value is not None:
        stats["bytes_in_use"] = value
        stats["allocator"] = probe.name


_WANTS_CONTEXT: dict[int, bool] = {}
#: the run's private folder (set at bootstrap): where a CUDA memory snapshot is dumped
_CAPTURE_DIR: list[str | None] = [None]
#: set by main(): sends a stage boundary to the supervisor and waits for its answer
_STAGE_CHANNEL: Any = None


def _make_context(fn: Any, msg: dict[str, Any], started: float) -> Any:
    """The trial context for ``fn(params, ctx)``, or None for a function of one argument."""
    key = id(fn)
    if key not in _WANTS_CONTEXT:
        from trainguard.runner.worker.context import wants_context

        _WANTS_CONTEXT[key] = wants_context(fn)
    if not _WANTS_CONTEXT[key]:
        return None
    from trainguard.runner.worker.context import TrialContext

    data = None
    shared = msg.get("data")
    if shared:
        from trainguard.runner._shared import _attach

        data = _attach(shared["path"], tuple(shared["names"]), bool(shared["single"]))
        data.attach()
    boundary = None
    if _STAGE_CHANNEL is not None and msg.get("checkpoint_dir"):

        def boundary(stage: int, remaining: int | None, pressure: bool) -> None:
            _STAGE_CHANNEL(msg, stage, remaining, started, fn, pressure)

    return TrialContext(
        index=msg["index"],
        attempt=msg["attempt"],
        seed=msg.get("seed"),
        data=data,
        checkpoint_root=msg.get("checkpoint_dir"),
        restart_reason=msg.get("restart_reason"),
        boundary=boundary,
        checkpoint_levels=int(msg.get("checkpoint_levels") or 1),
        run_uuid=msg.get("run_uuid"),
    )


def _memory_now(fn: Any) -> dict[str, int | None]:
    """A trial's end: the worker's RSS and peak RSS since the trial began (one read of
    ``/proc/self/status``), the peak the command trial's program's where that is higher."""
    memory = _status_bytes(("VmRSS:", "VmHWM:"))
    return {"rss_bytes": memory.get("VmRSS:") or 0, "hwm_bytes": _peak(fn, memory.get("VmHWM:"))}


def _peak(fn: Any, own: int | None) -> int | None:
    """This process's peak RSS since the trial began (``own``), or the command trial's program's,
    if higher."""
    program = getattr(fn, "last_peak_bytes", None)
    if program is None:
        return own
    return max(own or 0, int(program))


def _load_fn(msg: dict[str, Any], max_result_bytes: int | None = None) -> Any:
    from trainguard._nesting import importing
    from trainguard.runner._fnref import load

    kind, payload = msg["kind"], msg["payload"]
    if kind == "command":
        from trainguard.runner.worker import command as _command

        return _command.load(payload, max_result_bytes)
    if kind == "file":
        path = payload.rpartition(":")[0]
        rel = os.path.relpath(path)
        shown = rel if not rel.startswith("..") else path
    elif kind == "module":
        shown = f"module {payload.rpartition(':')[0]}"
    else:
        shown = None
    if shown is None:
        return load(kind, payload)
    with importing(shown):
        return load(kind, payload)


class _PipeSafe:
    """A worker's stdout or stderr: a closed pipe silences it instead of failing the trial.

    Workers write to the supervisor's stderr; with ``trainguard run ... 2>&1 | head -5`` the reader
    goes away while trials still run, and a trial's ``print()`` would raise ``BrokenPipeError``.
    The descriptor is pointed at /dev/null instead, and the trial goes on.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _silence(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (AttributeError, OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._silence()
            try:
                return int(self._stream.write(text))
            except (OSError, ValueError):
                return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._silence()
            try:
                self._stream.flush()
            except (OSError, ValueError):
                pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: list[str]) -> None:
    read_fd, write_fd = int(argv[1]), int(argv[2])
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _PipeSafe):
            setattr(sys, name, _PipeSafe(stream))
    config = json.loads(os.environ.pop(WORKER_CONFIG_ENV, "{}"))
    _TF_CUSTOM_GRADIENTS[0] = bool(config.get("tf_custom_gradients", True))
    inbox, outbox = _bootstrap(config, read_fd, write_fd)
    global _STAGE_CHANNEL
    _STAGE_CHANNEL = _stage_channel(inbox, outbox)
    _serve(inbox, outbox, config.get("threads"), config.get("max_result_bytes"))
    _flush_std()
    _end_tree_and_exit(0)


def _bootstrap(config: dict[str, Any], read_fd: int, write_fd: int) -> tuple[Any, Any]:
    """Everything before the first trial, in order: the tree, the pipes, quiet imports, device
    settings, preloads, thread counts; ends with the ``ready`` message (or a ``fatal`` one and exit)."""
    from trainguard import _nesting
    from trainguard import process as proctree

    _nesting.set_role("worker")
    from trainguard.runner.worker.context import install_pressure_handler

    install_pressure_handler()
    _CAPTURE_DIR[0] = config.get(
        "capture_dir"
    )  # before "ready": the supervisor may signal pressure from the first trial
    # keep every descendant in this worker's tree, however it detaches: a cgroup of its own when
    # the supervisor made one (membership survives re-parenting), and always as child subreaper
    _TIER[0] = str(config.get("tree_tracking") or "auto")
    portable = _TIER[0] in ("portable", "windows")
    tree = {"cgroup": False, "subreaper": False if portable else proctree.become_subreaper()}
    if config.get("cgroup") and not portable:
        tree["cgroup"] = proctree.TreeCgroup(config["cgroup"]).join()
    from trainguard.runner.worker.reaping import TrialReaper

    _REAPER[0] = TrialReaper(portable=portable, cgroup_path=config["cgroup"] if tree["cgroup"] else None)
    channel = str(config.get("channel") or "pipes")  # "sockets" on Windows
    _watch_supervisor(read_fd, int(config.get("parent_pid", os.getppid())), channel)
    for entry in reversed(config.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    inbox, outbox = child_ends(channel, read_fd, write_fd)
    if config.get("quiet_modules"):
        from trainguard.frameworks import install_quiet_imports

        install_quiet_imports(tuple(config["quiet_modules"]), capture_dir=config.get("capture_dir"))
    threads = config.get("threads")
    start = time.perf_counter()
    device_report = None
    if config.get("device"):
        try:
            from trainguard.runner.device import apply_in_worker

            device_report = apply_in_worker(config["device"])
        except BaseException as exc:  # noqa: BLE001
            write_message(
                outbox, {"op": "fatal", "message": f"device settings failed: {type(exc).__name__}: {exc}"}
            )
            _end_tree_and_exit(3)
    try:
        _preload(list(config.get("preload", [])), threads)
    except BaseException as exc:  # noqa: BLE001
        write_message(outbox, {"op": "fatal", "message": f"preload failed: {type(exc).__name__}: {exc}"})
        _end_tree_and_exit(3)
    _apply_torch_threads(threads, _TORCH_THREADS_DONE)
    _freeze_imports()
    if _REAPER[0] is not None:
        _REAPER[0].keep_present()
    write_message(
        outbox,
        {
            "op": "ready",
            "pid": os.getpid(),
            "preload_s": time.perf_counter() - start,
            "frameworks": _frameworks(),
            "tree": tree,
            "device": device_report,
        },
    )
    return inbox, outbox


#: whether torch's thread count has been set in this worker (torch may be imported by any trial)
_TORCH_THREADS_DONE = [False]
#: trials this worker has started
_TRIALS_RUN = [0]


def _freeze_imports() -> None:
    """Move what the worker holds before its first trial (trainguard, the preloads, the trial's
    module and what it imports) into the collector's permanent generation, after a collection so
    that no garbage is frozen: the ``gc.collect()`` after every trial then scans only what trials
    made. Measured: 3.1 ms a trial with trainguard and numpy imported, a full collection's cost,
    the most of a tiny trial's, and 78 ms with Keras and TensorFlow imported (BENCHMARKS.md,
    "Supervisor overhead"). Only before the first trial: an object a trial made and still holds,
    frozen, would never be collected once dropped, and ``gc.get_objects()`` (the census, a trial's
    own counts) no longer lists frozen objects, so what a trial keeps must stay visible. A
    framework imported inside the trial function is therefore not frozen: preload it (``preload=``,
    ``keras_backend=``) or import it at the module's top level to have it frozen."""
    gc.collect()
    gc.freeze()


def _serve(inbox: Any, outbox: Any, threads: int | None, max_result_bytes: int | None) -> None:
    """Answer the supervisor's messages (load a function, run a trial) until it says ``exit``."""
    functions: dict[int, Any] = {}
    while True:
        try:
            msg = inbox.recv()
        except (EOFError, OSError):
            _end_tree_and_exit(0)
        op = msg.get("op")
        if op == "trial":
            _TRIALS_RUN[0] += 1
            _apply_torch_threads(threads, _TORCH_THREADS_DONE)
            reply = run_trial(functions[msg["key"]], msg, max_result_bytes)
            _apply_torch_threads(threads, _TORCH_THREADS_DONE)
            write_message(outbox, reply)
        elif op == "fn":
            try:
                functions[msg["key"]] = _load_fn(msg, max_result_bytes)
                if not _TRIALS_RUN[0]:
                    _freeze_imports()  # the function's module and what it imported (TensorFlow...)
                write_message(outbox, {"op": "fn_ok", "key": msg["key"]})
            except BaseException as exc:  # noqa: BLE001
                from trainguard.exceptions import ConfigError

                reply = {
                    "op": "fn_error",
                    "key": msg["key"],
                    "message": f"{type(exc).__name__}: {exc}",
                    "traceback": "".join(traceback.format_exception(exc))[-20000:],
                }
                if isinstance(exc, ConfigError) and getattr(exc, "nested", False):
                    reply["nested"] = str(exc)
                write_message(outbox, reply)
        elif op == "trim":
            write_message(outbox, _trim())
        elif op == "exit":
            return


def _trim() -> dict[str, Any]:
    """glibc's ``malloc_trim(0)`` between trials, when the supervisor asks (a retention recycle
    tries it first); the reply says whether the call was made and the RSS after it."""
    from trainguard.frameworks import malloc_trim

    before = _status_kb("VmRSS:") or 0
    try:
        trimmed = malloc_trim()
    except Exception:  # noqa: BLE001 - a failed trim only means the worker is recycled
        trimmed = False
    return {
        "op": "trimmed",
        "trimmed": trimmed,
        "rss_before_bytes": before,
        "rss_bytes": _status_kb("VmRSS:") or 0,
    }


def _stage_channel(inbox: Any, outbox: Any) -> Callable[..., None]:
    def stage_channel(
        msg: dict[str, Any],
        stage: int,
        remaining: int | None,
        started: float,
        fn: Any,
        pressure: bool = False,
    ) -> None:
        """A staged trial committed a checkpoint: tell the supervisor, and leave when it says so."""
        write_message(
            outbox,
            {
                "op": "stage",
                "index": msg["index"],
                "attempt": msg["attempt"],
                "stage": stage,
                "remaining": remaining,
                "rss_bytes": _status_kb("VmRSS:") or 0,
                "pressure": pressure,
            },
        )
        try:
            reply = inbox.recv()
        except (EOFError, OSError):
            _end_tree_and_exit(0)
        if reply.get("op") == "stage_reply" and reply.get("go_on"):
            return
        # the policy wants this worker gone: the checkpoint is committed, the trial goes on elsewhere.
        # Exit right here rather than unwind the trial's code, which may catch any exception.
        write_message(
            outbox,
            {
                "op": "result",
                "index": msg["index"],
                "attempt": msg["attempt"],
                "status": "staged",
                "value_json": None,
                "error": None,
                "duration_s": time.perf_counter() - started,
                **_memory_now(fn),
                "stats": {"stage": stage},
            },
        )
        _flush_std()
        _end_tree_and_exit(0)

    return stage_channel


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    main(sys.argv)
