"""The limit verdict, pure: one sample of a running trial's tree against the policy gives the kill
(or none) and the pressure to raise (or none), the same for every backend. And the check that no
other module decides it: the local sampler and the node-local agent of the Ray and Slurm backends
call the one function, and the kill messages are built only there."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import trainguard
from trainguard.process.charge import MemorySplit
from trainguard.runner import Policy
from trainguard.runner.policy import LimitReading, PressureSince, limit_verdict

MiB = 2**20
SRC = Path(trainguard.__file__).parent
VERDICT_MODULE = "runner/policy/_limit_verdict.py"


def test_under_every_limit_no_kill_no_pressure():
    policy = Policy(memory_limit="700MB", soft_limit="450MB", gpu_memory_limit="1GB", timeout="1m")
    verdict = limit_verdict(policy, LimitReading(400_000_000, gpu_bytes=10**8, elapsed_s=30.0, now_s=5.0))
    assert verdict.kill is None and verdict.pressure is None and not verdict.kills
    assert verdict.counted_bytes == 400_000_000 and "tree RSS" in verdict.counted


def test_over_the_memory_limit_is_a_kill_that_says_the_numbers():
    verdict = limit_verdict(Policy(memory_limit=300 * MiB), LimitReading(310 * MiB))
    assert verdict.kills and verdict.kill is not None
    assert verdict.kill.status == "killed_memory"
    assert verdict.kill.limit == 300 * MiB and verdict.kill.value == 310 * MiB
    assert verdict.kill.message == "killed at memory_limit: tree RSS 310.0 MiB > 300.0 MiB"


def test_tmpfs_is_counted_though_no_rss_shows_it():
    # 40 MiB anonymous, 12 MiB of libraries, 600 MiB in a /dev/shm file written and closed
    split = MemorySplit(40 * MiB, 12 * MiB, 0, tmpfs_bytes=600 * MiB)
    verdict = limit_verdict(Policy(memory_limit=300 * MiB), LimitReading(split.rss_bytes, memory=split))
    assert verdict.kill is not None and verdict.kill.status == "killed_memory"
    assert verdict.kill.value == 640 * MiB and verdict.kill.memory == split
    assert verdict.kill.message == (
        "killed at memory_limit: tree RSS 640.0 MiB > 300.0 MiB (anonymous 40.0 MiB + shmem/tmpfs "
        "600.0 MiB counted; file-backed 12.0 MiB not counted (reclaimable))"
    )
    assert verdict.counted_bytes == 640 * MiB and "shmem/tmpfs 600.0 MiB counted" in verdict.counted
    # the RSS alone (no split read) would have let it run
    assert limit_verdict(Policy(memory_limit=300 * MiB), LimitReading(split.rss_bytes)).kill is None


def test_file_backed_pages_are_not_the_trials():
    # a 600 MiB file read through mmap: resident, over the limit by RSS, but reclaimable
    split = MemorySplit(30 * MiB, 600 * MiB, 0)
    verdict = limit_verdict(Policy(memory_limit=300 * MiB), LimitReading(split.rss_bytes, memory=split))
    assert verdict.kill is None and verdict.counted_bytes == 30 * MiB
    assert "file-backed 600.0 MiB not counted" in verdict.counted
    # the same RSS unsplit is a kill: what the split changes
    assert limit_verdict(Policy(memory_limit=300 * MiB), LimitReading(split.rss_bytes)).kills


def test_soft_limit_raises_pressure_then_its_grace_ends_in_a_kill():
    policy = Policy(memory_limit=700 * MiB, soft_limit=450 * MiB, pressure_grace="1s")
    first = limit_verdict(policy, LimitReading(460 * MiB, now_s=10.0))
    assert first.kill is None and first.pressure is not None and first.pressure.rule == "soft_limit"
    since = PressureSince(10.0, first.pressure.message)
    # raised already: nothing new while the grace runs, whatever the RSS does
    within = limit_verdict(policy, LimitReading(600 * MiB, now_s=10.9), pressure=since)
    assert within.kill is None and within.pressure is None
    ended = limit_verdict(policy, LimitReading(610 * MiB, now_s=11.2), pressure=since)
    assert ended.kill is not None and ended.pressure is None
    assert ended.kill.status == "killed_memory" and ended.kill.limit == 450 * MiB
    assert ended.kill.message == (
        "killed under memory pressure: no checkpoint within pressure_grace=1.0 s after tree RSS "
        "460.0 MiB crossed soft_limit 450.0 MiB"
    )


def test_no_grace_means_pressure_never_kills_and_the_hard_limit_wins_over_the_grace():
    since = PressureSince(0.0, "tree RSS crossed soft_limit")
    no_grace = Policy(memory_limit="700MB", soft_limit="450MB")
    assert limit_verdict(no_grace, LimitReading(690_000_000, now_s=1e6), pressure=since).kill is None
    graced = Policy(memory_limit="700MB", soft_limit="450MB", pressure_grace="1s")
    kill = limit_verdict(graced, LimitReading(701_000_000, now_s=5.0), pressure=since).kill
    assert kill is not None and kill.message.startswith("killed at memory_limit")


def test_pressure_predicted_from_the_growth_rate():
    policy = Policy(memory_limit="700MB", soft_limit="450MB", pressure_horizon="3s")
    # 300 MB growing 150 MB/s: the hard limit in 2.7 s, within the horizon
    verdict = limit_verdict(policy, LimitReading(300_000_000, rate_bytes_per_s=150e6, now_s=1.0))
    assert verdict.pressure is not None and verdict.pressure.rule == "predicted"
    slow = limit_verdict(policy, LimitReading(300_000_000, rate_bytes_per_s=50e6, now_s=1.0))
    assert slow.pressure is None
    # without a soft limit there is no pressure at all, however steep
    bare = limit_verdict(Policy(memory_limit="700MB"), LimitReading(690_000_000, rate_bytes_per_s=1e12))
    assert bare.pressure is None and bare.kill is None


def test_gpu_memory_and_timeout():
    policy = Policy(gpu_memory_limit=1024 * MiB, timeout="10s")
    gpu = limit_verdict(policy, LimitReading(10, gpu_bytes=1126 * MiB, elapsed_s=1.0)).kill
    assert gpu is not None and gpu.status == "killed_gpu_memory"
    assert gpu.message == "killed at gpu_memory_limit: GPU memory 1.1 GiB > 1.0 GiB"
    late = limit_verdict(policy, LimitReading(10, elapsed_s=10.5)).kill
    assert late is not None and late.status == "timeout"
    assert late.message == "killed at timeout: trial ran 10.5 s > 10 s"


def test_pressure_raised_with_a_kill_in_the_same_sample_is_reported_too():
    # a sample over both limits: the trial is told of the pressure and killed at the hard limit
    policy = Policy(memory_limit="700MB", soft_limit="450MB")
    verdict = limit_verdict(policy, LimitReading(701_000_000, now_s=1.0))
    assert verdict.kill is not None and verdict.pressure is not None


# -- one owner ---------------------------------------------------------------------------------------

#: the words of a limit's kill message (the budget's kill, a run-wide sum, has its own)
KILL_WORDS = (
    "killed at {}",
    "memory_limit: tree RSS",
    "gpu_memory_limit: GPU memory",
    "killed at timeout",
    "killed under memory pressure",
    "no checkpoint within pressure_grace",
)
#: modules that read a kill's words (not build them): none; a grace kill is told by the kill's
#: status and limit (policy.is_grace_kill), never by its message
READERS: dict[str, set[str]] = {}
#: the pure decisions the verdict is made of: called only inside the policy package, so no backend
#: composes its own
PARTS = {"check_limits", "decide_pressure", "grace_expired"}
#: where the verdict is asked: the local sampler, the Ray/Slurm agent, the tracker (its soft part)
CALLERS = {
    "limit_verdict": {"runner/session/_sampling.py", "runner/backends/ray.py"},
    "pressure_verdict": {"runner/session/soft_limit_and_flight/_pressure_tracker.py", VERDICT_MODULE},
}


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), ast.parse(path.read_text(), str(path))


def _strings(tree: ast.AST):
    """The string constants of a module, docstrings left out (f-strings' literal parts included)."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.value


def _called(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_kill_messages_are_built_only_in_the_verdict_module():
    found: dict[str, set[str]] = {}
    for where, tree in _modules():
        for text in _strings(tree):
            for word in KILL_WORDS:
                if word in text:
                    found.setdefault(where, set()).add(word)
    assert found.pop(VERDICT_MODULE) == set(KILL_WORDS)
    assert found == READERS


def test_every_backend_reaches_the_verdict_through_the_one_function():
    calls = {where: _called(tree) for where, tree in _modules()}
    for name, expected in CALLERS.items():
        assert {w for w, called in calls.items() if name in called} == expected, name
    for part in PARTS:
        callers = {w for w, called in calls.items() if part in called}
        assert all(c.startswith("runner/policy/") for c in callers), (part, callers)
    # the Slurm pilot is the Ray agent's code: it samples and decides with the same method
    from trainguard.runner.backends.ray import SlotAgent
    from trainguard.runner.backends.slurm_pilot import PilotAgent

    for method in ("_sample_one", "_split", "_raise_pressure", "send", "_forward"):
        assert getattr(PilotAgent, method) is getattr(SlotAgent, method), method
    assert "limit_verdict(" in inspect.getsource(SlotAgent._sample_one)


@pytest.mark.parametrize("where", sorted(CALLERS["limit_verdict"]))
def test_the_verdicts_callers_do_not_reach_the_parts(where):
    tree = ast.parse((SRC / where).read_text())
    assert not (_called(tree) & PARTS), where
