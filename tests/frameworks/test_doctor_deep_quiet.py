"""``trainguard doctor --deep`` imports TensorFlow without its start-up banners on stderr, and
says which framework it is importing meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys

from _needs import needs

needs("tensorflow")


def test_doctor_deep_prints_no_tensorflow_banner():
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # as a user's shell has it
    proc = subprocess.run(
        [sys.executable, "-m", "trainguard", "doctor", "--deep"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tensorflow_memory_growth" in proc.stdout or "tensorflow" in proc.stdout
    assert "absl::InitializeLog" not in proc.stderr and "oneDNN" not in proc.stderr, proc.stderr[-2000:]
    assert "cpu_feature_guard" not in proc.stderr
    # it says what it is doing while the imports take their seconds
    assert "doctor --deep: importing tensorflow to read its GPUs and memory growth..." in proc.stderr
