#!/usr/bin/env bash
# End-to-end checks of `fathom sweep` and `fathom merge`: a small plan on threads, resumed, sharded
# and merged, and bad plans. With MPIRUN (e.g. "mpirun --oversubscribe --allow-run-as-root") it
# also runs the plan under MPI with 3 ranks and checks the store equals the threaded run's row for
# row, and that an MPI run killed midway resumes to the same store, simulating nothing twice; and
# that `fathom calibrate --fit --cross-validate` on 3 ranks prints what one process prints.
# Usage: sweep_test.sh FATHOM_BINARY [MPIRUN...]
set -u
fathom=$1
shift
mpirun=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

check() {  # check NAME CONDITION-EXIT-CODE
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi
}

# Every row of a store's tables, in key order.
rows() {
  sqlite3 "$1" "SELECT * FROM tune_sweeps ORDER BY sweep; SELECT * FROM tune_results ORDER BY sweep, candidate;
                SELECT * FROM tune_complete ORDER BY sweep;"
}

# Llama 2 70B on 2 H200s and 2 B200s, Offline and Server: cheap cells.
cat >"$tmp/plan.json" <<'EOF'
{
  "models": ["llama2-70b"],
  "hardware": ["h200", "b200"],
  "gpus": [2],
  "scenarios": ["offline", "server"],
  "limits": [{"ttft_ms": 2000, "tpot_ms": 200}],
  "prices": {"b200": 4.9},
  "tune": {"weights": ["fp8"], "kv": ["fp8"], "max_batch": [64, 256], "max_num_tokens": [4096],
           "disaggregated": false, "dataset_samples": 200, "probe_duration_s": 60}
}
EOF

"$fathom" sweep "$tmp/plan.json" --db "$tmp/threads.db" --jobs 2 >"$tmp/out" 2>&1
check "sweep on threads: $(tail -3 "$tmp/out")" $?
grep -q "4 cells, 0 already complete, 4 run on 2 threads" "$tmp/out"
check "sweep summary: $(tail -2 "$tmp/out")" $?
grep -q "llama2-70b on 2 x b200, server, TTFT 2000 ms, TPOT 200 ms:" "$tmp/out"
check "sweep names each finished cell" $?

out=$("$fathom" sweep "$tmp/plan.json" --db "$tmp/threads.db" --json)
grep -q '"complete": 4' <<<"$out" && grep -q '"simulated": 0' <<<"$out"
check "a finished sweep run again skips every cell: $out" $?

out=$("$fathom" report --db "$tmp/threads.db")
grep -q "Cheapest deployment per model across GPUs" <<<"$out" && grep -qE "llama2-70b +server .*2 GPU setups" <<<"$out"
check "report: the cheapest deployment per model across GPUs" $?

# A Slurm array: shards into their own stores, merged, hold what one run holds.
for i in 0 1 2; do
  "$fathom" sweep "$tmp/plan.json" --db "$tmp/shard$i.db" --shard "$i/3" --jobs 1 >/dev/null 2>&1
  check "shard $i/3" $?
done
"$fathom" merge --out "$tmp/merged.db" "$tmp"/shard{0,1,2}.db >/dev/null
check "merge" $?
diff <(rows "$tmp/threads.db") <(rows "$tmp/merged.db") >/dev/null
check "merged shards equal the one run row for row" $?

# Sizing a cluster: the sweep run here as 16 workers would run it; the same store.
"$fathom" sweep "$tmp/plan.json" --db "$tmp/schedule.db" --schedule-on 16 --json >"$tmp/schedule.json" 2>/dev/null
jq -e '.schedule.workers == 16 and .schedule.makespan_s > 0 and .schedule.makespan_s <= .schedule.compute_s' \
  "$tmp/schedule.json" >/dev/null
check "sweep --schedule-on 16: $(jq -c .schedule "$tmp/schedule.json")" $?
diff <(rows "$tmp/threads.db") <(rows "$tmp/schedule.db") >/dev/null
check "the scheduled run's store equals the threaded one row for row" $?

