"""The tier chooser and the refusals, for every platform (pure functions of the platform's name)."""

from __future__ import annotations

import pytest

from trainguard.exceptions import ConfigError
from trainguard.process import guarantees, refuse_linux_only, resolve_tracking


@pytest.mark.parametrize(
    ("requested", "platform", "tier"),
    [
        ("auto", "linux", "auto"),
        ("auto", "darwin", "portable"),
        ("auto", "freebsd14", "portable"),
        ("auto", "win32", "windows"),
        ("portable", "linux", "portable"),
        ("portable", "darwin", "portable"),
        ("cgroup", "linux", "cgroup"),
        ("subreaper", "linux", "subreaper"),
        ("windows", "win32", "windows"),
    ],
)
def test_each_platform_gets_its_tier(requested, platform, tier):
    assert resolve_tracking(requested, platform) == tier


@pytest.mark.parametrize(
    ("requested", "platform", "needle"),
    [
        (
            "cgroup",
            "darwin",
            "tree_tracking='cgroup' needs Linux (cgroup v2); on macOS use tree_tracking='auto' (the portable tier)",
        ),
        (
            "subreaper",
            "win32",
            "needs Linux (a child subreaper); on Windows use tree_tracking='auto' (the windows tier)",
        ),
        (
            "windows",
            "linux",
            "tree_tracking='windows' needs Windows (Job Objects); on Linux use 'auto' or 'portable'",
        ),
        ("portable", "win32", "on Windows use 'auto'"),
        (
            "proc",
            "linux",
            "tree_tracking='proc' is unknown: use one of 'auto', 'cgroup', 'subreaper', 'portable', 'windows'",
        ),
    ],
)
def test_a_tier_the_platform_lacks_is_refused_in_one_line(requested, platform, needle):
    with pytest.raises(ConfigError) as info:
        resolve_tracking(requested, platform)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_linux_only_features_are_refused_elsewhere_in_one_line():
    refuse_linux_only("allocator='jemalloc'", "LD_PRELOAD of a glibc allocator", "linux")  # allowed
    with pytest.raises(
        ConfigError, match=r"^allocator='jemalloc' works only on Linux \(LD_PRELOAD.*on macOS$"
    ):
        refuse_linux_only("allocator='jemalloc'", "LD_PRELOAD of a glibc allocator", "darwin")


def test_guarantees_say_what_is_exact_and_what_approximate():
    portable = {g.name: g.level for g in guarantees("portable")}
    assert portable["tree membership"] == "approximate" and portable["kill"] == "approximate"
    linux = {g.name: g.level for g in guarantees("auto", cgroup=True)}
    assert (
        linux["tree membership"] == "exact"
        and linux["kill"] == "exact"
        and linux["memory cap"] == "approximate"
    )
    windows = {g.name: g.level for g in guarantees("windows")}
    assert windows["memory cap"] == "exact" and windows["peak"] == "exact"
    assert {g.name for g in guarantees("auto", nvml_per_process=False) if g.level == "missing"} == {
        "GPU per process"
    }


def test_the_runner_refuses_a_tier_this_machine_lacks_before_any_worker():
    from trainguard.runner import Runner

    with pytest.raises(ConfigError, match="tree_tracking='windows' needs Windows"):
        Runner(store=None, tree_tracking="windows")


def test_doctor_lists_this_machines_guarantees(trainguard_cli):
    import json

    out = trainguard_cli("doctor", "--json")
    assert out.returncode == 0, out.stderr
    process = json.loads(out.stdout)["process"]
    assert process["tier"] == "linux"
    levels = {g["name"]: g["level"] for g in process["guarantees"]}
    assert set(levels) == {"tree membership", "kill", "memory cap", "peak", "GPU per process"}
    assert levels["memory cap"] == "approximate"
    assert {g["name"]: g["level"] for g in process["portable"]}["kill"] == "approximate"
    text = trainguard_cli("doctor").stdout
    assert "worker processes: the linux tier" in text and "with --tree-tracking" in text
