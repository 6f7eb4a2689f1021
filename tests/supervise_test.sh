#!/usr/bin/env bash
# fathom online --supervise end to end on loopback: two fathom serve replicas behind fathom's
# gateway, 10x faster than real time. The load's lengths shift from chat-like to reasoning-like;
# the controller's first change is forced to a bad configuration (--inject-limits), which its
# canary (one replica at a fifth of the traffic) rolls back; the change is then made for real, its
# canary passing first; a replica killed with SIGKILL is
# replaced; and every request sent is answered. --advise recommends without replacing, measuring
# from the replicas' /metrics pages. Bad input exits 2 with a clear message.
# Usage: supervise_test.sh FATHOM_BINARY
set -u
fathom=$1
tmp=$(mktemp -d)
supervisor=""
trap '[ -n "$supervisor" ] && kill -TERM "$supervisor" 2>/dev/null && wait "$supervisor"; [ -n "${KEEP:-}" ] && cp -r "$tmp" /tmp/supervise_test_keep; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"

# Llama 2 70B (FP8) on 2 x H200, one replica a GPU, started at 8 running sequences: enough for
# chat-like requests, too few once outputs are ten times longer.
cat >"$tmp/deployment.json" <<'EOF'
{"model": "llama2-70b", "hardware": "h200", "gpus": 2, "tp": 1, "ep": 1, "attn_dp": 1, "weights": "fp8",
 "kv": "fp8", "max_batch": 256, "max_num_tokens": 8192}
EOF
{
  echo input_length,output_length
  for i in $(seq 0 199); do echo "$((200 + i * 37 % 600)),$((20 + i * 13 % 40))"; done
} >"$tmp/chat.csv"
{
  echo input_length,output_length
  for i in $(seq 0 199); do echo "$((200 + i * 37 % 400)),$((300 + i * 29 % 300))"; done
} >"$tmp/reasoning.csv"

scale=10
"$fathom" online --supervise --deployment "$tmp/deployment.json" --cost-model roofline --time-scale $scale \
  --initial-batch 8 --initial-tokens 2048 --max-batch 8,64 --max-num-tokens 2048 --ttft-ms 2000 --tpot-ms 100 \
  --window-s 10 --min-requests 10 --confirm-windows 1 --cooldown-windows 1 --ban-windows 3 --warmup-s 60 \
  --probe-s 120 --inject-limits 1,2048 --journal "$tmp/journal.db" --token secret --engine-log "$tmp/engines.log" \
  >"$tmp/online.out" 2>"$tmp/online.log" &
supervisor=$!
gateway=$(printed_url "$tmp/online.log" "gateway listening on") || { echo "FAIL: the supervisor did not start: $(cat "$tmp/online.log")"; exit 1; }

check "the gateway answers /health" curl -sf "$gateway/health"
check "control endpoints need the token" \
  bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' $gateway/fathom/replicas) = 401 ]"
check "two replicas listed with the token" \
  bash -c "curl -sf -H 'Authorization: Bearer secret' $gateway/fathom/replicas | jq -e 'length == 2' >/dev/null"
check "a malformed request gets 400 from the gateway" \
  bash -c "curl -s -d '{\"prompt\":' $gateway/v1/completions | grep -q 'malformed JSON'"
check "an oversized body gets 413" \
  bash -c "head -c 2000000 /dev/zero | tr '\\0' ' ' | curl -s -o /dev/null -w '%{http_code}' --data-binary @- \
             $gateway/v1/completions | grep -q 413"

load() {  # load TRACE QPS SAMPLES OUT
  "$fathom" loadgen --url "$gateway" --trace "$1" --scenario server --qps "$2" --samples "$3" --min-duration 0 \
    --time-scale $scale --ttft-ms 2000 --tpot-ms 100 --json >"$4" 2>"$4.log"
}
load "$tmp/chat.csv" 2 100 "$tmp/chat.json"
check "chat-like phase: every request answered" jq -e '.failed_requests == 0 and .completed_requests == 100' \
  "$tmp/chat.json"

# The reasoning-like phase, with one replica killed part-way.
load "$tmp/reasoning.csv" 2 500 "$tmp/reasoning.json" &
client=$!
sleep 12
# A replica in routing, not the canary of the injected configuration (1 sequence): killing the
# canary would end its window early and replace the rollback checked below with a restart. While
# the canary runs, the others may all be draining, so wait (at most 10 s) for one, else take any.
routed() {  # routed JQ_FILTER: the first replica in routing that also matches it, or nothing
  curl -sf -H 'Authorization: Bearer secret' "$gateway/fathom/replicas" |
    jq -r "[.[] | select((.draining | not) and ($1))][0].pid // empty"
}
victim=""
for _ in $(seq 1 100); do
  victim=$(routed '.max_num_seqs != 1')
  [ -n "$victim" ] && break
  sleep 0.1
done
[ -n "$victim" ] || victim=$(routed 'true')
kill -KILL "$victim"
wait "$client"
check "reasoning-like phase, a replica killed: every request answered" \
  jq -e '.failed_requests == 0 and .completed_requests == 500' "$tmp/reasoning.json"
curl -sf "$gateway/metrics" >"$tmp/metrics.txt"
check "the gateway's /metrics counts every request answered" \
  grep -qE '^fathom_gateway_requests_total\{outcome="ok"\} ([6-9][0-9]{2}|[0-9]{4,})$' "$tmp/metrics.txt"
