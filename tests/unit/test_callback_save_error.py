"""The error a MemoryCallback raises when the framework cannot write its checkpoint: one line that
says which checkpoint, why (the OS error), and that the committed one before it is kept."""

from trainguard.exceptions import CheckpointError
from trainguard.integrations._callback_shell import save_error


def test_a_failed_save_says_which_why_and_what_is_kept() -> None:
    err = save_error("the model of epoch 3 could not be saved", OSError(28, "No space left on device"))
    assert isinstance(err, CheckpointError)
    text = str(err)
    assert "\n" not in text
    assert text == (
        "MemoryCallback(action='checkpoint'): the model of epoch 3 could not be saved "
        "(OSError: [Errno 28] No space left on device); the earlier checkpoint is kept"
    )
