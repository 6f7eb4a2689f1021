#!/usr/bin/env bash
# End-to-end checks of the fathom program: exit codes, key outputs and error messages.
# Usage: cli_test.sh FATHOM_BINARY TEST_DATA_DIR
set -u
fathom=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# expect CODE PATTERN -- ARGS...: runs fathom, checks the exit code and that PATTERN occurs in
# stdout+stderr.
expect() {
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$("$fathom" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -qF -- "$pattern" <<<"$out"; then
    echo "FAIL: fathom $* -> exit $rc (wanted $code), pattern '$pattern'"
    echo "$out" | head -20
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
}

# Foundation: the default job, listings and JSON keys.
expect 0 "fits: yes" -- memory
expect 0 '"kv_capacity_tokens_per_gpu"' -- memory --json
expect 0 '"params_active"' -- memory --json --model llama3.1-405b --gpus 8 --weights fp8
expect 0 "mi355x" -- hardware list
expect 0 '"scale_up_domain_gpus": 72' -- hardware show gb200
expect 0 "qwen3-235b-a22b" -- model list
expect 0 '"attention": "mla"' -- model show deepseek-r1

# Bad input: exit code 2 and a message naming the field, the value and the rule.
expect 2 "gpus = 8: must be a multiple of tp x pp (3)" -- memory --model deepseek-r1 --gpus 8 --tp 3
expect 2 "ep = 16: must divide the number of experts (8)" -- memory --model mixtral-8x7b --gpus 16 --ep 16
expect 2 "attention tp (tp / attn_dp) = 6: must divide num_attention_heads (128)" -- memory --model deepseek-r1 --gpus 6
expect 2 '--weights = "fp5": unknown data type' -- memory --weights fp5
expect 2 "malformed_config.json: malformed JSON at byte" -- memory --model "$data/malformed_config.json"
expect 2 "missing_field_config.json: field 'num_hidden_layers': missing (required integer)" -- \
  memory --model "$data/missing_field_config.json"
expect 2 "hardware 'tpu': unknown" -- hardware show tpu
expect 2 "model 'gpt-9'" -- model show gpt-9
expect 2 "--reserve = 1.500000: must be in [0, 1)" -- memory --reserve 1.5
expect 2 "The following argument was not expected" -- memory --bogus

# Workloads.
root=$(cd "$data/../.." && pwd)
expect 0 '"mean": 3886.2274' -- trace stats "$root/traces/data/mlperf_deepseek_r1/deepseek-r1.csv" --max-output 20000 --json
expect 0 "requests        19366" -- trace stats "$root/traces/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
expect 0 "36.6% repeated" -- trace stats "$root/traces/data/mooncake_fast25/conversation_trace.jsonl"
expect 0 "failed responses 2" -- trace stats "$data/burstgpt_sample.csv"
printf 'input_length,output_length\n10,20\n5,x\n7,8\n' >"$tmp/bad.csv"
expect 2 "bad.csv:3: column output_length: \"x\" is not a non-negative integer" -- trace stats "$tmp/bad.csv"
expect 0 "skipped lines   1 (first: " -- trace stats "$tmp/bad.csv" --skip-bad-lines
expect 2 '--format = "parquet": unknown trace format' -- trace stats "$tmp/bad.csv" --format parquet
expect 0 "wrote 8776 requests" -- trace convert "$root/traces/data/mlperf_deepseek_r1/deepseek-r1.csv" \
  --equal-issue 5000 --out "$tmp/padded.jsonl"
expect 0 "requests        8776" -- trace stats "$tmp/padded.jsonl"
expect 0 "wrote 1000 requests" -- trace synth --requests 1000 --rate 2 --arrival gamma --cv 3 --out "$tmp/syn.csv" --to csv
expect 0 "burstiness CV" -- trace stats "$tmp/syn.csv"
expect 0 "fitted lognormal lengths" -- trace synth --requests 100 --lengths fit --max-output 20000 \
  --from "$root/traces/data/mlperf_deepseek_r1/deepseek-r1.csv" --out "$tmp/fit.jsonl"
expect 2 "--cv = -1.000000: must be > 0" -- trace synth --arrival gamma --cv -1 --out "$tmp/never.jsonl"
[[ ! -e "$tmp/never.jsonl" ]] || { echo "FAIL: a failed synth left a file"; failed=$((failed + 1)); }
expect 2 "bad.csv:3" -- trace convert "$tmp/bad.csv" --out "$tmp/half.csv"
[[ ! -e "$tmp/half.csv" ]] || { echo "FAIL: a failed convert left a half-written file"; failed=$((failed + 1)); }

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
