"""Pure parts of the demo and of the store-reading CLI: slopes, sparklines, value formatting, rendering."""

from __future__ import annotations

import pytest

from trainguard.cli._display import short_value, sparkline
from trainguard.demo import DemoHalf, DemoResult, theil_sen_slope

MIB = 2**20


def test_theil_sen_slope_ignores_a_spike_and_gaps() -> None:
    values = [100.0 + 10 * i for i in range(20)]
    values[7] = 10_000.0  # one wild reading
    values[3] = None
    assert theil_sen_slope(values) == pytest.approx(10.0)
    assert theil_sen_slope([5.0]) is None
    assert theil_sen_slope([3.0, 3.0, 3.0]) == 0.0


def test_sparkline_scale_and_width() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "▁▁▁"
    assert sparkline([]) == ""
    line = sparkline(list(range(1000)), 40)
    assert len(line) == 40 and line[0] == "▁" and line[-1] == "█"
    # a fixed scale makes two curves comparable: a flat curve at the top of the scale is all full bars
    assert sparkline([10, 10], low=0, high=10) == "██"
    # max-pooling keeps a one-sample spike visible
    assert "█" in sparkline([0] * 500 + [9] + [0] * 499, 20)


def test_short_value() -> None:
    assert short_value({"loss": 0.123456, "n": 3, "tag": "x"}) == 'loss=0.1235 n=3 tag="x"'
    assert short_value(None) == "-"
    assert short_value("plain text") == "plain text"
    assert short_value(list(range(100)), 20).endswith("…") and len(short_value(list(range(100)), 20)) == 20


def _half(mode: str, peaks: list[int], wall_s: float, **kw) -> DemoHalf:
    return DemoHalf(
        mode=mode,
        trials=len(peaks),
        wall_s=wall_s,
        peak_rss_bytes=max(peaks),
        trial_peak_rss_bytes=tuple(peaks),
        growth_bytes_per_trial=theil_sen_slope(peaks[1:]),
        values=tuple({"loss": 0.5, "accuracy": 0.8, "backend": "tensorflow"} for _ in peaks),
        **kw,
    )


def test_render_shows_both_curves_on_one_scale(capsys: pytest.CaptureFixture[str]) -> None:
    from trainguard.cli.demo import render

    naive = _half("naive", [600 * MIB + i * 10 * MIB for i in range(20)], 25.0)
    runner = _half(
        "runner (1 worker)",
        [600 * MIB + (i % 5) * 10 * MIB for i in range(20)],
        27.5,
        recycles=3,
        workers_started=4,
        run_name="demo-x",
        store="/tmp/x.db",
    )
    render(DemoResult(naive=naive, runner=runner, params={}, versions={}))
    out = capsys.readouterr().out
    assert "1.10 x" in out  # wall-time ratio
    assert "+10.0 MiB/trial" in out and "4 (3 recycled)" in out
    naive_line = next(line for line in out.splitlines() if line.strip().startswith("naive "))
    runner_line = next(line for line in out.splitlines() if line.strip().startswith("Runner "))
    assert naive_line.count("█") >= 1 and "█" not in runner_line  # the runner never reaches the naive peak
    assert "loss=0.5 accuracy=0.8" in out and "tensorflow" not in out
    assert "trainguard show demo-x --store /tmp/x.db" in out
