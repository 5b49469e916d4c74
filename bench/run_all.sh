#!/usr/bin/env bash
# Every benchmark, one after the other, on this machine; each prints a markdown table that
# BENCHMARKS.md quotes. Output goes to bench/results/run_all-<date>.md (about 25 minutes on 2 cores).
#   bash bench/run_all.sh            # all
#   bash bench/run_all.sh quick      # the fast ones only (no runner_bench, no leak corpus)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
mkdir -p bench/results
out="bench/results/run_all-$(date -u +%Y%m%dT%H%MZ).md"
run() {
  echo "## $*" | tee -a "$out"
  echo '```' >> "$out"; echo "$ $*" >> "$out"; echo '```' >> "$out"
  "$@" 2>>"$out.stderr" | tee -a "$out"
  echo >> "$out"
}
run $PY bench/sampler_overhead.py
run $PY bench/census_speed.py
run $PY bench/supervisor_overhead.py
run $PY bench/worker_start.py
run $PY bench/leak_detection.py --runs 1000
run $PY bench/leakcheck_overhead.py
run $PY bench/oom_recovery.py
run $PY bench/report_size.py
run $PY bench/node_dispatch.py
run $PY bench/share_bench.py
run $PY bench/cli_response.py
if [ "${1:-}" != quick ]; then
  run $PY bench/leak_corpus_run.py
  run $PY bench/runner_bench.py
  run $PY bench/runner_bench.py --only abelmt --pss-hz 0 --out bench/results/runner_bench_parallel.json
  run $PY bench/runner_bench.py --only ahijk --pss-hz 0 --out bench/results/runner_bench_budget.json
  run $PY bench/runner_bench.py --only ahg --pss-hz 0 --out bench/results/runner_bench_ray.json
  run $PY bench/one_worker_rounds.py --rounds 2
  run $PY bench/parallel_probe.py --fits 5
  run $PY bench/ray_backend_bench.py
  run $PY bench/compare_backends.py --json bench/results/compare.json
  run $PY bench/staged_bench.py
  run $PY bench/pressure_bench.py
  run $PY bench/optuna_constraints.py --out bench/results/optuna_constraints.json
fi
echo "results: $out"
