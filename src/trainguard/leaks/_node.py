"""``trainguard leakcheck train.js:step``: the leak check of a TensorFlow.js (or any Node) step.

The step runs in a Node process started with ``--expose-gc`` (``js/trainguard/lib/leakcheck.js``);
this module drives it with the same loop decisions as a Python step (:mod:`trainguard.leaks._plan`:
batching, the look schedule, the leak gate, the sequential test, the final verdict), one command at
a time: "call the step k times", "read". Each reading is taken after ``global.gc()``: the Node
process's RSS (its process tree, read from here), and from inside it ``process.memoryUsage()``
and ``tf.memory()``. Attribution comes from those inside readings: tensors and ``numBytes`` per
iteration from ``tf.memory()``, and growth outside tensors called out as JS heap or native.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.leaks import _js_misuse, _plan, stats
from trainguard.leaks._loop import LoopBase, analysis_dict, settled_slope
from trainguard.leaks._report import KindGrowth, LeakReport, StepError
from trainguard.leaks.stats import Verdict
from trainguard.units import format_bytes

__all__ = ["run_node", "node_attribution"]

logger = logging.getLogger(__name__)

#: The reading decided on besides RSS when TF.js is loaded: tf.memory().numBytes.
TENSOR_KEY = "tf_num_bytes"
#: TF.js's exact count of live tensors, the count evidence of a Node check.
COUNT_KEY = "tf_num_tensors"
#: Tensors a step may keep before a steady rise of ``numTensors`` supports a leak: tensors kept
#: one a call are not a cache anyone bounds, the same allowance as graph kinds in Python.
TENSOR_FILL_ALLOWANCE = 8
#: RSS of the Node tree less the free pages V8 keeps committed in its heap (heapTotal - heapUsed,
#: after ``global.gc()``): the row key Python's loop gives its live memory, so that
#: ``_plan.retention_hold`` asks it before RSS alone calls a leak. Measured on examples/tfjs's
#: disposed step: RSS +40 MiB over the first 300 calls, +21 KiB a call at call 148, all but
#: 2 MiB of it V8 committing heap pages (heapTotal 37 -> 58 MiB) it then keeps; this series is
#: flat from call 50. What grows in it is the JS heap's live objects, Buffers, native memory.
LIVE_KEY = "live_bytes"
#: Calls a ``leak`` from memory alone (RSS and live memory, no rising tensor count) waits for when
#: the budget allows, where Python's wait is 120 (``_plan.LEAK_GATE_ITERATIONS``): V8 tiers code up
#: and grows its heap's live objects and its own native memory for the first 300 calls of a TF.js
#: fit step (measured on examples/tfjs's disposed step: heapUsed +10-13 KiB a call over calls
#: 10-110, +2 KiB over 150-300, +0.9 KiB after 300; live memory +5-10 KiB a call over 150-300,
#: flat after), against a tolerance of 1.3-2.3 KiB: the 120-call wait called that a leak in 4 of
#: 5 runs, a 300-call wait in 1 of 6. A rising tensor count is exact and does not wait (count
#: evidence), nor does a leak the budget cannot wait for (the gate is lowered to 60 % of it).
NODE_LEAK_GATE_ITERATIONS = 600
#: V8's warm-up, which a short budget's lowered gate does not shorten (``_plan.warmup_hold``): over
#: examples/tfjs's disposed step's first 100 calls RSS grows 22-37 KiB a call (the 95 % interval's
#: ends, 3 runs of a 2-second budget), so before call 300 memory alone calls a leak only above
#: 128 KiB a call. A rising tensor count does not wait (count evidence).
NODE_WARMUP_CALLS = 300
NODE_WARMUP_LEAK_BYTES = 128 * 1024.0
#: The least default tolerance of a Node step, per call: twice what TF.js itself keeps a model
#: built (tfjs-layers' map of unique weight names, about 1 KiB a model with 4 weights, never
#: emptied), capped, as Python's floor is, at 64 MiB per minute of step time (a 1 ms step: 1.1 KiB).
NODE_TOLERANCE_FLOOR_BYTES = 4096.0
NODE_LIVE_WORDS = (
    "live memory (RSS less the free pages of V8's heap, heapTotal - heapUsed after gc)",
    "the growth is V8 committing heap pages it keeps free for the next allocations (the JS engine's "
    "warm-up, bounded by its heap limits), not live objects, buffers or native allocations",
)


def tensor_trend(series: list[dict[str, Any]], *, alpha: float) -> stats.CountTrend | None:
    """``stats.count_trend`` over ``tf.memory().numTensors`` (its bytes beside), or None before
    three readings with it."""
    rows = [r for r in series if r.get(COUNT_KEY) is not None]
    if len(rows) < 3:
        return None
    return stats.count_trend(
        [r[COUNT_KEY] for r in rows],
        [r["iteration"] for r in rows],
        [r.get(TENSOR_KEY) or 0 for r in rows],
        alpha=alpha,
        fill_allowance=TENSOR_FILL_ALLOWANCE,
    )


def tensors_rising(series: list[dict[str, Any]], readings: int = 3) -> bool:
    """``numTensors`` rose at each of the last ``readings`` readings (the loop reads call by call
    while it does, as the Python loop does for rising counts)."""
    counts = [r[COUNT_KEY] for r in series if r.get(COUNT_KEY) is not None]
    if len(counts) <= readings:
        return len(counts) < 2
    tail = counts[-readings - 1 :]
    return all(b > a for a, b in zip(tail, tail[1:], strict=False))


def tensor_support_text(trend: stats.CountTrend) -> str:
    return (
        f"tf.memory().numTensors rose {trend.count_per_iter:+.1f} tensors/call "
        f"({format_bytes(trend.bytes_per_iter, signed=True)}/call numBytes) at every one of "
        f"{trend.run_readings} readings over {trend.run_calls} calls"
    )


_GPU_WORDS = "GPU memory: "
_TENSOR_WORDS = "TF.js tensors (tf.memory().numBytes): "


class _Died(Exception):
    """The Node process ended without answering."""


class _Driver:
    """The Node leak-check process: started, asked, stopped."""

    def __init__(self, path: str, step: str, setup: str | None, *, limit_s: float | None) -> None:
        from trainguard._node import find_node, is_js_file, js_script

        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"{path}: no such file: give the path of a JavaScript file, e.g. train.js:step")
        if not is_js_file(path):
            raise ConfigError(
                f"{path}: not a .js, .mjs or .cjs file: give a JavaScript file, e.g. train.js:step"
            )
        node = find_node()
        read_fd, write_fd = os.pipe()
        os.set_inheritable(read_fd, False)
        try:
            stdout = sys.stderr.fileno()  # the step's own prints must never reach a --json stdout
        except (AttributeError, OSError, ValueError):
            stdout = None
        try:
            self.proc = subprocess.Popen(
                [node, "--expose-gc", js_script("leakcheck.js"), str(write_fd), str(file), step, setup or ""],
                stdin=subprocess.PIPE,
                stdout=stdout,
                pass_fds=(write_fd,),
                start_new_session=True,  # its children die with it (killpg)
            )
        finally:
            os.close(write_fd)
        self._events = os.fdopen(read_fd, "rb")
        self._watchdog = None
        if limit_s is not None:
            from trainguard.leaks._child import Watchdog

            # the loop stops itself at max_time (or min_calls); this only catches a step that never
            # returns: re-armed at each answer, so a slow step's min_calls can outlast it
            self._watchdog = Watchdog(limit_s, self.kill)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def event(self) -> dict[str, Any]:
        line = self._events.readline()
        if not line:
            raise _Died
        if self._watchdog is not None:
            self._watchdog.arm()
        return json.loads(line)

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(command) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _Died from None
        return self.event()

    def kill(self) -> None:
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> int | None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b'{"op":"exit"}\n')
                self.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()  # whatever the step started must not outlive the check
        rc = self.proc.wait()
        self._events.close()
        return rc


def _read_tree(pid: int, metric: str) -> tuple[int, int]:
    from trainguard.process import tree_memory

    tree = tree_memory(pid, detail=metric in ("uss", "pss"))
    value = tree.rss_bytes if metric in ("auto", "rss") else getattr(tree, f"{metric}_bytes")
    if value is None:
        raise ConfigError(
            f"metric={metric!r} cannot be read here (needs /proc/PID/smaps_rollup access): use metric='rss'"
        )
    return int(value), len(tree.pids)


def run_node(
    path: str,
    step: str,
    setup: str | None,
    config: Any,
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> LeakReport:
    """Leak-check ``step`` of the JavaScript file ``path`` in a Node process. See :func:`trainguard.leakcheck`.

    Raises:
        ConfigError: the file, the step or the setup does not exist or does not load, or setup threw.
        MissingDependencyError: ``node`` is not installed (the message says how to install it).
    """
    limit = config.max_time_s * 1.5 + 120 if config.max_time_s is not None else None
    driver = _Driver(path, step, setup, limit_s=limit)
    rows: list[dict[str, Any]] = []
    try:
        try:
            ready = driver.event()
        except _Died:
            rc = driver.close()
            raise ConfigError(
                f"{path}: node exited with code {rc} before the step could run; see its output above"
            ) from None
        if ready.get("event") == "error":
            raise ConfigError(str(ready.get("message") or "the step could not be loaded"))
        loop = _NodeLoop(driver, config, progress, ready, rows)
        try:
            return loop.run()
        except _Died:
            rc = driver.close()
            from trainguard.leaks._child import died_report

            return died_report(rc, rows, config)
    finally:
        driver.close()


class _NodeLoop(LoopBase):
    """The leak loop over a Node step: the same phases as the Python loop, commands instead of calls."""

    def __init__(
        self,
        driver: _Driver,
        config: Any,
        progress: Callable[[dict[str, Any]], None] | None,
        ready: dict[str, Any],
        series: list[dict[str, Any]],
    ) -> None:
        super().__init__(config, progress, series)
        self.driver, self.ready = driver, ready
        self.trend: stats.CountTrend | None = None
        #: what TF.js only logs (tf.tidy given an async function, errors the step caught)
        self.misuse = _js_misuse.Misuse()

    def run(self) -> LeakReport:
        self.loop()
        return self.report()

    def count_support(self, key: str) -> bool:
        """TF.js's exact tensor count rising like a leak (``tensor_trend``)."""
        if self.plan is None:
            return False
        self.trend = tensor_trend(self.series, alpha=self.plan.alpha_per_look)
        return self.trend is not None and self.trend.status == "grows"

    def dense_rising(self) -> bool:
        """TF.js's tensor count, read after every call while it rises."""
        return tensors_rising(self.series)

    def after_measure(self) -> None:
        if self.dense:
            self.dense_spent += self.measure_cost
        if self.plan is None and len(self.series) >= 3:
            self.calibrate()
        if self.dense:
            self.end_dense_if_due()

    def calibrate(self, looks_done: int = 0, k: int | None = None) -> None:
        plan = _plan.calibrate(
            self.config,
            self.series,
            iterations=self.iterations,
            measure_cost_s=self.measure_cost,
            step_time_s=self.step_time(),
            elapsed_s=time.perf_counter() - self.start,
            looks_done=looks_done,
            calls_per_measurement=k,
        )
        if self.config.tolerance_bytes_per_iter is None:
            floor = min(NODE_TOLERANCE_FLOOR_BYTES, 64 * 1024 * 1024 * self.step_time() / 60.0)
            plan = dataclasses.replace(
                plan, tolerance_bytes_per_iter=max(plan.tolerance_bytes_per_iter, floor)
            )
        if any(r.get(TENSOR_KEY) is not None for r in self.series):
            # TF.js's own count of tensor bytes is decided on as a second series, as GPU
            # allocator bytes are for Python: the false-positive budget is split between them
            plan = dataclasses.replace(plan, gpu_key=TENSOR_KEY, alpha_per_look=plan.alpha_per_look / 2)
        self.plan = dataclasses.replace(
            plan,
            live_words=NODE_LIVE_WORDS,
            leak_gate_iterations=NODE_LEAK_GATE_ITERATIONS,
            warmup_calls=NODE_WARMUP_CALLS,
            warmup_leak_bytes=NODE_WARMUP_LEAK_BYTES,
        )

    def call_block(self) -> bool:
        answer = self.driver.ask({"op": "calls", "n": self.block_size()})
        self.step_times.extend(float(t) for t in answer.get("step_times", ()))
        self.misuse = _js_misuse.from_answer(answer, self.misuse)
        if answer.get("event") == "step_error":
            self.iterations = int(answer["iteration"]) - 1
            self.error = StepError(
                iteration=int(answer["iteration"]),
                exc_type=str(answer.get("type") or "Error"),
                message=str(answer.get("message") or ""),
                traceback=str(answer.get("stack") or ""),
            )
            return False
        self.iterations = int(answer["iterations"])
        # a step whose every call fails (its errors caught and logged, or in a misused tidy's
        # async work) is not a memory question: stop once that is clear
        failing = _js_misuse.every_call_failed(self.misuse, self.iterations)
        return not (failing and self.iterations >= _js_misuse.FAILED_CALLS_TO_STOP)

    def measure(self) -> None:
        t0 = time.perf_counter()
        inside = self.driver.ask({"op": "read"})
        if inside.get("event") != "reading":
            raise _Died
        value, processes = _read_tree(self.driver.pid, self.config.metric)
        self.measure_cost = time.perf_counter() - t0
        row: dict[str, Any] = {
            "bytes": value,
            "untrimmed_bytes": None,
            "gpu_allocated_bytes": None,
            "gpu_nvml_bytes": None,
            "processes": processes,
            "heap_used_bytes": inside.get("heap_used"),
            "heap_total_bytes": inside.get("heap_total"),
            "external_bytes": inside.get("external"),
            "array_buffers_bytes": inside.get("array_buffers"),
            "node_rss_bytes": inside.get("rss"),
        }
        heap_total, heap_used = inside.get("heap_total"), inside.get("heap_used")
        if heap_total is not None and heap_used is not None:
            row[LIVE_KEY] = value - max(int(heap_total) - int(heap_used), 0)
        for key in ("tf_num_tensors", "tf_num_bytes", "tf_num_data_buffers", "tf_num_variables"):
            if inside.get(key) is not None:
                row[key] = inside[key]
        row["iteration"] = self.iterations
        row["elapsed_s"] = round(time.perf_counter() - self.start, 4)
        self.series.append(row)

    def count_reason(self, verdict: Verdict) -> str:
        """A leak let through before the warm-up wait on the tensor count: say so, with the counts."""
        look, trend = self.last_look, self.trend
        if verdict is not Verdict.LEAK or look is None or trend is None or trend.status != "grows":
            return ""
        if self.iterations >= look.leak_gate:
            return ""
        return (
            f"; called before the {look.leak_gate}-call warm-up wait on count evidence: "
            + tensor_support_text(trend)
        )

    def report(self) -> LeakReport:
        elapsed = time.perf_counter() - self.start
        plan = self.plan
        decision, tensor_decision, tolerance, alpha = self.final_decisions()
        verdict, reason = _plan.final_verdict(
            decision,
            tensor_decision,
            self.error,
            iterations=self.iterations,
            readings=len(self.series),
            step_times=self.step_times,
            elapsed_s=elapsed,
            tolerance=tolerance,
        )
        metric = "rss" if self.config.metric == "auto" else self.config.metric
        warm, slopes = settled_slope(self.series, decision)
        growth, hints = node_attribution(
            self.series, warm, slopes["slope_bytes_per_iter"], tolerance, verdict
        )
        if reason.startswith(_GPU_WORDS):  # the second series is TF.js's tensors here, not a GPU
            reason = _TENSOR_WORDS + reason[len(_GPU_WORDS) :]
        elif _tensors_called_it(verdict, tensor_decision, self.error):
            # RSS grew too, but TF.js's own byte count is exact where RSS carries warm-up and noise
            assert tensor_decision is not None
            reason = f"{_TENSOR_WORDS}{tensor_decision.reason}; RSS as well: {reason}"
        if reason.startswith(_TENSOR_WORDS) and tensor_decision is not None:
            # the verdict rests on the tensors' bytes: report their growth, not RSS's
            metric = "tfjs tensor bytes"
            slopes = settled_slope(self.series, tensor_decision, TENSOR_KEY)[1]
        reason += self.count_reason(verdict)
        verdict, reason = self.misuse_verdict(verdict, reason)
        hints = _js_misuse.hints(self.misuse) + hints
        fields, extra = self.report_fields(self.series, tolerance, alpha, elapsed)
        return LeakReport(
            verdict=verdict,
            reason=reason,
            metric=metric,
            **slopes,
            **fields,
            calls_per_measurement=plan.calls_per_measurement if plan else 1,
            growth_by_kind=growth,
            hints=hints,
            error=self.error,
            isolated=True,
            extra={
                **extra,
                "runtime": "node",
                "node": self.ready.get("node"),
                "tfjs": self.ready.get("tfjs"),
                "setup_s": self.ready.get("setup_s"),
                "tfjs_misuse": self.misuse.to_list(),
                "failed_calls": self.misuse.failed_calls,
                "tfjs_tensors": None
                if tensor_decision is None
                else {"source": TENSOR_KEY, **analysis_dict(tensor_decision)},
            },
        )

    def misuse_verdict(self, verdict: Verdict, reason: str) -> tuple[Verdict, str]:
        """A step whose every call failed is reported as such, never as a leak verdict; any other
        verdict names a misused tf.tidy() (where, and the fix) beside what it says."""
        if self.error is None and _js_misuse.every_call_failed(self.misuse, self.iterations):
            failed = _js_misuse.failed_reason(self.misuse, self.iterations)
            return Verdict.INCONCLUSIVE, f"{failed} (memory meanwhile: {reason})"
        misused = _js_misuse.hints(self.misuse)
        return verdict, (f"{reason}; {misused[0]}" if misused else reason)


