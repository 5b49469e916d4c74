"""TrialResult.error is a frozen Failure record: built in the worker, carried as a flat JSON object
across the pipe and into the store, read back as the same record (an older release's dict too)."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest

from trainguard.exceptions import StoreError
from trainguard.outcomes import Failure

#: what a worker's exception became in the release before the record (tests/data/store_8f299fd.db)
OLD = {
    "status": "exception",
    "type": "builtins.RuntimeError",
    "message": "RuntimeError: boom from the trial",
    "traceback": "Traceback (most recent call last):\n...",
}


def test_a_failure_is_frozen_and_a_changed_view_is_a_new_record():
    failure = Failure(
        "killed_memory", "killed at 1.0 GiB", rss_bytes=2**30, limit_bytes=2**30, signal="SIGKILL"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        failure.message = "edited"  # type: ignore[misc]
    given_up = dataclasses.replace(failure, message="killed at 1.0 GiB (batch_size=1 is the minimum)")
    assert failure.message == "killed at 1.0 GiB" and given_up.rss_bytes == 2**30
    assert not hasattr(failure, "__getitem__")  # no dict-style reads: attributes only
    assert pickle.loads(pickle.dumps(given_up)) == given_up  # it crosses threads and pickled errors


def test_to_dict_is_the_flat_stored_form_and_from_dict_gives_the_record_back():
    failure = Failure(
        "exception",
        "ValueError: bad lr",
        exc_type="builtins.ValueError",
        mro=("builtins.ValueError", "builtins.Exception", "builtins.BaseException"),
        traceback="Traceback...",
        attempt=2,
        worker_id=0,
        ran_with={"batch_size": 8},
        detail={"host": "node-1"},
    )
    data = failure.to_dict()
    assert data == {
        "status": "exception",
        "message": "ValueError: bad lr",
        "type": "builtins.ValueError",
        "mro": ["builtins.ValueError", "builtins.Exception", "builtins.BaseException"],
        "traceback": "Traceback...",
        "attempt": 2,
        "worker_id": 0,
        "ran_with": {"batch_size": 8},
        "host": "node-1",
    }
    assert Failure.from_dict(json.loads(json.dumps(data))) == failure


def test_an_older_releases_dict_loads_and_unknown_keys_go_to_detail():
    failure = Failure.from_dict({**OLD, "timeout_s": 1.5, "exitcode": None})
    assert failure.status == "exception" and failure.exc_type == "builtins.RuntimeError"
    assert failure.traceback is not None and failure.traceback.startswith("Traceback")
    assert failure.detail == {"timeout_s": 1.5} and failure.exitcode is None
    assert Failure.from_dict({"status": "timeout"}).message == ""  # a dict without words still loads
    ended = Failure.of_end(
        "crashed", "killed by SIGSEGV", {"exitcode": -11, "signal": "SIGSEGV", "host": "h"}
    )
    assert (ended.exitcode, ended.signal, ended.detail) == (-11, "SIGSEGV", {"host": "h"})


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"message": "boom"}, "'status' is missing"),
        ({"status": "exception", "message": ["boom"]}, "'message' is list"),
        ({"status": "crashed", "message": "x", "exitcode": "-11"}, "'exitcode' is str"),
        ({"status": "exception", "message": "x", "mro": "builtins.ValueError"}, "'mro' is"),
        ({"status": "exception", "message": "x", "flight_recorder": [1]}, "'flight_recorder' is list"),
        (["exception", "boom"], "is a list, not a JSON object"),
    ],
)
def test_a_malformed_stored_error_is_one_line_naming_the_field(data, field):
    with pytest.raises(StoreError) as info:
        Failure.from_dict(data)
    assert field in str(info.value) and "\n" not in str(info.value)
