"""Self-contained HTML reports: a run, a leak check, a comparison of configurations.

Each report is one ``.html`` file that opens offline: the charts are SVG drawn by
:mod:`trainguard.report._svg`, the tables are built by one small inline script from inline JSON, and
the page's Content-Security-Policy forbids every request (no CDN, no fonts, nothing fetched).
Everything a user typed or a trial returned is shown as text, never as markup.

This module is imported by ``import trainguard`` (so that ``trainguard.report`` is the function,
not the package), so it imports nothing at the top but the standard library.

Each report's data is read apart from its rendering: :class:`RunReportData` (``from_store``; its
:class:`RunRecords` are the rows ``trainguard show`` reads too), ``_leak_data.LeakReportData`` and
``_compare.ComparisonData``, frozen and typed; the renderers take only those. This package imports
neither the runner nor the leak check: they hand themselves to it.

* :func:`report` / ``trainguard report RUN -o run.html`` / ``Runner.report(path)``: one run.
* ``LeakReport.to_html(path)`` / ``trainguard leakcheck ... --html leak.html``: one leak check.
* :func:`write_comparison`: configurations side by side (the input shape is documented there).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from trainguard.report._output import (
    STDOUT,
    check_output_path,
    default_report_name,
    shown_output,
    write_html,
)

if TYPE_CHECKING:
    from trainguard.comparison import Comparison
    from trainguard.leaks import LeakReport
    from trainguard.report._data import RunRecords, RunReportData
    from trainguard.store import RunInfo, Store

__all__ = [
    "report",
    "render_run_html",
    "render_leak_html",
    "render_comparison_html",
    "write_comparison",
    "check_output_path",
    "write_html",
    "shown_output",
    "STDOUT",
    "default_report_name",
    "find_run",
    "RunRecords",
    "RunReportData",
]

#: the data layer's records, imported when first asked for (this module imports only the standard
#: library at the top)
_DATA_NAMES = frozenset({"RunRecords", "RunReportData"})


def __getattr__(name: str) -> Any:
    if name in _DATA_NAMES:
        from trainguard.report import _data

        return getattr(_data, name)
    raise AttributeError(f"module 'trainguard.report' has no attribute {name!r}")


def find_run(store: Store, run: str | int) -> RunInfo:
    """The :class:`~trainguard.store.RunInfo` named ``run`` (or with that id).

    Raises:
        ConfigError: no such run; the message lists the runs the store holds.
    """
    from trainguard.exceptions import ConfigError

    info = None
    if isinstance(run, str):
        info = store.get_run(run)
        if info is None and run.isdigit():
            info = store.get_run_by_id(int(run))
    elif isinstance(run, int) and not isinstance(run, bool):
        info = store.get_run_by_id(run)
    else:
        raise ConfigError(f"run must be a run's name or id, not {type(run).__name__}")
    if info is not None:
        return info
    names = [s.name for s in store.list_runs()]
    if not names:
        listing = "the store has no runs yet"
    else:
        shown = ", ".join(repr(n) for n in names[:20])
        more = (
            f" and {len(names) - 20} more (trainguard runs --store {store.path})" if len(names) > 20 else ""
        )
        listing = f"the runs in it are {shown}{more}"
    raise ConfigError(f"no run named {run!r} in {store.path}: {listing}: pass one of them")


def render_run_html(store: Store, run: str | int) -> tuple[str, RunInfo]:
    """The HTML text of one run's report and its :class:`~trainguard.store.RunInfo`."""
    from trainguard.report._data import RunReportData
    from trainguard.report._run import render_run

    info = find_run(store, run)
    return render_run(RunReportData.from_store(store, info, environment_now=_environment_now)), info


def _environment_now() -> dict[str, Any]:
    import platform

    from trainguard import __version__
    from trainguard.doctor import diagnose

    env = diagnose().to_dict()
    env["hostname"] = platform.node()
    env["trainguard"] = __version__
    return env


def report(
    run: str | int,
    *,
    store: Store | str | os.PathLike[str] = "trainguard.db",
    path: str | os.PathLike[str] | None = None,
) -> str:
    """Write the self-contained HTML report of one run and return its path.

    Args:
        run: the run's name (or id), as ``trainguard runs`` lists it.
        store: the store's path or an open :class:`~trainguard.store.Store`.
        path: where to write; default ``<run name>.html`` in the current folder.

    Returns:
        The path written. A run still in progress is reported as far as it got, marked in progress.

    Raises:
        ConfigError: no such run (the message lists the runs there are), or ``path`` cannot be written.
        StoreError: ``store`` is not a trainguard store.
    """
    from trainguard.store import Store

    if path is not None:
        check_output_path(path, flag="path=")
    if isinstance(store, Store):
        html, info = render_run_html(store, run)
    else:
        with Store(store, readonly=True) as opened:
            html, info = render_run_html(opened, run)
    if path is None:
        path = default_report_name(info.name)
    return str(write_html(path, html, flag="path="))


def render_leak_html(leak_report: LeakReport | dict[str, Any], *, title: str | None = None) -> str:
    """The HTML text of a :class:`~trainguard.leaks.LeakReport` (or its ``to_dict()``)."""
    from trainguard.report._leak import render_leak
    from trainguard.report._leak_data import LeakReportData

    return render_leak(LeakReportData.from_report(leak_report), title=title)


def render_comparison_html(comparison: Comparison | dict[str, Any]) -> str:
    """The HTML text of a comparison of configurations (see :func:`write_comparison`)."""
    from trainguard.report._compare import ComparisonData, render_comparison

    if hasattr(comparison, "to_dict"):
        comparison = comparison.to_dict()
    return render_comparison(ComparisonData.from_comparison(comparison))


def write_comparison(
    comparison: Comparison | dict[str, Any], path: str | os.PathLike[str], *, flag: str = "--html"
) -> str:
    """Write configurations side by side as one HTML file; see :mod:`trainguard.report._compare`
    for the input shape (a :class:`~trainguard.comparison.Comparison`, its ``to_dict()``, or
    ``{"title", "configurations": [{"name", "settings", "growth_bytes_per_trial", ...}],
    "recommendations"}``)."""
    check_output_path(path, flag=flag)
    return str(write_html(path, render_comparison_html(comparison), flag=flag))