def _tensors_called_it(verdict: Verdict, tensor_decision: stats.Decision | None, error: Any) -> bool:
    """Whether a leak both series saw is reported on TF.js's tensor bytes (exact) over RSS."""
    return (
        error is None
        and verdict is Verdict.LEAK
        and tensor_decision is not None
        and tensor_decision.verdict is Verdict.LEAK
    )


def _slope(rows: list[dict[str, Any]], key: str) -> float | None:
    pairs = [(r["iteration"], r[key]) for r in rows if r.get(key) is not None]
    if len(pairs) < 3 or pairs[-1][0] == pairs[0][0]:
        return None
    return float(stats.theil_sen([p[1] for p in pairs], [p[0] for p in pairs]))


def node_attribution(
    series: list[dict[str, Any]],
    warm: int,
    slope: float | None,
    tolerance: float,
    verdict: Verdict,
) -> tuple[tuple[KindGrowth, ...], tuple[str, ...]]:
    """What grows in a Node step, per iteration over the settled part of the series.

    ``tf.memory()``'s tensors and numBytes, and the memory that grows outside tensors: the JS heap
    (``heapUsed``) and the rest of RSS (native: ArrayBuffers, TF.js native backends, code), each
    a robust (Theil-Sen) slope of the readings the Node process reported.
    """
    rows = series[warm:] if len(series) - warm >= 3 else series
    growth: list[KindGrowth] = []
    hints: list[str] = []
    tensors = _slope(rows, "tf_num_tensors")
    tf_bytes = _slope(rows, "tf_num_bytes") or 0.0
    if tensors is not None and (abs(tensors) >= 0.05 or abs(tf_bytes) >= 1.0):
        growth.append(KindGrowth("tfjs tensors", tensors, tf_bytes, "tf.memory() numTensors and numBytes"))
    variables = _slope(rows, "tf_num_variables")
    if variables is not None and abs(variables) >= 0.05:
        growth.append(
            KindGrowth("tfjs variables", variables, 0.0, "registered variables: model weights not disposed")
        )
    heap = _slope(rows, "heap_used_bytes") or 0.0
    buffers = _slope(rows, "array_buffers_bytes") or 0.0
    meaningful = max(tolerance, 1024.0)
    if slope is not None and verdict in (Verdict.LEAK, Verdict.INCONCLUSIVE) or abs(heap) > meaningful:
        if abs(heap) > meaningful:
            growth.append(
                KindGrowth("JS heap", 0.0, heap, "process.memoryUsage().heapUsed after global.gc()")
            )
        if slope is not None:
            native = slope - heap - max(tf_bytes, 0.0)
            if native > meaningful:
                growth.append(
                    KindGrowth(
                        "native memory",
                        0.0,
                        native,
                        "RSS growth outside TF.js tensors and the JS heap"
                        + (
                            f"; ArrayBuffers {format_bytes(buffers, signed=True)}/iter"
                            if abs(buffers) > meaningful
                            else ""
                        ),
                    )
                )
    if tensors is not None and tensors >= 0.5:
        hints.append(
            f"tf.memory() counts {tensors:+.1f} tensors per iteration ({format_bytes(tf_bytes, signed=True)} numBytes): "
            "dispose what each iteration creates (model.dispose(), tf.dispose(), tf.tidy(), or trainguard's "
            "scope() around an async step)"
        )
    elif verdict is Verdict.LEAK and slope is not None:
        where = (
            "the JS heap" if heap > 0.5 * slope else "native memory (outside the JS heap and TF.js tensors)"
        )
        hints.append(
            f"RSS grows {format_bytes(slope, signed=True)}/iter while tf.memory() is flat: the growth is in {where}"
        )
    growth.sort(key=lambda g: -abs(g.bytes_per_iter or g.count_per_iter))
    return tuple(growth), tuple(hints)
