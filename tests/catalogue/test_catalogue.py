"""The bad-input and fault catalogue: each row is one thing a user can get wrong or one fault a
trial can cause, run through the CLI (in-process with ``cli.main(argv)``, or as a subprocess where
the behaviour needs one) or through the Python API, with its expected outcome: the exit code (or
exception), a pattern its one-line message must match, and what must hold of the store afterwards
(``unchanged``: its rows are the same; ``absent``: no file was created).

Adding a case is one line in ``CLI_CASES`` or ``API_CASES``. Invariants checked for every CLI row:
no raw escape character reaches the output, an error (exit 2, 4, 5, 6, 7) is exactly one line
on stderr besides the progress said before the work (argparse's usage errors too: the line names
``--help``), and ``--json`` output is strict
JSON. docs/errors.md says what the rows cover.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _waits import process_starts, wait_for
from trainguard.cli import main
from trainguard.exceptions import (
    ConfigError,
    StoreError,
    UnitError,
)
from trainguard.store import Store

HERE = Path(__file__).parent
TRIALS = HERE / "catalogue_trials.py"
ERROR_CODES = {2, 4, 5, 6, 7}


@dataclass(frozen=True)
class Cli:
    """One CLI row. ``argv`` is formatted with the paths of :class:`Env` ({t}, {p}, {store}...)."""

    id: str
    argv: str
    code: int
    pattern: str
    checks: str = ""  # space-separated "unchanged:{store}", "absent:{fresh}", "json", "stored:NAME=STATUS", "alltrials:NAME=STATUS"
    stdin: str | None = None
    usage: bool = False  # an argparse error: one line that points to --help
    subprocess: bool = False
    env: str = ""  # "NAME=value ..." set for a subprocess row


def C(id: str, argv: str, code: int, pattern: str, checks: str = "", **kw: Any) -> Cli:  # noqa: A002
    return Cli(id, argv, code, pattern, checks, **kw)


R = "run {t}:echo --params {p} --store {fresh}"  # a valid run; rows append one bad flag
U = "unchanged:{store}"

# fmt: off
CLI_CASES: list[Cli] = [
    # -- units and flag values --------------------------------------------------------------------
    C("unit-memory-limit", R + " --memory-limit '4 potatoes'", 2, r"4 potatoes.*'4GB'", "absent:{fresh}"),
    C("unit-timeout", R + " --timeout soon", 2, r"'soon' is not a duration", "absent:{fresh}"),
    C("unit-recycle-above", R + " --recycle-above lots", 2, r"'lots' is not a size", "absent:{fresh}"),
    C("unit-negative-size", R + " --memory-limit=-5GB", 2, r"-5GB' is negative", "absent:{fresh}"),
    C("unit-soft-limit-no-unit", R + " --soft-limit 1.5", 2, r"soft_limit='1.5' has no unit: give a unit, such as '1.5GB'", "absent:{fresh}"),
    C("unit-memory-limit-no-unit", R + " --memory-limit 4096", 2, r"'4096' has no unit: give a unit, such as '4096GB'", "absent:{fresh}"),
    C("unit-recycle-above-no-unit", R + " --recycle-above 2", 2, r"'2' has no unit", "absent:{fresh}"),
    C("unit-memory-budget-no-unit", R + " --memory-budget 8", 2, r"'8' has no unit", "absent:{fresh}"),
    C("fit-no-unit", "fit {t}:echo --params {p} --memory-limit 2 --no-store", 2, r"'2' has no unit"),
    C("unit-result-size", R + " --max-result-size big", 2, r"'big' is not a size", "absent:{fresh}"),
    C("gpu-limit-without-nvml", R + " --gpu-memory-limit 2GB", 2, r"NVML|GPU", "absent:{fresh}"),
    C("workers-zero", R + " --workers 0", 2, r"--workers 0 must be at least 1", "absent:{fresh}"),
    C("workers-negative", R + " --workers -3", 2, r"--workers -3", "absent:{fresh}"),
    C("workers-not-int", R + " --workers two", 2, r"'two' is not a number of workers or 'auto'", usage=True),
    C("workers-auto-no-budget", R + " --workers auto", 2, r"workers='auto' has nothing to size from.*memory_budget", "absent:{fresh}"),
    C("memory-budget-unit", R + " --memory-budget lots", 2, r"'lots' is not a size", "absent:{fresh}"),
    C("peak-ratio-below-1", R + " --peak-ratio 0.5", 2, r"--peak-ratio 0.5 must be above 1", "absent:{fresh}"),
    C("retries-negative", R + " --retries -1", 2, r"retries", "absent:{fresh}"),
    C("retry-on-unknown", R + " --retry-on gremlins", 2, r"gremlins", "absent:{fresh}"),
    C("threads-zero", R + " --threads 0", 2, r"threads=0", "absent:{fresh}"),
    C("keras-backend-unknown", R + " --keras-backend theano", 2, r"theano.*tensorflow", "absent:{fresh}"),
    C("allocator-missing-so", R + " --allocator /nonexistent/lib.so", 2, r"does not exist", "absent:{fresh}"),
    C("allocator-unknown", R + " --allocator ptmalloc9", 2, r"ptmalloc9.*unknown", "absent:{fresh}"),
    C("preload-missing", R + " --preload no_such_module_xyz", 2, r"no_such_module_xyz", "absent:{fresh}"),
    C("max-trials-zero", R + " --max-trials 0", 2, r"--max-trials 0 must be at least 1", "absent:{fresh}"),
    C("unknown-flag", R + " --memroy-limit 4GB", 2, r"unrecognized arguments", usage=True),
    C("missing-params-flag", "run {t}:echo --store {fresh}", 2, r"--params", usage=True),
    C("unknown-command", "frobnicate", 2, r"invalid choice: 'frobnicate'", usage=True),
    C("fn-and-cmd-both", R + " --cmd echo", 2, r"a function .* or a program .*not both", "absent:{fresh}"),
    C("fn-and-cmd-neither", "run --params {p} --store {fresh}", 2, r"give what to run", "absent:{fresh}"),
    C("seed-negative", R + " --seed=-1", 2, r"seed=-1 must be a whole number", "absent:{fresh}"),
    C("on-oom-bogus", R + " --on-oom bogus", 2, r"--on-oom 'bogus' is not understood", "absent:{fresh}"),
    C("mixed-precision-bogus", R + " --mixed-precision bogus", 2, r"not a Keras dtype policy", "absent:{fresh}"),
    C("tf-memory-growth-maybe", R + " --tf-memory-growth maybe", 2, r"'maybe' is not true or false", usage=True),
    C("torch-fraction-2", R + " --torch-memory-fraction 2", 2, r"must be a fraction in \(0, 1\]", "absent:{fresh}"),
    C("report-unknown-run", "report nope --store {store}", 2, r"no run named 'nope'", U),
    C("report-missing-store", "report base --store {fresh}", 4, r"no store at", "absent:{fresh}"),
    C("report-missing-folder", "report base --store {store} -o {d}/no/r.html", 2, r"folder .* does not exist", U),
    C("fit-bad-unit", "fit {t}:echo --params {p} --memory-limit potatoes --no-store", 2, r"'potatoes' is not a size"),
    C("fit-without-limit", "fit {t}:echo --params {p} --no-store", 2, r"needs a hard limit"),
    C("compare-unknown-backend", "compare {t}:echo --keras-backend theano --store {fresh}", 2, r"unknown Keras backend 'theano'", "absent:{fresh}"),
    C("compare-too-few-trials", "compare {t}:echo --trials 0 --store {fresh}", 2, r"trials=0 must be a whole number >= 3", "absent:{fresh}"),
    C("leakcheck-json-and-bad-plot", "leakcheck {t}:echo --json --plot {d}/x.gif", 2, r"\.png or \.svg"),
    # -- what to run ----------------------------------------------------------------------------------
    C("fn-file-missing", "run missing.py:fn --params {p} --store {fresh}", 2, r"does not exist", "absent:{fresh}"),
    C("fn-no-colon", "run {t} --params {p} --store {fresh}", 2, r"is not a reference", "absent:{fresh}"),
    C("fn-not-defined", "run {t}:nothere --params {p} --store {fresh}", 2, r"defines no top-level 'nothere'"),
    C("fn-syntax-error", "run {d}/bad_syntax.py:f --params {p} --store {fresh}", 2, r"does not parse: line 1"),
    C("fn-not-python", "run {d}/notes.txt:f --params {p} --store {fresh}", 2, r"must be a \.py file"),
    C("fn-module-missing", "run no.such.module:f --params {p} --store {fresh}", 2, r"cannot be found"),
    C("fn-import-fails-escaped", "run {d}/load_fails.py:f --params {p} --store {fresh}", 2, r"\\x1b\]0;owned"),
    C("fn-starts-a-runner", "run {d}/recursive.py:train --params {p} --store {fresh}", 2, r'if __name__ == "__main__"'),
    # -- params ------------------------------------------------------------------------------------------
    C("params-missing", "run {t}:echo --params nope.yaml --store {fresh}", 2, r"'nope.yaml' does not exist"),
    C("params-folder", "run {t}:echo --params {d} --store {fresh}", 2, r"is a folder"),
    C("params-bad-yaml", "run {t}:echo --params {d}/bad.yaml --store {fresh}", 2, r"not valid YAML at line 2"),
    C("params-bad-json", "run {t}:echo --params {d}/bad.json --store {fresh}", 2, r"not valid JSON at line 1, column 13"),
    C("params-empty-list", "run {t}:echo --params {d}/empty_list.json --store {fresh}", 2, r"list of params is empty", "absent:{fresh}"),
    C("params-empty-map", "run {t}:echo --params {d}/empty_map.json --store {fresh}", 2, r"empty mapping", "absent:{fresh}"),
    C("params-empty-axis", "run {t}:echo --params {d}/empty_axis.yaml --store {fresh}", 2, r"'lr' has an empty list"),
    C("params-empty-file", "run {t}:echo --params {d}/empty.yaml --store {fresh}", 2, r"no params"),
    C("params-ints", "run {t}:echo --params {d}/ints.json --store {fresh}", 2, r"item 0 is a int, not an object"),
    C("params-scalar", "run {t}:echo --params {d}/scalar.yaml --store {fresh}", 2, r"not a str"),
    C("params-not-utf8", "run {t}:echo --params {d}/latin1.json --store {fresh}", 2, r"cannot be read"),
    C("params-not-json-type", "run {t}:echo --params {d}/dates.yaml --store {fresh}", 2, r"date.*cannot store", "absent:{fresh}"),
    C("params-grid-10-12", "run {t}:echo --params {d}/huge.yaml --store {fresh}", 2, r"1,000,000,000,000 trials", "absent:{fresh}"),
    C("params-grid-10-7", "run {t}:echo --params {d}/ten_million.yaml --store {fresh}", 2, r"10,000,000 trials \(10 x 10"),
    C("params-over-max-trials", "run {t}:echo --params {d}/six.json --max-trials 5 --store {fresh}", 2, r"6 trials, more than the cap of 5"),
    C("params-stdin-empty", "run {t}:echo --params - --store {fresh}", 2, r"stdin: no params", stdin=""),
    C("params-stdin-empty-list", "run {t}:echo --params - --store {fresh}", 2, r"stdin: the list of params is empty", stdin="[]"),
    C("params-stdin-ok", "run {t}:echo --params - --store {fresh} --json", 0, r'"ran": 2', "json", stdin='{"x": [1, 2]}'),
    C("params-process-substitution", "run {t}:echo --params <(echo '[{{\"x\": 5}}]') --store {fresh} --json", 0, r'"x": 5', "json", subprocess=True),
    # -- stores ------------------------------------------------------------------------------------------
    C("store-not-trainguard", "run {t}:echo --params {p} --store {junk}", 4, r"not a trainguard store", "unchanged:{junk}"),
    C("store-empty-file", "runs --store {empty}", 4, r"empty file, not a trainguard store", "unchanged:{empty}"),
    C("store-is-a-folder", "run {t}:echo --params {p} --store {d}", 2, r"is a folder: pass a file path"),
    C("store-missing-folder", "run {t}:echo --params {p} --store {d}/no/such/s.db", 2, r"folder .* does not exist: create it", "absent:{d}/no"),
    C("store-read-only-place", "run {t}:echo --params {p} --store /proc/trainguard-catalogue.db", 4, r"/proc"),
    C("store-other-schema", "runs --store {schema}", 4, r"schema 999; this trainguard reads schema 1: upgrade", "unchanged:{schema}"),
    C("store-same-name-other-params", "run {t}:echo --params {d}/six.json --store {store} --name base", 2, r"already exists.*different params", U),
    C("run-name-empty", "run {t}:echo --params {p} --store {store} --name ''", 2, r"name must be a non-empty", U),
    C("run-name-newline", "run {t}:echo --params {p} --store {store} --name 'a\nb'", 2, r"one-line", U),
    C("runs-missing-store", "runs --store {fresh}", 4, r"no store at", "absent:{fresh}"),
    C("show-missing-store", "show base --store {fresh}", 4, r"no store at", "absent:{fresh}"),
    C("show-unknown-run", "show nope --store {store}", 2, r"no run named 'nope'.*known runs: base", U),
    C("show-unknown-escape-name", "show 'e\x1b[2Jx' --store {store}", 2, r"no run named 'e\\x1b\[2Jx'", U),
    C("show-negative-events", "show base --store {store} --events -1", 2, r"--events and --max-trials must be >= 0", U),
    C("show-junk-store", "show base --store {junk}", 4, r"not a trainguard store", "unchanged:{junk}"),
    C("show-ok-json-strict", "show base --store {store} --json", 0, r'"name": "base"', "json " + U),
    C("runs-ok-json-strict", "runs --store {store} --json", 0, r'"base"', "json " + U),
    # -- report ------------------------------------------------------------------------------------------
    C("report-junk-store", "report base --store {junk} -o {d}/r.html", 4, r"not a trainguard store", "unchanged:{junk}"),
    C("report-unknown-escape-name", "report 'e\x1b[2Jx' --store {store} -o {d}/r.html", 2, r"no run named 'e\\x1b\[2Jx'", U),
    C("report-output-is-a-folder", "report base --store {store} -o {d}", 2, r"is a folder", U),
    # -- leakcheck ---------------------------------------------------------------------------------------
    C("leakcheck-missing-file", "leakcheck missing.py:step", 2, r"missing\.py"),
    C("leakcheck-no-colon", "leakcheck {t}", 2, r"must be FILE\.py:FUNCTION"),
    C("leakcheck-bad-time", "leakcheck {t}:echo --max-time forever", 2, r"'forever' is not a duration"),
    C("leakcheck-bad-metric", "leakcheck {t}:echo --metric vibes", 2, r"vibes"),
    C("leakcheck-bad-tolerance", "leakcheck {t}:echo --tolerance '4 potatoes'", 2, r"4 potatoes"),
    C("leakcheck-min-calls-zero", "leakcheck {t}:echo --min-calls 0", 2, r"min_calls=0 must be at least 1"),
    C("leakcheck-plot-gif", "leakcheck {t}:echo --plot {d}/x.gif", 2, r"\.png or \.svg"),
    C("leakcheck-plot-missing-folder", "leakcheck {t}:echo --plot {d}/no/x.png", 2, r"does not exist"),
    C("leakcheck-step-not-defined", "leakcheck {t}:nothere", 2, r"nothere"),
    C("leakcheck-step-sys-exit", "leakcheck {t}:step_exits --json", 3, r'"verdict": "inconclusive".*SystemExit', "json"),
    C("leakcheck-step-keyboard-interrupt", "leakcheck {t}:step_interrupts --json", 3, r'"verdict": "inconclusive".*KeyboardInterrupt', "json"),
    C("leakcheck-zero-iterations", "leakcheck {t}:echo --max-iterations 0", 2, r"max_iterations|iterations"),
    C("demo-one-trial", "demo --trials 1", 2, r"trials must be an int >= 2"),
    C("demo-junk-store", "demo --trials 2 --store {junk}", 4, r"not a trainguard store", "unchanged:{junk}"),
    # -- faults in trials: the run goes on, the store says why -----------------------------------------
    C("trial-raises-escape", "run {t}:raise_escape --params {p} --store {fresh} --name f", 1, r"FAILED: ValueError: \\x1b\[2J", "stored:f=failed"),
    C("trial-returns-escape", "run {t}:return_escape --params {p} --store {fresh} --json", 0, r"\\u001b\[31mred", "json"),
    C("trial-returns-nan", "run {t}:nan --params {p} --store {fresh} --json", 0, r'"loss": null', "json"),
    C("trial-not-json", "run {t}:not_json --params {p} --store {fresh} --name f", 1, r"not_serializable", "stored:f=failed"),
    C("trial-result-too-big", "run {t}:big --params {p} --store {fresh} --name f --max-result-size 1KB", 1, r"FAILED", "stored:f=failed"),
    C("trial-sys-exit", "run {t}:exits --params {p} --store {fresh} --name f", 1, r"FAILED", "stored:f=failed"),
    C("trial-segfault", "run {t}:segfault --params {p} --store {fresh} --name f", 1, r"FAILED: crashed.*SIGSEGV", "stored:f=failed"),
    C("trial-timeout", "run {t}:sleeps --params {p} --store {fresh} --name f --timeout 1s", 1, r"FAILED: timeout", "stored:f=failed"),
    C("trial-memory-error", "run {t}:memory_error --params {p} --store {fresh} --name f", 1, r"MemoryError", "stored:f=failed"),
    C("trial-pipe-garbage", "run {t}:write_garbage --params {p} --store {fresh} --name f", 1, r"FAILED", "stored:f=failed"),
    C("stop-on-error", "run {t}:fails_then_ok --params {d}/three.json --store {fresh} --name f --stop-on-error --workers 1", 1, r"on_error='stop'"),
    C("run-locked", "run {t}:echo --params {p} --store {locked} --name held", 7, r"being run by another supervisor \(pid \d+"),
    C("broken-pipe-keeps-run", "run {t}:echo --params {d}/three.json --store {fresh} --name piped", 0, r"", "stored:piped=completed", subprocess=True),
    C("closed-stdout-show", "show base --store {store} | true; exit ${{PIPESTATUS[0]}}", 141, r"^$", U, subprocess=True),
    C("closed-stdout-doctor", "doctor | true; exit ${{PIPESTATUS[0]}}", 141, r"^$", subprocess=True),
    C("temp-files-private-and-gone", "run {t}:echo --params {p} --store {fresh} && test -z \"$(ls -A {d}/tmp)\"", 0, r"1 ran now", subprocess=True, env="TMPDIR={d}/tmp"),
    # -- smaller edges of a day of hostile use (issue 23) -------------------------------------------------
    C("store-is-a-fifo-run", R.replace("{fresh}", "{d}/fifo.db"), 2, r"store .*fifo\.db is a FIFO \(named pipe\), not a file"),
    C("store-is-a-fifo-runs", "runs --store {d}/fifo.db", 2, r"is a FIFO \(named pipe\), not a file"),
    C("store-is-dev-null", "runs --store /dev/null", 2, r"/dev/null is a character device, not a file"),
    C("run-name-not-utf8", R + " --name '\udcff'", 2, r"run name '\\xff' is not UTF-8 text \(byte 0xff at position 0\)", "absent:{fresh}"),
    C("show-name-not-utf8", "show 'a\udcff' --store {store}", 2, r"no run named 'a\\udcff'", U),
    C("fn-path-not-utf8", "run {d}/t\udcff.py:echo --params {p} --store {fresh}", 2, r"function '.*t\\xff\.py:echo' is not UTF-8 text", "absent:{fresh}"),
    C("allocator-path-with-space", R + " --allocator '{d}/my libs/liba.so'", 2, r"has a space or colon in its path, which LD_PRELOAD cannot hold", "absent:{fresh}"),
    C("max-trials-above-ceiling", "run {t}:echo --params {d}/ten_million.yaml --max-trials 20000000 --store {fresh}", 2, r"--max-trials 20,000,000 is above the most one run can hold, 1,000,000", "absent:{fresh}"),
    C("params-nested-5000-json", "run {t}:echo --params {d}/deep.json --store {fresh}", 2, r"deep\.json: the params are nested too deep to read", "absent:{fresh}"),
    C("params-nested-5000-yaml", "run {t}:echo --params {d}/deep.yaml --store {fresh}", 2, r"deep\.yaml: the params are nested too deep to read", "absent:{fresh}"),
    # -- a full disk (a 4 MiB tmpfs mounted at {full} for the row) -----------------------------------
    C("disk-full-checkpoint", "run {t}:big_checkpoint --params {d}/big_checkpoint.json --store {full}/c.db --name full", 4, r"run full stopped: the disk under .*c\.db\.checkpoints \(the run's checkpoints\) filled up while trial 0 wrote its checkpoint \(\d+(\.\d+)? [KM]?i?B free of 4\.0 MiB\): free space there.*resume", "status:{full}/c.db=full=disk_full nopartial:{full}"),
    C("disk-full-store", "run {t}:fills_disk --params - --store {full}/s.db --name fill --no-progress", 4, r"run fill stopped: the disk under .* \(the store .*s\.db\) is full \(0 B free of 4\.0 MiB\): free space there", "status:{full}/s.db=fill=disk_full nopartial:{full}", stdin='[{{"x": 0, "filler": "{full}/filler"}}, {{"x": 1, "filler": "{full}/filler"}}, {{"x": 2, "filler": "{full}/filler"}}]'),
    C("broken-pipe-printing-trials", "run {t}:prints --params {d}/six.json --store {fresh} --name piped", 0, r"", "stored:piped=completed alltrials:piped=ok", subprocess=True),
    # -- a hostile local user on a shared machine (issue 34): links, stores and trackers ----------------
    C("report-output-planted-link", "report base --store {store} -o {d}/planted.html", 2, r"planted\.html: it is a symbolic link that is owned by uid 65534 .*remove it", "unchanged:{d}/victim.txt " + U),
    C("leakcheck-html-planted-link", "leakcheck {t}:echo --html {d}/planted.html", 2, r"symbolic link that is owned by uid 65534", "unchanged:{d}/victim.txt"),
    C("leakcheck-plot-planted-link", "leakcheck {t}:echo --plot {d}/planted.png", 2, r"cannot write the plot to .*planted\.png: it is a symbolic link", "unchanged:{d}/victim.txt"),
    C("show-store-folder-others-write", "show base --store {d}/shared/runs.db", 4, r"refusing store .*its folder .*shared is owned by uid 65534 .*folder only you can write", "unchanged:{d}/shared/runs.db"),
    C("run-slurm-folder-cannot-be-made", "run {t}:echo --params {p} --store {store} --name slurmproc --backend slurm --slurm folder=/proc/nope", 2, r"(slurm folder=/proc/nope cannot hold the pilot jobs: it cannot be made .*folder of your own|needs Slurm, and there is no sbatch)", U),
    C("run-slurm-without-backend", R + " --slurm partition=gpu", 2, r"--slurm is for --backend slurm", "absent:{fresh}"),
    C("run-address-without-ray", R + " --address auto", 2, r"--address and --resources are for --backend ray", "absent:{fresh}"),
    C("run-ray-port-out-of-range", R + " --backend ray --address 127.0.0.1:99999", 2, r"the port 99999 is not a TCP port", "absent:{fresh}"),
    C("run-slurm-option-set-by-trainguard", R + " --backend slurm --slurm job_name=x", 2, r"slurm job_name= is set by trainguard", "absent:{fresh}"),
    C("run-store-folder-others-write", "run {t}:echo --params {p} --store {d}/shared/runs.db --name base", 4, r"refusing store .*its folder .*shared", "unchanged:{d}/shared/runs.db"),
    C("show-store-world-writable", "show base --store {d}/ww.db", 4, r"refusing store .*ww\.db: the file has mode 0666, which lets every user write it", "unchanged:{d}/ww.db"),
    C("export-refused-port", "export base --store {store} --to mlflow --tracking-uri http://127.0.0.1:9", 2, r"cannot reach the MLflow tracking server at http://127\.0\.0\.1:9 \(connection refused\)", U),
    C("export-unknown-scheme", "export base --store {store} --to mlflow --tracking-uri bogus://x", 2, r"scheme 'bogus', which MLflow does not open", U),
    C("export-no-host", "export base --store {store} --to mlflow --tracking-uri http://", 2, r"tracking URI 'http://' names no host", U),
    # -- which runs the peak model learns from (issue 34) ---------------------------------------------
    C("predict-from-unknown-run", "run {t}:echo --params {p} --store {store} --name seeded --predict-from nope", 2, r"predict_from='nope' is not a run in .*base\.db \(its runs: 'base'\): `trainguard runs --store", U),
    C("predict-from-missing-store", R + " --predict-from base", 2, r"predict_from='base' is not a run in .*fresh-\d+\.db \(it has no runs yet\)", "absent:{fresh}"),
    C("predict-from-with-no-predict", R + " --no-predict --predict-from base", 2, r"--predict-from 'base' seeds the peak model and --no-predict turns it off: give one of them", "absent:{fresh}"),
]

# -- the API --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Api:
    id: str
    call: Callable[[Any], Any]
    exc: type[BaseException]
    pattern: str


def _typed(kind, **kw):
    import trainguard

    return getattr(trainguard, kind)(**kw)


def _runner(**kw):
    from trainguard import Runner

    return Runner(**kw)


def _policy(**kw):
    from trainguard import Policy

    return Policy(**kw)


def _map(env, params, fn=None, name="api"):
    from trainguard import Runner

    with Runner(store=env.fresh()) as runner:
        return runner.map(fn or f"{TRIALS}:echo", params, name=name)


def _map_seeded(env, predict_from, store="", predict_peaks=True):
    """A run of the catalogue's store that names ``predict_from`` (the store holds run 'base')."""
    from trainguard import Policy, Runner

    policy = Policy(memory_limit="2GB", predict_peaks=predict_peaks)
    with Runner(store=env.store if store == "" else store, policy=policy) as runner:
        return runner.map(f"{TRIALS}:echo", [{"x": 1}], name="seeded", predict_from=predict_from)


