"""Which series a TF.js leak verdict is reported on: TF.js's exact tensor bytes whenever they
say leak, even when RSS (warm-up, noise) says leak first, so the slope is the tensors' own."""

from __future__ import annotations

from trainguard.leaks import stats
from trainguard.leaks._node import _tensors_called_it
from trainguard.leaks._report import StepError
from trainguard.leaks.stats import Verdict


def _decision(verdict: Verdict | None) -> stats.Decision:
    return stats.Decision(verdict, "why", 0, None, None, (), 0.0, 0.01)


def test_a_leak_both_series_saw_is_reported_on_the_tensor_bytes():
    assert _tensors_called_it(Verdict.LEAK, _decision(Verdict.LEAK), None)


def test_rss_alone_or_a_step_error_keeps_the_rss_figures():
    assert not _tensors_called_it(Verdict.LEAK, _decision(Verdict.NO_LEAK), None)
    assert not _tensors_called_it(Verdict.LEAK, _decision(None), None)
    assert not _tensors_called_it(Verdict.LEAK, None, None)
    assert not _tensors_called_it(Verdict.NO_LEAK, _decision(Verdict.LEAK), None)
    error = StepError(iteration=3, exc_type="TypeError", message="x", traceback="")
    assert not _tensors_called_it(Verdict.LEAK, _decision(Verdict.LEAK), error)