# Bad input: exit 2, a message naming the file, the field and the rule, and no store written.
expect_error() {  # expect_error PATTERN -- ARGS...
  local pattern=$1
  shift 2
  local out rc
  out=$("$fathom" "$@" 2>&1)
  rc=$?
  [[ $rc -eq 2 ]] && grep -qF -- "$pattern" <<<"$out" && [[ ! -e "$tmp/bad.db" ]]
  check "fathom $* -> exit $rc, '$pattern' in: $out" $?
}
sed 's/"gpus": \[2\]/"gpus": [2, 0]/' "$tmp/plan.json" >"$tmp/bad_gpus.json"
expect_error "bad_gpus.json: field 'gpus[1]' = 0: must be an integer from 1 to 2^30" -- sweep "$tmp/bad_gpus.json" --db "$tmp/bad.db"
sed 's/"llama2-70b"/"llama2-70b", "gpt-9"/' "$tmp/plan.json" >"$tmp/bad_model.json"
expect_error "bad_model.json: cell gpt-9 on 2 x h200, offline: " -- sweep "$tmp/bad_model.json" --db "$tmp/bad.db"
sed 's/"b200": 4.9/"tpu": 4.9/' "$tmp/plan.json" >"$tmp/bad_price.json"
expect_error "bad_price.json: field 'prices.tpu': no such GPU" -- sweep "$tmp/bad_price.json" --db "$tmp/bad.db"
expect_error "none.json: cannot open file" -- sweep "$tmp/none.json" --db "$tmp/bad.db"
expect_error '--shard = "3/3": must be I/N with 0 <= I < N' -- sweep "$tmp/plan.json" --db "$tmp/bad.db" --shard 3/3
expect_error '--schedule-on = -2: must be >= 1' -- sweep "$tmp/plan.json" --db "$tmp/bad.db" --schedule-on -2
# A task of `srun -n 3` without an MPI plugin (what srun sets, and no PMI): refused, not run 3x.
out=$(env SLURM_STEP_NUM_TASKS=3 SLURM_PROCID=1 SLURM_STEP_ID=0 "$fathom" sweep "$tmp/plan.json" --db "$tmp/bad.db" 2>&1)
[[ $? -eq 2 && $out == *"one of 3 srun tasks that joined no MPI job"*"--mpi=pmix"* && ! -e $tmp/bad.db ]]
check "a task of srun without --mpi=pmix is refused: $out" $?
expect_error "none.db: no such results database" -- merge --out "$tmp/bad.db" "$tmp/none.db"

