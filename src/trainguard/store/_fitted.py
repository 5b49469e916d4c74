"""The store's fitted sizes: the batch sizes an OOM shrink found to fit, per function, params, device and key.

One table's section of :class:`~trainguard.store.Store` (see ``_base.py``).
"""

from __future__ import annotations

import time
from typing import Any

from trainguard.exceptions import ConfigError
from trainguard.store._base import StoreRows
from trainguard.store._codec import _check_int, _dumps, _loads, _record_of_row
from trainguard.store._records import FittedSize

#: the columns of a :class:`FittedSize`, in its fields' order (a row is read positionally)
SELECT_FITTED = "SELECT fn_ref, params_key, device, key, size, peak_rss_bytes, source, detail_json, updated_at FROM fitted_sizes"


class FittedSizeRows(StoreRows):
    """The store's fitted sizes."""

    def remember_size(
        self,
        fn_ref: str,
        params_key: str,
        device: str,
        key: str,
        size: int,
        *,
        peak_rss_bytes: int | None = None,
        source: str = "shrink",
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Remember that ``key=size`` fitted ``fn_ref`` with these params on this device (replaces
        what was remembered for the same four)."""
        size = _check_int(size, "size", minimum=1)
        if source not in ("shrink", "fit"):
            raise ConfigError(f"source={source!r} must be 'shrink' or 'fit'")
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO fitted_sizes (fn_ref, params_key, device, key, size, peak_rss_bytes, "
                "source, detail_json, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    fn_ref,
                    params_key,
                    device,
                    key,
                    size,
                    peak_rss_bytes,
                    source,
                    None if detail is None else _dumps(detail, "detail"),
                    time.time(),
                ),
            )

    def fitted_size(self, fn_ref: str, params_key: str, device: str, key: str) -> FittedSize | None:
        """What :meth:`remember_size` stored for these four, or None."""
        rows = self._fitted(
            "WHERE fn_ref=? AND params_key=? AND device=? AND key=?", (fn_ref, params_key, device, key)
        )
        return rows[0] if rows else None

    def fitted_sizes(self, fn_ref: str | None = None) -> list[FittedSize]:
        """Every remembered size (of one function when ``fn_ref`` is given), newest first."""
        if fn_ref is None:
            return self._fitted("", ())
        return self._fitted("WHERE fn_ref=?", (fn_ref,))

    def _fitted(self, where: str, args: tuple[Any, ...]) -> list[FittedSize]:
        rows = self._rows_if_table(f"{SELECT_FITTED} {where} ORDER BY updated_at DESC", args)
        return [_record_of_row(FittedSize, r, detail=_loads) for r in rows]
