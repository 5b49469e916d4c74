#!/usr/bin/env bash
# The test command: builds the test environment in .venv (idempotent) and runs the suite.
#   bash scripts/test.sh            # whole suite
#   bash scripts/test.sh -k scope   # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# A .venv that is a link belongs to another checkout: build this one its own.
if [ -L .venv ]; then rm .venv; fi
# shellcheck source=scripts/apt_install.sh
. scripts/apt_install.sh
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch is pinned to the CPU wheel: an unpinned torch resolves to a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0" -e ".[test]"
# compare's tests preload jemalloc and tcmalloc (Debian packages; installed when missing and we can)
if ! { ldconfig -p | grep -q libjemalloc.so.2 && ldconfig -p | grep -q libtcmalloc_minimal.so.4; }; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt_install libjemalloc2 libtcmalloc-minimal4
  else
    echo "scripts/test.sh: install libjemalloc2 and libtcmalloc-minimal4 for the allocator tests" >&2
  fi
fi
# TensorFlow.js tests: Node.js, and real @tensorflow/tfjs (pure JavaScript, CPU) from the lock file
if ! command -v node >/dev/null 2>&1; then
  apt_install nodejs npm
fi
if [ ! -d js/trainguard/node_modules/@tensorflow/tfjs ] || [ js/trainguard/package-lock.json -nt js/trainguard/node_modules/.package-lock.json ]; then
  (cd js/trainguard && npm ci --cache ../../.npm-cache --no-audit --no-fund --loglevel=error)
fi
# The HTML report tests open reports in a real headless Chromium (Debian's package; playwright
# drives it and never downloads a browser of its own).
if [ ! -x /usr/bin/chromium ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt_install chromium
  else
    echo "scripts/test.sh: install Debian's chromium (apt-get install chromium) for the HTML report tests" >&2
  fi
fi
# The Slurm backend's tests submit pilot jobs to a real one-node Slurm (Debian's slurm-wlm and
# munge): installed here when missing and we can; the tests start it (scripts/slurm-local.sh start)
# when none answers, and stop what they started.
if ! command -v slurmctld >/dev/null 2>&1; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    bash scripts/slurm-local.sh install || echo "scripts/test.sh: could not install slurm-wlm and munge" >&2
  else
    echo "scripts/test.sh: install Debian's slurm-wlm and munge for the Slurm backend's tests" >&2
  fi
fi
export PYTHONHASHSEED=0 TF_CPP_MIN_LOG_LEVEL=2
.venv/bin/ruff check --quiet src tests bench
# types: strict on runner/, store/, probes/ and leaks/stats.py (settings in pyproject.toml)
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