check "and the supervisor's part its canaries (one failed, one passed) and the restart" \
  bash -c "grep -qE '^fathom_supervisor_decisions_total\{action=\"rollback\"\} [1-9]' $tmp/metrics.txt &&
           grep -qE '^fathom_supervisor_canaries_total\{outcome=\"failed\"\} [1-9]' $tmp/metrics.txt &&
           grep -qE '^fathom_supervisor_canaries_total\{outcome=\"passed\"\} [1-9]' $tmp/metrics.txt &&
           grep -qx 'fathom_supervisor_replica_restarts_total 1' $tmp/metrics.txt"
kill -TERM "$supervisor"
wait "$supervisor"
check "the supervisor exits 0 after SIGTERM" test $? -eq 0
supervisor=""

check "the supervisor counts no request dropped" grep -q "requests arrived, [0-9]* finished, 0 dropped" "$tmp/online.out"
check "the killed replica was detected" grep -q "replica [0-9]* (pid $victim) died" "$tmp/online.log"
check "and restarted" grep -q "Replicas restarted after dying: 1" "$tmp/online.out"
sql() { sqlite3 "${2:-$tmp/journal.db}" "$1"; }  # sql QUERY [DATABASE]
check "the injected bad configuration was started" grep -q "injected bad configuration" "$tmp/online.log"
took=$(grep -o 'canary failed: its canary ([^)]*)' "$tmp/online.log" | head -1 | sed -E 's/.*took ([0-9]+) of the ([0-9]+) .*/\1 \2/')
check "the bad canary took at most its share of the requests (a fifth, a third allowing for chance): $took" \
  awk -v t="$took" 'BEGIN { split(t, n, " "); exit !(n[2] >= 10 && n[1] <= n[2] / 3) }'
check "and rolled back by its canary, one replica at a share of the traffic, journaled with its p99" \
  test "$(sql "SELECT count(*) FROM journal WHERE event = 'rollback'
                 AND reason LIKE '%1 seqs, 2048 tokens (started instead): its canary (replica %p99 TTFT%'")" -ge 1
check "then the better configuration applied for real" \
  test "$(sql "SELECT count(*) FROM journal WHERE event = 'apply' AND after_config LIKE '%\"max_num_seqs\":64%'
                 AND id > (SELECT min(id) FROM journal WHERE event = 'rollback')")" -ge 1
check "every decision journaled with its reason" \
  test "$(sql "SELECT count(*) FROM journal WHERE event IN ('hold', 'apply', 'rollback') AND reason != ''")" -ge 10
check "the replica's death and restart journaled" \
  test "$(sql "SELECT count(*) FROM journal WHERE event IN ('replica_died', 'replica_restarted')")" -eq 2
check "replacements journaled with their duration" \
  test "$(sql "SELECT count(*) FROM journal WHERE event = 'apply' AND replace_s > 0")" -ge 1
check "the last windows hold both p99 limits" \
  bash -c "grep -E '^ +[0-9]+ ' $tmp/online.out | tail -3 | awk '{ if (\$7 < 0) exit 1 }'"
sql "SELECT event, after_config, round(replace_s, 2), reason FROM journal WHERE event != 'hold'"

# --advise: the same shift recommends a change, journals it, and replaces nothing. Its windows come
# from the replicas' own /metrics pages.
"$fathom" online --supervise --advise --metrics-source engines --deployment "$tmp/deployment.json" \
  --cost-model roofline --time-scale $scale \
  --initial-batch 8 --initial-tokens 2048 --max-batch 8,64 --max-num-tokens 2048 --ttft-ms 2000 --tpot-ms 100 \
  --window-s 10 --min-requests 10 --confirm-windows 1 --warmup-s 60 --probe-s 120 --journal "$tmp/advice.db" \
  --token secret --windows 6 >"$tmp/advise.out" 2>"$tmp/advise.log" &
supervisor=$!
gateway=$(printed_url "$tmp/advise.log" "gateway listening on")
load "$tmp/reasoning.csv" 3 60 "$tmp/advised.json"
wait "$supervisor"
check "--advise exits 0" test $? -eq 0
supervisor=""
check "--advise: every request answered" jq -e '.failed_requests == 0 and .completed_requests == 60' "$tmp/advised.json"
check "--advise recommends a change" \
  test "$(sql "SELECT count(*) FROM journal WHERE event = 'advise'" "$tmp/advice.db")" -ge 1
check "--advise applies nothing" \
  test "$(sql "SELECT count(*) FROM journal WHERE event IN ('apply', 'rollback')" "$tmp/advice.db")" -eq 0
check "--advise replaces no replica" bash -c "! grep -q 'rolling replacement' $tmp/advise.log"
check "--advise prints the advice" grep -qE "advise +64 seqs" "$tmp/advise.out"

# Bad input exits 2 and says why.
expect_fail "--engine-cmd = sleep 100: must contain {port}" online --supervise --deployment "$tmp/deployment.json" \
  --ttft-ms 2000 --tpot-ms 100 --engine-cmd "sleep 100"
expect_fail "exited with status 1 before it was healthy" online --supervise --deployment "$tmp/deployment.json" \
  --ttft-ms 2000 --tpot-ms 100 --engine-cmd "false {port}"
expect_fail "--supervise: fathom runs the replicas; not with --metrics-cmd" online --supervise \
  --deployment "$tmp/deployment.json" --metrics-cmd true
expect_fail "--replicas: only with --supervise" online --replicas 3
expect_fail "--metrics-source = statsd: must be gateway, engines or prometheus" online --supervise \
  --deployment "$tmp/deployment.json" --ttft-ms 2000 --tpot-ms 100 --metrics-source statsd
expect_fail "--metrics-source = prometheus: give --prometheus-url" online --supervise \
  --deployment "$tmp/deployment.json" --ttft-ms 2000 --tpot-ms 100 --metrics-source prometheus
expect_fail "--prometheus-url: only with --supervise" online --prometheus-url http://127.0.0.1:9090

finish supervise
