"""HTML reports opened in a real headless Chromium: a real run with recycles and a kill, untrusted
strings, a leak check, a comparison; and the bad inputs of ``trainguard report``."""

from __future__ import annotations

import html as html_mod
import json
import os
import re
import sqlite3
import sys
from pathlib import Path

import pytest
from browser import launch, open_file

import trainguard
from trainguard.cli import main
from trainguard.store import Store

HERE = Path(__file__).parent
TRIALS = f"{HERE / 'report_trials.py'}:trial"

HOSTILE = (
    '<script>window.__xss=1</script>"><img src=x onerror="window.__xss=2">'
    "</script><script>window.__xss=3</script>\x1b[31m\x07\x7f"
)


def _data(path: Path) -> dict:
    """The report's inline JSON, read back the way the page's script reads it."""
    raw = re.search(r'<script type="application/json" id="tg-data">(.*?)</script>', path.read_text(), re.S)
    assert raw is not None
    return json.loads(raw.group(1))


@pytest.fixture(scope="module")
def browser():
    pw, browser = launch()
    yield browser
    browser.close()
    pw.stop()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> tuple[Path, str]:
    """A real run: 2 workers, workers that grow 24 MiB a trial and are recycled every 3 trials, one
    trial killed at the memory limit, one that raises. 16 attempts on 2 slots of 3 trials make at
    least 6 workers, of which at most one is killed and two end with the run: at least 2 recycles,
    whichever slot the scheduler gives each trial."""
    folder = tmp_path_factory.mktemp("run")
    db = folder / "runs.db"
    grid = [{"kind": "leak", "mb": 24, "i": i} for i in range(14)]
    grid.insert(5, {"kind": "alloc"})
    grid.insert(8, {"kind": "raise", "payload": "bad input"})
    policy = trainguard.Policy(memory_limit="400MB", max_trials_per_worker=3, peak_ratio=None)
    with trainguard.Runner(workers=2, policy=policy, store=str(db)) as runner:
        results = runner.map(TRIALS, grid, name="sweep")
    assert [r.status for r in results].count("failed") == 2
    return db, "sweep"


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("hostile")
    db = folder / "runs.db"
    params = [
        {"kind": "leak", "mb": 1, "sleep_s": 0.05, "payload": HOSTILE, HOSTILE: HOSTILE},
        {"kind": "raise", "sleep_s": 0.05, "payload": HOSTILE},
    ]
    name = HOSTILE.replace("\n", " ")
    with trainguard.Runner(workers=1, store=str(db)) as runner:
        results = runner.map(TRIALS, params, name=name)
    assert [r.status for r in results] == ["ok", "failed"]
    return db, name


