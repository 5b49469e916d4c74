#!/usr/bin/env bash
# The test command: builds the test environment in .venv (idempotent) and runs the suite.
#   bash scripts/test.sh            # ruff, then the whole suite with mypy beside it (about 19 min on 2 cores)
#   bash scripts/test.sh --fast     # the same with the fast lane (under 5 min on 2 cores; tests/_lanes.py)
#   bash scripts/test.sh -k scope   # extra arguments go to pytest, in both phases
# As root it installs the Debian packages the tests need, and says which before it does; as any other
# user it installs none (the tests that need a missing one are skipped, each with its reason).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# A .venv that is a link belongs to another checkout: build this one its own.
if [ -L .venv ]; then rm .venv; fi
# shellcheck source=scripts/system_packages.sh
. scripts/system_packages.sh
# shellcheck source=scripts/python_packages.sh
. scripts/python_packages.sh

FAST=()
ARGS=()
for arg in "$@"; do
  if [ "$arg" = --fast ]; then FAST=(--fast); else ARGS+=("$arg"); fi
done

install_system_packages
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
install_python_packages
# TensorFlow.js tests: real @tensorflow/tfjs (pure JavaScript, CPU) from the lock file
if command -v npm >/dev/null 2>&1 && { [ ! -d js/trainguard/node_modules/@tensorflow/tfjs ] || [ js/trainguard/package-lock.json -nt js/trainguard/node_modules/.package-lock.json ]; }; then
  (cd js/trainguard && npm ci --cache ../../.npm-cache --no-audit --no-fund --loglevel=error)
fi
export PYTHONHASHSEED=0 TF_CPP_MIN_LOG_LEVEL=2
# Bytecode is written on first import and read after: with PYTHONDONTWRITEBYTECODE set, every test
# process and worker would compile what it imports from source again (TensorFlow, torch, JAX and
# scikit-learn: 32 CPU s an import from source here, 12 from bytecode).
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check --quiet src tests bench
.venv/bin/ruff format --check --quiet src tests bench
# types: strict on runner/, store/, probes/ and leaks/stats.py (settings in pyproject.toml). mypy
# runs beside the first phase: it prints only what it finds, and the command fails at the end if it
# found anything. Its cache lives outside the checkout, so a clean clone reuses what an earlier run
# on this machine checked (mypy compares each file's hash: a changed file is checked again): 7 CPU s
# where an empty cache costs 134, which the first phase's tests would wait for on 2 cores.
.venv/bin/mypy --no-error-summary --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/mypy" &
mypy_pid=$!
# Two phases. First every test but the `solo` ones on three processes (pytest-xdist): most of the
# suite's time is spent waiting on workers, pilots, kernels and a browser, so three share 2 cores
# well (18.7 min against 21.2 on two, quiet; TEST_PROCESSES=0 runs it in this process). The files
# run longest first (tests/_lanes.py) and an idle process takes work from a busy one (worksteal),
# so the phase does not end on one process running the last long file while two stand idle. Then the
# `solo` tests, one at a time with nothing beside them: leak verdicts that depend on how many calls fit a time budget on this machine. Extra arguments
# go to both; a phase that selects no test (pytest's exit 5) is not a failure.
run_phase() {
  local rc=0
  .venv/bin/python -m pytest "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then rc=0; fi
  return "$rc"
}
status=0
run_phase -n "${TEST_PROCESSES:-3}" --dist worksteal -m "not solo" "${FAST[@]}" "${ARGS[@]}" || status=$?
wait "$mypy_pid" || { echo "mypy found type errors (above)" >&2; status=1; }
run_phase -n 0 -m solo "${FAST[@]}" "${ARGS[@]}" || status=$?
exit "$status"