def _nested(depth):
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _share(arrays):
    import trainguard

    return trainguard.share(arrays)


def _hp_search(**kw):
    """trainguard.transformers.hyperparameter_search with one bad argument (checked before any
    study or worker starts, and without importing transformers)."""
    import trainguard.transformers

    args = {"trainer_factory": f"{TRIALS}:echo", "hp_space": f"{TRIALS}:echo", "n_trials": 2, **kw}
    return trainguard.transformers.hyperparameter_search(**args)


def _stored_error(env, error):
    """A store whose failed trial's error column holds ``error`` (an old or edited store's), read."""
    from trainguard.outcomes import Failure

    path = env.fresh()
    with Store(path) as store:
        run = store.begin_run("r", "m:f", [{}], {})
        store.finish_trial(run.run_id, 0, status="failed", value=None, error=Failure("exception", "boom"),
                           attempts=1, peak_rss_bytes=None, worker_id=None, duration_s=None)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE trials SET error_json=?", (json.dumps(error),))
    with Store(path, readonly=True) as store:
        return store.trials(run.run_id)


def _finish_with_dict(env):
    with Store(env.fresh()) as store:
        run = store.begin_run("r", "m:f", [{}], {})
        store.finish_trial(run.run_id, 0, status="failed", value=None, error={"status": "exception"},
                           attempts=1, peak_rss_bytes=None, worker_id=None, duration_s=None)