# The Slurm batch scripts in docs/sweeps.md parse.
page="${FATHOM_DATA_DIR:-.}/docs/sweeps.md"
scripts=$(awk -v dir="$tmp" '/^```bash$/ { f = dir "/batch" ++n ".sh"; next } /^```/ { f = ""; next } f { print > f }
                      END { print n + 0 }' "$page")
[[ $scripts -ge 2 ]]
check "docs/sweeps.md has the Slurm batch scripts ($scripts)" $?
for script in "$tmp"/batch*.sh; do
  grep -q "^#SBATCH" "$script" && bash -n "$script"
  check "bash -n $(basename "$script") (docs/sweeps.md)" $?
done

if [[ ${#mpirun[@]} -gt 0 ]]; then
  # The same plan on 3 ranks (rank 0 hands out cells and writes; ranks 1 and 2 compute).
  "${mpirun[@]}" -np 3 "$fathom" sweep "$tmp/plan.json" --db "$tmp/mpi.db" >"$tmp/mpi_out" 2>&1
  check "sweep under mpirun -np 3: $(tail -3 "$tmp/mpi_out")" $?
  grep -q "4 run on 2 MPI ranks" "$tmp/mpi_out"
  check "the MPI run used 2 compute ranks: $(tail -2 "$tmp/mpi_out")" $?
  diff <(rows "$tmp/threads.db") <(rows "$tmp/mpi.db") >/dev/null
  check "the MPI store equals the threaded run's row for row" $?

  # Killed once a cell is complete, then run again: the same store, finished cells not rerun.
  # (8 cells of 18 or 36 candidates, every one simulated: long enough to be killed midway)
  sed -e 's/"gpus": \[2\]/"gpus": [2, 4]/' -e 's/"max_batch": \[64, 256\], "max_num_tokens": \[4096\]/"max_batch": [16, 64, 256], "max_num_tokens": [2048, 4096], "prune": false/' \
    "$tmp/plan.json" >"$tmp/plan8.json"
  "$fathom" sweep "$tmp/plan8.json" --db "$tmp/whole.db" --jobs 2 >/dev/null 2>&1
  check "the 8-cell reference run" $?
  "${mpirun[@]}" -np 3 "$fathom" sweep "$tmp/plan8.json" --db "$tmp/killed.db" >/dev/null 2>&1 &
  job=$!
  for _ in $(seq 600); do
    done_cells=$(sqlite3 "$tmp/killed.db" "SELECT count(*) FROM tune_complete" 2>/dev/null || echo 0)
    [[ ${done_cells:-0} -ge 1 ]] && break
    sleep 0.05
  done
  kill -TERM "$job" 2>/dev/null
  wait "$job"
  before=$(sqlite3 "$tmp/killed.db" "SELECT count(*) FROM tune_complete")
  [[ $before -ge 1 && $before -lt 8 ]]
  check "the MPI run was killed midway ($before of 8 cells complete)" $?
  out=$("${mpirun[@]}" -np 3 "$fathom" sweep "$tmp/plan8.json" --db "$tmp/killed.db" --json 2>/dev/null)
  grep -q "\"complete\": $before," <<<"$out"
  check "the resumed run skips the $before complete cells: $out" $?
  diff <(rows "$tmp/whole.db") <(rows "$tmp/killed.db") >/dev/null
  check "the resumed MPI store equals an uninterrupted run's row for row" $?

  # Calibration on 3 ranks: rank 0 runs the fit and hands out rows, QPS searches and folds.
  # Llama 2 70B on Dell's H200s and NVIDIA's B200s, short runs.
  sed -n '1p;4,6p;13,14p' "${FATHOM_DATA_DIR:-.}/models/calibration/mlperf_v5.1.csv" >"$tmp/rows.csv"
  calibrate=(calibrate --results "$tmp/rows.csv" --samples 100 --max-requests 200 --fit --cross-validate
             --free gemm_efficiency,cpp_iteration_overhead_us)
  "$fathom" "${calibrate[@]}" --jobs 1 >"$tmp/calibrate_one" 2>"$tmp/err"
  check "calibrate on one thread: $(tail -3 "$tmp/err")" $?
  "${mpirun[@]}" -np 3 "$fathom" "${calibrate[@]}" >"$tmp/calibrate_mpi" 2>"$tmp/err"
  check "calibrate under mpirun -np 3: $(tail -3 "$tmp/err")" $?
  grep -q "leave-one-hardware-out:" "$tmp/calibrate_one" && diff "$tmp/calibrate_one" "$tmp/calibrate_mpi" >/dev/null
  check "calibrate under mpirun prints what one process prints" $?
  out=$("${mpirun[@]}" -np 3 "$fathom" calibrate --results "$tmp/none.csv" 2>&1)
  [[ $? -ne 0 ]] && [[ $(grep -c "none.csv: cannot open results file" <<<"$out") -eq 1 ]]
  check "calibrate under mpirun: a bad input is one error: $out" $?
  # Ranks that cannot load what rank 0 loaded fail their items; rank 0 reports why.
  out=$("${mpirun[@]}" -np 1 "$fathom" calibrate --results "$tmp/rows.csv" --samples 100 --max-requests 200 : \
        -np 2 env FATHOM_DATA_DIR="$tmp/none" "$fathom" calibrate --results "$tmp/rows.csv" --samples 100 2>&1)
  [[ $? -ne 0 ]] && [[ $(grep -c "fathom: error: $tmp/none/models/calibration/.*: cannot open file" <<<"$out") -eq 1 ]]
  check "calibrate under mpirun: a worker's error is rank 0's: $out" $?
fi

echo "sweep: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
