#!/usr/bin/env bash
# The calibration benchmark (not a test): `fathom calibrate` over the shipped MLPerf v5.1 rows on 1
# and 2 threads, then under mpirun with 1 and 2 computing ranks (rank 0 only hands out rows, QPS
# searches and folds, and prints). Checks that every run prints what the first printed, and prints
# each run's wall time, the parallel efficiency of 2 computing ranks against 1, and the
# coordinator's own time per work item. Extra flags go to calibrate, e.g. a short cross-validation:
# --cross-validate --max-requests 100 --samples 200.
# Usage: apps/bench/calibrate_bench.sh [build/fathom [FLAGS...]]
set -euo pipefail
fathom=$(realpath "${1:-build/fathom}")
shift || true
flags=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpirun=(mpirun --oversubscribe --allow-run-as-root)
cd "$(dirname "$0")/../.."

# run NAME LAUNCHER... -- FLAGS...: one calibration; prints its wall time and the coordinator's.
run() {
  local name=$1 launcher=()
  shift
  while [[ $1 != -- ]]; do launcher+=("$1"); shift; done
  shift
  local start=$EPOCHREALTIME
  "${launcher[@]}" "$fathom" calibrate --results models/calibration/mlperf_v5.1.csv "${flags[@]}" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
  awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }' >"$tmp/$name.wall"
  printf "%10s: wall %.1f s; %s\n" "$name" "$(cat "$tmp/$name.wall")" "$(grep -o '[0-9]* work items.*' "$tmp/$name.err")"
}

run threads-1 -- --jobs 1
run threads-2 -- --jobs 2
run mpi-np2 "${mpirun[@]}" -np 2 --
run mpi-np3 "${mpirun[@]}" -np 3 --
# efficiency ONE TWO: the parallel efficiency of the run TWO (2 workers) against ONE (1 worker).
efficiency() { awk -v one="$(cat "$tmp/$1.wall")" -v two="$(cat "$tmp/$2.wall")" 'BEGIN { printf "%.0f%%", 100 * one / (2 * two) }'; }
echo "efficiency, 2 compute ranks against 1: $(efficiency mpi-np2 mpi-np3); 2 threads against 1: $(efficiency threads-1 threads-2)"
for name in threads-2 mpi-np2 mpi-np3; do
  diff "$tmp/threads-1.out" "$tmp/$name.out" >/dev/null || echo "$name: output differs from threads-1"
done
