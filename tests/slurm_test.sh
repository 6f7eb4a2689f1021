#!/usr/bin/env bash
# fathom online --supervise on a one-node Slurm (tests/slurm_local.sh): the replicas run as Slurm
# job steps through --launcher (srun), each placed on its own GPU (CUDA_VISIBLE_DEVICES), reached
# by the gateway at the node's name; a replica whose job is cancelled is replaced, and every
# request is answered. Then docs/sweeps.md's Slurm batch scripts run as printed. Skipped (77) where
# Slurm's daemons are not installed or this is not root.
# Usage: slurm_test.sh FATHOM_BINARY
set -u
fathom=$(realpath "$1")
here=$(realpath "$(dirname "$0")")
tmp=$(mktemp -d)
supervisor=""
source "$here/lib.sh"
source "$here/slurm_local.sh"
trap '[ -n "$supervisor" ] && kill -KILL "$supervisor" 2>/dev/null; scancel -n fathom-replica 2>/dev/null; slurm_down; rm -rf "$tmp"' EXIT
slurm_up "$tmp/slurm" || { echo "SKIP: no Slurm here (slurm-wlm and munge, run as root)"; exit 77; }
node=$(hostname -s)

cat >"$tmp/deployment.json" <<'JSON'
{"model": "llama2-70b", "hardware": "h200", "gpus": 2, "tp": 1, "ep": 1, "attn_dp": 1, "weights": "fp8",
 "kv": "fp8", "max_batch": 64, "max_num_tokens": 8192}
JSON
"$fathom" online --supervise --deployment "$tmp/deployment.json" --cost-model roofline --time-scale 10 \
  --window-s 10 --initial-batch 64 --max-batch 64 --max-num-tokens 8192 --token secret \
  --launcher 'srun --nodes=1 --ntasks=1 --nodelist={node} --job-name=fathom-replica' --nodes "$node" \
  --gpus 0,1,2 --engine-log "$tmp/engines.log" >"$tmp/online.out" 2>"$tmp/online.log" &
supervisor=$!
gateway=$(printed_url "$tmp/online.log" "gateway listening on" 60) || { echo "FAIL: the supervisor did not start: $(cat "$tmp/online.log")"; exit 1; }
replicas() { curl -sf -H 'Authorization: Bearer secret' "$gateway/fathom/replicas"; }

check "two replicas run as Slurm job steps" test "$(squeue -h -n fathom-replica | wc -l)" -eq 2
check "the gateway reaches them at the node's name" \
  bash -c "[ \"\$(curl -sf -H 'Authorization: Bearer secret' $gateway/fathom/replicas | jq -r '[.[].host] | unique | join(\",\")')\" = '$node' ]"
check "each on a GPU of its own" \
  bash -c "[ \"\$(curl -sf -H 'Authorization: Bearer secret' $gateway/fathom/replicas | jq -r '[.[].gpus] | sort | join(\",\")')\" = '0,1' ]"
visible() {  # the CUDA_VISIBLE_DEVICES of each fathom serve process, sorted
  for pid in $(pgrep -f '^[^ ]*fathom serve'); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^CUDA_VISIBLE_DEVICES=//p'
  done | sort | paste -sd,
}
check "which the engines see (CUDA_VISIBLE_DEVICES through srun): $(visible)" test "$(visible)" = 0,1

{
  echo input_length,output_length
  for i in $(seq 0 99); do echo "$((200 + i * 37 % 600)),$((40 + i * 13 % 80))"; done
} >"$tmp/chat.csv"
load() {  # load OUT
  "$fathom" loadgen --url "$gateway" --trace "$tmp/chat.csv" --scenario server --qps 4 --samples 100 \
    --min-duration 0 --time-scale 10 --json >"$1" 2>"$1.log"
}
load "$tmp/first.json"
check "every request answered" jq -e '.failed_requests == 0 and .completed_requests == 100' "$tmp/first.json"

# A replica's job cancelled: replaced, on the GPU left free.
load "$tmp/second.json" &
client=$!
sleep 1
victim=$(squeue -h -n fathom-replica -o %i | head -1)
scancel "$victim"
wait $client
check "a replica's job cancelled under load: every request answered" \
  jq -e '.failed_requests == 0 and .completed_requests == 100' "$tmp/second.json"
for _ in $(seq 1 100); do
  grep -q "Replicas restarted\|replica [0-9]* replaces replica" "$tmp/online.log" 2>/dev/null && break
  [ "$(squeue -h -n fathom-replica | wc -l)" -eq 2 ] && [ "$(replicas | jq length)" -eq 2 ] && break
  sleep 0.1
done
check "and replaced by a new job step" test "$(squeue -h -n fathom-replica | wc -l)" -eq 2
check "whose replica has a GPU of its own" \
  bash -c "curl -sf -H 'Authorization: Bearer secret' $gateway/fathom/replicas | jq -e '[.[].gpus] | unique | length == 2'"
kill -TERM $supervisor
wait $supervisor
check "the supervisor exits 0 after SIGTERM" test $? -eq 0
supervisor=""
for _ in $(seq 1 100); do
  [ "$(squeue -h -n fathom-replica | wc -l)" -eq 0 ] && break
  sleep 0.1
done
check "and its job steps end with it" test "$(squeue -h -n fathom-replica | wc -l)" -eq 0

# docs/sweeps.md's two batch scripts as printed, on this one node: the MPI job (srun --mpi=pmix,
# its 4 nodes overridden to 1 with 3 tasks) and the array of 16 shards merged by the printed
# dependent job; each store equals one process's run of the plan, row for row.
page="$here/../docs/sweeps.md"
mkdir -p "$tmp/sweep/build" && cd "$tmp/sweep" || exit 1
ln -s "$fathom" build/fathom
awk '/^```bash$/ { f = "batch" ++n ".sh"; next } /^```/ { f = ""; next } f { print > f }' "$page"
sed -n '/^cat >"$tmp\/plan.json" <<.EOF.$/,/^EOF$/p' "$here/sweep_test.sh" | sed '1d;$d' >plan.json
rows() {
  sqlite3 "$1" "SELECT * FROM tune_sweeps ORDER BY sweep; SELECT * FROM tune_results ORDER BY sweep, candidate;
                SELECT * FROM tune_complete ORDER BY sweep;"
}
same_rows() {  # same_rows STORE STORE: both hold rows, the same
  local a b
  a=$(rows "$1") && b=$(rows "$2") && [ -n "$a" ] && [ "$a" = "$b" ]
}
"$fathom" sweep plan.json --db one.db >/dev/null 2>&1
sbatch --wait --nodes=1 --ntasks-per-node=3 --output=mpi.out batch1.sh >/dev/null 2>&1
check "the MPI batch script runs: $(tail -2 mpi.out)" grep -q "4 run on 2 MPI ranks" mpi.out
check "its store equals one process's" same_rows one.db sweep.db
check "and it wrote the report" test -s report.html
mkdir shards && cd shards && ln -s ../build build && ln -s ../plan.json plan.json
job=$(sbatch --parsable --output=shard-%a.out ../batch2.sh)
merge=$(grep -o "sbatch --dependency=afterok:JOBID --wrap '.*'" "$page" | sed "s/JOBID/$job/")
eval "${merge/sbatch /sbatch --wait --output=merge.out }" >/dev/null
check "the array script's 16 shards, merged by the printed line: $(cat merge.out 2>&1)" \
  same_rows ../one.db sweep.db
cd "$tmp" || exit 1

expect_fail "--gpus: 2 replicas of 1 GPUs need room for 3" online --supervise \
  --deployment "$tmp/deployment.json" --gpus 0,1
finish slurm_test
