"""The worker process: ``python -m trainguard.runner._worker READ_FD WRITE_FD``.

The supervisor starts it with ``subprocess.Popen`` (never fork) and an environment that is already
complete (KERAS_BACKEND, thread counts, CUDA_VISIBLE_DEVICES, MALLOC_*, LD_PRELOAD), so every
framework imported here sees its settings. Bootstrap: die with the supervisor, pre-import the
requested frameworks, say "ready"; then run trials until told to exit or the pipe closes. It exits
with ``os._exit`` to skip the interpreter teardown (0.65 s with TensorFlow loaded).

This module imports nothing heavy at the top: a worker pays only for what its trials use.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

from trainguard.runner._protocol import WORKER_CONFIG_ENV, child_connections

_PR_SET_PDEATHSIG = 1
_SIGKILL = 9


def _die_with_parent(parent_pid: int, use_pdeathsig: bool) -> None:
    """Exit when the supervisor dies, even mid-trial: PR_SET_PDEATHSIG where the kernel has it,
    plus a thread that polls the parent pid (PDEATHSIG fires on the death of the parent *thread*
    that spawned us, and is Linux-only)."""
    if use_pdeathsig and sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(70)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(70)

    threading.Thread(target=watch, name="trainguard-parent-watch", daemon=True).start()


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(field.encode()):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


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
    """Cheap allocator figures of frameworks already imported; never imports one."""
    stats: dict[str, Any] = {}
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                stats["torch_cuda_allocated_bytes"] = int(torch.cuda.memory_allocated())
                stats["torch_cuda_reserved_bytes"] = int(torch.cuda.memory_reserved())
                stats["torch_cuda_peak_bytes"] = int(torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
        except Exception:  # noqa: BLE001 - stats are best effort and must never fail a trial
            pass
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
    return cleanup()


def _oom_framework(exc: BaseException) -> str | None:
    try:
        from trainguard.frameworks import is_oom
    except ImportError:
        is_oom = None
    if is_oom is not None:
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


def run_trial(fn: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """Run one trial and build its result message (exceptions become statuses, never propagate)."""
    params = msg["params"]
    _reset_peak()
    error: dict[str, Any] | None = None
    value_json: str | None = None
    start = time.perf_counter()
    try:
        if msg.get("mixed_precision"):
            _set_mixed_precision()
        value = fn(params)
        status = "ok"
    except BaseException as exc:  # noqa: BLE001 - SystemExit/KeyboardInterrupt in a trial fail that trial only
        duration = time.perf_counter() - start
        framework = _oom_framework(exc)
        status = "framework_oom" if framework else "exception"
        error = {
            "status": status,
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": f"{type(exc).__name__}: {exc}"[:2000],
            "traceback": "".join(traceback.format_exception(exc))[-20000:],
        }
        if framework:
            error["framework"] = framework
        del exc
    else:
        duration = time.perf_counter() - start
        try:
            value_json = json.dumps(value, default=_json_default)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            status = "not_serializable"
            error = {
                "status": status,
                "type": type(exc).__name__,
                "message": f"the result is not JSON-serializable: {exc}; return plain numbers, strings, lists and dicts",
            }
        del value
    stats = _framework_stats()
    if msg.get("cleanup"):
        stats["cleanup_s"] = _cleanup()
    if msg.get("census"):
        totals = _census_totals()
        if totals is not None:
            stats["census"] = totals
    stats["frameworks"] = _frameworks()
    return {
        "op": "result",
        "index": msg["index"],
        "attempt": msg["attempt"],
        "status": status,
        "value_json": value_json,
        "error": error,
        "duration_s": duration,
        "rss_bytes": _status_kb("VmRSS:") or 0,
        "hwm_bytes": _status_kb("VmHWM:"),
        "stats": stats,
    }


def main(argv: list[str]) -> None:
    read_fd, write_fd = int(argv[1]), int(argv[2])
    config = json.loads(os.environ.pop(WORKER_CONFIG_ENV, "{}"))
    _die_with_parent(int(config.get("parent_pid", os.getppid())), bool(config.get("pdeathsig", True)))
    for entry in reversed(config.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    inbox, outbox = child_connections(read_fd, write_fd)
    if config.get("quiet_modules"):
        from trainguard.frameworks._quiet import install_quiet_imports

        install_quiet_imports(tuple(config["quiet_modules"]))
    threads = config.get("threads")
    start = time.perf_counter()
    try:
        _preload(list(config.get("preload", [])), threads)
    except BaseException as exc:  # noqa: BLE001
        outbox.send({"op": "fatal", "message": f"preload failed: {type(exc).__name__}: {exc}"})
        os._exit(3)
    torch_threads_done = [False]
    _apply_torch_threads(threads, torch_threads_done)
    outbox.send(
        {
            "op": "ready",
            "pid": os.getpid(),
            "preload_s": time.perf_counter() - start,
            "frameworks": _frameworks(),
        }
    )
    from trainguard.runner._fnref import load

    functions: dict[int, Any] = {}
    while True:
        try:
            msg = inbox.recv()
        except (EOFError, OSError):
            os._exit(0)
        op = msg.get("op")
        if op == "trial":
            _apply_torch_threads(threads, torch_threads_done)
            outbox.send({"op": "started", "index": msg["index"], "attempt": msg["attempt"]})
            reply = run_trial(functions[msg["key"]], msg)
            _apply_torch_threads(threads, torch_threads_done)
            outbox.send(reply)
        elif op == "fn":
            try:
                functions[msg["key"]] = load(msg["kind"], msg["payload"])
                outbox.send({"op": "fn_ok", "key": msg["key"]})
            except BaseException as exc:  # noqa: BLE001
                outbox.send(
                    {
                        "op": "fn_error",
                        "key": msg["key"],
                        "message": f"{type(exc).__name__}: {exc}",
                        "traceback": "".join(traceback.format_exception(exc))[-20000:],
                    }
                )
        elif op == "exit":
            break
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
