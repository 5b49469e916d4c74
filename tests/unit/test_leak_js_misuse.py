"""What a Node step's leak check makes of the misuse records its Node process sends (pure)."""

from __future__ import annotations

from trainguard.leaks import _js_misuse

TIDY = {
    "kind": "async-tidy",
    "site": "train.js:12:9",
    "count": 10,
    "rejected": 10,
    "resolved": 0,
    "error": {"type": "TypeError", "message": "Cannot read properties of undefined (reading 'backend')"},
    "text": "tf.tidy() was given an async function at train.js:12:9 (10 times) ... Fix: ... trainguard.scope(async () => ...)",
}


def test_every_call_failed_counts_calls_not_records():
    misuse = _js_misuse.from_answer({"misuse": [TIDY], "failed_calls": 10}, _js_misuse.Misuse())
    assert _js_misuse.every_call_failed(misuse, 10)
    assert not _js_misuse.every_call_failed(misuse, 11)
    assert not _js_misuse.every_call_failed(_js_misuse.Misuse(), 0)
    # an answer without records (an older Node process) keeps what was known
    assert _js_misuse.from_answer({"event": "done"}, misuse) is misuse


def test_the_failed_reason_names_the_error_the_site_and_the_fix():
    misuse = _js_misuse.Misuse((TIDY,), 10)
    reason = _js_misuse.failed_reason(misuse, 10)
    assert reason.startswith("every one of the 10 calls failed (TypeError: Cannot read properties")
    assert "train.js:12:9" in reason and "trainguard.scope(async" in reason
    assert _js_misuse.hints(misuse) == (TIDY["text"],)


def test_a_caught_and_logged_error_is_named_where_it_was_logged():
    logged = {
        "kind": "logged-error",
        "site": "train.js:30:13",
        "count": 12,
        "error": {"type": "RangeError", "message": "bad shape"},
    }
    reason = _js_misuse.failed_reason(_js_misuse.Misuse((logged,), 12), 12)
    assert "(RangeError: bad shape)" in reason and "logs it (at train.js:30:13)" in reason
    assert _js_misuse.hints(_js_misuse.Misuse((logged,), 12)) == ()
