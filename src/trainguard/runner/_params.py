"""The trials' params checked before any work: a list of dicts whose values the store can hold."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainguard.exceptions import ConfigError

__all__ = ["check_params"]


def check_params(params_list: Any) -> list[dict[str, Any]]:
    """The trials' params checked before any work: a list of dicts whose values the store can hold.

    Args:
        params_list: the params, one dict per trial.

    Returns:
        The params as a list of dicts.

    Raises:
        ConfigError: not a list of dicts, or a value that is not JSON (named with its trial).
    """
    if isinstance(params_list, (str, bytes, Mapping)) or not isinstance(params_list, Iterable):
        raise ConfigError(
            f"params must be a list of dicts (one per trial), not a {type(params_list).__name__}; "
            "for a grid, expand it first (trainguard run expands a YAML/JSON mapping of lists)"
        )
    out = list(params_list)
    from trainguard.store import encode_json  # the store's encoder names the offending value

    for i, params in enumerate(out):
        if not isinstance(params, Mapping):
            raise ConfigError(
                f"params[{i}] is a {type(params).__name__}, not a dict: each trial's params must be a dict"
            )
        bad = [k for k in params if not isinstance(k, str)]
        if bad:
            raise ConfigError(f"params[{i}] has the non-string key {bad[0]!r}: JSON objects have string keys")
        encode_json(dict(params), f"params[{i}]")
    return [dict(p) for p in out]
