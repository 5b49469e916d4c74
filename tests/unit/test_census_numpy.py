"""Census of numpy arrays: owners vs views, foreign buffers, untracked tuples; census arguments."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from trainguard.exceptions import ConfigError
from trainguard.probes.census import Census, CensusEntry, census, reachable_ids


def _numpy_groups(c: Census) -> dict[tuple[str, tuple[int, ...] | None], tuple[int, int]]:
    return {(e.kind, e.shape): (e.count, e.nbytes) for e in c.entries if e.framework == "numpy"}


# Distinctive shapes so the test process's own arrays never collide with them.
SHAPE_A = (137, 11)
SHAPE_B = (7919,)


def test_views_count_toward_their_owner_once():
    before = census(frameworks=["numpy"])
    owner = np.zeros(SHAPE_A)
    views = [owner[1:], owner[:, 2], owner.T, owner[::2][1:]]  # a view of a view too
    grown = {(e.kind, e.shape): (e.count, e.nbytes) for e in census(frameworks=["numpy"]).diff(before)}
    assert grown[("ndarray", SHAPE_A)] == (1, owner.nbytes)
    # no entry for any view's shape: views add neither count nor bytes
    assert all(shape == SHAPE_A for kind, shape in grown if kind == "ndarray" and shape[0] in (136, 137, 11))
    del views


def test_view_alone_reaches_its_owner_through_base():
    before = census(frameworks=["numpy"])
    view = np.ones(SHAPE_B)[10:20]  # the owner is referenced only by view.base
    grown = {(e.kind, e.shape): (e.count, e.nbytes) for e in census(frameworks=["numpy"]).diff(before)}
    assert grown[("ndarray", SHAPE_B)] == (1, SHAPE_B[0] * 8)
    assert ("ndarray", (10,)) not in grown
    del view


def test_array_over_foreign_buffer_is_a_buffer_view():
    before = census(frameworks=["numpy"])
    raw = bytes(range(256)) * 3
    arr = np.frombuffer(raw, dtype=np.uint8)
    again = np.frombuffer(raw, dtype=np.uint8)  # same buffer: counted once
    grown = {(e.kind, e.shape): (e.count, e.nbytes) for e in census(frameworks=["numpy"]).diff(before)}
    assert grown[("buffer_view", (768,))] == (1, 768)
    del arr, again


def test_arrays_inside_untracked_tuples_are_found():
    holder = {"t": (np.zeros((3, 5, 7)), np.zeros((3, 5, 7)))}
    gc.collect()  # CPython untracks the tuple: it holds only untracked objects
    assert not gc.is_tracked(holder["t"])
    found = _numpy_groups(census(frameworks=["numpy"]))
    assert found[("ndarray", (3, 5, 7))][0] >= 2


def test_exclude_leaves_out_objects_and_what_they_reference():
    kept = [np.zeros((41, 43)), {"inner": np.zeros((41, 43))}]
    other = np.zeros((41, 43))
    c_all = _numpy_groups(census(frameworks=["numpy"]))
    c_excl = _numpy_groups(census(frameworks=["numpy"], exclude=[kept]))
    assert c_all[("ndarray", (41, 43))][0] - c_excl[("ndarray", (41, 43))][0] == 2
    assert id(kept[1]["inner"]) in reachable_ids(kept)
    del other


def test_diff_reports_growth_only_and_by_kind_sums():
    a = Census(entries=(CensusEntry("numpy", "ndarray", "float64", (2,), "cpu", 3, 48),), elapsed_s=0)
    b = Census(
        entries=(
            CensusEntry("numpy", "ndarray", "float64", (2,), "cpu", 5, 80),
            CensusEntry("tensorflow", "Operation", None, None, None, 1084, 0),
        ),
        elapsed_s=0,
    )
    grown = b.diff(a)
    assert [(g.kind, g.count, g.nbytes) for g in grown] == [("ndarray", 2, 32), ("Operation", 1084, 0)]
    assert a.diff(b) == ()
    assert b.by_kind() == {"numpy.ndarray": (5, 80), "tensorflow.Operation": (1084, 0)}
    assert b.total_count == 1089 and b.total_nbytes == 80
    assert Census.from_dict(b.to_dict()) == b


def test_unknown_framework_name_is_a_config_error():
    with pytest.raises(ConfigError, match=r"unknown framework 'pytorch'.*'torch'"):
        census(frameworks=["pytorch"])
    with pytest.raises(ConfigError, match="list of names"):
        census(frameworks="torch")  # type: ignore[arg-type]


def test_census_does_not_import_frameworks():
    import sys

    had = {m for m in ("torch", "tensorflow", "jax", "keras") if m in sys.modules}
    census(frameworks=["torch", "tensorflow", "jax", "keras", "numpy"])
    assert {m for m in ("torch", "tensorflow", "jax", "keras") if m in sys.modules} == had


_GLOBAL_ARRAY = np.zeros((47, 53))


def test_exclude_reaches_what_a_kept_objects_functions_close_over_but_not_their_globals():
    """``s.keep(model)`` listed a Keras model's traced graphs as survivors "held by: global model":
    they hang off ``model.train_function``'s closure, and the walk stopped at functions."""

    class Model:
        pass

    model = Model()
    graph = np.zeros((47, 59))

    def train_function():
        return graph.sum() + _GLOBAL_ARRAY.sum()

    model.train_function = train_function  # type: ignore[attr-defined]
    reached = reachable_ids([model])
    assert id(graph) in reached
    assert id(_GLOBAL_ARRAY) not in reached
    kept = _numpy_groups(census(frameworks=["numpy"], exclude=[model]))
    assert ("ndarray", (47, 59)) not in kept
    assert kept[("ndarray", (47, 53))][0] >= 1