def _leakcheck(step, **kw):
    import trainguard

    return trainguard.leakcheck(step, **kw)


API_CASES: list[Api] = [
    Api("runner-workers-zero", lambda e: _runner(workers=0), ConfigError, r"workers=0"),
    Api("runner-workers-str", lambda e: _runner(workers="2"), ConfigError, r"workers='2'"),
    Api("runner-threads-zero", lambda e: _runner(threads=0), ConfigError, r"threads=0"),
    Api("runner-auto-no-budget", lambda e: _runner(workers="auto"), ConfigError, r"workers='auto' has nothing to size from"),
    Api("runner-budget-zero", lambda e: _runner(memory_budget=0), ConfigError, r"memory_budget=0 must be a size above 0"),
    Api("runner-keras-backend", lambda e: _runner(keras_backend="theano"), ConfigError, r"theano"),
    Api("runner-allocator", lambda e: _runner(allocator="ptmalloc9"), ConfigError, r"ptmalloc9"),
    Api("runner-sample-interval", lambda e: _runner(sample_interval="0s"), ConfigError, r"sample_interval"),
    Api("runner-result-cap", lambda e: _runner(max_result_bytes="huge"), UnitError, r"'huge' is not a size"),
    Api("runner-env", lambda e: _runner(env={"A": 1}), ConfigError, r"env must be a mapping of strings"),
    Api("runner-gpus-empty", lambda e: _runner(gpus=[]), ConfigError, r"gpus=\[\]"),
    Api("runner-fresh-not-bool", lambda e: _runner(fresh="yes"), ConfigError, r"fresh='yes' must be True or False"),
    Api("policy-memory-unit", lambda e: _policy(memory_limit="4 potatoes"), UnitError, r"4 potatoes"),
    Api("policy-timeout-unit", lambda e: _policy(timeout="soon"), UnitError, r"soon"),
    Api("policy-retries", lambda e: _policy(retries=-1), ConfigError, r"retries"),
    Api("policy-on-error", lambda e: _policy(on_error="explode"), ConfigError, r"explode"),
    Api("policy-retry-on", lambda e: _policy(retry_on=("gremlins",)), ConfigError, r"gremlins"),
    Api("map-params-string", lambda e: _map(e, "abc"), ConfigError, r"params must be a list of dicts"),
    Api("map-params-ints", lambda e: _map(e, [1, 2]), ConfigError, r"params\[0\] is a int"),
    Api("map-params-int-key", lambda e: _map(e, [{1: 2}]), ConfigError, r"non-string key 1"),
    Api("map-params-object", lambda e: _map(e, [{"a": object()}]), ConfigError, r"cannot store"),
    Api("map-name-empty", lambda e: _map(e, [{}], name=" "), ConfigError, r"name must be a non-empty"),
    Api("map-fn-not-callable", lambda e: _map(e, [{}], fn=42), ConfigError, r"fn must be a callable"),
    Api("map-fn-module-missing", lambda e: _map(e, [{}], fn="no_such_mod_q:f"), ConfigError, r"cannot be found"),
    Api("leakcheck-not-callable", lambda e: _leakcheck(42), ConfigError, r"must be callable"),
    Api("leakcheck-min-calls-str", lambda e: _leakcheck(lambda: None, min_calls="many"), ConfigError, r"min_calls='many' must be a whole number"),
    Api("api-leakcheck-bad-time", lambda e: _leakcheck(lambda: None, max_time="forever"), UnitError, r"forever"),
    Api("scope-bad-unit", lambda e: __import__("trainguard").scope(max_rss_growth="4 potatoes"), UnitError, r"4 potatoes"),
    Api("parse-size-negative", lambda e: __import__("trainguard").parse_size(-1), UnitError, r"is negative"),
    Api("parse-size-no-unit", lambda e: __import__("trainguard").parse_size("1.5"), UnitError, r"'1.5' has no unit: give a unit, such as '1.5GB'"),
    Api("parse-size-fraction-of-byte", lambda e: __import__("trainguard").parse_size(1.5), UnitError, r"1.5 is a fraction of a byte"),
    Api("policy-memory-no-unit", lambda e: _policy(memory_limit="4"), UnitError, r"memory_limit='4' has no unit"),
    Api("runner-budget-no-unit", lambda e: _runner(memory_budget="8"), UnitError, r"memory_budget='8' has no unit"),
    Api("runner-result-cap-fraction", lambda e: _runner(max_result_bytes=1000.5), UnitError, r"fraction of a byte"),
    Api("parse-duration-unit", lambda e: __import__("trainguard").parse_duration("1 fortnight"), UnitError, r"fortnight"),
    Api("store-junk", lambda e: Store(e.junk), StoreError, r"not a trainguard store"),
    Api("store-readonly-missing", lambda e: Store(e.fresh(), readonly=True), StoreError, r"no store at"),
    Api("store-run-name-not-utf8", lambda e: Store(e.fresh()).begin_run("r\udcff", "m:f", [{}], {}), ConfigError, r"run name 'r\\xff' is not UTF-8"),
    Api("map-name-not-utf8", lambda e: _map(e, [{}], name="\udcfe"), ConfigError, r"run name '\\xfe' is not UTF-8 text"),
    Api("map-params-nested-5000", lambda e: _map(e, [{"x": _nested(5000)}]), ConfigError, r"params\[0\] is nested too deep to store as JSON"),
    Api("runner-allocator-space", lambda e: _runner(allocator=str(e.d / "my libs" / "liba.so")), ConfigError, r"space or colon"),
    Api("share-masked-array", lambda e: _share({"m": __import__("numpy").ma.array([1, 2], mask=[0, 1])}), ConfigError, r"'m' is a masked array.*without its mask"),
    Api("share-matrix", lambda e: _share({"m": __import__("numpy").matrix([[1, 2]])}), ConfigError, r"'m' is an np\.matrix.*\* multiplies element-wise"),
    Api("share-key-101-letters", lambda e: _share({"k" * 101: __import__("numpy").zeros(2)}), ConfigError, r"\(101 characters\) cannot name a file: use at most 100"),
    Api("store-bad-run-name", lambda e: Store(e.fresh()).begin_run("a\nb", "m:f", [{}], {}), ConfigError, r"one-line"),
    Api("store-error-message-a-list", lambda e: _stored_error(e, {"status": "exception", "message": ["boom"]}), StoreError, r"a trial's stored error is malformed: its 'message' is list \['boom'\], not text"),
    Api("store-error-without-status", lambda e: _stored_error(e, {"message": "boom"}), StoreError, r"stored error is malformed: its 'status' is missing"),
    Api("store-finish-error-a-dict", _finish_with_dict, ConfigError, r"error must be a trainguard\.Failure or None, not dict"),
    Api("magic-out-not-a-name", lambda e: __import__("trainguard.notebook").notebook.parse_options("--out 'model weights'"), ConfigError, r"--out takes variable names, such as --out model"),
    Api("magic-out-no-value", lambda e: __import__("trainguard.notebook").notebook.parse_options("--out"), ConfigError, r"--out needs a value, such as --out model"),
    Api("map-predict-from-unknown", lambda e: _map_seeded(e, "nope"), ConfigError, r"predict_from='nope' is not a run in .*\(its runs: 'base'\)"),
    Api("map-predict-from-no-store", lambda e: _map_seeded(e, "base", store=None), ConfigError, r"predict_from='base' reads that run's trials from the store, and this runner has none"),
    Api("map-predict-from-predictions-off", lambda e: _map_seeded(e, "base", predict_peaks=False), ConfigError, r"predict_from='base' seeds the peak model and Policy\(predict_peaks=False\) turns it off"),
    Api("map-predict-from-not-a-name", lambda e: _map_seeded(e, 7), ConfigError, r"predict_from must name a run of the store, such as 'sweep1', not 7"),
    Api("magic-unknown-option", lambda e: __import__("trainguard.notebook").notebook.parse_options("--outs model"), ConfigError, r"has no option '--outs'.*--out"),
    Api("hp-search-n-trials-zero", lambda e: _hp_search(n_trials=0), ConfigError, r"n_trials=0 must be a whole number >= 1, such as 20"),
    Api("hp-search-direction", lambda e: _hp_search(direction="down"), ConfigError, r"direction='down' must be 'minimize' or 'maximize'"),
    Api("hp-search-guard-not-dict", lambda e: _hp_search(guard="4GB"), ConfigError, r"guard must be a dict of options such as \{'memory_limit': '4GB'\}"),
    Api("hp-search-factory-not-callable", lambda e: _hp_search(trainer_factory=42), ConfigError, r"trainer_factory must be a callable params -> transformers.Trainer or a 'file.py:function' reference, not int"),
    Api("hp-search-hp-space-missing-file", lambda e: _hp_search(hp_space=str(e.d / "no_such_space.py") + ":hp_space"), ConfigError, r"no_such_space.py' does not exist"),
    Api("ray-backend-port", lambda e: _typed("RayBackend", address="127.0.0.1:99999"), ConfigError, r"the port 99999 is not a TCP port \(1-65535\)"),
    Api("ray-backend-resources", lambda e: _typed("RayBackend", resources={"GPU": "one"}), ConfigError, r"resources: GPU='one' must be a number >= 0"),
    Api("ray-backend-connect-timeout", lambda e: _typed("RayBackend", connect_timeout=-1), ConfigError, r"RayBackend\(connect_timeout=-1\) must be a number of seconds above 0"),
    Api("slurm-backend-not-a-string", lambda e: _typed("SlurmBackend", partition=5), ConfigError, r"SlurmBackend\(partition=5\) must be a string, such as partition='gpu'"),
    Api("slurm-backend-option-twice", lambda e: _typed("SlurmBackend", options={"mem": "4G"}), ConfigError, r"mem is a parameter of its own: write SlurmBackend\(mem=...\)"),
    Api("slurm-backend-workers-per-pilot", lambda e: _typed("SlurmBackend", workers_per_pilot=0), ConfigError, r"workers_per_pilot=0 must be a whole number >= 1"),
    Api("slurm-backend-fixed-option", lambda e: _typed("SlurmBackend", options={"nodes": 2}), ConfigError, r"slurm nodes= is set by trainguard"),
    Api("runner-keyword-beside-typed-backend", lambda e: _runner(backend=_typed("RayBackend"), resources={"CPU": 2}), ConfigError, r"resources= is given beside backend=RayBackend\(...\): give it inside RayBackend"),
    Api("runner-backend-unknown", lambda e: _runner(backend="kubernetes"), ConfigError, r"backend='kubernetes' is not a backend: use 'local'"),
]
# fmt: on


