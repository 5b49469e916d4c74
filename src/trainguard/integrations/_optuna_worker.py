"""Worker side of the guarded Optuna objective: the slot function and the trial proxy.

This module runs inside trainguard worker processes and imports nothing heavy: not optuna (the
user's objective imports it if it raises ``optuna.TrialPruned``), not a framework.

A *slot* is one trial of the Runner. The slot function connects to the parent's bridge (a unix
socket with an authkey, see ``_Pool`` in :mod:`trainguard.integrations.optuna`), says which slot it is,
and receives either an Optuna trial to run or "stop". It then calls the user's objective with a
:class:`TrialProxy` whose methods are answered by the real ``optuna.Trial`` in the parent, and
returns a JSON description of the outcome as the Runner trial's value. Messages are JSON both
ways: neither side ever unpickles what the other sends.
"""

from __future__ import annotations

import builtins
import datetime
import math
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from trainguard.guarded import BaseSlot, recv_json, send_json

__all__ = ["SlotFunction", "TrialProxy", "encode_value"]

# exceptions the parent may send back by name and that are rebuilt as the same builtin type
_REBUILT = ("ValueError", "TypeError", "KeyError", "RuntimeError", "NotImplementedError", "AttributeError")


def _is_pruned(exc: BaseException) -> bool:
    optuna = sys.modules.get("optuna")
    if optuna is not None:
        pruned = getattr(getattr(optuna, "exceptions", None), "TrialPruned", None)
        if isinstance(pruned, type) and isinstance(exc, pruned):
            return True
    return False


def encode_value(value: Any) -> dict[str, Any]:
    """What the objective returned, as JSON the parent checks against the study's directions."""
    if value is None:
        return {"kind": "none"}
    if isinstance(value, (str, bytes)):
        return {"kind": "bad_value", "type": type(value).__name__, "repr": repr(value)[:200]}
    try:
        return {"kind": "value", "values": [float(value)], "multi": False}
    except (TypeError, ValueError):
        pass
    try:
        values = [float(v) for v in value]
    except (TypeError, ValueError):
        return {"kind": "bad_value", "type": type(value).__name__, "repr": repr(value)[:200]}
    return {"kind": "value", "values": values, "multi": True}


class TrialProxy:
    """Stands for ``optuna.Trial`` inside the worker; every call is answered by the parent.

    Supports ``suggest_*`` (every suggest method the parent's Optuna has: float, int, categorical,
    and the older uniform, loguniform, discrete_uniform), ``report``, ``should_prune``,
    ``set_user_attr``, and the properties ``number``, ``params``, ``user_attrs``,
    ``relative_params`` and ``datetime_start``. ``trial.study`` is not available: only the parent
    talks to the study.
    """

    def __init__(self, conn: Connection, number: int) -> None:
        """The worker's stand-in for the study's ``optuna.Trial``; made by the worker, not directly.

        Args:
            conn: the connection to the study's process, where each call is answered by the real trial.
            number: the trial's number in the study.
        """
        self._conn = conn
        self._number = number
        self._lock = threading.Lock()
        self._closed = False

    def _request(self, message: dict[str, Any]) -> Any:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"trial {self._number} is over: its proxy cannot be used any more")
            send_json(self._conn, message)
            reply = recv_json(self._conn)
        if reply.get("ok"):
            return reply.get("value")
        kind = reply.get("type", "RuntimeError")
        cls = getattr(builtins, kind) if kind in _REBUILT else RuntimeError
        raise cls(reply.get("message", "the parent could not answer"))

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._request({"op": "call", "method": method, "args": list(args), "kwargs": kwargs})

    def _get(self, name: str) -> Any:
        return self._request({"op": "get", "name": name})

    # -- what objectives use ----------------------------------------------------------------------

    def suggest_float(self, name: str, low: float, high: float, **kwargs: Any) -> float:
        """``optuna.Trial.suggest_float``, asked of the real trial in the study's process.

        Args:
            name: the parameter's name.
            low: the lowest value.
            high: the highest value.
            **kwargs: ``step``, ``log`` as Optuna takes them.

        Returns:
            The suggested value.
        """
        return self._call("suggest_float", name, low, high, **kwargs)

    def suggest_int(self, name: str, low: int, high: int, **kwargs: Any) -> int:
        """``optuna.Trial.suggest_int``: :meth:`suggest_float` for an integer parameter.

        Args:
            name, low, high, **kwargs: as for :meth:`suggest_float`.

        Returns:
            The suggested integer.
        """
        return self._call("suggest_int", name, low, high, **kwargs)

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        """``optuna.Trial.suggest_categorical``, asked of the real trial in the study's process.

        Args:
            name: the parameter's name.
            choices: the values to choose from (JSON-friendly).

        Returns:
            The suggested choice.
        """
        return self._call("suggest_categorical", name, list(choices))

    def report(self, value: float, step: int) -> None:
        """``optuna.Trial.report``: an intermediate value, for pruners.

        Args:
            value: the objective's intermediate value.
            step: the step (an epoch) it belongs to.
        """
        self._call("report", float(value), int(step))

    def should_prune(self) -> bool:
        """``optuna.Trial.should_prune``, asked of the study's pruner.

        Returns:
            True when the trial should stop (raise ``optuna.TrialPruned``).
        """
        return bool(self._call("should_prune"))

    def set_user_attr(self, key: str, value: Any) -> None:
        """``optuna.Trial.set_user_attr`` on the real trial.

        Args:
            key: the attribute's name.
            value: a JSON-friendly value.
        """
        self._call("set_user_attr", key, value)

    @property
    def number(self) -> int:
        return self._number

    @property
    def params(self) -> dict[str, Any]:
        return self._get("params")

    @property
    def user_attrs(self) -> dict[str, Any]:
        return self._get("user_attrs")

    @property
    def relative_params(self) -> dict[str, Any]:
        return self._get("relative_params")

    @property
    def datetime_start(self) -> datetime.datetime | None:
        text = self._get("datetime_start")
        return datetime.datetime.fromisoformat(text) if text else None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("suggest_"):

            def suggest(*args: Any, **kwargs: Any) -> Any:
                return self._call(name, *args, **kwargs)

            suggest.__name__ = name
            return suggest
        if name == "study":
            raise AttributeError(
                "trial.study is not available in a trainguard worker: only the parent process talks to "
                "the study (use trial.params, trial.user_attrs, trial.report and trial.should_prune)"
            )
        raise AttributeError(
            f"the trial proxy has no {name!r}: a guarded objective can use suggest_*, report, should_prune, "
            "set_user_attr, number, params, user_attrs, relative_params and datetime_start"
        )

    def __repr__(self) -> str:
        return f"TrialProxy(number={self._number})"


class SlotFunction(BaseSlot):
    """The Runner's trial function for a guarded study: one call runs at most one Optuna trial
    (a :class:`trainguard.guarded.BaseSlot`: it carries the user's objective as
    :func:`trainguard.runner.prepare_fn` made it, loaded when the worker unpickles it)."""

    job_op = "trial"

    def run(self, conn: Connection, message: dict[str, Any]) -> dict[str, Any]:
        proxy = TrialProxy(conn, int(message["number"]))
        try:
            try:
                value = self._fn(proxy)
            except BaseException as exc:
                if _is_pruned(exc):
                    return {"kind": "pruned", "message": str(exc)}
                raise
            out = encode_value(value)
            if out["kind"] == "value" and any(math.isnan(v) for v in out["values"]):
                out["nan"] = True
            return out
        finally:
            with proxy._lock:
                proxy._closed = True
