"""What the TensorFlow.js tests share: where the JavaScript package is, and the skip when Node or
the npm install of @tensorflow/tfjs (done by scripts/test.sh) is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

JS_DIR = Path(__file__).resolve().parents[2] / "js" / "trainguard"
FIXTURES = JS_DIR / "test" / "fixtures"
SEED_LOOP = FIXTURES / "seed_loop.js"

needs_tfjs = pytest.mark.skipif(
    shutil.which("node") is None or not (JS_DIR / "node_modules" / "@tensorflow" / "tfjs").is_dir(),
    reason="needs node and @tensorflow/tfjs installed in js/trainguard (scripts/test.sh runs npm ci)",
)
