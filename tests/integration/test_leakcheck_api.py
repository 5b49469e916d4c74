"""trainguard.leakcheck() from Python: in-process and isolated, errors, attribution, plot, pytest plugin."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import trainguard
from trainguard.exceptions import ConfigError
from trainguard.leaks import LeakReport, Verdict

pytest_plugins = ["pytester"]

KEEP: list = []


def leaky_step() -> None:
    KEEP.append(bytearray(300_000))


def test_in_process_leak_with_progress_and_report_round_trip() -> None:
    KEEP.clear()
    events = []
    report = trainguard.leakcheck(leaky_step, max_time="10s", progress=events.append)
    KEEP.clear()
    assert report.verdict is Verdict.LEAK and report.leaked
    # the allocator's bytes in use grow by the step's bytearray; RSS also counts whole pages and the
    # allocator's slack (+5 % to +25 % over a short series)
    if report.allocator and report.allocator["available"]:
        assert report.allocator["slope_bytes_per_iter"] == pytest.approx(300_000, rel=0.05)
    assert 0.8 * 300_000 < report.slope_bytes_per_iter < 1.5 * 300_000
    assert events and "slope_bytes_per_iter" in events[-1]
    again = LeakReport.from_dict(report.to_dict())
    assert again.verdict is report.verdict and again.iterations == report.iterations
    assert "leak" in report.summary()


def test_setup_value_is_passed_and_isolated_keeps_this_process_clean() -> None:
    def setup():
        return []

    def step(store):
        store.append(bytearray(250_000))

    before = len(KEEP)
    report = trainguard.leakcheck(step, setup=setup, isolated=True, max_time="15s")
    assert report.isolated and report.verdict is Verdict.LEAK
    assert len(KEEP) == before


def test_step_error_keeps_series_and_iteration() -> None:
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 7:
            raise ValueError("bad batch")

    report = trainguard.leakcheck(step, max_time="5s")
    assert report.verdict is Verdict.INCONCLUSIVE
    assert report.error is not None and report.error.iteration == 7 and "bad batch" in report.error.traceback
    assert report.iterations == 6 and len(report.series) >= 2


def test_tracemalloc_names_the_allocation_site() -> None:
    store = []

    def step():
        store.append([object() for _ in range(200)])

    # 4 s: the site is named from the first measurements (10 s took 14 CPU s for the same answer)
    report = trainguard.leakcheck(step, max_time="4s", tracemalloc=True, calls_per_measurement=20)
    sites = [g for g in report.growth_by_kind if g.detail == "tracemalloc"]
    assert sites and "test_leakcheck_api.py" in sites[0].kind


def test_plot_and_missing_matplotlib(tmp_path) -> None:
    report = trainguard.leakcheck(lambda: None, max_iterations=200, max_time=None, attribution=False)
    out = report.plot(str(tmp_path / "p.svg"))
    assert open(out).read().lstrip().startswith("<?xml")
    code = textwrap.dedent(
        f"""
        import sys; sys.modules["matplotlib"] = None
        from trainguard.leaks import LeakReport
        from trainguard.exceptions import MissingDependencyError
        import json
        r = LeakReport.from_dict(json.loads({report.to_json()!r}))
        try:
            r.plot({str(tmp_path / "q.png")!r})
        except MissingDependencyError as e:
            print(e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "pip install -e '.[plot]'` in your trainguard clone" in out


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_iterations": 0}, "max_iterations=0"),
        ({"max_iterations": -5}, "max_iterations=-5"),
        ({"min_iterations": 0}, "min_iterations=0"),
        ({"max_iterations": 5, "min_iterations": 10}, "above max_iterations"),
        ({"metric": "vms"}, "unknown"),
        ({"max_time": 0}, "must be positive"),
        ({"max_time": None}, "needs a budget"),
        ({"max_time": "soon"}, "not a duration"),
        ({"tolerance": "lots"}, "not a size"),
        ({"alpha": 0.9}, "alpha"),
    ],
)
def test_bad_arguments_raise_before_any_work(kwargs, message) -> None:
    calls = []
    with pytest.raises(ConfigError, match=message):
        trainguard.leakcheck(lambda: calls.append(1), **kwargs)
    assert calls == []


