#!/usr/bin/env bash
# The official OpenAI Node SDK (installed by `.ci/setup --tests` into build/sdk) through `fathom
# gateway` in front of two `fathom serve` replicas: 1,000 streams at once all complete, a chat
# completion, and an unknown model is the SDK's NotFoundError (404), streamed or not. Skipped (77)
# without node or the SDK.
# Usage: sdk_test.sh FATHOM_BINARY SDK_DIR
set -u
fathom=$1
sdk=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null || [ ! -d "$sdk/node_modules/openai" ]; then
  echo "SKIP: no node or no OpenAI SDK in $sdk (bash .ci/setup --tests installs them)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] && cp -r "$tmp" /tmp/sdk_keep; rm -rf "$tmp"' EXIT
source "$here/lib.sh"

replicas=()
for i in 1 2; do
  "$fathom" serve llama2-70b --tensor-parallel-size 2 --time-scale 50 --port 0 \
    --served-model-name llama >"$tmp/serve$i.log" 2>&1 &
  url=$(printed_url "$tmp/serve$i.log" "fathom serve: listening on")
  replicas+=(--replica "${url#http://}")
done
"$fathom" gateway --port 0 "${replicas[@]}" >"$tmp/gateway.log" 2>&1 &
gateway=$(printed_url "$tmp/gateway.log" "fathom gateway: listening on") || { echo "FAIL: $(cat "$tmp/gateway.log")"; exit 1; }
node "$here/sdk_check.js" "$sdk" "$gateway" >"$tmp/sdk.json" 2>"$tmp/sdk.err"
check "the SDK ran: $(cat "$tmp/sdk.err" | tail -3)" test -s "$tmp/sdk.json"
saw=$(cat "$tmp/sdk.json")
saw() { jq -e -s "length == 1 and (.[0] | $1)" "$tmp/sdk.json"; }  # saw FILTER: what the SDK saw
check "1,000 SDK streams through the gateway all complete: $saw" \
  saw '.streams == 1000 and .complete == 1000 and .failed == 0'
check "a chat completion" saw '.chat_tokens == 5'
check "an unknown model is the SDK's NotFoundError (404), streamed or not" \
  saw '.not_found_streamed == 404 and .not_found_whole == 404' 
finish sdk_test
