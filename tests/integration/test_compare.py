"""compare(): the same trial under each allocator / backend / thread count, each in fresh workers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.comparison import compare
from trainguard.exceptions import ConfigError

GROWS = f"{Path(__file__).parent / 'oom_trials.py'}:grows"
MIB = 2**20


def test_each_configuration_is_measured_in_its_own_worker_with_an_interval():
    result = compare(GROWS, {"mb": 4}, allocator="glibc,jemalloc,/nonexistent/libnothing.so", trials=5)
    measured = [r for r in result.results if not r.skipped]
    (skipped,) = [r for r in result.results if r.skipped]
    assert [r.configuration["allocator"] for r in measured] == ["glibc", "jemalloc"]
    for r in measured:
        # the leak is 4 MiB per trial whatever the allocator; the interval brackets it
        assert 3.5 * MIB < r.growth_bytes_per_trial < 4.5 * MIB and r.growing
        assert r.growth_ci_low_bytes_per_trial <= 4 * MIB + 65536 <= r.growth_ci_high_bytes_per_trial + 131072
        assert r.failures == 0 and len(r.rss_after_bytes) == 5 and r.peak_rss_bytes > 20 * MIB
    assert measured[1].vs_baseline["growth_change"] == "no change"
    assert "jemalloc" in result.recommendation and "no change to growth" in result.recommendation
    assert "does not exist" in skipped.skipped and skipped.growth_bytes_per_trial is None
    json.dumps(result.to_dict())  # the documented JSON shape serialises as is


def test_a_backend_that_is_not_installed_is_skipped_with_the_reason():
    missing = next((b for b in ("jax", "openvino") if importlib.util.find_spec(b) is None), None)
    if missing is None:
        pytest.skip("jax and openvino are both installed: no missing backend to skip")
    result = compare(GROWS, {"mb": 1}, keras_backend=[missing], trials=3)
    (row,) = result.results
    assert f"needs the package {missing!r}, which is not installed" in row.skipped
    assert result.baseline is None and "every configuration was skipped" in result.recommendation


def test_a_flat_trial_is_no_growth_and_recommended():
    result = compare(GROWS, {"mb": 0}, trials=4)
    (only,) = result.results
    assert only.growing is False and abs(only.growth_bytes_per_trial) < 256 * 1024
    assert "no growth" in only.words and "Recommendation: keep" in result.recommendation


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"keras_backend": "tensorflow,theano"}, "unknown Keras backend 'theano'"),
        ({"allocator": "glibc,mimalloc"}, "unknown allocator 'mimalloc'"),
        ({"threads": "1,zero"}, "threads 'zero'"),
        ({"threads": "0"}, "threads '0'"),
        ({"trials": 2}, "trials=2"),
        ({"allocator": "glibc,glibc"}, "twice"),
    ],
)
def test_bad_configurations_are_refused_before_any_trial(kwargs, needle):
    with pytest.raises(ConfigError) as info:
        compare(GROWS, {}, **kwargs)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_compare_cli_json_and_usage_errors(tmp_path, capsys):
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"mb": 1}))
    assert main(["compare", GROWS, "--params", str(params), "--trials", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"fn", "params", "trials", "results", "baseline", "recommendation", "elapsed_s"}
    (row,) = out["results"]
    assert set(row) >= {
        "label",
        "configuration",
        "skipped",
        "growth_bytes_per_trial",
        "growth_ci_low_bytes_per_trial",
        "growth_ci_high_bytes_per_trial",
        "peak_rss_bytes",
        "seconds_per_trial",
        "failures",
        "vs_baseline",
    }
    assert main(["compare", GROWS, "--allocator", "hoard"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown allocator 'hoard'" in err and len(err.splitlines()) == 1


def test_bytes_in_use_stand_beside_rss_at_the_end_of_each_loop():
    from trainguard.probes.allocator import AllocatorProbe
    from trainguard.report import render_comparison_html

    if not AllocatorProbe().available:
        pytest.skip("this platform's allocator has no bytes-in-use count")
    result = compare(GROWS, {"mb": 4}, trials=4)
    (row,) = result.results
    after = row.bytes_in_use_after_bytes
    # the trial keeps 4 MiB of malloc'd memory a call: the allocator's count rises by that, exactly
    # but for the bookkeeping of the trial's own objects
    steps = [b - a for a, b in zip(after, after[1:], strict=False)]
    assert len(after) == 4 and all(abs(s - 4 * MIB) < 256 * 1024 for s in steps), after
    assert row.bytes_in_use_bytes == after[-1] and row.bytes_in_use_allocator == AllocatorProbe().name
    assert 16 * MIB <= row.bytes_in_use_bytes < row.rss_after_bytes[-1]
    header, _, first = result.table().splitlines()[:3]
    assert "RSS at end" in header and "in use at end" in header
    shown = f"{row.bytes_in_use_bytes / MIB:.1f} MiB"
    assert shown in first, (shown, first)
    assert result.to_dict()["results"][0]["bytes_in_use_bytes"] == row.bytes_in_use_bytes
    html = render_comparison_html(result.to_dict())
    assert "in use at end" in html
