"""What can be sent to a guarded worker by value: checked before anything runs, one line each.

The same cloudpickle the Runner uses for a function by value. A value that cannot be pickled (an
open file, a lock, a socket) or that lives on an accelerator (a torch tensor or module off the
CPU: it would be rebuilt on a device the worker may not see, or that is already full) is named
with what it is and what to do instead.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.guarded._slot import describe

__all__ = ["off_cpu", "pickle_inputs", "why_unsendable"]


def off_cpu(value: Any) -> str | None:
    """Where a torch tensor or module lives when it is not on the CPU (``"cuda:0"``), else None.
    Only a torch that is already imported is looked at."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if isinstance(value, torch.Tensor):
            return None if value.device.type == "cpu" else str(value.device)
        if isinstance(value, torch.nn.Module):
            for tensor in itertools.chain(value.parameters(), value.buffers()):
                if tensor.device.type != "cpu":
                    return str(tensor.device)
    except Exception:  # noqa: BLE001 - a module whose parameters cannot be listed is not ours to judge
        return None
    return None


def _hint(value: Any, error: str) -> str:
    text = f"{type(value).__module__}.{type(value).__qualname__} {error}".lower()
    if "lock" in text or "rlock" in text or "condition" in text:
        return "make it inside the function (a lock cannot cross processes)"
    if (
        hasattr(value, "read")
        and hasattr(value, "closed")
        or "textiowrapper" in text
        or "bufferedreader" in text
    ):
        return "pass its path and open it inside the function"
    if "socket" in text:
        return "connect inside the function"
    return "build it inside the function, or pass what it is made from"


def why_unsendable(value: Any) -> str | None:
    """Why ``value`` cannot go to a worker (what it is, and what to do instead), or None."""
    import io

    import cloudpickle

    if isinstance(value, io.IOBase) and not value.closed:
        # cloudpickle would send a file opened for reading as a copy of its contents, and one
        # opened for writing not at all: neither is the open file the code means
        return f"it is {describe(value)}; {_hint(value, 'file')}"
    device = off_cpu(value)
    if device is not None:
        return (
            f"it is {describe(value)} on {device}; move it to the CPU first (.cpu()) or build it "
            "inside the function, since the worker may not see that device"
        )
    try:
        cloudpickle.dumps(value)
    except Exception as err:  # noqa: BLE001 - pickling anything can raise anything
        return f"it is {describe(value)}, which cannot be pickled ({err}); {_hint(value, str(err))}"
    return None


def pickle_inputs(items: dict[str, Any], what: str) -> bytes:
    """cloudpickle ``items`` (label -> value) as one payload, after checking each label alone.

    Raises:
        ConfigError: one line naming the first value that cannot be sent, and why.
    """
    import io

    import cloudpickle

    for label, value in items.items():
        if off_cpu(value) is not None or (isinstance(value, io.IOBase) and not value.closed):
            raise ConfigError(
                f"{label} cannot be sent to the {what}'s worker: {why_unsendable(value)}", value=label
            )
    try:
        return cloudpickle.dumps(items)  # one payload: values that share objects still share them
    except Exception as whole:  # noqa: BLE001 - find which one, to name it
        for label, value in items.items():
            reason = why_unsendable(value)
            if reason is not None:
                raise ConfigError(
                    f"{label} cannot be sent to the {what}'s worker: {reason}", value=label
                ) from whole
        raise ConfigError(f"the {what}'s inputs cannot be sent to its worker: {whole}") from whole
