"""The words for outcomes in one place (trainguard.outcomes), read by policy, store, show and report."""

from __future__ import annotations

import json

from trainguard.outcomes import (
    ATTEMPT_STATUSES,
    ATTEMPT_WORDS,
    OOM_STATUSES,
    WORKER_REASONS,
    AttemptStatus,
    EventKind,
    WorkerReason,
)


def test_every_status_has_its_words_and_the_readers_agree():
    from trainguard import store
    from trainguard.cli import show
    from trainguard.runner import policy

    assert set(ATTEMPT_WORDS) == {s.value for s in AttemptStatus}
    # the report's list lacked three statuses before; now every one has words of its own
    for status in ("staged", "result_too_large", "protocol_error"):
        assert ATTEMPT_WORDS[status] != status.replace("_", " ")
    assert store.ATTEMPT_STATUSES == policy.ATTEMPT_STATUSES == ATTEMPT_STATUSES
    assert "running" not in ATTEMPT_STATUSES and "interrupted" not in ATTEMPT_STATUSES
    assert store.WORKER_REASONS == WORKER_REASONS == {r.value: r.words for r in WorkerReason}
    assert set(OOM_STATUSES) == {"framework_oom", "os_oom", "killed_memory", "killed_gpu_memory"}
    assert policy.failure_category("killed_budget") == "memory" and policy.failure_category("staged") is None
    assert show.POOL_EVENT_KINDS == EventKind.in_view("pool")
    assert "trial_stats" in show.MEMORY_EVENT_KINDS


def test_members_are_their_stored_words():
    assert AttemptStatus("os_oom") is AttemptStatus.OS_OOM
    assert (
        AttemptStatus.OK == "ok" and str(AttemptStatus.OK) == "ok" and f"{WorkerReason.CRASHED}" == "crashed"
    )
    assert json.dumps({"status": AttemptStatus.TIMEOUT}) == '{"status": "timeout"}'
    assert WorkerReason.KILLED_BUDGET.is_kill and not WorkerReason.RECYCLED.is_kill
