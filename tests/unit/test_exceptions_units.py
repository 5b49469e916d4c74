"""Every exception survives pickling with its attributes; size and duration parsing."""

from __future__ import annotations

import inspect
import pickle

import pytest

import trainguard.exceptions as exc_mod
from trainguard.exceptions import ConfigError, MissingDependencyError, TrainguardError, UnitError, missing
from trainguard.units import format_bytes, format_duration, parse_duration, parse_size

_CLASSES = [
    obj
    for _, obj in inspect.getmembers(exc_mod, inspect.isclass)
    if issubclass(obj, TrainguardError) and obj.__module__ == exc_mod.__name__
]


def test_every_listed_class_is_in_the_tree():
    warnings = {"TrainguardWarning", "FunctionChangedWarning", "SettingsChangedWarning", "NoGpuWarning"}
    assert set(exc_mod.__all__) == {c.__name__ for c in _CLASSES} | warnings
    assert all(issubclass(getattr(exc_mod, name), UserWarning) for name in warnings)


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda c: c.__name__)
def test_pickling_keeps_type_message_and_attributes(cls):
    err = cls(
        "one line: do this instead",
        pid=4242,
        exitcode=-9,
        signal="SIGKILL",
        limit_bytes=10**9,
        detail={"a": [1]},
    )
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is cls
    assert str(again) == "one line: do this instead"
    assert (again.pid, again.exitcode, again.signal, again.limit_bytes, again.detail) == (
        4242,
        -9,
        "SIGKILL",
        10**9,
        {"a": [1]},
    )


def test_config_error_is_a_value_error_and_missing_dependency_an_import_error():
    assert issubclass(ConfigError, ValueError) and issubclass(UnitError, ConfigError)
    err = missing("nvidia-ml-py", "GPU probes", extra="nvml")
    assert isinstance(err, ImportError) and isinstance(err, MissingDependencyError)
    assert "pip install -e '.[nvml]'` in your trainguard clone" in str(err)
    assert pickle.loads(pickle.dumps(err)).extra == "nvml"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("200MB", 200_000_000),
        ("512MiB", 512 * 1024**2),
        ("1.5G", int(1.5 * 1024**3)),
        ("4gb", 4_000_000_000),
        (" 10 kB ", 10_000),
        (1024, 1024),
        (4e9, 4_000_000_000),
        ("0", 0),
        ("2048B", 2048),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["4 potatoes", "MB", "-5MB", "1e400GB", "", True, [1]])
def test_parse_size_rejects_with_an_example(bad):
    with pytest.raises(UnitError, match=r"'4GB'"):
        parse_size(bad, name="memory_limit")


@pytest.mark.parametrize(("bad", "example"), [("1.5", "'1.5GB'"), ("2048", "'2048GB'"), (" 3 ", "'3GB'")])
def test_a_size_text_without_a_unit_is_refused_not_read_as_bytes(bad, example):
    # "--soft-limit 1.5" was a soft limit of 2 bytes
    with pytest.raises(UnitError) as err:
        parse_size(bad, name="soft_limit")
    assert (
        str(err.value)
        == f"soft_limit={bad!r} has no unit: give a unit, such as {example} or {example[:-3]}MiB'"
    )
    assert err.value.problem == "has no unit"


@pytest.mark.parametrize("bad", [1.5, 0.25, 1e3 + 0.5])
def test_a_fraction_of_a_byte_is_refused(bad):
    with pytest.raises(
        UnitError, match=r"is a fraction of a byte: give a whole number of bytes, or a unit such as"
    ):
        parse_size(bad, name="max_result_bytes")


def test_parse_size_none():
    assert parse_size(None, allow_none=True) is None
    with pytest.raises(UnitError, match="required"):
        parse_size(None)


@pytest.mark.parametrize(
    ("text", "expected"), [("30s", 30.0), ("5m", 300.0), ("250ms", 0.25), ("1.5h", 5400.0), (2, 2.0)]
)
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["soon", "5 parsecs", "-1s", False])
def test_parse_duration_rejects_with_an_example(bad):
    with pytest.raises(UnitError, match=r"'30s'"):
        parse_duration(bad, name="timeout")


def test_formatting():
    assert format_bytes(56_000_000) == "53.4 MiB"
    assert format_bytes(-2048, signed=True) == "-2.0 KiB"
    assert format_bytes(5, signed=True) == "+5 B"
    assert format_duration(0.85) == "850 ms"
    assert format_duration(245) == "4m05s"


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("-5MB", "is negative"),
        (-5, "is negative"),
        ("-0.5GB", "is negative"),
        (float("nan"), "is not a finite number"),
    ],
)
def test_a_negative_or_infinite_size_is_named_as_such(bad, problem):
    with pytest.raises(UnitError) as err:
        parse_size(bad, name="memory_limit")
    assert f"memory_limit={bad!r} {problem}: " in str(err.value) and "'4GB'" in str(err.value)
    assert err.value.problem == problem


def test_a_negative_duration_is_named_as_such():
    with pytest.raises(UnitError, match=r"timeout='-1s' is negative: give a duration such as '30s'"):
        parse_duration("-1s", name="timeout")
