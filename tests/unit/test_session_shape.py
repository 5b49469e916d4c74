"""The session's shape: its parts own their state and hand the loop decisions.

No module of ``runner/session`` but the loop reads or writes the session's private attributes;
every module is named in the package's docstring; the parts' decisions (after a budget kill, after
a trim, how a session ends, what becomes of a worker after its trial, how a pressure ended) are pure
functions that return records, tested here without a process.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import trainguard.runner.session as session_package
import trainguard.runner.session.soft_limit_and_flight as room
from trainguard.runner import Policy
from trainguard.runner.policy import (
    BudgetKill,
    KillDecision,
    LimitReading,
    PressureSince,
    is_grace_kill,
    limit_verdict,
)
from trainguard.runner.policy import worker_history as make_history
from trainguard.runner.session._budget_kill import BudgetKillVerdict, decide_after_budget_kill
from trainguard.runner.session._deaths import pressure_end
from trainguard.runner.session._ending import DISK_FULL, EndingPlan, plan_ending
from trainguard.runner.session._records import BUDGET_KILLS_PER_TRIAL, Attempt, WorkerRecord
from trainguard.runner.session._trial_end import decide_worker_next
from trainguard.runner.session._trim import decide_after_trim

SESSION = Path(session_package.__file__).parent
LOOP = SESSION / "_loop.py"
MiB = 2**20


def _loop_private_names() -> set[str]:
    """The private attributes and methods of Session (``self._x`` in the loop module)."""
    tree = ast.parse(LOOP.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                names.add(node.attr)
    return names


def test_no_module_but_the_loop_reads_or_writes_the_sessions_private_state():
    private = _loop_private_names()
    assert {"_queue", "_data", "_tmpdir", "_end_reason"} <= private  # the check sees the loop's state
    reaching = []
    for path in sorted(SESSION.rglob("*.py")):
        if path == LOOP:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                not isinstance(node, ast.Attribute)
                or not node.attr.startswith("_")
                or node.attr.startswith("__")
            ):
                continue
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            # session._x anywhere, or any object's ._x that is one of the loop's private names
            if owner == "session" or (owner not in ("self", "cls") and node.attr in private):
                reaching.append(f"{path.relative_to(SESSION)}:{node.lineno}: {ast.unparse(node)}")
    assert reaching == [], reaching


def test_the_parts_never_import_the_loop_to_run():
    """A part may name Session in a type, never import the loop at run time (no call back into it)."""
    for path in sorted(SESSION.rglob("*.py")):
        if path in (LOOP, SESSION / "__init__.py"):
            continue
        tree = ast.parse(path.read_text())
        guarded = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for n in ast.walk(block)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("session._loop"):
                assert id(node) in guarded, f"{path.name} imports the loop at run time"


def _modules_of(package: Path) -> set[str]:
    found = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    found |= {p.parent.name for p in package.glob("*/__init__.py")}
    return found


@pytest.mark.parametrize("package", [session_package, room], ids=["session", "soft_limit_and_flight"])
def test_every_module_of_the_package_is_named_in_its_docstring(package):
    folder = Path(package.__file__).parent
    named = set(re.findall(r":mod:`\.(\w+)`", package.__doc__ or ""))
    assert _modules_of(folder) - named == set()
    assert named - _modules_of(folder) == set()  # and none named that is gone


def test_the_package_draws_the_data_flow_with_the_watchdog_beside_it():
    doc = session_package.__doc__ or ""
    drawing = doc[doc.index("::") : doc.index("Only the loop")]
    for part in ("queue", "_dispatch", "worker", "_trial_end", "_outcomes", "_recovery", "watchdog"):
        assert part in drawing, part


# -- after a budget kill --------------------------------------------------------------------------


def _choice(*, alone: bool, gpu: int | None = None, budget: int = 1000 * MiB) -> BudgetKill:
    values = {
        "sum_bytes": 1200 * MiB,
        "tree_bytes": 1100 * MiB if alone else 600 * MiB,
        "budget_bytes": budget,
    }
    if gpu is not None:
        values["gpu"] = gpu
    return BudgetKill(worker_id=3, alone=alone, message="killed at the budget", values=values)


def _budget_verdict(choice: BudgetKill, **kw) -> BudgetKillVerdict:
    args = {
        "index": 7,
        "fresh_worker": True,
        "budget_bytes": 1000 * MiB,
        "gpu_budgets": {},
        "budget_kills": 0,
    }
    return decide_after_budget_kill(choice, **{**args, **kw})


def test_one_trial_alone_over_the_budget_in_a_fresh_worker_stops_the_run():
    verdict = _budget_verdict(_choice(alone=True))
    assert verdict.action == "stop"
    assert (
        "memory_budget=1000.0 MiB is below one trial's measured peak: trial 7 alone reached"
        in verdict.message
    )
    on_gpu = _budget_verdict(
        _choice(alone=True, gpu=1, budget=8000 * MiB), gpu_budgets={0: 8000 * MiB, 1: 8000 * MiB}
    )
    assert on_gpu.action == "stop" and "gpu_memory_budget=7.8 GiB (GPU 1)" in on_gpu.message


def test_a_trial_that_may_fit_elsewhere_runs_again_until_killed_too_often():
    # beside other trials, in a worker grown by earlier ones, or on a GPU with a larger budget
    assert _budget_verdict(_choice(alone=False)).action == "rerun"
    assert _budget_verdict(_choice(alone=True), fresh_worker=False).action == "rerun"
    smaller_gpu = _choice(alone=True, gpu=0, budget=4000 * MiB)
    assert _budget_verdict(smaller_gpu, gpu_budgets={0: 4000 * MiB, 1: 8000 * MiB}).action == "rerun"
    assert _budget_verdict(_choice(alone=False), budget_kills=BUDGET_KILLS_PER_TRIAL).action == "finish"
    # a worker that ran no trial: only the pool changes
    assert _budget_verdict(_choice(alone=True), index=None) == BudgetKillVerdict("none")


# -- after a trim ---------------------------------------------------------------------------------


def _grown() -> object:
    return make_history(4, [300 * MiB, 340 * MiB, 380 * MiB, 420 * MiB], [350 * MiB] * 4)


def test_a_trim_that_gave_the_memory_back_keeps_the_worker():
    policy = Policy(recycle_growth="100MB")
    said = "malloc_trim(0) after trial 4"
    assert (
        decide_after_trim(policy, _grown(), before=420 * MiB, after=310 * MiB, trimmed=True, said=said)
        is None
    )


def test_a_trim_that_did_not_recycles_it_saying_what_it_gave_back():
    policy = Policy(recycle_growth="100MB")
    kept = decide_after_trim(policy, _grown(), before=420 * MiB, after=410 * MiB, trimmed=True, said="trim")
    assert kept is not None and kept.rule == "recycle_growth" and not kept.trim_first
    assert kept.message.endswith("malloc_trim(0) gave back only 10.0 MiB")
    assert (
        kept.values["trim_rss_before_bytes"] == 420 * MiB and kept.values["trim_rss_after_bytes"] == 410 * MiB
    )
    no_glibc = decide_after_trim(
        policy, _grown(), before=420 * MiB, after=420 * MiB, trimmed=False, said="no trim here"
    )
    assert no_glibc is not None and no_glibc.message.endswith("; no trim here")


# -- how a session ends ---------------------------------------------------------------------------


def _worker(worker_id: int, state: str, trial: Attempt | None = None) -> WorkerRecord:
    return WorkerRecord(worker_id, worker_id, handle=None, started_mono=0.0, state=state, trial=trial)  # type: ignore[arg-type]


def test_an_ending_kills_nothing_first_unless_the_disk_is_full():
    busy = _worker(1, "busy", Attempt(4, {}, 1, 1))
    workers = [busy, _worker(2, "idle"), _worker(3, "busy"), _worker(4, "dead")]
    for status in ("completed", "stopped", "interrupted", "failed"):
        assert plan_ending(status, workers) == EndingPlan(status)
    full = plan_ending(DISK_FULL, workers)
    assert [w.worker_id for w in full.kill_first] == [1, 3]  # every busy worker: each write would fail
    assert [(w.worker_id, run.index) for w, run in full.stopped] == [(1, 4)]  # attempts recorded disk_full
    assert full.make_room


# -- after a trial, and a pressure's end ----------------------------------------------------------


def test_a_worker_is_never_reused_after_an_oom_and_kept_when_nothing_waits():
    run = Attempt(2, {}, 1, 1)
    oom = decide_worker_next(Policy(), None, run, "framework_oom", more_to_run=False)
    assert oom.action == "retire" and oom.decision is not None and oom.decision.rule == "out_of_memory"
    assert (
        decide_worker_next(Policy(recycle_growth="100MB"), _grown(), run, "ok", more_to_run=False).action
        == "keep"
    )
    grown = decide_worker_next(Policy(recycle_growth="100MB"), _grown(), run, "ok", more_to_run=True)
    # no allocator readings: no cause known, so no malloc_trim(0) first: recycled now
    assert grown.action == "retire" and grown.decision is not None and grown.decision.rule == "recycle_growth"
    assert (
        decide_worker_next(
            Policy(), make_history(1, [300 * MiB], [350 * MiB]), run, "ok", more_to_run=True
        ).action
        == "prestart"
    )


def test_a_grace_kill_is_told_by_the_kills_fields_not_its_words():
    policy = Policy(memory_limit=700 * MiB, soft_limit=450 * MiB, pressure_grace="1s")
    since = PressureSince(10.0, "tree RSS crossed soft_limit")
    grace = limit_verdict(policy, LimitReading(610 * MiB, now_s=11.2), pressure=since).kill
    assert grace is not None and is_grace_kill(policy, grace)
    assert pressure_end(policy, grace) == "grace_expired"
    hard = limit_verdict(policy, LimitReading(800 * MiB, now_s=11.2), pressure=since).kill
    assert hard is not None and not is_grace_kill(policy, hard) and pressure_end(policy, hard) == "ignored"
    # as a Ray or Slurm agent's kill reaches the driver (status, limit, value, message): the same
    remote = KillDecision(grace.status, grace.limit, grace.value, "killed (words of another version)")
    assert pressure_end(policy, remote) == "grace_expired"
    # the grace's words on another kill (a message is for people) do not make it a grace kill
    worded = KillDecision("killed_budget", 450 * MiB, 610 * MiB, grace.message)
    assert pressure_end(policy, worded) == "ignored" and pressure_end(policy, None) == "ignored"
    assert pressure_end(Policy(memory_limit=700 * MiB), grace) == "ignored"  # no soft limit: no grace
