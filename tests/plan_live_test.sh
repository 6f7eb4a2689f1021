#!/usr/bin/env bash
# fathom online --supervise --plan end to end on loopback, 5x faster than real time: Llama 2 70B
# (FP8) on 2 x H200 serving a replayed load whose first 10 s are chat-like requests at about 40 a
# second and whose next 30 s are reasoning-like ones at 3 a second. The plan starts on two TP1
# replicas (more throughput for short requests) and at 10 s switches to one TP2 replica (long
# decodes twice as fast), a layout switch by rolling replacement (drain). Checked: every request
# answered, the switch made and journaled, and the gain the supervisor measured over holding the
# start (tokens/s and mean end-to-end latency) within 10% of what `fathom simulate --plan`
# predicts for the same load. Bad plans and flags exit 2 with a clear message.
# Usage: plan_live_test.sh FATHOM_BINARY
set -u
fathom=$1
tmp=$(mktemp -d)
supervisor=""
trap '[ -n "$supervisor" ] && kill -TERM "$supervisor" 2>/dev/null && wait "$supervisor"; [ -n "${KEEP:-}" ] && cp -r "$tmp" /tmp/plan_live_keep; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"

two_tp1='{"model": "llama2-70b", "hardware": "h200", "gpus": 2, "tp": 1, "ep": 1, "attn_dp": 1,
  "weights": "fp8", "kv": "fp8", "max_batch": 256, "max_num_tokens": 8192}'
one_tp2='{"model": "llama2-70b", "hardware": "h200", "gpus": 2, "tp": 2, "ep": 1, "attn_dp": 1,
  "weights": "fp8", "kv": "fp8", "max_batch": 512, "max_num_tokens": 8192}'
echo "{\"start\": $two_tp1, \"switches\": []}" >"$tmp/static.json"
echo "{\"start\": $two_tp1, \"switches\": [{\"when\": \"after_s\", \"value\": 10, \"kv\": \"drain\",
  \"restart_s\": 1, \"to\": $one_tp2}]}" >"$tmp/plan.json"
# Poisson arrivals from a fixed seed: 40 a second of short requests, then 3 a second of long ones.
awk 'BEGIN { srand(3); t = 0; print "input_length,output_length,timestamp"
  while (t < 10) { t += -log(1 - rand()) / 40; printf "%d,%d,%.4f\n", 200 + int(rand() * 600), 20 + int(rand() * 40), t }
  while (t < 40) { t += -log(1 - rand()) / 3; printf "%d,%d,%.4f\n", 200 + int(rand() * 400), 1000 + int(rand() * 1000), t } }' \
  >"$tmp/load.csv"
requests=$(($(wc -l <"$tmp/load.csv") - 1))

scale=5
simulated() {  # simulated PLAN: the simulated run's JSON
  "$fathom" simulate --plan "$1" --scenario replay --trace "$tmp/load.csv" --cost-model roofline --min-duration 0 --json
}
live() {  # live PLAN OUT: the plan run by the supervisor under the load; loadgen's JSON in OUT
  "$fathom" online --supervise --plan "$1" --cost-model roofline --time-scale $scale --window-s 1 \
    --journal "$2.journal" >"$2.online" 2>"$2.log" &
  supervisor=$!
  local gateway
  gateway=$(printed_url "$2.log" "gateway listening on") || { echo "FAIL: the supervisor did not start: $(cat "$2.log")"; exit 1; }
  "$fathom" loadgen --url "$gateway" --trace "$tmp/load.csv" --scenario replay --time-scale $scale --min-duration 0 \
    --json >"$2" 2>"$2.loadgen"
  curl -sf "$gateway/fathom/replicas" >"$2.replicas"
  kill -TERM "$supervisor"
  wait "$supervisor"
  supervisor=""
}
simulated "$tmp/static.json" >"$tmp/sim_static.json"
simulated "$tmp/plan.json" >"$tmp/sim_plan.json"
live "$tmp/static.json" "$tmp/live_static.json"
live "$tmp/plan.json" "$tmp/live_plan.json"

for run in live_static live_plan; do
  check "$run: every request answered" \
    jq -e ".failed_requests == 0 and .completed_requests == $requests" "$tmp/$run.json"
done
check "the switch was made under load" grep -q "1 switches done, 0 rolled back" "$tmp/live_plan.json.online"
check "the switch is journaled" \
  bash -c "[ \$(sqlite3 '$tmp/live_plan.json.journal' \"select count(*) from journal where event = 'plan_switch'\") = 1 ]"
check "one TP2 replica serves after it" jq -e 'length == 1 and .[0].max_num_seqs == 512' "$tmp/live_plan.json.replicas"
check "holding the start keeps two replicas" jq -e 'length == 2' "$tmp/live_static.json.replicas"
check "the simulated plan made its switch" jq -e '.switches | length == 1' "$tmp/sim_plan.json"

# gain KEY DIRECTION STATIC PLAN: the plan's gain on KEY (1: higher is better, -1: lower).
gain() { jq -n --slurpfile s "$3" --slurpfile p "$4" "if $2 > 0 then \$p[0].$1 / \$s[0].$1 - 1 else 1 - \$p[0].$1 / \$s[0].$1 end"; }
for run in sim_static sim_plan live_static live_plan; do
  jq -r "\"$run: \\(.throughput_tokens_per_s | round) tokens/s, mean e2e \\(.e2e_mean_ms | round) ms, p99 TPOT \\(.tpot_p99_ms | round) ms\"" "$tmp/$run.json"
done
for key in "throughput_tokens_per_s 1" "e2e_mean_ms -1"; do
  set -- $key
  predicted=$(gain "$1" "$2" "$tmp/sim_static.json" "$tmp/sim_plan.json")
  measured=$(gain "$1" "$2" "$tmp/live_static.json" "$tmp/live_plan.json")
  echo "plan's gain on $1: simulated $predicted, measured $measured"
  check "a real gain predicted on $1" jq -en "$predicted > 0.1"
  check "the measured gain on $1 within 10% of the simulated one" \
    jq -en "($measured - $predicted) | fabs <= 0.1 * $predicted"
done

# Bad input: exit 2, naming the rule.
sed 's/"drain"/"migrate"/' "$tmp/plan.json" >"$tmp/migrate.json"
expect_fail 'switches[0].kv = "migrate": the supervisor switches replicas by rolling replacement' \
  online --supervise --plan "$tmp/migrate.json"
expect_fail "--plan: with --supervise" online --plan "$tmp/plan.json"
expect_fail "--deployment and --plan" online --supervise --plan "$tmp/plan.json" --deployment "$tmp/plan.json"
expect_fail "--engine-cmd and --replicas" online --supervise --plan "$tmp/plan.json" --replicas 3
sed 's/"after_s"/"after"/' "$tmp/plan.json" >"$tmp/bad.json"
expect_fail "switches[0]" online --supervise --plan "$tmp/bad.json"

finish plan_live_test