# -- the environment every row runs in ---------------------------------------------------------------


class Env:
    def __init__(self, d: Path) -> None:
        self.d = d
        self._n = 0
        self.t = str(TRIALS)
        self.p = str(d / "p.json")
        self.store = str(d / "base.db")
        self.junk = str(d / "junk.db")
        self.empty = str(d / "empty.db")
        self.schema = str(d / "schema.db")
        self.locked = str(d / "locked.db")

    def fresh(self) -> str:
        self._n += 1
        return str(self.d / f"fresh-{self._n}.db")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    d = tmp_path_factory.mktemp("catalogue")
    e = Env(d)
    files = {
        "p.json": '[{"x": 1}]',
        "three.json": json.dumps([{"x": 0}, {"x": 1}, {"x": 2}]),
        "six.json": json.dumps([{"x": i} for i in range(6)]),
        "bad.yaml": "lr: [0.1, 0.2\nunits: 3\n",
        "bad.json": '{"lr": [0.1,, 0.2]}',
        "empty_list.json": "[]",
        "empty_map.json": "{}",
        "empty_axis.yaml": "lr: []\n",
        "empty.yaml": "",
        "ints.json": "[1, 2]",
        "scalar.yaml": "just a string\n",
        "dates.yaml": "d: [2024-01-01]\n",
        "huge.yaml": "".join(f"k{i}: [{', '.join(map(str, range(10)))}]\n" for i in range(12)),
        "ten_million.yaml": "".join(f"k{i}: [{', '.join(map(str, range(10)))}]\n" for i in range(7)),
        "bad_syntax.py": "def f(:\n    pass\n",
        "notes.txt": "not python\n",
        "load_fails.py": 'raise RuntimeError("\\x1b]0;owned\\x07 import failed")\n\ndef f(params):\n    return 1\n',
        "big_checkpoint.json": '[{"mb": 8}]',
        "recursive.py": (
            "import trainguard\n\ndef train(params):\n    return params\n\n"
            "with trainguard.Runner(store=None) as runner:\n    runner.map(train, [{'a': 1}])\n"
        ),
    }
    for name, text in files.items():
        (d / name).write_text(text)
    (d / "latin1.json").write_bytes(b'[{"name": "\xff\xfe caf\xe9"}]')
    (d / "deep.json").write_text('[{"x": ' + "[" * 5000 + "]" * 5000 + "}]")
    (d / "deep.yaml").write_text("x: " + "[" * 5000 + "]" * 5000 + "\n")
    os.mkfifo(d / "fifo.db")
    (d / "my libs").mkdir()
    (d / "my libs" / "liba.so").write_bytes(b"\x7fELF")
    (d / "t\udcff.py").write_text(TRIALS.read_text())  # a file name with the byte 0xff
    (d / "junk.db").write_bytes(b"this is not a database, it is a shopping list\n" * 40)
    (d / "empty.db").write_bytes(b"")
    (d / "tmp").mkdir()
    _hostile_neighbour(d)
    with Store(e.store) as store:
        run = store.begin_run("base", f"{TRIALS}:echo", [{"x": 1}], {})
        store.finish_run(run.run_id, "completed")
    with Store(e.schema) as store:
        pass
    conn = sqlite3.connect(e.schema)
    conn.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    return e


