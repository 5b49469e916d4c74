"""The pure parts of memory pressure and the flight recorder: the soft limit's forms and errors,
the pressure decision (crossed, predicted, neither), the growth rate, the grace, the tracker's
events, the ring buffer's window and snapshot, the cgroup peak reader on this machine's cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from trainguard.exceptions import ConfigError
from trainguard.probes.cgroup_peak import memory_cgroup_dir, own_memory_cgroup, read_peak
from trainguard.runner import Policy
from trainguard.runner.policy import KillDecision, decide_pressure, grace_expired, growth_rate
from trainguard.runner.policy._pressure import resolve_soft_limit
from trainguard.runner.session.soft_limit_and_flight._flight_recorder import FlightRecorder
from trainguard.runner.session.soft_limit_and_flight._pressure_tracker import PressureTracker

MiB = 2**20


def test_soft_limit_is_a_size_or_a_fraction_of_memory_limit():
    assert resolve_soft_limit("450MB", 700_000_000) == 450_000_000
    assert resolve_soft_limit(0.5, 700_000_000) == 350_000_000
    assert resolve_soft_limit("50%", 700_000_000) == 350_000_000
    assert resolve_soft_limit("0.5", 700_000_000) == 350_000_000  # the CLI's text
    assert resolve_soft_limit("450MB", None) == 450_000_000  # a soft limit alone is allowed
    assert Policy(memory_limit="700MB", soft_limit="450MB").soft_limit == 450_000_000
    assert Policy().soft_limit is None


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"memory_limit": "700MB", "soft_limit": "700MB"}, "must be under memory_limit"),
        ({"memory_limit": "700MB", "soft_limit": "1GB"}, "must be under memory_limit"),
        ({"memory_limit": "700MB", "soft_limit": -1}, "is negative"),
        ({"memory_limit": "700MB", "soft_limit": "-5MB"}, "is negative"),
        ({"soft_limit": 0.5}, "there is none"),
        ({"memory_limit": "700MB", "soft_limit": "150%"}, "between 0% and 100%"),
        ({"soft_limit": 0}, "every trial under pressure"),
        ({"soft_limit": "450MB", "pressure_grace": "0s"}, "pressure_grace"),
    ],
)
def test_bad_soft_limits_are_one_line(kwargs, words):
    with pytest.raises(ConfigError) as info:
        Policy(**kwargs)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_pressure_when_the_soft_limit_is_crossed_or_the_hard_one_is_predicted():
    crossed = decide_pressure(
        rss_bytes=460 * MiB, soft_limit=450 * MiB, memory_limit=700 * MiB, rate_bytes_per_s=0.0, horizon_s=3
    )
    assert crossed is not None and crossed.rule == "soft_limit"
    # 300 MiB at 100 MiB/s: 700 MiB in 4 s, beyond a 3 s horizon; at 150 MiB/s, within it
    args = {"rss_bytes": 300 * MiB, "soft_limit": 450 * MiB, "memory_limit": 700 * MiB, "horizon_s": 3}
    assert decide_pressure(rate_bytes_per_s=100 * MiB, **args) is None
    predicted = decide_pressure(rate_bytes_per_s=150 * MiB, **args)
    assert predicted is not None and predicted.rule == "predicted"
    assert predicted.values["seconds_left"] == pytest.approx(400 / 150)
    assert decide_pressure(rate_bytes_per_s=-50 * MiB, **args) is None  # shrinking
    assert decide_pressure(rate_bytes_per_s=None, **args) is None
    # no soft limit: the policy behaves as before, even when the hard limit is near
    assert decide_pressure(**{**args, "soft_limit": None}, rate_bytes_per_s=1e12) is None


def test_growth_rate_over_the_last_seconds():
    series = [(t * 0.1, int(100 * MiB + t * 0.1 * 40 * MiB)) for t in range(50)]
    assert growth_rate(series) == pytest.approx(40 * MiB)
    assert growth_rate(series[:3]) is None
    flat_then_steep = [(t * 0.1, 100 * MiB) for t in range(30)] + [
        (3 + t * 0.1, int(100 * MiB + t * 0.1 * 80 * MiB)) for t in range(1, 21)
    ]
    assert growth_rate(flat_then_steep) == pytest.approx(80 * MiB, rel=0.01)  # the last 2 s only


def test_grace():
    assert not grace_expired(10.0, 100.0, None)
    assert grace_expired(10.0, 41.0, 30.0) and not grace_expired(10.0, 39.0, 30.0)


def test_tracker_raises_once_then_resolves_with_what_it_cost():
    tracker = PressureTracker(Policy(memory_limit="700MB", soft_limit="450MB", pressure_grace="5s"))
    common = {"index": 3, "attempt": 1, "attempt_started_s": 0.0, "series": []}
    assert tracker.observe(0, rss_bytes=400_000_000, now_s=1.0, **common) is None
    raised = tracker.observe(0, rss_bytes=460_000_000, now_s=2.0, **common)
    assert raised is not None and raised.rule == "soft_limit"
    tracker.delivered(0, True)
    assert tracker.observe(0, rss_bytes=470_000_000, now_s=3.0, **common) is None  # raised already
    kill = tracker.observe(0, rss_bytes=480_000_000, now_s=7.5, **common)
    assert isinstance(kill, KillDecision) and "pressure_grace" in kill.message
    event = tracker.resolve(0, "grace_expired", now_s=7.6, rss_bytes=480_000_000)
    assert event is not None and event.index == 3
    assert event.data["action"] == "grace_expired" and event.data["work_lost_s"] == pytest.approx(7.6)
    assert tracker.resolve(0, "ignored", now_s=8.0) is None  # resolved once
    # checkpointed: no work lost, the wait and the growth said
    tracker.checkpointed(1, 0.5)
    tracker.observe(1, rss_bytes=460_000_000, now_s=2.0, **common)
    done = tracker.resolve(1, "checkpointed", now_s=2.4, rss_bytes=470_000_000, stage=4)
    assert done is not None and done.data["work_lost_s"] == 0.0 and done.data["grown_bytes"] == 10_000_000
    assert "checkpointed stage 4" in done.message
    # ignored: the work since the last checkpoint is lost
    tracker.checkpointed(2, 1.0)
    tracker.observe(2, rss_bytes=460_000_000, now_s=2.0, **common)
    lost = tracker.resolve(2, "ignored", now_s=6.0)
    assert lost is not None and lost.data["work_lost_s"] == pytest.approx(5.0)
    assert "pressure ignored; killed at the hard limit" in lost.message


def test_flight_recorder_keeps_the_last_seconds_at_full_rate():
    recorder = FlightRecorder(window_s=2.0)
    for i in range(100):  # 10 s at 100 ms
        recorder.add(i * 0.1, 1000.0 + i * 0.1, 100 * MiB + i * MiB)
    snap = recorder.snapshot(cause="killed_memory", exact_peak={"peak_bytes": 210 * MiB, "source": "x"})
    assert len(snap["samples"]) == 21  # 2 s at 100 ms, not downsampled
    assert snap["samples"][-1]["t_s"] == 0 and snap["samples"][0]["t_s"] == pytest.approx(-2.0)
    assert snap["growth_bytes_per_s"] == pytest.approx(10 * MiB)
    assert snap["sampled_peak_bytes"] == 199 * MiB
    assert snap["exact_peak"]["sampled_shortfall_bytes"] == 11 * MiB
    bounded = FlightRecorder(window_s=100.0, max_samples=10)
    for i in range(50):
        bounded.add(float(i), float(i), i)
    assert len(bounded) == 10


def test_cgroup_peak_reads_this_machines_memory_cgroup():
    found = memory_cgroup_dir(os.getpid())
    if found is None:  # no memory controller readable: the reader says so, and nothing is recorded
        assert own_memory_cgroup(os.getpid()) is None
        return
    peak = read_peak(*found)
    version, folder = found
    if version == "v2" and not os.path.exists(os.path.join(folder, "memory.peak")):
        assert peak is None  # kernels before 5.19 keep no memory.peak: nothing is claimed
    else:
        assert peak is not None and peak["peak_bytes"] > 0 and "memory" in peak["source"]
    # this process shares its cgroup with itself: its peak is not a tree's own
    assert own_memory_cgroup(os.getpid()) is None


def test_a_checkpoint_that_cannot_be_written_keeps_the_earlier_stage(tmp_path):
    """A real write failure (a file size limit, as a full disk fails a write) in a fresh process."""
    code = textwrap.dedent(
        f"""
        import os, resource, signal
        from trainguard.exceptions import CheckpointError
        from trainguard.runner import TrialContext
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        ctx = TrialContext(index=0, attempt=1, checkpoint_root={str(tmp_path)!r})
        ctx.checkpoint({{"epoch": 1}})
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            ctx.checkpoint({{"epoch": 2, "blob": b"x" * (4 << 20)}})
        except CheckpointError as err:
            print("ERR", err)
        print("STAGE", ctx.stage, sorted(os.listdir({str(tmp_path)!r})))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    err = next(line for line in proc.stdout.splitlines() if line.startswith("ERR"))
    assert "stage 2 could not be written" in err and "stage 1 is kept" in err and "\n" not in err
    assert "STAGE 1 ['stage-1']" in proc.stdout


def test_device_torch_memory_history():
    from trainguard.runner import Device

    assert Device(torch_memory_history=True).torch_memory_history == 100_000
    assert Device(torch_memory_history=5000).worker_settings()["torch_memory_history"] == 5000
    assert "torch_memory_history" not in Device().worker_settings()
    with pytest.raises(ConfigError, match="torch_memory_history"):
        Device(torch_memory_history=0)
