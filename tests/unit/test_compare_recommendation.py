"""compare's recommendation says when the growth it measured is one the Runner's workers release."""

from __future__ import annotations

from dataclasses import replace

from trainguard.comparison import ConfigurationResult, _recommend

MiB = 1 << 20


def _result(backend: str, growth: float, *, growing: bool, secs: float) -> ConfigurationResult:
    return ConfigurationResult(
        label=f"{backend} / glibc / 1 thread",
        configuration={"keras_backend": backend, "allocator": "glibc", "threads": 1},
        trials=6,
        growth_bytes_per_trial=growth,
        growth_ci_low_bytes_per_trial=growth * 0.9 if growing else -MiB,
        growth_ci_high_bytes_per_trial=growth * 1.1 if growing else MiB,
        growing=growing,
        seconds_per_trial=secs,
        words="grows" if growing else "no growth",
    )


def test_a_switch_to_torch_says_the_runner_already_releases_the_tensorflow_growth() -> None:
    tf = _result("tensorflow", 10 * MiB, growing=True, secs=1.0)
    torch = _result("torch", 0.0, growing=False, secs=1.3)
    text = _recommend([tf, torch], tf)
    assert "Recommendation: torch / glibc / 1 thread" in text
    assert "Runner workers release those graphs" in text and "before switching backend" in text


def test_no_caveat_when_the_baseline_is_flat_or_the_switch_is_not_a_backend() -> None:
    tf = _result("tensorflow", 0.0, growing=False, secs=1.0)
    torch = _result("torch", 0.0, growing=False, secs=0.5)
    assert "Runner workers" not in _recommend([tf, torch], tf)
    grows = _result("tensorflow", 10 * MiB, growing=True, secs=1.0)
    other = replace(
        grows, label="tensorflow / jemalloc / 1 thread", growing=False, growth_bytes_per_trial=0.0
    )
    assert "Runner workers" not in _recommend([grows, other], grows)
