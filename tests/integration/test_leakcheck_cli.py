"""`trainguard leakcheck FILE.py:step` as a subprocess: verdicts, exit codes, JSON, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TARGETS = textwrap.dedent(
    """
    import os, time
    KEEP = []

    def setup():
        return 200_000

    def leak(n):
        KEEP.append(bytearray(n))
        time.sleep(0.005)

    def flat():
        x = bytearray(500_000)
        time.sleep(0.005)

    def two_args(a, b):
        pass

    COUNT = [0]

    def boom():
        COUNT[0] += 1
        if COUNT[0] == 5:
            raise RuntimeError("disk on fire")

    def slow():
        time.sleep(0.4)

    CRASH = [0]

    def segfault():
        CRASH[0] += 1
        KEEP.append(bytearray(100_000))
        time.sleep(0.005)
        if CRASH[0] == 300:
            import signal
            os.kill(os.getpid(), signal.SIGSEGV)

    if __name__ == "__main__":
        raise SystemExit("the __main__ block must not run")
    """
)

CHILDREN = textwrap.dedent(
    """
    import os, time
    STATE = {}
    CHUNK = 2 * 1024 * 1024

    def setup():
        # a buffer shared copy-on-write with a forked child, as a DataLoader's dataset is
        buf = bytearray(os.urandom(1024)) * (160 * 1024)
        r1, w1 = os.pipe(); r2, w2 = os.pipe()
        pid = os.fork()
        if pid == 0:
            i = 0
            while True:
                if not os.read(r1, 1):
                    os._exit(0)
                # writing makes the touched pages private to the child: its RSS does not change
                start = (i * CHUNK) % len(buf)
                buf[start:start + CHUNK] = b"x" * CHUNK
                i += 1
                os.write(w2, b"k")
        STATE.update(buf=buf, w=w1, r=r2, pid=pid)

    def step():
        os.write(STATE["w"], b"g")
        os.read(STATE["r"], 1)
        time.sleep(0.01)
    """
)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lk") / "targets.py"
    path.write_text(TARGETS)
    (path.parent / "children.py").write_text(CHILDREN)
    (path.parent / "broken.py").write_text("import not_a_module_anywhere\n")
    (path.parent / "nosetup.py").write_text(
        "KEEP = []\n\ndef step():\n    KEEP.append(bytearray(150_000))\n\ndef needs(x):\n    pass\n"
    )
    return path


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainguard", "leakcheck", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_leak_gives_exit_1_and_one_json_object(targets: Path) -> None:
    res = cli(f"{targets}:leak", "--setup", "setup", "--json", "--max-time", "15s")
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)  # nothing else on stdout
    for key in (
        "verdict",
        "slope_bytes_per_iter",
        "ci_low_bytes_per_iter",
        "ci_high_bytes_per_iter",
        "iterations",
        "warmup_iterations",
        "metric",
        "growth_by_kind",
        "reason",
    ):
        assert key in data
    assert data["verdict"] == "leak"
    # the allocator's count calls it within about 15 calls: its slope is the bytearray's; RSS,
    # over so few readings, also counts whole pages and the allocator's slack (+5 % here, +25 % before
    # the check warmed its own statistics up before its first reading)
    assert data["allocator"]["slope_bytes_per_iter"] == pytest.approx(200_000, rel=0.05)
    # 209-211 KB in 3 runs; 308-316 KB when the check's first look allocated inside the series
    assert 160_000 < data["slope_bytes_per_iter"] < 250_000
    assert data["ci_low_bytes_per_iter"] > 100_000 and data["ci_high_bytes_per_iter"] >= 200_000
    assert "must not run" not in res.stderr


@pytest.mark.slow
@pytest.mark.solo
def test_flat_gives_exit_0_and_a_table(targets: Path, tmp_path: Path) -> None:
    plot = tmp_path / "flat.png"
    res = cli(f"{targets}:flat", "--max-time", "10s", "--plot", str(plot))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no_leak" in res.stdout
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert f"plot written to {plot}" in res.stderr  # says where the file went


@pytest.mark.solo
def test_a_slow_step_has_rss_split_at_glibcs_heaps_in_the_table_and_json(targets: Path) -> None:
    # the readings split RSS at glibc's heaps on (almost) every call, slow readings (a loaded
    # machine) making the split sparser, never switching it off for the rest of the run (a loaded CI
    # run: 8 of 35 split, all at the start); what a reading costs is a bench's. The table's check
    # and the JSON's run at once: each sleeps 0.4 s a call, a few percent of a core between them
    table, as_json = (
        subprocess.Popen(
            [sys.executable, "-m", "trainguard", "leakcheck", f"{targets}:slow", *extra, "--max-time", "8s"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for extra in ((), ("--json",))
    )
    table_out, json_out = (proc.communicate(timeout=120)[0] for proc in (table, as_json))
    assert "heaps" in table_out and "RSS inside glibc's heaps" in table_out, table_out
    data = json.loads(json_out)
    alloc = data["allocator"]
    assert alloc["heaps_available"] is True and alloc["heaps_cost_per_reading_s"] is not None
    series = data["series"]
    split = [i for i, r in enumerate(series) if r.get("live_bytes") is not None]
    assert len(split) >= len(series) / 3 and split[-1] >= len(series) - 4, split
    rows = [series[i] for i in split]
    for r in rows:
        assert r["heap_resident_bytes"] + r["outside_heaps_bytes"] > 0
        assert r["live_bytes"] == r["outside_heaps_bytes"] + r["allocated_bytes"]


def test_step_that_raises_keeps_the_series_and_says_where(targets: Path) -> None:
    res = cli(f"{targets}:boom", "--json", "--max-time", "10s")
    assert res.returncode == 3
    data = json.loads(res.stdout)
    assert data["verdict"] == "inconclusive"
    assert data["error"]["iteration"] == 5 and data["error"]["exc_type"] == "RuntimeError"
    assert "disk on fire" in data["error"]["traceback"] and "disk on fire" in data["reason"]
    assert len(data["series"]) >= 2


def test_missing_setup_named_setup_is_a_warning_and_the_step_still_runs(
    targets: Path, bad_input_runs: list[dict]
) -> None:
    # tools pass `--setup setup` to every file alike; a file without one is still checked
    path = targets.parent / "nosetup.py"
    res = cli(f"{path}:step", "--setup", "setup", "--json", "--max-time", "10s", "--min-iterations", "20")
    assert res.returncode == 1, res.stderr
    assert "has no function 'setup'; running the step without setup" in res.stderr
    assert json.loads(res.stdout)["verdict"] == "leak"
    # a step that needs setup's value still fails as a usage error (run with the bad inputs below)
    needs = bad_input_runs[BAD_INPUT.index(NEEDS_SETUP)]
    assert needs["code"] == 2 and "requires the argument 'x'" in needs["stderr"]


def test_a_process_killed_by_a_signal_is_inconclusive_with_the_signal_and_series(targets: Path) -> None:
    res = cli(f"{targets}:segfault", "--json", "--max-time", "20s", "--min-iterations", "1000")
    assert res.returncode == 3, res.stdout + res.stderr[-2000:]
    data = json.loads(res.stdout)
    assert data["verdict"] == "inconclusive"
    assert "SIGSEGV" in data["reason"] and data["extra"]["signal"] == "SIGSEGV"
    assert len(data["series"]) >= 6 and data["iterations"] >= 200
    # the readings so far still measure the growth (100 KB a call)
    assert data["slope_bytes_per_iter"] == pytest.approx(100_000, rel=0.3)


def test_budget_too_short_is_inconclusive(targets: Path) -> None:
    # --min-calls 1: max_time alone (by default a slow step goes on to 100 calls past max_time)
    res = cli(f"{targets}:slow", "--json", "--max-time", "1s", "--min-calls", "1")
    assert res.returncode == 3
    data = json.loads(res.stdout)
    assert data["verdict"] == "inconclusive" and "raise max_time" in data["reason"]


# a file without `setup` given `--setup setup`, whose step needs setup's value
NEEDS_SETUP = (["{d}/nosetup.py:needs", "--setup", "setup"], "requires the argument 'x'")
BAD_INPUT = [
    (["{d}/nope.py:step"], "no such file"),
    (["{d}/broken.py:step"], "ModuleNotFoundError"),
    (["{t}:missing"], "has no step 'missing'"),
    (["{t}:leak", "--setup", "nosetup"], "has no setup 'nosetup'"),
    (["{t}:two_args"], "requires 2 arguments"),
    (["{t}:leak"], "requires the argument"),
    (["{t}:flat", "--metric", "vms"], "metric='vms' is unknown"),
    (["{t}:flat", "--max-iterations", "0"], "max_iterations=0"),
    (["{t}:flat", "--max-time", "soon"], "not a duration"),
    (["{t}"], "FILE.py:FUNCTION"),
    (["{t}:flat", "--plot", "{d}/x.gif"], ".png or .svg"),
    NEEDS_SETUP,
]

# Every bad command line through the CLI's entry point in ONE child interpreter (one start
# instead of eleven, about 2 CPU s each): each case's stdout and stderr are captured at the file
# descriptors, so output a grandchild or C code writes is seen as a separate run would see it.
_BAD_INPUT_CHILD = """
import json, os, sys, tempfile
from trainguard.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    files = [tempfile.TemporaryFile(mode="w+") for _ in range(2)]
    sys.stdout.flush(); sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(files[0].fileno(), 1); os.dup2(files[1].fileno(), 2)
    try:
        code = main(["leakcheck", *argv])
    except SystemExit as stop:  # argparse's usage errors
        code = stop.code
    finally:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
    texts = []
    for f in files:
        f.seek(0)
        texts.append(f.read())
    out.append({"code": code, "stdout": texts[0], "stderr": texts[1]})
