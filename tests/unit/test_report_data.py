"""The reports' data layer without rendering: RunReportData built from a real SQLite store (slots,
time axis, trial causes, growth per worker, policy changes, environment), LeakReportData's fitted
line and band, ComparisonData's reading of both input shapes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from trainguard.exceptions import ConfigError
from trainguard.outcomes import ATTEMPT_WORDS, Failure
from trainguard.report import RunRecords, RunReportData
from trainguard.report._compare import ComparisonData
from trainguard.report._leak_data import LeakReportData
from trainguard.store import Store

MB = 1_000_000


def _finish(s: Store, run: int, index: int, worker: int, status: str, peak: int, error=None) -> None:  # noqa: ANN001
    s.start_attempt(run, index, 1, worker)
    s.finish_attempt(run, index, 1, status=status, error=error, peak_rss_bytes=peak, duration_s=0.5)
    s.finish_trial(
        run,
        index,
        status="ok" if status == "ok" else "failed",
        value={"i": index} if status == "ok" else None,
        error=error,
        attempts=1,
        peak_rss_bytes=peak,
        worker_id=worker,
        duration_s=0.5,
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A run on two slots: worker 0 (slot 0) runs trials 0-3 growing 10 MB a trial and is recycled;
    worker 1 (slot 1) runs trial 4 and is killed at the memory limit; worker 2 (slot 0 again) has
    trial 6 running; trial 5 is pending. Samples of worker 0 were read 200 s before anything else
    (an idle stretch the time axis cuts), and samples of worker 9 have no worker row."""
    s = Store(tmp_path / "runs.db")
    now = time.time()
    policy = {"memory_limit": 900 * MB, "retries": 0, "timeout": None}
    run = s.begin_run("grid", "train.py:fit", [{"lr": i} for i in range(7)], {"policy": policy, "workers": 2})
    r = run.run_id
    s.add_event(r, "environment", "recorded", data={"hostname": "node-a", "python": "3.11"})
    s.start_worker(r, 0, 100, {"slot": 0})
    s.start_worker(r, 1, 101, {"slot": 1})
    s.add_samples(r, 0, [(now - 200 + k, 500 * MB + k, None, None) for k in range(3)])
    s.add_samples(r, 9, [(now + 1, 300 * MB, 200 * MB, None)])
    for i in range(4):
        _finish(s, r, i, 0, "ok", 600 * MB + i * 10 * MB)
    s.end_worker(r, 0, reason="recycled", detail={"rule": "max_trials"})
    error = Failure("killed_memory", "RSS 950 MB over the limit 900 MB\nmore lines")
    _finish(s, r, 4, 1, "killed_memory", 950 * MB, error)
    s.end_worker(r, 1, reason="killed_memory", detail={"rss_bytes": 950 * MB})
    s.start_worker(r, 2, 102, {"slot": 0})
    s.start_attempt(r, 6, 1, 2)
    s.add_event(r, "recycle", "worker 0 recycled", worker_id=0)
    s.add_event(r, "trial_stats", "stats", index=0, data={})
    yield s
    s.close()


def _data(store: Store, **kwargs) -> RunReportData:  # noqa: ANN003
    info = store.get_run("grid")
    assert info is not None
    return RunReportData.from_store(store, info, **kwargs)


def test_slots_hold_their_workers_samples_and_attempts(store: Store) -> None:
    data = _data(store)
    assert [s.slot for s in data.slots] == [0, 1, 9]
    slot0, slot1, orphan = data.slots
    assert [w.worker_id for w in slot0.workers] == [0, 2] and orphan.workers == ()
    # worker 0's three readings, worker 2's none: one segment per worker
    assert [len(seg) for seg in slot0.rss] == [3, 0] and slot0.peak_rss_bytes == 500 * MB + 2
    assert [(a.index, a.status) for a in slot0.attempts] == [
        (0, "ok"),
        (1, "ok"),
        (2, "ok"),
        (3, "ok"),
        (6, "running"),
    ]
    assert [a.index for a in slot1.attempts] == [4] and slot1.rss == ((),)
    # readings of a worker the store has no row of: a slot of their own, under its id
    assert orphan.rss[0][0][1] == 300.0 * MB and orphan.uss[0][0][1] == 200.0 * MB and orphan.attempts == ()
    assert (data.recycles, data.kills) == (1, 1)


def test_the_idle_stretch_is_cut_from_the_time_axis(store: Store) -> None:
    data = _data(store)
    [(start, end)] = data.timeline.gaps
    assert 190 < end - start < 200  # from the last early reading to the run's first record
    # the early readings stay at the start, the rest of the run follows them closely
    first = data.slots[0].rss[0]
    assert first[0][0] == 0.0 and first[-1][0] == 2.0
    assert data.timeline.x_range[1] < 20
    assert data.timeline.at(data.timeline.t_end) == data.timeline.x_range[1]


def test_trial_rows_say_status_cause_and_history(store: Store) -> None:
    rows = {row.record.index: row for row in _data(store).trials}
    assert rows[0].status == "ok" and rows[0].cause == "" and rows[0].history == "1: ok"
    # the cause: the status in words, then the message's first line
    assert rows[4].cause == f"{ATTEMPT_WORDS['killed_memory']}: RSS 950 MB over the limit 900 MB"
    assert rows[6].status == "running" and rows[6].history == "1: running"
    assert rows[5].status == "pending" and rows[5].history == ""


