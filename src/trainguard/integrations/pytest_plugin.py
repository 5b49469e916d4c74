"""pytest plugin: ``@pytest.mark.leakcheck`` and the ``leakcheck`` fixture. Inert unless used.

A test marked ``@pytest.mark.leakcheck(max_growth_per_iter="1MiB", max_iterations=50)`` has a body
that is one iteration: the plugin runs it repeatedly (after one ordinary run that sets up its
fixtures) and fails it when the verdict is ``leak`` with a slope above ``max_growth_per_iter`` (a
size as everywhere in trainguard: ``"1MiB"``, ``"500KB"``, or a number of bytes); the failure
prints the report. ``max_mb_per_iter`` (megabytes of 10^6 bytes) is its deprecated older form. The ``leakcheck`` fixture is :func:`trainguard.leakcheck` itself, for tests that
build their own step. Importing this plugin imports nothing heavy: trainguard's leak module is
loaded only when a marked test runs.
"""

from __future__ import annotations

from typing import Any

import pytest

_MARKER = (
    "leakcheck(max_growth_per_iter='1MiB', max_iterations=50, max_time='2m', metric='auto'): run the "
    "test body repeatedly as one iteration and fail when memory leaks faster than max_growth_per_iter"
)
_ALLOWED = {
    "max_growth_per_iter",
    "max_mb_per_iter",  # deprecated: megabytes of 10^6 bytes
    "max_iterations",
    "min_iterations",
    "max_time",
    "metric",
    "attribution",
    "tolerance",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)


@pytest.fixture
def leakcheck() -> Any:
    """:func:`trainguard.leakcheck`; ``leakcheck(step, max_iterations=...)`` returns a LeakReport."""
    from trainguard.leaks import leakcheck as _leakcheck

    return _leakcheck


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    marker = pyfuncitem.get_closest_marker("leakcheck")
    if marker is None:
        yield
        return
    unknown = set(marker.kwargs) - _ALLOWED
    if marker.args or unknown:
        raise pytest.UsageError(
            f"{pyfuncitem.nodeid}: @pytest.mark.leakcheck takes keyword arguments among "
            f"{', '.join(sorted(_ALLOWED))}; got {', '.join(sorted(unknown)) or repr(marker.args)}"
        )
    opts = dict(marker.kwargs)
    limit = _growth_limit(pyfuncitem.nodeid, opts)
    opts.setdefault("max_iterations", 50)  # max_time: the check's own default (two minutes)
    testfunction = pyfuncitem.obj
    funcargs = pyfuncitem.funcargs
    argnames = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: funcargs[name] for name in argnames}

    def step() -> None:
        testfunction(**kwargs)

    outcome = yield  # the ordinary run: a failing body fails the test as usual
    if outcome.excinfo is not None:
        return
    from trainguard.leaks import Verdict
    from trainguard.leaks import leakcheck as _leakcheck
    from trainguard.units import format_bytes

    report = _leakcheck(step, **opts)
    pyfuncitem.user_properties.append(("leakcheck", report.to_dict() | {"series": None}))
    # pytest.fail(..., pytrace=False): the report is the message; a traceback through this hook
    # wrapper would print about a hundred lines of pluggy internals before it
    if report.error is not None:
        outcome.force_exception(
            pytest.fail.Exception(
                f"leakcheck: the test body failed while repeated:\n{report.summary()}", pytrace=False
            )
        )
    elif report.verdict is Verdict.LEAK and (report.slope_bytes_per_iter or 0) > limit:
        outcome.force_exception(
            pytest.fail.Exception(
                f"leakcheck: memory grows faster than {format_bytes(limit)}/iter\n{report.summary()}",
                pytrace=False,
            )
        )


def _growth_limit(nodeid: str, opts: dict[str, Any]) -> int:
    """Bytes per iteration from the marker's ``max_growth_per_iter`` (or the deprecated
    ``max_mb_per_iter``), popped from ``opts``; a bad value is a usage error before any run."""
    import warnings

    from trainguard.exceptions import UnitError
    from trainguard.units import parse_size

    if "max_mb_per_iter" in opts:
        if "max_growth_per_iter" in opts:
            pytest.fail(
                f"{nodeid}: give max_growth_per_iter or the deprecated max_mb_per_iter, not both",
                pytrace=False,
            )
        megabytes = opts.pop("max_mb_per_iter")
        warnings.warn(
            f"{nodeid}: @pytest.mark.leakcheck(max_mb_per_iter={megabytes!r}) is deprecated: it means "
            f"10^6-byte megabytes; write max_growth_per_iter='{megabytes}MB' (or '{megabytes}MiB')",
            DeprecationWarning,
            stacklevel=2,
        )
        value: Any = megabytes if isinstance(megabytes, bool) else f"{megabytes}MB"
        name = "max_mb_per_iter"
    else:
        value, name = opts.pop("max_growth_per_iter", "1MiB"), "max_growth_per_iter"
    try:
        return parse_size(value, name=name)
    except UnitError as err:
        pytest.fail(f"{nodeid}: @pytest.mark.leakcheck: {err}", pytrace=False)
