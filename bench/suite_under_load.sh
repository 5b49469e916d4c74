#!/usr/bin/env bash
# The test command on a loaded machine: a fresh clone of HEAD, N CPU-bound processes beside it the whole
# time, the README's test command (`.ci/run`) R times in a row in that clone (the first builds .venv).
#   bash bench/suite_under_load.sh                   # 3 rounds beside 2 CPU-bound processes
#   bash bench/suite_under_load.sh --rounds 1 --hog 2 --keep-going
# Prints, per round: exit status, minutes, the load average seen (1-minute, least and mean, read every
# 30 s), the pass/fail line of each phase and any FAILED test; a summary line at the end. Stops at the
# first red round unless --keep-going. Results also go to bench/results/suite_under_load.txt.
set -uo pipefail
ROUNDS=3
HOG=2
KEEP_GOING=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --hog) HOG=$2; shift 2 ;;
    --keep-going) KEEP_GOING=1; shift ;;
    *) echo "suite_under_load: unknown option '$1' (use --rounds N, --hog N, --keep-going)" >&2; exit 2 ;;
  esac
done
case "$ROUNDS$HOG" in *[!0-9]*) echo "suite_under_load: --rounds and --hog take whole numbers" >&2; exit 2 ;; esac
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT="$REPO/bench/results/suite_under_load.txt"
mkdir -p "$(dirname "$OUT")"
WORK=$(mktemp -d /tmp/suite-under-load.XXXXXX)
chmod 755 "$WORK"  # a clone others can read, as a checkout is: tests run parts of it as nobody
git clone -q "$REPO" "$WORK/clone"
COMMIT=$(git -C "$WORK/clone" rev-parse --short HEAD)

HOGS=()
for _ in $(seq 1 "$HOG"); do
  python3 -c "while True: pass" &
  HOGS+=($!)
done
cleanup() { for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

{
  echo "suite under load: commit $COMMIT, $ROUNDS round(s) beside $HOG CPU-bound process(es), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
} | tee "$OUT"
GREEN=0
for round in $(seq 1 "$ROUNDS"); do
  LOG="$WORK/round$round.log"
  LOADS="$WORK/round$round.load"
  (while true; do cut -d' ' -f1 /proc/loadavg >> "$LOADS"; sleep 30; done) &
  SAMPLER=$!
  start=$(date +%s)
  (cd "$WORK/clone" && bash .ci/run) > "$LOG" 2>&1
  rc=$?
  minutes=$(( ($(date +%s) - start) / 60 ))
  kill "$SAMPLER" 2>/dev/null
  load=$(awk 'NR==1 || $1<m {m=$1} {s+=$1} END {printf "least %.1f, mean %.1f", m, s/NR}' "$LOADS")
  {
    echo "round $round: exit $rc, $minutes min, load $load"
    grep -E "^(=+ .*(passed|failed).* =+|FAILED )" "$LOG" | sed 's/^/  /'
  } | tee -a "$OUT"
  if [ "$rc" -eq 0 ]; then GREEN=$((GREEN + 1)); elif [ "$KEEP_GOING" -eq 0 ]; then break; fi
done
echo "green: $GREEN of $ROUNDS rounds beside $HOG CPU-bound process(es) (logs in $WORK)" | tee -a "$OUT"
[ "$GREEN" -eq "$ROUNDS" ]
