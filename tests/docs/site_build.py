"""Build the documentation site once per test session (``mkdocs build --strict``) for the tests that read it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from blocks import ROOT


def build(site_dir: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``mkdocs.yml`` into ``site_dir``: any warning (a broken link, a
    docstring mkdocstrings cannot render, a page left out of the nav) fails it."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
