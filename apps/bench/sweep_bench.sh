#!/usr/bin/env bash
# The sweep benchmark (not a test): a 108-cell plan (3 models x 4 GPU kinds x 3 GPU counts x 3
# scenarios, small data sets and short probes) run on 1 thread, then under mpirun with 1 and 2
# compute ranks (rank 0 only hands out cells and writes the store), each into a fresh store.
# Prints each run's wall time, the parallel efficiency of 2 compute ranks against 1, and rank 0's
# own time per cell (building and recording cells, handing them out, storing their results). Then
# the schedule on 1, 16 and 64 workers (--schedule-on: each candidate's measured time) and its
# speed-up over one worker. Every store must equal the one-thread run's.
# Usage: apps/bench/sweep_bench.sh [build/fathom]
set -euo pipefail
fathom=$(realpath "${1:-build/fathom}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/plan.json" <<'PLAN'
{
  "models": ["llama2-70b", "llama3.1-405b", "gpt-oss-120b"],
  "hardware": ["h100-sxm", "h200", "b200", "mi300x"],
  "gpus": [2, 4, 8],
  "scenarios": ["offline", "server", "interactive"],
  "tune": {"weights": ["fp8"], "kv": ["fp8"], "max_batch": [64, 256], "max_num_tokens": [4096],
           "disaggregated": false, "dataset_samples": 1000, "samples": 2000, "probe_duration_s": 300, "qps_steps": 5}
}
PLAN
mpirun=(mpirun --oversubscribe --allow-run-as-root)

# run NAME LAUNCHER... -- FLAGS...: one sweep into a fresh store; prints its summary and keeps its JSON.
run() {
  local name=$1 launcher=() flags=()
  shift
  while [[ $1 != -- ]]; do launcher+=("$1"); shift; done
  shift
  flags=("$@")
  "${launcher[@]}" "$fathom" sweep "$tmp/plan.json" --db "$tmp/$name.db" --json "${flags[@]}" >"$tmp/$name.json" 2>/dev/null
  python3 - "$name" "$tmp/$name.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[2]))
print(f"{sys.argv[1]:>10}: {s['cells']} cells, {s['simulated']} candidates simulated, wall {s['wall_s']:.1f} s, "
      f"rank 0 {1e3 * (s['prepare_s'] + s['serve_s']) / s['cells']:.1f} ms a cell "
      f"(prepare {1e3 * s['prepare_s'] / s['cells']:.1f}, serve {1e3 * s['serve_s'] / s['cells']:.2f})")
PY
}

run threads-1 -- --jobs 1
run threads-2 -- --jobs 2
run mpi-np2 "${mpirun[@]}" -np 2 --
run mpi-np3 "${mpirun[@]}" -np 3 --
for n in 1 16 64; do run "sched-$n" -- --schedule-on "$n"; done
python3 - "$tmp" <<'PY'
import json, sys
w = {n: json.load(open(f"{sys.argv[1]}/{n}.json"))["wall_s"] for n in ("threads-1", "threads-2", "mpi-np2", "mpi-np3")}
print(f"efficiency, 2 compute ranks against 1: {w['mpi-np2'] / (2 * w['mpi-np3']):.0%}; "
      f"2 threads against 1: {w['threads-1'] / (2 * w['threads-2']):.0%}")
m = {n: json.load(open(f"{sys.argv[1]}/sched-{n}.json"))["schedule"] for n in (1, 16, 64)}
for n in (16, 64):
    print(f"schedule on {n} workers: {m[n]['makespan_s']:.2f} s, {m[1]['makespan_s'] / m[n]['makespan_s']:.1f}x one "
          f"worker's {m[1]['makespan_s']:.2f} s ({m[n]['compute_s']:.1f} s computed, results not used included)")
PY
for name in threads-2 mpi-np2 mpi-np3 sched-16 sched-64; do
  diff <(sqlite3 "$tmp/threads-1.db" "SELECT * FROM tune_results ORDER BY sweep, candidate") \
       <(sqlite3 "$tmp/$name.db" "SELECT * FROM tune_results ORDER BY sweep, candidate") >/dev/null ||
    echo "$name: store differs from threads-1"
done