def test_run_report_in_chromium(browser, real_run, tmp_path: Path, capsys) -> None:
    db, name = real_run
    out = tmp_path / "run.html"
    assert main(["report", name, "--store", str(db), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    with Store(db, readonly=True) as store:
        run_id = store.get_run(name).run_id
        trials = store.trials(run_id)
        attempts = store.attempts(run_id)
        workers = store.workers(run_id)
    opened = open_file(browser, out)
    page = opened.page
    assert opened.errors == [] and [m for m in opened.console if m[0] in ("error", "warning")] == []
    assert opened.other_requests == []
    # one timeline per worker slot, each with a drawn RSS line of many points, the limit and markers
    slots = {w.config["slot"] for w in workers}
    assert page.locator("svg.chart[id^='slot-']").count() == len(slots) == 2
    lengths = page.eval_on_selector_all("path.series.rss", "ps => ps.map(p => p.getTotalLength())")
    assert len(lengths) == 2 and min(lengths) > 100
    assert page.locator("svg[id^='slot-'] g.limit").count() == 2
    recycled = sum(w.reason == "recycled" for w in workers)
    assert recycled >= 2 and page.locator("g.marker.recycle").count() == recycled
    assert page.locator("g.marker.kill").count() == sum(w.reason == "killed_memory" for w in workers) == 1
    assert page.locator("rect.trial").count() == len(attempts)
    # the flight recorder of the attempt killed at the memory limit: a chart of its last seconds
    recorded = [a for a in attempts if a.error is not None and a.error.flight_recorder]
    assert [a.status for a in recorded] == ["killed_memory"]
    flight = page.locator("#flight svg.chart[id^='flight-']")
    assert flight.count() == 1
    drawn = page.eval_on_selector_all(
        "#flight path.series.flight-rss", "ps => ps.map(p => p.getTotalLength())"
    )
    assert len(drawn) == 1 and drawn[0] > 50
    assert page.locator("#flight g.limit").count() >= 1
    assert "samples over the last" in page.inner_text("#flight")
    kill_tip = page.locator("g.marker.kill title").text_content()
    assert "killed at the memory limit" in kill_tip
    recycle_tip = page.locator("g.marker.recycle title").first.text_content()
    assert "recycled by policy" in recycle_tip and "[rule: max_trials]" in recycle_tip
    # the trials table: all rows, then filtered by text and by status, then sorted by peak
    rows = page.locator("[data-table='trials'] tbody tr")
    assert rows.count() == len(trials) == 16
    page.fill("[data-table='trials'] input[type='search']", "alloc")
    assert rows.count() == 1 and "killed at the memory limit" in rows.first.inner_text()
    page.fill("[data-table='trials'] input[type='search']", "")
    page.select_option("[data-table='trials'] select", "failed")
    assert rows.count() == 2
    page.select_option("[data-table='trials'] select", "")
    header = page.locator("[data-table='trials'] th", has_text="peak RSS")
    header.click()
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    top = int(rows.first.get_attribute("data-row"))
    assert trials[top].peak_rss_bytes == max(t.peak_rss_bytes or 0 for t in trials)
    # growth per trial, per worker: the leaking workers' slopes are about +24 MiB with an interval
    growth = _data(out)["tables"]["growth"]["rows"]
    all_ok = {w.worker_id for w in workers} - {a.worker_id for a in attempts if a.status != "ok"}
    grown = [r for r in growth if r[2] >= 3 and r[0] in all_ok]
    assert grown, growth
    for row in grown:
        assert 20 * 2**20 < row[5] < 28 * 2**20, row
        assert row[6] is not None and row[6] <= row[5] <= row[7]
    assert page.locator("svg.intervals g.interval").count() >= len(grown)
    assert (
        "no known leaking" in page.inner_text("#environment").lower()
        or page.locator("ul.warn li").count() >= 1
    )
    shot = tmp_path / "run.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    if os.environ.get("TRAINGUARD_SCREENSHOT_DIR"):  # how docs/report.png is made
        page.set_viewport_size({"width": 1280, "height": 1000})
        page.screenshot(
            path=str(Path(os.environ["TRAINGUARD_SCREENSHOT_DIR"]) / "report.png"), full_page=True
        )
    page.context.close()


def test_runner_report_and_module_function(real_run, tmp_path: Path, monkeypatch) -> None:
    db, name = real_run
    written = trainguard.report(name, store=str(db), path=tmp_path / "a.html")
    assert Path(written).read_text().startswith("<!DOCTYPE html>")
    monkeypatch.chdir(tmp_path)
    assert trainguard.report(name, store=str(db)) == "sweep.html" and (tmp_path / "sweep.html").exists()
    runner = trainguard.Runner(store=str(db))
    with pytest.raises(trainguard.ConfigError, match="has not run anything yet"):
        runner.report(tmp_path / "b.html")
    assert Path(runner.report(tmp_path / "b.html", run=name)).exists()
    runner.close()


def test_untrusted_strings_stay_text(browser, hostile_run, tmp_path: Path) -> None:
    db, name = hostile_run
    out = tmp_path / "hostile.html"
    assert main(["report", name, "--store", str(db), "-o", str(out)]) == 0
    opened = open_file(browser, out)
    page = opened.page
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("img").count() == 0
    assert page.locator("script").count() == 2  # the inline JSON and the report's own script
    assert opened.errors == [] and [m for m in opened.console if m[0] == "error"] == []
    assert opened.other_requests == []
    shown = '<script>window.__xss=1</script>"><img src=x onerror="window.__xss=2"></script>'
    assert shown in page.locator("h1").inner_text()
    assert "\u241b[31m\u2407\u2421" in page.locator("h1").inner_text()  # control characters made visible
    assert shown in page.title()
    table = page.locator("[data-table='trials']").inner_text()
    assert table.count("onerror=") >= 3  # params (key and value), result and the exception message
    assert "ValueError: <script>window.__xss=1</script>" in table
    page.context.close()
    # and without any browser: the markup has exactly two script elements and no other element
    # that a payload could have made
    raw = out.read_text()
    assert raw.count("<script") == 2 and "<img" not in raw
    assert html_mod.escape("<script>window.__xss=1</script>") in raw


def _leaky_step_factory():
    import numpy as np

    holder: dict[str, list] = {}

    def step():
        # 512 KiB a call, a numpy array the census counts; the list is made by the first call
        # (objects that exist before the check are frozen out of the census)
        holder.setdefault("kept", []).append(np.ones(64 * 1024))

    return step


def test_leak_report_in_chromium(browser, tmp_path: Path) -> None:
    # in a fresh process: in this one, the browser is a child whose memory the tree would count
    # (PSS swung by Chromium read as a plateau), and other tests' objects are in the census
    report = trainguard.leakcheck(_leaky_step_factory(), max_iterations=160, max_time="60s", isolated=True)
    assert report.verdict.value == "leak", report.summary()
    out = tmp_path / "leak.html"
    assert report.to_html(str(out)) == str(out)
    opened = open_file(browser, out)
    page = opened.page
    assert opened.errors == [] and [m for m in opened.console if m[0] == "error"] == []
    assert opened.other_requests == []
    assert page.locator("h1 .badge").inner_text() == "leak"
    assert report.reason in page.inner_text("#verdict")
    assert page.locator("path.series.measured").count() == 1
    assert page.locator("path.series.fit").count() == 1
    assert page.locator("polygon.band").count() == 1  # the slope's 95 % band
    if report.warmup_iterations:
        assert page.locator("rect.warmup").count() == 1 and page.locator("g.warmup-cut").count() == 1
    rows = page.locator("[data-table='attribution'] tbody tr")
    assert rows.count() == len(report.growth_by_kind) >= 1
    assert "numpy" in rows.first.inner_text()
    # the layout holds whatever "what grows" says: two columns of about the same width (a 90 px
    # verdict column wrapped its text a letter a line into a 5,650 px page) and a page of sane height
    page.set_viewport_size({"width": 1280, "height": 900})
    widths = page.eval_on_selector_all(
        ".cols > section", "ss => ss.map(s => s.getBoundingClientRect().width)"
    )
    assert len(widths) == 2 and min(widths) > 0.8 * max(widths) and min(widths) > 400, widths
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 3000, height
    page.screenshot(path=str(tmp_path / "leak.png"), full_page=True)
    if os.environ.get("TRAINGUARD_SCREENSHOT_DIR"):
        page.screenshot(path=str(Path(os.environ["TRAINGUARD_SCREENSHOT_DIR"]) / "leak.png"), full_page=True)
    page.context.close()


def test_leak_report_draws_live_memory_where_rss_was_split_at_the_heaps(browser, tmp_path: Path) -> None:
    from trainguard.report._leak import render_leak
    from trainguard.report._leak_data import LeakReportData

    mib = 2**20
    series = [
        {"iteration": i, "bytes": 700 * mib + 60_000 * i, "live_bytes": 400 * mib + 4_000 * i}
        for i in range(30)
    ]
    series[5].pop("live_bytes")  # a reading that could not afford the heaps: no point there
    report = {
        "verdict": "no_leak",
        "reason": "live memory under the tolerance",
        "metric": "rss",
        "series": series,
    }
    out = tmp_path / "live.html"
    out.write_text(render_leak(LeakReportData.from_report(report)))
    opened = open_file(browser, out)
    page = opened.page
    assert opened.errors == [] and opened.other_requests == []
    assert page.locator("path.series.live").count() == 1
    assert "live memory: bytes in use + RSS outside glibc's heaps" in page.inner_text(".legend")
    # without the split, neither the line nor its legend
    out2 = tmp_path / "plain.html"
    plain = {**report, "series": [{k: v for k, v in r.items() if k != "live_bytes"} for r in series]}
    out2.write_text(render_leak(LeakReportData.from_report(plain)))
    page2 = open_file(browser, out2).page
    assert page2.locator("path.series.live").count() == 0 and "live memory" not in page2.inner_text(".legend")
    page.context.close()
    page2.context.close()


def test_leakcheck_cli_html(tmp_path: Path) -> None:
    import subprocess

    script = tmp_path / "step.py"
    script.write_text("KEPT = []\n\ndef step():\n    KEPT.append(bytearray(1 << 20))\n")
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainguard",
            "leakcheck",
            f"{script}:step",
            "--html",
            str(tmp_path / "no" / "x.html"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        bad.returncode == 2 and "does not exist" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    )
    out = tmp_path / "leak.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainguard",
            "leakcheck",
            f"{script}:step",
            "--max-iterations",
            "40",
            "--html",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # 1 MiB kept a call: a leak, exit code 1
    assert done.returncode == 1, (done.stdout[-1000:], done.stderr)
    verdict = json.loads(done.stdout)["verdict"]
    assert verdict == "leak" and _data(out)["verdict"] == verdict and f"{script}:step" in out.read_text()


def test_comparison_in_chromium(browser, tmp_path: Path) -> None:
    from trainguard.report import write_comparison

    comparison = {
        "title": "compare <b>train.py:fit</b>",
        "recommendations": ["torch backend: no growth, 1.3x slower"],
        "configurations": [
            {
                "name": "tensorflow",
                "settings": {"keras_backend": "tensorflow"},
                "trials": 12,
                "failed": 0,
                "growth_bytes_per_trial": 10.1e6,
                "growth_ci_low_bytes_per_trial": 9.0e6,
                "growth_ci_high_bytes_per_trial": 11.2e6,
                "peak_rss_bytes": 812e6,
                "seconds_per_trial": 1.6,
                "peaks_bytes": [600e6 + i * 10e6 for i in range(12)],
            },
            {
                "name": "torch",
                "settings": {"keras_backend": "torch"},
                "trials": 12,
                "failed": 0,
                "growth_bytes_per_trial": 0.1e6,
                "growth_ci_low_bytes_per_trial": -1e6,
                "growth_ci_high_bytes_per_trial": 1.2e6,
                "peak_rss_bytes": 640e6,
                "seconds_per_trial": 2.1,
                "peaks_bytes": [630e6 + (i % 3) * 4e6 for i in range(12)],
            },
            {
                "name": "jax",
                "settings": {"keras_backend": "jax"},
                "status": "skipped",
                "reason": "jax is not installed",
            },
        ],
    }
    out = tmp_path / "compare.html"
    write_comparison(comparison, out)
    opened = open_file(browser, out)
    page = opened.page
    assert opened.errors == [] and opened.other_requests == []
    assert page.locator("[data-table='configurations'] tbody tr").count() == 3
    assert page.locator("svg.intervals g.interval").count() == 2
    assert page.locator("svg.bars g.bar").count() == 4
    assert page.locator("#peaks path.series").count() == 2
    assert "compare <b>train.py:fit</b>" in page.locator("h1").inner_text()
    assert "jax is not installed" in page.inner_text("[data-table='configurations']")
    page.context.close()


def test_compare_cli_html_in_chromium(browser, tmp_path: Path, capsys) -> None:
    grows = f"{HERE / 'oom_trials.py'}:grows"
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"mb": 4}))
    assert main(["compare", grows, "--params", str(params), "--html", str(tmp_path / "no" / "c.html")]) == 2
    assert "does not exist" in _one_line_error(capsys)
    out = tmp_path / "compare.html"
    argv = ["compare", grows, "--params", str(params), "--allocator", "glibc,/nonexistent/libnothing.so"]
    assert main([*argv, "--trials", "4", "--html", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    opened = open_file(browser, out)
    page = opened.page
    assert opened.errors == [] and opened.other_requests == []
    rows = page.locator("[data-table='configurations'] tbody tr")
    assert rows.count() == len(result["results"]) == 2
    assert "skipped" in rows.nth(1).inner_text()
    assert page.locator("svg.intervals g.interval").count() == 1
    assert page.locator("#peaks path.series").count() == 1
    assert result["recommendation"][:40] in page.inner_text("#recommendations")
    page.context.close()


def test_a_peak_survives_downsampling_into_the_chart(tmp_path: Path) -> None:
    """An hour at 10 Hz with one 0.1 s spike: the store buckets it, the report pools it to ~2
    readings per pixel column, and the chart's highest point is still the spike."""
    db = tmp_path / "long.db"
    spike = 1_900 * 2**20
    with Store(db) as store:
        run = store.begin_run("long", "train.py:fit", [{"i": 0}], {"workers": 1, "policy": {}})
        store.start_worker(run.run_id, 0, 1, {"slot": 0})
        t0 = run.created_at
        rows = [(t0 + k / 10, 600 * 2**20 + (k % 600) * 2**17, None, None) for k in range(36_000)]
        rows[23_456] = (rows[23_456][0], spike, None, None)
        for start in range(0, len(rows), 3_000):
            store.add_samples(run.run_id, 0, rows[start : start + 3_000])
        store.finish_run(run.run_id, "completed")
    out = tmp_path / "long.html"
    assert main(["report", "long", "--store", str(db), "-o", str(out)]) == 0
    page = out.read_text()
    svg = re.search(r'<svg[^>]*id="slot-0"[^>]*>', page).group(0)
    y_min, y_max, top, height = (
        float(re.search(rf'{k}="([^"]+)"', svg).group(1))
        for k in ("data-y-min", "data-y-max", "data-plot-top", "data-plot-height")
    )
    path = re.search(r'<path class="series rss" d="([^"]+)"', page).group(1)
    ys = [float(y) for y in re.findall(r"[ML]-?[\d.]+ (-?[\d.]+)", path)]
    assert len(ys) <= 2 * 1_800 + 10  # downsampled: about two readings per pixel column
    highest = y_min + (top + height - min(ys)) / height * (y_max - y_min)
    assert abs(highest - spike) < 0.01 * spike, (highest, spike)


# -- bad input -----------------------------------------------------------------------------------


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err, err
    return err


def test_unknown_run_lists_the_runs_there_are(real_run, tmp_path: Path, capsys) -> None:
    db, _ = real_run
    assert main(["report", "nope", "--store", str(db), "-o", str(tmp_path / "x.html")]) == 2
    err = _one_line_error(capsys)
    assert "no run named 'nope'" in err and "'sweep'" in err and "pass one of them" in err
    assert not (tmp_path / "x.html").exists()


def test_store_that_is_not_trainguards(tmp_path: Path, capsys) -> None:
    text_file = tmp_path / "notes.db"
    text_file.write_text("just some notes\n")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    for store in (text_file, other):  # exit 4: a store error
        assert main(["report", "r", "--store", str(store), "-o", str(tmp_path / "x.html")]) == 4
        assert "not a trainguard store" in _one_line_error(capsys)
    assert text_file.read_text() == "just some notes\n" and not (tmp_path / "x.html").exists()


def test_output_in_a_missing_or_read_only_folder_fails_before_any_work(tmp_path: Path, capsys) -> None:
    nowhere = tmp_path / "missing.db"  # not even a store: the output is checked first
    assert main(["report", "r", "--store", str(nowhere), "-o", str(tmp_path / "no" / "run.html")]) == 2
    err = _one_line_error(capsys)
    assert "does not exist" in err and "mkdir -p" in err
    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o555)
    # root writes through a mode of 0o555; /sys refuses even root
    folder = Path("/sys") if os.geteuid() == 0 else read_only
    assert main(["report", "r", "--store", str(nowhere), "-o", str(folder / "run.html")]) == 2
    assert "is not writable" in _one_line_error(capsys)
    assert main(["report", "r", "--store", str(nowhere), "-o", str(tmp_path)]) == 2
    assert "is a folder" in _one_line_error(capsys)
    assert not nowhere.exists()


def test_run_in_progress_is_reported_and_marked(tmp_path: Path, capsys) -> None:
    import time

    db = tmp_path / "runs.db"
    with Store(db) as store:  # a run whose supervisor is still at work: one trial running
        run = store.begin_run("live", "train.py:fit", [{"i": 0}, {"i": 1}], {"workers": 1, "policy": {}})
        store.start_worker(run.run_id, 0, os.getpid(), {"slot": 0})
        t0 = time.time()
        store.add_samples(  # USS and GPU bytes too, as Runner(uss=True) and NVML record them
            run.run_id,
            0,
            [(t0 + k / 10, 50_000_000 + k * 1_000_000, 40_000_000 + k, 2_000_000 * k) for k in range(20)],
        )
        store.start_attempt(run.run_id, 0, 1, 0)
    out = tmp_path / "live.html"
    assert main(["report", "live", "--store", str(db), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "still in progress" in captured.err and "\n" not in captured.err.strip()
    page = out.read_text()
    assert 'id="in-progress"' in page and "In progress." in page
    assert page.count('class="series rss"') == page.count('class="series uss"') == 1
    assert page.count('class="series gpu"') == 1
    rows = _data(out)["tables"]["trials"]["rows"]
    assert [r[1] for r in rows] == ["running", "pending"]


@pytest.mark.slow
def test_run_report_axes_fit_the_data_and_cut_a_resume_gap(browser, tmp_path: Path) -> None:
    """A run far under its memory limit, resumed after a pause: its memory line fills the chart
    (the 8 GB limit is not the axis, nor drawn) and the pause is cut from the time axis (one gap
    marker; the two sessions' trials sit side by side, not at the two ends of the chart)."""
    import time

    db = tmp_path / "runs.db"
    grid = [{"kind": "leak", "mb": 8, "sleep_s": 0.1, "i": i} for i in range(3)]
    policy = trainguard.Policy(memory_limit="8GB", peak_ratio=None)
    with trainguard.Runner(workers=1, policy=policy, store=str(db)) as runner:
        for done, _ in enumerate(runner.imap(TRIALS, grid, name="paused"), 1):
            if done == 2:
                break  # the session ends with a trial left: the run is resumed below
    # the pause is this test's input (longer than the axis's idle gap, report._axes.GAP_S); moving
    # the first session's records back cannot stand in for it: samples sit in buckets indexed by
    # the time they were read
    time.sleep(12)  # sleep-ok: the idle gap the report must cut
    with trainguard.Runner(workers=1, policy=policy, store=str(db)) as runner:
        assert [r.status for r in runner.map(TRIALS, grid, name="paused")] == ["ok"] * 3
    out = tmp_path / "paused.html"
    assert main(["report", "paused", "--store", str(db), "-o", str(out)]) == 0
    opened = open_file(browser, out)
    page = opened.page
    assert opened.errors == []
    assert page.locator("svg[id^='slot-'] g.limit").count() == 0
    assert page.locator("svg[id^='slot-'] g.marker.gap").count() == 1
    page.screenshot(path=str(tmp_path / "paused.png"), full_page=True)
    if os.environ.get("TRAINGUARD_SCREENSHOT_DIR"):
        page.screenshot(
            path=str(Path(os.environ["TRAINGUARD_SCREENSHOT_DIR"]) / "paused.png"), full_page=True
        )
    # the RSS line (it grows 8 MiB a trial) spans most of the plot's height, not a flat sliver
    line = page.eval_on_selector("path.series.rss", "p => p.getBBox().height")
    plot = page.eval_on_selector("svg[id^='slot-']", "s => s.getBBox().height")
    assert line > 0.4 * plot, (line, plot)
    # the trials of both sessions take most of the chart's width: the 12 s pause is not drawn
    xs = page.eval_on_selector_all(
        "rect.trial", "rs => rs.map(r => [r.x.baseVal.value, r.width.baseVal.value])"
    )
    width = page.eval_on_selector("svg[id^='slot-']", "s => s.getBBox().width")
    assert len(xs) == 3
    busy = sum(w for _, w in xs)
    assert busy > 0.3 * width, (xs, width)
    page.context.close()
