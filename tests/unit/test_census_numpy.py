"""Census of numpy arrays: owners vs views, foreign buffers, untracked tuples; census arguments."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import numpy as np
import pytest

from trainguard.exceptions import ConfigError
from trainguard.probes.census import Census, CensusEntry, census, reachable_ids


def _numpy_groups(c: Census) -> dict[tuple[str, tuple[int, ...] | None], tuple[int, int]]:
    return {(e.kind, e.shape): (e.count, e.nbytes) for e in c.entries if e.framework == "numpy"}


# Distinctive shapes so the test process's own arrays never collide with them.
SHAPE_A = (137, 11)
SHAPE_B = (7919,)


_GLOBAL_ARRAY = np.zeros((47, 53))


class _Model:
    pass


@pytest.fixture(scope="module")
def arrays() -> SimpleNamespace:
    """Every case below made between two numpy censuses, plus one census that excludes the kept
    objects: a census walks every live object (seconds in a test process that imported the
    frameworks), so the cases share three censuses instead of taking two each. Each case has its
    own distinctive shapes, asserted on in its own test."""
    ns = SimpleNamespace()
    before = census(frameworks=["numpy"])
    ns.owner = np.zeros(SHAPE_A)
    ns.views = [ns.owner[1:], ns.owner[:, 2], ns.owner.T, ns.owner[::2][1:]]  # a view of a view too
    ns.view = np.ones(SHAPE_B)[10:20]  # the owner is referenced only by view.base
    ns.raw = bytes(range(256)) * 3
    ns.buffers = [np.frombuffer(ns.raw, dtype=np.uint8), np.frombuffer(ns.raw, dtype=np.uint8)]  # same buffer
    ns.holder = {"t": (np.zeros((3, 5, 7)), np.zeros((3, 5, 7)))}
    ns.kept = [np.zeros((41, 43)), {"inner": np.zeros((41, 43))}]
    ns.other = np.zeros((41, 43))
    # a model whose train_function closes over a graph and reads a module global
    ns.model = _Model()
    ns.graph = graph = np.zeros((47, 59))
    ns.model.train_function = lambda: graph.sum() + _GLOBAL_ARRAY.sum()
    gc.collect()  # CPython untracks the tuple: it holds only untracked objects
    ns.tuple_tracked = gc.is_tracked(ns.holder["t"])
    ns.after = census(frameworks=["numpy"])
    ns.grown = {(e.kind, e.shape): (e.count, e.nbytes) for e in ns.after.diff(before)}
    ns.excluded = census(frameworks=["numpy"], exclude=[ns.kept, ns.model])
    return ns


def test_views_count_toward_their_owner_once(arrays):
    grown = arrays.grown
    assert grown[("ndarray", SHAPE_A)] == (1, arrays.owner.nbytes)
    # no entry for any view's shape: views add neither count nor bytes
    assert all(shape == SHAPE_A for kind, shape in grown if kind == "ndarray" and shape[0] in (136, 137, 11))


def test_view_alone_reaches_its_owner_through_base(arrays):
    assert arrays.grown[("ndarray", SHAPE_B)] == (1, SHAPE_B[0] * 8)
    assert ("ndarray", (10,)) not in arrays.grown


def test_array_over_foreign_buffer_is_a_buffer_view(arrays):
    assert arrays.grown[("buffer_view", (768,))] == (1, 768)


def test_arrays_inside_untracked_tuples_are_found(arrays):
    assert not arrays.tuple_tracked
    assert _numpy_groups(arrays.after)[("ndarray", (3, 5, 7))][0] >= 2


def test_exclude_leaves_out_objects_and_what_they_reference(arrays):
    c_all = _numpy_groups(arrays.after)
    c_excl = _numpy_groups(arrays.excluded)
    assert c_all[("ndarray", (41, 43))][0] - c_excl[("ndarray", (41, 43))][0] == 2
    assert id(arrays.kept[1]["inner"]) in reachable_ids(arrays.kept)


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


def test_exclude_reaches_what_a_kept_objects_functions_close_over_but_not_their_globals(arrays):
    """``s.keep(model)`` listed a Keras model's traced graphs as survivors "held by: global model":
    they hang off ``model.train_function``'s closure, and the walk stopped at functions."""
    reached = reachable_ids([arrays.model])
    assert id(arrays.graph) in reached
    assert id(_GLOBAL_ARRAY) not in reached
    kept = _numpy_groups(arrays.excluded)
    assert ("ndarray", (47, 59)) not in kept
    assert kept[("ndarray", (47, 53))][0] >= 1