def _hostile_neighbour(d: Path) -> None:
    """What nobody (uid 65534) leaves for issue 34's rows: links to a file of ours, a folder of
    theirs that every user can write holding a store, and a store every user can write."""
    (d / "victim.txt").write_text("ours\n")
    for name in ("planted.html", "planted.png"):
        (d / name).symlink_to(d / "victim.txt")
        os.lchown(d / name, 65534, 65534)
    shared = d / "shared"
    shared.mkdir()
    with Store(shared / "runs.db") as store:
        store.finish_run(store.begin_run("base", f"{TRIALS}:echo", [{"x": 1}], {}).run_id, "completed")
    os.chown(shared, 65534, 65534)
    shared.chmod(0o777)
    with Store(d / "ww.db") as store:
        store.finish_run(store.begin_run("base", f"{TRIALS}:echo", [{"x": 1}], {}).run_id, "completed")
    (d / "ww.db").chmod(0o666)


def _snapshot(path: str) -> str | None:
    p = Path(path)
    if not p.exists():
        return None
    if p.is_dir():
        return "dir"
    try:
        conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            text = "\n".join(conn.iterdump())
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        text = p.read_bytes().hex()
    return hashlib.sha256(text.encode()).hexdigest()


def _format(text: str, env: Env, fresh: str = "", full: str = "") -> str:
    return text.format(
        full=full,
        d=env.d,
        t=env.t,
        p=env.p,
        store=env.store,
        junk=env.junk,
        empty=env.empty,
        schema=env.schema,
        locked=env.locked,
        fresh=fresh,
    )


