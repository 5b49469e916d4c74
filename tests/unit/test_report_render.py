"""The report's pure parts: escaping, the inline JSON, max-keeping downsampling, the renderers'
markup (parsed, no browser), and bad comparison input."""

from __future__ import annotations

import html.parser
import json
import math
import re

import pytest

from trainguard.exceptions import ConfigError
from trainguard.report._html import text, to_json_block
from trainguard.report._svg import minmax_downsample

HOSTILE = '<script>window.x=1</script>"><img src=x onerror=alert(1)></script>\x1b[2J\x00\x7f'


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        self.tags.append(tag)


def _tags(markup: str) -> list[str]:
    parser = _Tags()
    parser.feed(markup)
    return parser.tags


def test_text_escapes_markup_and_shows_control_characters():
    out = text(HOSTILE)
    assert "<" not in out and ">" not in out and '"' not in out
    assert "\u241b[2J\u2400\u2421" in out and "\x1b" not in out


def test_json_block_cannot_end_its_script_and_round_trips():
    data = {"name": HOSTILE, "nan": math.nan, "sep": "\u2028", HOSTILE: [1, 2.5, None]}
    block = to_json_block(data)
    assert not set("<>&") & set(block) and "\u2028" not in block
    back = json.loads(block)
    assert back["name"] == HOSTILE and back["nan"] == "nan" and back[HOSTILE] == [1, 2.5, None]


def test_minmax_downsample_keeps_extremes_in_order_and_bounds_the_count():
    points = [
        (i / 10, math.sin(i / 7) + (50 if i == 7_777 else 0) - (40 if i == 3_333 else 0))
        for i in range(20_000)
    ]
    out = minmax_downsample(points, 0.0, 2_000.0, 500)
    assert len(out) <= 2 * 500
    assert max(y for _, y in out) == max(y for _, y in points)
    assert min(y for _, y in out) == min(y for _, y in points)
    assert [x for x, _ in out] == sorted(x for x, _ in out)
    short = points[::100]  # 200 points over 500 columns: already under two a column, untouched
    assert minmax_downsample(short, 0.0, 2_000.0, 500) == short


def test_leak_report_markup_keeps_untrusted_text_as_text():
    from trainguard.report import render_leak_html as render_leak

    report = {
        "verdict": "leak",
        "reason": HOSTILE,
        "metric": "rss",
        "slope_bytes_per_iter": 1024.0,
        "ci_low_bytes_per_iter": 900.0,
        "ci_high_bytes_per_iter": 1100.0,
        "iterations": 50,
        "warmup_iterations": 10,
        "series": [
            {"iteration": i, "bytes": 1e8 + 1024 * i, "untrimmed_bytes": 1.1e8 + 1024 * i} for i in range(50)
        ],
        "growth_by_kind": [
            {"kind": HOSTILE, "count_per_iter": 1.0, "bytes_per_iter": 1024.0, "detail": HOSTILE}
        ],
        "hints": [HOSTILE],
        "error": {"iteration": 3, "exc_type": HOSTILE, "message": HOSTILE, "traceback": HOSTILE},
    }
    page = render_leak(report, title=HOSTILE)
    tags = _tags(page)
    assert tags.count("script") == 2 and "img" not in tags
    assert page.count('<polygon class="band"') == 1 and 'class="warmup"' in page
    data = json.loads(re.search(r'id="tg-data">(.*?)</script>', page, re.S).group(1))
    assert data["tables"]["attribution"]["rows"][0][0].startswith("<script>")


def test_leak_report_shows_holders_and_count_evidence_when_reported():
    from trainguard.report import render_leak_html as render_leak

    report = {
        "verdict": "leak",
        "reason": "grows",
        "series": [{"iteration": i, "bytes": 1e8 + i} for i in range(5)],
        "growth_by_kind": [
            {
                "kind": "numpy.ndarray",
                "count_per_iter": 1.0,
                "bytes_per_iter": 8e3,
                "holder": "KEPT[-1] in step.py",
            }
        ],
        "bytes_note": "the kinds above hold +8 KiB/iter of the growth",
        "counts": {
            "status": "supports_leak",
            "note": "numpy.ndarray rose at every census",
            "kinds": [{"kind": "numpy.ndarray", "trend": {"status": "leak", "count_per_iter": 1.0}}],
        },
    }
    page = render_leak(report)
    data = json.loads(re.search(r'id="tg-data">(.*?)</script>', page, re.S).group(1))
    attribution = data["tables"]["attribution"]
    assert (
        attribution["columns"][-1]["label"] == "holder"
        and attribution["rows"][0][-1] == "KEPT[-1] in step.py"
    )
    counts = data["tables"]["counts"]
    assert [c["label"] for c in counts["columns"]] == ["kind", "trend status", "trend count per iter"]
    assert counts["rows"] == [["numpy.ndarray", "leak", 1.0]]
    assert "Count evidence: supports_leak" in page and "the kinds above hold" in page


def test_comparison_bad_input_is_one_line():
    from trainguard.report import render_comparison_html as render_comparison

    for bad, needle in (([], "must be a dict"), ({"configurations": [{"x": 1}]}, "'name' string")):
        with pytest.raises(ConfigError, match=needle) as info:
            render_comparison(bad)
        assert "\n" not in str(info.value)


def test_growth_rows_of_a_long_serving_worker_stay_small():
    """The report of a 10,000-trial run peaked at 881 MB: the all-pairs Theil-Sen over every trial
    of a worker. An even sample of GROWTH_POINTS trials keeps the slope (at each trial's number)
    and its memory does not grow with the run: 8,000 trials stay under 40 MiB (all pairs: 256 MB)."""
    import tracemalloc
    from types import SimpleNamespace

    from trainguard.report._data import GROWTH_POINTS, evenly_sampled, growth_per_worker

    n = 8_000
    attempts = [
        SimpleNamespace(
            started_at=i, worker_id=1, peak_rss_bytes=10**8 + 1000 * i + (i * 7919) % 5000, status="ok"
        )
        for i in range(n)
    ]
    workers = [SimpleNamespace(worker_id=1, config={"slot": 0}, reason_text="run ended")]
    growth_per_worker(attempts[:50], workers)  # imports outside the measurement
    tracemalloc.start()
    try:
        [row] = growth_per_worker(attempts, workers)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40 * 2**20, peak
    assert row.trials == n and row.slope is not None and abs(row.slope - 1000) < 5
    assert row.low is not None and row.high is not None and row.low < 1000 < row.high
    x, y = evenly_sampled(list(range(n)), GROWTH_POINTS)
    assert len(x) == GROWTH_POINTS and x[0] == 0 and x[-1] == n - 1 and y == x
