"""The Slurm driver-pilot wire and its pure rules: JSON of a fixed schema, never pickle; pilots owned
by a run's store and name; the controller's address; the node's check before it unpickles."""

from __future__ import annotations

import os
import pickle

import pytest

from trainguard.runner.backends.base import WorkerSpec
from trainguard.runner.backends.slurm_folder import check_private_file
from trainguard.runner.backends.slurm_rules import ctld_hosts, job_name_for, run_owner_key
from trainguard.runner.backends.slurm_wire import (
    ProtocolError,
    decode,
    encode,
    from_events,
    spec_from_wire,
    spec_to_wire,
    to_events,
)

FROM_PILOT = frozenset({"started", "start_failed", "events", "ending"})


class _Evil:
    def __reduce__(self):
        return (os.system, ("false",))


def test_a_pickle_is_refused_and_never_unpickled():
    with pytest.raises(ProtocolError, match="not JSON"):
        decode(pickle.dumps(("events", [_Evil()])), FROM_PILOT)


@pytest.mark.parametrize(
    ("msg", "why"),
    [
        ({"op": "hello"}, "unexpected op 'hello'"),
        ({"op": "started", "worker_id": "1", "info": {}}, "worker_id of type str"),
        ({"op": "ending", "why": "x", "terminating": 1}, "terminating"),
        ({"op": "events", "events": [["out", 1, "%%%"]]}, "not base64"),
        ({"op": "events", "events": [["exec", 1, "x"]]}, "not one of"),
        ({"op": "events", "events": [["sample", 1, True, None, None]]}, "sample"),
    ],
)
def test_messages_outside_the_schema_are_refused(msg, why):
    with pytest.raises(ProtocolError, match=why):
        decode(encode(msg), FROM_PILOT)


def test_events_and_specs_round_trip():
    events = [
        ("out", 3, b"\x00\x01frame"),
        ("sample", 3, 10, None, 5),
        ("kill", 3, "killed_memory", 1.0, 2, "m"),
    ]
    msg = decode(encode({"op": "events", "events": to_events(events)}), FROM_PILOT)
    assert msg["events"] == events == from_events(to_events(events))
    spec = WorkerSpec(1, 0, {"A": "b"}, {"k": [1]}, "python", 1 << 20, memory_limit_bytes=None)
    assert (
        spec_from_wire(
            decode(
                encode(
                    {"op": "start", "worker_id": 1, "spec": spec_to_wire(spec), "overrides": {}, "index": 0}
                ),
                frozenset({"start"}),
            )["spec"]
        )
        == spec
    )
    with pytest.raises(ProtocolError):
        spec_from_wire({**spec_to_wire(spec), "env": {"A": 1}})


def test_the_verdicts_pressure_and_a_kills_memory_split_cross_the_wire():
    events = [
        ("kill", 3, "killed_memory", 300.0, 640, "killed at memory_limit", [40, 12, 0, 600, None]),
        ("pressure", 3, "soft_limit", 460, "crossed", {"rss_bytes": 460, "rate_bytes_per_s": None}, True),
    ]
    msg = decode(encode({"op": "events", "events": to_events(events)}), FROM_PILOT)
    assert msg["events"] == events


@pytest.mark.parametrize(
    "event",
    [
        ["kill", 3, "killed_memory", 1.0, 2, "m", [1, 2, 3, "4", None]],
        ["kill", 3, "killed_memory", 1.0, 2, "m", [1, 2, 3]],
        ["pressure", 3, "soft_limit", 5, "m", {"rss_bytes": [5]}, True],
        ["pressure", 3, "soft_limit", 5, "m", {}, 1],
    ],
)
def test_a_split_or_pressure_of_the_wrong_shape_is_refused(event):
    with pytest.raises(ProtocolError):
        decode(encode({"op": "events", "events": [event]}), FROM_PILOT)


def test_pilots_are_owned_by_store_and_run():
    a = job_name_for("sweep", run_owner_key("/data/a.db", "sweep"))
    b = job_name_for("sweep", run_owner_key("/data/b.db", "sweep"))
    assert a != b and a.startswith("trainguard-sweep-") and b.startswith("trainguard-sweep-")
    assert a == job_name_for("sweep", run_owner_key("/data/./a.db", "sweep"))


def test_controller_hosts_from_scontrol():
    text = "ClusterName = c\nSlurmctldHost[0] = vm(10.0.0.2)\nSlurmctldHost[1] = backup\n"
    assert ctld_hosts(text) == ["10.0.0.2", "backup"]


def test_the_node_refuses_a_pickle_others_could_read_or_swap(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir(mode=0o700)
    pkl = folder / "1_submitted.pkl"
    pkl.write_bytes(b"x")
    pkl.chmod(0o644)
    assert "mode 0644" in check_private_file(str(pkl))
    pkl.chmod(0o600)
    assert check_private_file(str(pkl)) is None
    folder.chmod(0o755)
    assert "folder" in check_private_file(str(pkl))
    if os.geteuid() == 0:
        folder.chmod(0o700)
        os.chown(pkl, 65534, -1)
        assert "owned by uid 65534" in check_private_file(str(pkl))