def test_growth_reads_the_trials_a_worker_survived(store: Store) -> None:
    growth = {g.worker: g for g in _data(store).growth}
    g0 = growth[0]
    assert (g0.slot, g0.trials, g0.first_peak, g0.last_peak) == (0, 4, 600 * MB, 630 * MB)
    assert g0.slope == pytest.approx(10 * MB) and "recycled" in g0.end
    # a kill's peak is the failure, not growth: worker 1 has no trial to fit
    assert (growth[1].trials, growth[1].slope) == (0, None)
    assert growth[2].trials == 0


def test_policy_values_marked_changed_against_the_defaults(store: Store) -> None:
    data = _data(store)
    changed = {v.key: v.changed for v in data.policy_values}
    assert changed == {"memory_limit": True, "retries": False, "timeout": False}
    assert data.memory_limit == 900 * MB and data.gpu_memory_limit is None
    # the limit is near the highest reading: drawn, and the axis reaches it
    assert data.show_limit and data.memory_range[1] >= 900 * MB


def test_environment_is_the_recorded_one_and_events_leave_out_statistics(store: Store) -> None:
    calls = []

    def now_env() -> dict:
        calls.append(1)
        return {"hostname": "here"}

    data = _data(store, environment_now=now_env)
    assert data.environment_recorded and data.environment["hostname"] == "node-a" and calls == []
    assert [e.kind for e in data.events] == ["run_started", "recycle"]


def test_a_store_without_an_environment_record_asks_for_the_present_one(tmp_path: Path) -> None:
    with Store(tmp_path / "old.db") as s:
        info = s.begin_run("old", "m:f", [{}], {})
        data = RunReportData.from_store(s, info, environment_now=lambda: {"hostname": "here"})
        later = RunReportData.from_store(s, info, now=info.updated_at + 60)
    assert not data.environment_recorded and data.environment == {"hostname": "here"}
    assert data.in_progress and data.slots == () and data.growth == ()
    # an in-progress run's axis reaches a few seconds past its last record, never further
    assert later.timeline.t_end == pytest.approx(info.updated_at + 5.0)
    assert later.environment == {}


def test_show_and_the_report_read_the_same_run_records(store: Store) -> None:
    info = store.get_run("grid")
    assert info is not None
    records = RunRecords.from_store(store, info)
    assert records == _data(store).records
    assert records.summary is not None and records.summary.trials_total == 7 == len(records.trials)


def test_leak_data_fits_the_line_after_the_warm_up_and_its_band() -> None:
    series = [{"iteration": i, "bytes": 1000.0 * i + (5000 if i < 3 else 0)} for i in range(10)]
    series.append({"iteration": 10, "bytes": float("nan")})
    report = {
        "series": series,
        "warmup_iterations": 3,
        "slope_bytes_per_iter": 1000.0,
        "ci_low_bytes_per_iter": 900.0,
        "ci_high_bytes_per_iter": 1100.0,
        "growth_by_kind": [{"kind": "list", "count_per_iter": 2, "holder": "KEPT", "nested": {"x": 1}}],
    }
    data = LeakReportData.from_report(report)
    assert len(data.series) == 10 and data.verdict == "inconclusive" and data.metric == "memory"
    # the line through the settled readings (iterations 3..9): exact on a perfect line
    assert data.fit == ((3.0, 3000.0), (9.0, 9000.0))
    assert data.band is not None and data.band[0] == (3.0, 6000.0 + 900.0 * -3)
    assert data.untrimmed == () and data.gpu == ()
    assert data.extra_keys == ("holder",) and data.attribution[0].extras == ("KEPT",)
    no_interval = LeakReportData.from_report({**report, "ci_low_bytes_per_iter": None})
    assert no_interval.fit == data.fit and no_interval.band is None
    assert LeakReportData.from_report({}).fit is None


def test_comparison_data_reads_both_shapes_and_rejects_bad_ones() -> None:
    data = ComparisonData.from_comparison(
        {
            "fn": "train.py:fit",
            "trials": 3,
            "results": [
                {
                    "label": "tf",
                    "configuration": {"threads": 2},
                    "trials": 3,
                    "rss_after_bytes": [1, None, 3],
                },
                {"label": "jax", "configuration": {"backend": "jax"}, "skipped": "jax is not installed"},
            ],
        }
    )
    assert data.title == "compare train.py:fit" and data.setting_keys == ("threads", "backend")
    assert [c.status for c in data.configurations] == ["ok", "skipped"]
    assert [c.name for c in data.measured] == ["tf"]
    assert data.configurations[0].series == ((1.0, 1.0), (3.0, 3.0))
    assert data.configurations[1].reason == "jax is not installed"
    with pytest.raises(ConfigError, match="'configurations' list"):
        ComparisonData.from_comparison({"title": "x"})
    with pytest.raises(ConfigError, match=r"configurations\[0\]"):
        ComparisonData.from_comparison({"configurations": [{"settings": {}}]})


def test_recycles_count_every_cause_and_name_the_ones_the_policy_gave(tmp_path: Path) -> None:
    with Store(tmp_path / "causes.db") as s:
        info = s.begin_run("causes", "m:f", [{}, {}], {})
        for w, detail in enumerate([{"cause": "retention"}, None]):
            s.start_worker(info.run_id, w, 10 + w, {"slot": 0})
            s.end_worker(info.run_id, w, reason="recycled", detail=detail)
        data = RunReportData.from_store(s, info)
    assert (data.recycles, data.kills) == (2, 0)
    assert data.recycle_causes == (("retention", 1),)
