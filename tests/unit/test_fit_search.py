"""find_batch_size's search, pure: over a probe that fits below a threshold, it finds the largest
size that fits within the tolerance, probing no size twice, and says when it stopped at maximum."""

from __future__ import annotations

from trainguard.fitting import Probe, search_size


def _prober(largest_fitting: int):
    probed: list[int] = []

    def probe(size: int) -> Probe:
        probed.append(size)
        fits = size <= largest_fitting
        return Probe(size, "ok" if fits else "memory_limit", size * 1000, fits, 0.1, "")

    return probe, probed


def test_it_doubles_then_bisects_to_the_largest_fitting_size():
    probe, probed = _prober(300)
    lo, capped = search_size(probe, 32, minimum=1, maximum=None, tolerance=0.0)
    assert lo is not None and lo.size == 300 and not capped
    assert probed[:5] == [32, 64, 128, 256, 512]
    assert len(probed) == len(set(probed))


def test_it_halves_from_a_start_that_does_not_fit():
    probe, probed = _prober(20)
    lo, _ = search_size(probe, 256, minimum=1, maximum=None, tolerance=0.05)
    assert lo is not None and 19 <= lo.size <= 20
    assert probed[:5] == [256, 128, 64, 32, 16]


def test_nothing_fits_down_to_the_minimum():
    probe, probed = _prober(3)
    assert search_size(probe, 64, minimum=8, maximum=None, tolerance=0.05) == (None, False)
    assert probed == [64, 32, 16, 8]


def test_it_stops_at_the_maximum():
    probe, _ = _prober(10_000)
    lo, capped = search_size(probe, 32, minimum=1, maximum=100, tolerance=0.05)
    assert lo is not None and lo.size == 100 and capped
