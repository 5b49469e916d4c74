"""How the store encodes what it keeps: JSON text (never pickle) with one-line errors that name
the part that cannot be encoded, the checks of its integer and number arguments, and how a row
read back becomes its record."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from trainguard.exceptions import ConfigError
from trainguard.outcomes import Failure

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Record = TypeVar("_Record", bound="DataclassInstance")


def _json_path_of_bad_value(value: Any, path: str) -> tuple[str, str] | None:
    """Find the first value JSON cannot encode; return (where, type name)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _json_path_of_bad_value(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                return f"{path} key {key!r}", type(key).__name__
            found = _json_path_of_bad_value(item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    return path, type(value).__name__


def _dumps(value: Any, what: str) -> str:
    """Encode ``value`` as JSON or raise a one-line ConfigError that names the offending part."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=True)
    except RecursionError:
        raise ConfigError(
            f"{what} is nested too deep to store as JSON (more levels than Python's recursion limit of "
            f"{sys.getrecursionlimit():,}): flatten it, e.g. a list of values instead of lists in lists",
            what=what,
        ) from None
    except (TypeError, ValueError) as err:
        found = _json_path_of_bad_value(value, what)
        where, type_name = found if found else (what, type(value).__name__)
        raise ConfigError(
            f"{where} is a {type_name}, which trainguard cannot store (params and results are stored as "
            f"JSON, never pickle): convert it to a JSON type first, e.g. float(x), int(x), x.tolist(), str(x)",
            what=what,
            type_name=type_name,
        ) from err


def _canonical(value: Any) -> str:
    """JSON text that is equal for equal values whatever the dict key order (for resume checks)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _loads_object(text: str | None) -> Any:
    """A JSON object column read back, ``{}`` where it holds NULL (or an empty value)."""
    return _loads(text) or {}


@functools.cache
def _field_positions(record: type[DataclassInstance]) -> dict[str, int]:
    """Each field's position in the record (the same for every row: computed once per record)."""
    return {f.name: i for i, f in enumerate(dataclasses.fields(record))}


def _record_of_row(record: type[_Record], row: Sequence[Any], **decode: Callable[[Any], Any]) -> _Record:
    """The ``record`` dataclass of a row whose columns are its fields in their order, the fields
    named in ``decode`` read through their function first (``error=_load_failure``, ``data=_loads``).
    """
    values = list(row)
    positions = _field_positions(record)
    for name, read in decode.items():
        values[positions[name]] = read(values[positions[name]])
    return record(*values)


def _load_failure(text: str | None) -> Failure | None:
    """A stored error column as its record (an older release's dict loads the same way)."""
    return None if text is None else Failure.from_dict(json.loads(text))


def _dump_failure(error: Failure | None) -> str | None:
    """The error column for a record (None: the attempt or trial did not fail).

    Raises:
        ConfigError: ``error`` is not a :class:`~trainguard.outcomes.Failure` (a dict, say).
    """
    if error is None:
        return None
    if not isinstance(error, Failure):
        raise ConfigError(
            f"error must be a trainguard.Failure or None, not {type(error).__name__}: build it with "
            "Failure(status, message, ...) or Failure.from_dict(d)"
        )
    return _dumps(error.to_dict(), "error")


def _check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, not {type(value).__name__} ({value!r})", value=repr(value))
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be >= {minimum}", value=value)
    return value


def _check_attempt_key(run_id: Any, index: Any, attempt: Any) -> None:
    """Check what names one attempt of a trial: a run id, a trial index >= 0 and an attempt >= 1."""
    _check_int(run_id, "run_id")
    _check_int(index, "index", minimum=0)
    _check_int(attempt, "attempt", minimum=1)


def _check_optional_number(value: Any, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number or None, not {type(value).__name__} ({value!r})")
