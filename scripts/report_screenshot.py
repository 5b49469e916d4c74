"""Make docs/report.png, the HTML-reports page's picture of a run report, from a real run.

Two worker processes run 26 tiny trials that each keep 24 MiB alive (as a leaking framework does);
the policy recycles a worker once it has grown 100 MB, one trial allocates until it is killed at
the memory limit, one raises. The report is opened in headless Chromium (the test tooling in
tests/integration/browser.py) and its top part is captured.

    .venv/bin/python scripts/report_screenshot.py        # about 40 s; writes docs/report.png
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))


def main() -> None:
    from browser import launch, open_file

    import trainguard

    grid = [
        {"kind": "leak", "mb": 24, "sleep_s": 0.6, "lr": round(10 ** -(1 + i % 4), 4), "seed": i}
        for i in range(28)
    ]
    grid.insert(9, {"kind": "alloc", "lr": 0.1, "seed": 99})
    grid.insert(17, {"kind": "raise", "payload": "loss is NaN", "lr": 1.0, "seed": 100})
    policy = trainguard.Policy(memory_limit="500MB", peak_ratio=None, recycle_growth="100MB")
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "runs.db"
        with trainguard.Runner(workers=2, policy=policy, store=str(db)) as runner:
            runner.map(f"{ROOT / 'tests' / 'integration' / 'report_trials.py'}:trial", grid, name="lr-sweep")
            html = Path(runner.report(Path(folder) / "lr-sweep.html"))
        pw, browser = launch()
        try:
            opened = open_file(browser, html, width=1280, height=1000)
            assert not opened.errors and not opened.other_requests
            out = ROOT / "docs" / "report.png"
            height = opened.page.evaluate(
                "document.querySelector('#trials').getBoundingClientRect().top + 330"
            )
            opened.page.screenshot(
                path=str(out), clip={"x": 0, "y": 0, "width": 1280, "height": height}, full_page=True
            )
            print(f"wrote {out}")
        finally:
            browser.close()
            pw.stop()


if __name__ == "__main__":
    main()