print(json.dumps(out))
"""


def _argv(targets: Path, args: list[str]) -> list[str]:
    return [
        *[a.format(t=targets, d=targets.parent) for a in args],
        "--max-time" if "--max-time" not in args else "--min-iterations",
        "5s" if "--max-time" not in args else "1",
    ]


@pytest.fixture(scope="module")
def bad_input_runs(targets: Path) -> list[dict]:
    cases = json.dumps([_argv(targets, args) for args, _ in BAD_INPUT])
    res = subprocess.run(
        [sys.executable, "-c", _BAD_INPUT_CHILD, cases], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", range(len(BAD_INPUT)), ids=[m for _, m in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(bad_input_runs: list[dict], case: int) -> None:
    message = BAD_INPUT[case][1]
    res = bad_input_runs[case]
    assert res["code"] == 2, res["stdout"] + res["stderr"]
    lines = [ln for ln in res["stderr"].splitlines() if ln.startswith("trainguard leakcheck: error:")]
    assert len(lines) == 1 and message in lines[0], res["stderr"]
    assert res["stdout"] == ""


def test_bad_input_through_the_console_script_is_exit_2_and_one_line(targets: Path) -> None:
    # the cases above call the entry point in one interpreter; this one goes through
    # `python -m trainguard`, as a user does, so the exit status is the process's
    res = cli(*_argv(targets, ["{t}:flat", "--metric", "vms"]))
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("trainguard leakcheck: error:")]
    assert len(lines) == 1 and "metric='vms' is unknown" in lines[0], res.stderr
    assert res.stdout == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PSS needs /proc/PID/smaps_rollup")
def test_growth_in_a_forked_child_private_memory_is_a_leak_by_default_under_pss_and_rss(
    targets: Path,
) -> None:
    path = targets.parent / "children.py"
    # the default metric (auto) switches to the tree's PSS because the step has a child
    pss = json.loads(
        cli(
            f"{path}:step",
            "--setup",
            "setup",
            "--json",
            "--max-iterations",
            "60",
            "--max-time",
            "30s",
        ).stdout
    )
    assert pss["verdict"] == "leak", pss["reason"]
    assert pss["metric"] == "pss" and pss["extra"]["metric_requested"] == "auto"
    assert pss["slope_bytes_per_iter"] == pytest.approx(2 * 1024 * 1024, rel=0.35)
    rss = json.loads(
        cli(
            f"{path}:step",
            "--setup",
            "setup",
            "--metric",
            "rss",
            "--json",
            "--max-iterations",
            "60",
            "--max-time",
            "30s",
        ).stdout
    )
    # RSS sees it too: a fork that has not called exec is charged its private pages (USS), not its
    # statm (which counted the parent's pages again and stayed flat as they became the child's)
    assert rss["slope_bytes_per_iter"] == pytest.approx(pss["slope_bytes_per_iter"], rel=0.35), rss["reason"]