def test_make_config_takes_leakchecks_settings_and_defaults() -> None:
    from trainguard.leaks import make_config

    assert make_config().max_time_s == 120.0 and make_config().alpha == 0.01  # leakcheck's defaults
    assert make_config(max_time="1m", metric="RSS").metric == "rss"
    for name in ("max_tme", "isolated", "progress"):  # not a setting of the check
        with pytest.raises(
            ConfigError, match=f"unknown leak-check setting {name!r}: use one of max_iterations"
        ):
            make_config(**{name: 1})


def test_the_checks_defaults_are_written_once_in_the_config() -> None:
    import argparse
    import inspect

    from trainguard.cli import leakcheck as leakcheck_cli
    from trainguard.leaks import LeakCheckConfig
    from trainguard.leaks._run import NOT_SETTINGS, default_settings

    params = inspect.signature(trainguard.leakcheck).parameters
    signature = [(name, p.default) for name, p in params.items() if name not in NOT_SETTINGS]
    assert signature == list(default_settings().items())  # the same names, order and values
    parser = argparse.ArgumentParser()
    leakcheck_cli.register(parser)
    max_time = next(a for a in parser._actions if a.dest == "max_time")
    # the CLI leaves an option out when not given; its help names the config's default
    assert max_time.default is None and f"(default {LeakCheckConfig().max_time_s / 60:g}m)" in max_time.help


def test_step_signature_errors() -> None:
    with pytest.raises(ConfigError, match="requires 2 arguments"):
        trainguard.leakcheck(lambda a, b: None)
    with pytest.raises(ConfigError, match="there is no setup"):
        trainguard.leakcheck(lambda a: None)
    with pytest.raises(ConfigError, match="setup returned None"):
        trainguard.leakcheck(lambda a: None, setup=lambda: None)
    with pytest.raises(ConfigError, match="must be callable"):
        trainguard.leakcheck(42)


def test_pytest_marker_fails_a_leaking_test_and_passes_a_clean_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        KEEP = []

        @pytest.mark.leakcheck(max_growth_per_iter="512KiB", max_iterations=60, max_time="20s")
        def test_leaks():
            KEEP.append(bytearray(2_000_000))

        @pytest.mark.leakcheck(max_growth_per_iter="512KiB", max_iterations=60, max_time="20s")
        def test_clean():
            x = bytearray(2_000_000)

        # the deprecated form still works, in its old unit (10^6 bytes), with a warning
        @pytest.mark.leakcheck(max_mb_per_iter=0.5, max_iterations=60, max_time="20s")
        def test_leaks_old_form():
            KEEP.append(bytearray(2_000_000))

        @pytest.mark.leakcheck(max_growth_per_iter="a lot")
        def test_bad_size():
            pass

        def test_fixture(leakcheck):
            # a step that allocates nothing, against a tolerance far above the noise: no leak
            report = leakcheck(lambda: None, max_iterations=3000, max_time="5s", tolerance="64KiB")
            assert report.verdict.value == "no_leak", report.reason
        """
    )
    result = pytester.runpytest_subprocess("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(["*leakcheck: memory grows faster than 512.0 KiB/iter*", "*verdict: leak*"])
    result.stdout.fnmatch_lines(["*leakcheck: memory grows faster than 488.3 KiB/iter*"])
    result.stdout.fnmatch_lines(["*max_mb_per_iter=0.5) is deprecated*max_growth_per_iter='0.5MB'*"])
    result.stdout.fnmatch_lines(["*test_bad_size*max_growth_per_iter='a lot' is not a size*"])
    # the failure is the report, not a traceback through pytest's and pluggy's hook machinery
    out = result.stdout.str()
    failure = out[out.index("test_leaks ___") : out.index("short test summary")]
    assert "pluggy" not in failure and "_hooks.py" not in failure and "hookwrapper" not in failure
    # one failing test's section is its report: a dozen lines (verdict, growth, counts, bytes in use)
    first = failure[: failure.index("test_leaks_old_form ___")]
    assert first.count("\n") < 20, first


def test_plugin_imports_nothing_heavy() -> None:
    code = "import sys, trainguard.integrations.pytest_plugin as p; print(sorted(m for m in ('numpy','scipy','torch','tensorflow','trainguard.leaks') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    assert out == "[]"
