"""Out-of-memory recovery rules as pure functions: Shrink validation, the next attempt's sizes."""

from __future__ import annotations

import pytest

from trainguard.exceptions import ConfigError
from trainguard.runner.policy import (
    OOM_STATUSES,
    Policy,
    Shrink,
    params_without,
    resize,
    shrink_step,
    start_at,
)


def test_shrink_halves_and_keeps_the_effective_batch_with_accumulate():
    rule = Shrink("batch_size", factor=0.5, accumulate="grad_accum")
    step = shrink_step(rule, {"batch_size": 512, "lr": 0.1})
    assert step.params == {"batch_size": 256, "grad_accum": 2, "lr": 0.1}
    assert (step.effective_batch, step.previous_effective_batch) == (512, 512)
    step = shrink_step(rule, step.params)
    assert step.params["batch_size"] * step.params["grad_accum"] == 512
    # 96 x 1: 48 divides it; 100 x 3 = 300, target 50 divides 300
    assert shrink_step(rule, {"batch_size": 96}).params == {"batch_size": 48, "grad_accum": 2}
    assert shrink_step(rule, {"batch_size": 100, "grad_accum": 3}).params == {
        "batch_size": 50,
        "grad_accum": 6,
    }
    # 7 x 1 with factor 0.5: the largest divisor of 7 under 3.5 is 1
    assert shrink_step(rule, {"batch_size": 7}).params == {"batch_size": 1, "grad_accum": 7}


def test_shrink_without_accumulate_never_stalls_and_stops_at_the_minimum():
    rule = Shrink("bs", factor=0.9, minimum=3)
    sizes = [10]
    params = {"bs": 10}
    while (step := shrink_step(rule, params)) is not None:
        params = step.params
        sizes.append(params["bs"])
    assert sizes == [
        10,
        9,
        8,
        7,
        6,
        5,
        4,
        3,
    ]  # int(10*0.9)=9, int(9*0.9)=8 ... at least one smaller each time
    assert step is None and "grad_accum" not in params


def test_mixed_precision_comes_first_at_the_same_size():
    rule = Shrink("batch_size", mixed_precision=True)
    step = shrink_step(rule, {"batch_size": 64})
    assert step.mixed_precision and step.params == {"batch_size": 64}
    step = shrink_step(rule, step.params, mixed_precision_on=True)
    assert step.mixed_precision and step.params == {"batch_size": 32}


def test_resize_and_params_without():
    rule = Shrink("batch_size", accumulate="acc")
    assert resize(rule, {"batch_size": 64, "acc": 2}, 16) == {"batch_size": 16, "acc": 8}
    assert resize(rule, {"batch_size": 64}, 48) == {"batch_size": 48, "acc": 2}  # rounded up: 96 >= 64
    assert params_without({"b": 1, "batch_size": 3, "acc": 2}, ["batch_size", "acc"]) == '{"b":1}'
    assert set(OOM_STATUSES) == {"framework_oom", "os_oom", "killed_memory", "killed_gpu_memory"}


def test_a_remembered_size_keeps_the_effective_batch_exact():
    rule = Shrink("batch_size", accumulate="grad_accum")
    # find_batch_size remembered 3200; 8192 x 1 is started at 2048 x 4 (3200 does not divide 8192)
    assert start_at(rule, {"batch_size": 8192}, 3200) == {"batch_size": 2048, "grad_accum": 4}
    assert start_at(Shrink("batch_size"), {"batch_size": 8192}, 3200) == {"batch_size": 3200}
    assert start_at(Shrink("batch_size", minimum=8), {"batch_size": 64}, 2) == {"batch_size": 8}


def test_cli_text_parses_and_policy_accepts_it():
    rule = Shrink.parse("shrink:batch_size,factor=0.25,minimum=2,accumulate=grad_accum,mixed_precision")
    assert rule == Shrink("batch_size", 0.25, 2, "grad_accum", True)
    policy = Policy(on_oom="shrink:bs")
    assert policy.on_oom == Shrink("bs") and policy.to_dict()["on_oom"]["key"] == "bs"


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: Shrink("batch_size", factor=1.0), "between 0 and 1"),
        (lambda: Shrink("batch_size", factor=0), "between 0 and 1"),
        (lambda: Shrink("batch_size", factor=-0.5), "between 0 and 1"),
        (lambda: Shrink("batch_size", minimum=0), "minimum"),
        (lambda: Shrink(""), "integer parameter"),
        (lambda: Shrink("bs", accumulate="bs"), "must differ"),
        (lambda: Shrink.parse("halve:batch_size"), "not understood"),
        (lambda: Shrink.parse("shrink:batch_size,speed=2"), "not understood"),
        (lambda: Shrink.parse("shrink:batch_size,factor=abc"), "not understood"),
        (lambda: Policy(on_oom=3), "trainguard.Shrink"),
    ],
)
def test_bad_rules_are_one_line_config_errors(make, needle):
    with pytest.raises(ConfigError) as info:
        make()
    assert needle in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("params", "rule", "needle"),
    [
        ({"lr": 1}, Shrink("batch_size"), "is not in params[0] (its keys: lr)"),
        ({"batch_size": 32.0}, Shrink("batch_size"), "must be a whole number"),
        ({"batch_size": "32"}, Shrink("batch_size"), "must be a whole number"),
        ({"batch_size": True}, Shrink("batch_size"), "must be a whole number"),
        (
            {"batch_size": 8},
            Shrink("batch_size", minimum=16),
            "minimum=16 is above the starting batch_size=8",
        ),
        ({"batch_size": 8, "acc": 0}, Shrink("batch_size", accumulate="acc"), "accumulate 'acc' is 0"),
    ],
)
def test_params_that_cannot_be_shrunk_are_refused_before_any_worker(params, rule, needle):
    from trainguard.runner import Runner

    with Runner(policy=Policy(on_oom=rule), store=None) as runner:
        with pytest.raises(ConfigError) as info:
            runner.map("json:dumps", [params])
        assert runner.progress() is None  # nothing started
    assert needle in str(info.value) and "\n" not in str(info.value)
