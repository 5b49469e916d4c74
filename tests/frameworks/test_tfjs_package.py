"""The JavaScript package's own tests (scope survivors, memory readings) with real @tensorflow/tfjs,
run by Node's test runner."""

from __future__ import annotations

import subprocess

from tfjs_support import JS_DIR, needs_tfjs

pytestmark = needs_tfjs


def test_js_package_tests_pass():
    tests = sorted(str(p) for p in (JS_DIR / "test").glob("*.test.js"))
    assert tests
    out = subprocess.run(["node", "--test", *tests], cwd=JS_DIR, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "# fail 0" in out.stdout
