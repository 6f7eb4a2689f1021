#!/usr/bin/env bash
# `fathom gateway` as a process of its own on loopback: in front of a `fathom serve` given on its
# command line; then fronting the replicas of `fathom online --supervise --gateway-url`, whose
# supervisor is killed with SIGKILL under load (the gateway and the replicas serve on, no request
# fails), and a second supervisor started on the same gateway replaces the orphaned replicas with
# its own. Bad input exits 2 with a clear message.
# Usage: gateway_test.sh FATHOM_BINARY
set -u
fathom=$1
tmp=$(mktemp -d)
trap 'kill -KILL $(jobs -p) 2>/dev/null; [ -n "${orphans:-}" ] && kill -KILL $orphans 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"

ctl() { curl -sf -H 'Authorization: Bearer secret' "$@"; }  # ctl URL...: a control call

# 1. In front of a replica given on the command line.
"$fathom" serve llama2-70b --tensor-parallel-size 2 --time-scale 20 --port 0 >"$tmp/serve.log" 2>&1 &
serve=$!
replica=$(printed_url "$tmp/serve.log" "fathom serve: listening on") || { echo "FAIL: serve: $(cat "$tmp/serve.log")"; exit 1; }
"$fathom" gateway --port 0 --replica "${replica#http://}" >"$tmp/static.log" 2>&1 &
static=$!
url=$(printed_url "$tmp/static.log" "fathom gateway: listening on") || { echo "FAIL: gateway: $(cat "$tmp/static.log")"; exit 1; }
check "a completion through the gateway" \
  bash -c "curl -sf -d '{\"prompt\":[1,2],\"max_tokens\":5}' $url/v1/completions | jq -e '.usage.completion_tokens == 5'"
check "without --token the control endpoints are off (403)" \
  bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' $url/fathom/replicas) = 403 ]"
check "its /metrics counts the completion" \
  bash -c "curl -sf $url/metrics | grep -qx 'fathom_gateway_requests_total{outcome=\"ok\"} 1'"
kill -TERM $static
wait $static
check "SIGTERM stops it with status 0" test $? -eq 0
kill -TERM $serve
wait $serve

# 2. A supervisor's replicas behind it, the supervisor killed.
"$fathom" gateway --port 0 --token secret >"$tmp/gateway.log" 2>&1 &
gateway=$!
url=$(printed_url "$tmp/gateway.log" "fathom gateway: listening on") || { echo "FAIL: gateway: $(cat "$tmp/gateway.log")"; exit 1; }
check "no replica yet: /health is 503" bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' $url/health) = 503 ]"
cat >"$tmp/deployment.json" <<'JSON'
{"model": "llama2-70b", "hardware": "h200", "gpus": 2, "tp": 1, "ep": 1, "attn_dp": 1, "weights": "fp8",
 "kv": "fp8", "max_batch": 64, "max_num_tokens": 8192}
JSON
supervise() {  # supervise LOG: a supervisor on the gateway, until it has its replicas routed
  "$fathom" online --supervise --gateway-url "$url" --token secret --deployment "$tmp/deployment.json" \
    --cost-model roofline --time-scale 10 --window-s 10 --initial-batch 64 --max-batch 64 \
    --max-num-tokens 8192 >/dev/null 2>"$1" &
  supervisor=$!
  for _ in $(seq 1 300); do
    grep -q "replicas behind the gateway" "$1" && return 0
    sleep 0.1
  done
  echo "FAIL: the supervisor did not start: $(cat "$1")"
  exit 1
}
supervise "$tmp/first.log"
first_pids=$(ctl "$url/fathom/replicas" | jq -r '[.[].pid] | join(" ")')
check "the supervisor registered two replicas with their pids" test "$(wc -w <<<"$first_pids")" -eq 2
check "and its metrics are on the gateway's /metrics" \
  bash -c "curl -sf $url/metrics | grep -qx 'fathom_supervisor_replicas{state=\"serving\"} 2'"
{
  echo input_length,output_length
  for i in $(seq 0 199); do echo "$((200 + i * 37 % 600)),$((40 + i * 13 % 80))"; done
} >"$tmp/chat.csv"
"$fathom" loadgen --url "$url" --trace "$tmp/chat.csv" --scenario server --qps 4 --samples 200 \
  --min-duration 0 --time-scale 10 --json >"$tmp/load.json" 2>"$tmp/load.log" &
load=$!
sleep 3
kill -KILL $supervisor
wait $supervisor 2>/dev/null
wait $load
check "supervisor killed mid-load: every request answered" \
  jq -e '.failed_requests == 0 and .completed_requests == 200' "$tmp/load.json"
check "its replicas still routed" test "$(ctl "$url/fathom/replicas" | jq 'map(select(.draining | not)) | length')" -eq 2
orphans=$first_pids

# 3. The next supervisor on the same gateway takes the fleet over.
supervise "$tmp/second.log"
check "the next supervisor retired the earlier one's replicas" \
  test "$(grep -c 'of an earlier supervisor out of routing, draining' "$tmp/second.log")" -eq 2
gone=0
for _ in $(seq 1 100); do
  gone=1
  for pid in $orphans; do kill -0 "$pid" 2>/dev/null && gone=0; done
  [ $gone = 1 ] && break
  sleep 0.1
done
check "which drained and exited" test $gone = 1
check "the gateway routes its two replicas now" \
  bash -c "ctl() { curl -sf -H 'Authorization: Bearer secret' \"\$@\"; }; ctl $url/fathom/replicas |
           jq -e --arg old '$orphans' 'map(select(.draining | not)) | length == 2 and
             all(.[]; (.pid | tostring) as \$p | (\$old | split(\" \") | index(\$p)) == null)'"
"$fathom" loadgen --url "$url" --trace "$tmp/chat.csv" --scenario server --qps 4 --samples 40 \
  --min-duration 0 --time-scale 10 --json >"$tmp/load2.json" 2>"$tmp/load2.log"
check "and answers every request" jq -e '.failed_requests == 0 and .completed_requests == 40' "$tmp/load2.json"
kill -TERM $supervisor
wait $supervisor
check "SIGTERM stops the supervisor with status 0" test $? -eq 0
check "and takes its replicas out of the gateway" test "$(ctl "$url/fathom/replicas" | jq length)" -eq 0
kill -TERM $gateway
wait $gateway

expect_fail "--replica = nowhere: must be HOST:PORT" gateway --replica nowhere
expect_fail "--gateway-url: give --token" online --supervise --deployment "$tmp/deployment.json" \
  --gateway-url http://127.0.0.1:1
expect_fail "--gateway-url = 127.0.0.1:1: must be http://HOST:PORT" online --supervise \
  --deployment "$tmp/deployment.json" --gateway-url 127.0.0.1:1 --token secret
expect_fail "--gateway-url: GET http://127.0.0.1:1/fathom/replicas: the gateway did not answer" \
  online --supervise --deployment "$tmp/deployment.json" --gateway-url http://127.0.0.1:1 --token secret
expect_fail "--gateway-url excludes --gateway-port" \
  online --supervise --gateway-url http://127.0.0.1:1 --gateway-port 9 --token secret
finish gateway_test
