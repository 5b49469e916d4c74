"""A resume's settings change in words, leaf by leaf (issue 35, item 6): pure, no store."""

from __future__ import annotations

from trainguard._settings_change import change_words, setting_changes
from trainguard.store import settings_change_words

BEFORE = {
    "policy": {"memory_limit": 2 * 10**9, "timeout": None, "retry_on": ["crash", "memory"]},
    "workers": 1,
    "threads": 2,
    "device": None,
    "fn_version": "a",
}
AFTER = {
    "policy": {"memory_limit": 3 * 10**9, "timeout": 30.0, "retry_on": ["crash", "memory"]},
    "workers": 2,
    "threads": 2,
    "device": {"tf_memory_limit": 4 << 30, "env": {"X": "1"}},
    "fn_version": "b",
}


def test_only_the_changed_leaves_are_named():
    changes = setting_changes(BEFORE, AFTER)
    assert changes == [
        ("policy.memory_limit", 2 * 10**9, 3 * 10**9),
        ("policy.timeout", None, 30.0),
        ("workers", 1, 2),
        ("device.tf_memory_limit", None, 4 << 30),
    ]
    assert change_words(changes, flags=True) == (
        "--memory-limit 2GB → 3GB, --timeout none → 30s, --workers 1 → 2, --tf-memory-limit none → 4GiB"
    )
    assert change_words(changes) == (
        "memory_limit 2GB → 3GB, timeout none → 30s, workers 1 → 2, device.tf_memory_limit none → 4GiB"
    )
    assert setting_changes(BEFORE, dict(BEFORE)) == []


def test_an_older_stores_whole_policy_entry_is_said_leaf_by_leaf():
    # what a run_resumed event recorded before: the whole policy, before and after
    legacy = {"policy": [BEFORE["policy"], AFTER["policy"]], "workers": [1, 2]}
    words = settings_change_words(legacy)
    assert words == "memory_limit 2GB → 3GB, timeout none → 30s, workers 1 → 2"
    assert len(words) < 80


def test_a_setting_an_older_release_did_not_record_is_no_change():
    old = {"policy": {"memory_limit": None}, "workers": 1}
    new = {"policy": {"memory_limit": None, "predict_peaks": True}, "workers": 1, "seed": None}
    assert setting_changes(old, new) == []
