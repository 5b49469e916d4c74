"""Sampler: bounded memory with peaks kept, markers with synchronous readings, lifecycle, errors."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from _waits import wait_for
from trainguard.exceptions import ConfigError
from trainguard.sampling import Sampler, Timeline


def test_memory_is_bounded_and_peaks_survive_merging():
    counter = itertools.count()
    spike_at = 37

    def probe() -> int:
        n = next(counter)
        return 1_000_000 if n == spike_at else n % 5

    sampler = Sampler({"x": probe}, interval_s=0.001, max_samples=16)
    with sampler:
        wait_for(lambda: sampler.timeline.stride >= 8, 60, "the buffer to fill and merge to stride 8")
    tl = sampler.timeline
    assert len(tl) < 16 + 1
    assert max(v for v in tl.series("x") if v is not None) == 1_000_000  # merged as max, not dropped
    assert tl.peak("x") == 1_000_000
    assert list(tl.times_s) == sorted(tl.times_s)


def test_markers_carry_synchronous_readings_and_are_never_merged():
    value = {"v": 0}
    with Sampler({"v": lambda: value["v"]}, interval_s=0.001, max_samples=16) as sampler:
        for i in range(40):
            value["v"] = i * 10
            sampler.mark("iter_end", i)
            time.sleep(0.002)
    tl = sampler.timeline
    assert tl.marker_values("iter_end") == tuple(range(40))
    assert tl.values_at_markers("iter_end") == tuple(i * 10 for i in range(40))
    assert len(tl.markers_named("iter_end")) == 40


def test_default_probe_is_rss_of_this_process_tree():
    with Sampler(interval_s=0.01) as sampler:
        wait_for(lambda: len(sampler.timeline) >= 3, 60, "three readings")
    tl = sampler.timeline
    assert tl.probes == ("rss_bytes",)
    assert all(v > 10_000_000 for v in tl.series("rss_bytes"))


def test_close_is_idempotent_and_stops_the_thread():
    sampler = Sampler(interval_s=0.01).start()
    assert sampler.running
    sampler.close()
    sampler.close()
    assert not sampler.running
    # its thread has ended: nothing reads after close
    assert not any(t.name == "trainguard-sampler" and t.is_alive() for t in threading.enumerate())
    with pytest.raises(ConfigError, match="closed"):
        sampler.start()


def test_failing_probe_reads_none_and_the_thread_survives():
    def broken() -> int:
        raise OSError("gone")

    with Sampler({"bad": broken, "ok": lambda: 1}, interval_s=0.005) as sampler:
        wait_for(lambda: len(sampler.timeline) >= 3, 60, "three readings after the probe failed")
    tl = sampler.timeline
    assert set(tl.series("bad")) == {None}
    assert set(tl.series("ok")) == {1}


def test_timeline_is_frozen():
    with Sampler({"x": lambda: 1}, interval_s=0.01) as sampler:
        pass
    tl = sampler.timeline
    assert isinstance(tl, Timeline)
    with pytest.raises(AttributeError):
        tl.stride = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        tl.values["x"] = ()  # type: ignore[index]
    assert tl.to_dict()["values"]["x"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"interval_s": 0}, "positive"),
        ({"interval_s": "fast"}, "not a duration"),
        ({"max_samples": 3}, ">= 16"),
        ({"probes": ["rss"]}, "unknown probe 'rss'"),
        ({"probes": {"x": 3}}, "callable"),
        ({"probes": 42}, "list of built-in names"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Sampler(**kwargs)


def test_unknown_series_and_bad_marker_names():
    with Sampler({"x": lambda: 1}, interval_s=0.01) as sampler:
        with pytest.raises(ConfigError, match="marker name"):
            sampler.mark("")
    with pytest.raises(ConfigError, match="was not sampled"):
        sampler.timeline.series("rss_bytes")
