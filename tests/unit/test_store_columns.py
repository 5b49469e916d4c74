"""The store's readers build a record from a row by position (``_codec._record_of_row``,
``Record(*row)``): each SELECT must name its record's fields in their order. A swap of two columns of
one type would read back silently wrong, so the column lists are held to the records here."""

from __future__ import annotations

import dataclasses
import re

import pytest

from trainguard.store import _bytes_in_use, _events, _fitted, _runs, _samples, _stages, _trials, _workers
from trainguard.store._records import (
    AttemptRecord,
    BytesInUseReading,
    EventRecord,
    FittedSize,
    RunInfo,
    Sample,
    StageRecord,
    WorkerRecord,
)


def _columns(select: str) -> list[str]:
    listed = re.sub(r"^\s*SELECT\s+|\s+FROM\s+\w+\s*$", "", select)
    # a JSON column is stored as NAME_json and read back into the field NAME; a trial's position is
    # the column idx (index is an SQL word) and the field index
    names = [c.strip().removesuffix("_json") for c in listed.split(",")]
    return ["index" if n == "idx" else n for n in names]


@pytest.mark.parametrize(
    ("select", "record"),
    [
        (_events.EVENT_COLUMNS, EventRecord),
        (_samples._SELECT_SAMPLES, Sample),
        (_stages._SELECT_STAGES, StageRecord),
        (_trials._SELECT_ATTEMPTS, AttemptRecord),
        (_workers._SELECT_WORKERS, WorkerRecord),
        (_fitted.SELECT_FITTED, FittedSize),
        (_bytes_in_use.SELECT_BYTES_IN_USE, BytesInUseReading),
        (_runs._RUN_SELECT, RunInfo),
    ],
)
def test_each_select_names_its_records_fields_in_order(select: str, record: type) -> None:
    # the fields after the columns are not stored in that table: each has a default
    fields = dataclasses.fields(record)
    columns = _columns(select)
    assert columns == [f.name for f in fields][: len(columns)]
    missing = dataclasses.MISSING
    assert all(f.default is not missing or f.default_factory is not missing for f in fields[len(columns) :])