def _run_subprocess(case: Cli, argv_text: str, env: Env) -> tuple[int, str, str]:
    command = f"{_format(case.env, env)} {shlex.quote(sys.executable)} -m trainguard {argv_text}"
    if case.id.startswith("broken-pipe-"):
        # `2>&1 | head -1`: the reader goes away after one line while trials still run
        proc = subprocess.Popen(
            ["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        return proc.wait(timeout=120), "", first
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@contextlib.contextmanager
def _small_disk(case: Cli, env: Env) -> Iterator[str]:
    """A 4 MiB tmpfs for a row that names {full}, unmounted after it ("" for the other rows)."""
    if "{full}" not in case.argv + case.checks:
        yield ""
        return
    folder = env.d / f"full-{case.id}"
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here ({done.stderr.strip() or 'mount failed'}): run as root")
    try:
        yield str(folder)
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_case(case: Cli, env: Env, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    with _small_disk(case, env) as full:
        _cli_case(case, env, capsys, monkeypatch, full)


# errors only a child can find, by importing the user's module: the one child that found it is no work
_FOUND_BY_A_CHILD = {"fn-import-fails-escaped", "fn-starts-a-runner", "leakcheck-step-not-defined"}


def _cli_case(case: Cli, env: Env, capsys: pytest.CaptureFixture[str], monkeypatch, full: str) -> None:
    fresh = env.fresh()
    argv_text = _format(case.argv, env, fresh, full)
    checks = _format(case.checks, env, fresh, full).split()
    before = {c.split(":", 1)[1]: _snapshot(c.split(":", 1)[1]) for c in checks if c.startswith("unchanged:")}
    lock = None
    if case.id == "run-locked":
        from trainguard.store._lock import RunLock

        Store(env.locked).close()
        lock = RunLock(Path(env.locked), "held", env.locked).acquire()  # another supervisor holds it
    with process_starts() as started:
        try:
            if case.subprocess:
                code, out, err = _run_subprocess(case, argv_text, env)
            else:
                if case.stdin is not None:
                    stdin = _format(case.stdin, env, fresh, full) if "{full}" in case.stdin else case.stdin
                    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
                try:
                    code = main(shlex.split(argv_text))
                except SystemExit as exit_:  # argparse
                    code = int(exit_.code or 0)
                captured = capsys.readouterr()
                out, err = captured.out, captured.err
        finally:
            if lock is not None:
                lock.release()
    shown = out + err
    assert code == case.code, f"exit {code}, expected {case.code}\n{shown}"
    assert "\x1b" not in shown and "\x07" not in shown, shown  # control characters are shown, not obeyed
    import re

    assert re.search(case.pattern, shown, re.S), f"{case.pattern!r} not in:\n{shown}"
    if code in ERROR_CODES and not case.subprocess:
        # progress lines said before the work that failed (leakcheck's, on a pipe) are not the error
        lines = [line for line in err.splitlines() if line.strip() and not _is_progress(line)]
        assert len(lines) == 1, f"not one line:\n{err}"
        assert "Traceback" not in err and "`trainguard show" not in err
        if case.usage:
            assert "--help`" in err
        if code == 2 and not case.usage:
            # the user's code is imported only in a child: an error found there started that one child
            allowed = 1 if case.id in _FOUND_BY_A_CHILD else 0
            assert len(started) <= allowed, f"a usage error must come before any work; it started {started}"
    for check in checks:
        kind, _, arg = check.partition(":")
        if kind == "unchanged":
            assert _snapshot(arg) == before[arg], f"{arg} changed"
        elif kind == "absent":
            assert not Path(arg).exists(), f"{arg} was created"
        elif kind == "json":

            def refuse(constant: str) -> None:
                raise AssertionError(f"not strict JSON: {constant}")

            json.loads(out, parse_constant=refuse)
        elif kind == "stored":
            name, _, status = arg.partition("=")
            with Store(fresh, readonly=True) as store:
                run = store.get_run(name)
                assert run is not None, f"run {name} not stored"
                assert run.status == status or any(t.status == status for t in store.trials(run.run_id)), (
                    run.status
                )
        elif kind == "alltrials":
            name, _, status = arg.partition("=")
            with Store(fresh, readonly=True) as store:
                trials = store.trials(store.get_run(name).run_id)
                assert trials and all(t.status == status for t in trials), [
                    (t.status, t.error) for t in trials
                ]
        elif kind == "status":  # PATH=NAME=STATUS: the run's recorded status
            path, name, status = arg.split("=")
            with Store(path, readonly=True) as store:
                assert store.get_run(name).status == status
        elif kind == "nopartial":  # no half-written checkpoint, no lock (nor its reserve) left under PATH
            left = [str(p) for p in Path(arg).rglob("*") if p.name == "next" or p.name.endswith(".locks")]
            assert left == [], left
        else:
            raise AssertionError(f"unknown check {check}")


def _is_progress(line: str) -> bool:
    from trainguard.cli.leakcheck import PROGRESS_PREFIX

    rest = line[len(PROGRESS_PREFIX) :]
    return line.startswith(PROGRESS_PREFIX) and not rest.startswith(("error:", "warning:"))


@pytest.mark.parametrize("case", API_CASES, ids=[c.id for c in API_CASES])
def test_api_case(case: Api, env: Env) -> None:
    import re

    with pytest.raises(case.exc) as info:
        case.call(env)
    message = str(info.value)
    assert re.search(case.pattern, message), message
    assert "\n" not in message, message


def test_the_catalogue_has_at_least_60_cases() -> None:
    assert len(CLI_CASES) + len(API_CASES) >= 60
    ids = [c.id for c in CLI_CASES] + [c.id for c in API_CASES]
    assert len(ids) == len(set(ids))


def test_no_process_is_left_behind() -> None:
    """Every run above reaped its workers (the catalogue starts dozens)."""
    import psutil

    me = psutil.Process(os.getpid())
    wait_for(
        lambda: not [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE],
        60,
        "every process the catalogue started to end",
        ignore=(psutil.NoSuchProcess,),
    )
