"""The filter that drops TensorFlow's start-up lines from a worker's stderr, on the lines TF 2.21 prints."""

from __future__ import annotations

from trainguard.frameworks._quiet import filter_noise, is_startup_noise, min_log_level

PREINIT = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
ONEDNN = (
    "I0000 00:00:1795983069.685864   27655 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders. "
    "To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n"
)
WARN = "W0000 00:00:1795983070.1   27655 cpu_allocator_impl.cc:83] Allocation of 400000000 exceeds 10% of free system memory.\n"
ERROR = "E0000 00:00:1795983070.2   27655 cuda_dnn.cc:8310] could not load cuDNN\n"
TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nValueError: bad\n'


def test_level_follows_tf_cpp_min_log_level():
    assert min_log_level({}) == 0
    assert min_log_level({"TF_CPP_MIN_LOG_LEVEL": "2"}) == 2
    assert min_log_level({"TF_CPP_MIN_LOG_LEVEL": "quiet"}) == 0


def test_what_each_level_drops():
    for line in (PREINIT, ONEDNN, WARN, ERROR, TRACEBACK):
        assert not is_startup_noise(line, 0)  # TF's default shows everything: nothing is dropped
    assert is_startup_noise(PREINIT, 1) and is_startup_noise(ONEDNN, 1)
    assert not is_startup_noise(WARN, 1) and is_startup_noise(WARN, 2)
    assert not is_startup_noise(ERROR, 2) and is_startup_noise(ERROR, 3)
    assert not is_startup_noise("F0000 00:00:1.2   1 x.cc:1] Check failed: boom\n", 3)


def test_filter_keeps_real_errors_in_order():
    text = PREINIT + ONEDNN + PREINIT + ONEDNN + WARN + TRACEBACK
    assert filter_noise(text, 1) == WARN + TRACEBACK
    assert filter_noise(text, 0) == text
