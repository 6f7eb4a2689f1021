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

# The catalogue users own: every GPU and model type simulates and a restricted tune runs.
for hw in a100-sxm-40gb a100-sxm-80gb l40s h100-nvl gh200 gh200-144gb rtx-pro-6000; do
  expect 0 "throughput" -- simulate --model llama2-70b --hardware "$hw" --gpus 8 --tp 8 --kv fp8
done
for model in gpt-oss-20b kimi-k2 qwen3-32b qwen3-30b-a3b llama4-scout llama4-maverick gemma3-27b; do
  expect 0 "throughput" -- simulate --model "$model" --hardware b200 --gpus 8 --tp 8 --weights fp8 \
    --kv fp8
done
expect 0 "Best:" -- tune --model llama4-maverick --hardware h100-nvl --gpus 8 --samples 4388 \
  --max-batch 64 --max-num-tokens 4096
expect 2 "field 'model_type' = \"mamba\": unsupported architecture" -- model show \
  <(echo '{"model_type": "mamba", "vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1}')

# Bad input: exit code 2 and a message naming the field, the value and the rule.
expect 2 "gpus = 8: must be a multiple of tp x pp (3)" -- memory --model deepseek-r1 --gpus 8 --tp 3
expect 2 "ep = 16: must divide the number of experts (8)" -- memory --model mixtral-8x7b --gpus 16 --ep 16
expect 2 "attention tp (tp / attn_dp) = 6: must divide num_attention_heads (128)" -- memory --model deepseek-r1 --gpus 6
expect 2 '--weights = "fp5": unknown data type' -- memory --weights fp5
expect 2 "max_concurrency = -1: must be >= 0" -- simulate --max-concurrency -1 --samples 10
expect 2 "malformed_config.json: malformed JSON at byte" -- memory --model "$data/malformed_config.json"
expect 2 "missing_field_config.json: field 'num_hidden_layers': missing (required integer)" -- \
  memory --model "$data/missing_field_config.json"
expect 2 "hardware 'tpu': unknown" -- hardware show tpu
expect 2 "model 'gpt-9'" -- model show gpt-9
expect 2 "--reserve = 1.500000: must be in [0, 1)" -- memory --reserve 1.5
expect 2 "--kv-free-fraction = 1.500000: must be in [0, 1] (0: use --reserve)" -- memory --kv-free-fraction 1.5
expect 2 "kv_free_fraction = -0.5: must be in [0, 1] (0: use reserve)" -- simulate --kv-free-fraction -0.5 --samples 10
expect 2 "unknown flag --bogus for fathom memory; see fathom memory --help" -- memory --bogus
expect 2 "unknown flag --max-batchh for fathom tune (did you mean --max-batch?)" -- tune --max-batchh=5
expect 2 'unknown command "srve" for fathom (did you mean serve?)' -- srve --help
expect 2 "--max-model-len = 99999999: more than the 3464992 tokens one rank's KV cache holds" -- serve llama2-70b -tp 8 --max-model-len 99999999 --port 0
expect 2 'the commands: tune, simulate, autoscale, memory, report' -- srve --help
expect 2 'unknown command "tnue" for fathom (did you mean tune?)' -- tnue
expect 2 'unknown command "stat" for fathom trace (did you mean stats?)' -- trace stat x.csv
expect 2 'unknown flag --db for fathom profile summarize; see fathom profile summarize --help' -- profile summarize --db x.db

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
# A shifting mix: Azure's conversations, then mostly code, at the schedule's rates.
azure="$root/traces/data/azure_llm_2023/AzureLLMInferenceTrace"
expect 0 "wrote" -- trace synth --lengths empirical --from "${azure}_conv.csv" --from "${azure}_code.csv" \
  --schedule 600:2,600:4 --mix 1/0,0.2/0.8 --requests 100000 --out "$tmp/mix.csv" --to csv
expect 2 "several --from traces need --mix" -- trace synth --lengths empirical --from "${azure}_conv.csv" \
  --from "${azure}_code.csv" --schedule 600:2 --out "$tmp/never.jsonl"
expect 2 '--mix: segment "1/x" is not weights W/W/...' -- trace synth --lengths empirical \
  --from "${azure}_conv.csv" --from "${azure}_code.csv" --schedule 600:2 --mix 1/x --out "$tmp/never.jsonl"
expect 2 "--mix: weights for 1 segment, --schedule has 2" -- trace synth --lengths empirical \
  --from "${azure}_conv.csv" --from "${azure}_code.csv" --schedule 600:2,600:3 --mix 1/1 --out "$tmp/never.jsonl"
expect 2 "--cv = -1: must be > 0 and finite" -- trace synth --arrival gamma --cv -1 --out "$tmp/never.jsonl"
[[ ! -e "$tmp/never.jsonl" ]] || { echo "FAIL: a failed synth left a file"; failed=$((failed + 1)); }
expect 2 "bad.csv:3" -- trace convert "$tmp/bad.csv" --out "$tmp/half.csv"
expect 2 "--requests = 1000000000000: must be at most 100,000,000" -- trace synth --requests 1000000000000 \
  --out "$tmp/never.jsonl"
expect 2 "--rate = 1e+30: must be > 0 and at most 1e6 requests a second" -- trace synth --rate 1e30 \
  --out "$tmp/never.jsonl"
expect 2 "--rate = -1: must be > 0 and at most 1e6 requests a second" -- trace convert \
  "$root/traces/data/mlperf_deepseek_r1/deepseek-r1.csv" --rate -1 --out "$tmp/never.csv"
expect 2 "--sample = -3: must be from 1 to 100,000,000" -- trace convert \
  "$root/traces/data/mlperf_deepseek_r1/deepseek-r1.csv" --sample -3 --out "$tmp/never.csv"
if [[ -e "$tmp/never.jsonl" || -e "$tmp/never.csv" ]]; then
  echo "FAIL: a refused trace command left its output behind"
  failed=$((failed + 1))
fi
[[ ! -e "$tmp/half.csv" ]] || { echo "FAIL: a failed convert left a half-written file"; failed=$((failed + 1)); }

# Simulation.
expect 0 "MLPerf valid      yes" -- simulate --scenario server --qps 5
expect 0 '"mlperf_valid": true' -- simulate --deployment "$data/deployment_dsr1_b200.json" --scenario server --qps 4 --json
# Every token a response at 8 QPS: the serving front is busy the whole time requests arrive and
# bounds the figures, which the same run with a front that costs nothing bounds from the other side.
expect 0 "serving front     busy" -- simulate --scenario server --qps 5 --samples 300 --min-duration 0
expect 0 "FRONT-BOUND" -- simulate --stream-interval 1 --scenario server --qps 8 --samples 6582 \
  --min-duration 0
expect 0 '"front_free"' -- simulate --stream-interval 1 --scenario server --qps 8 --samples 6582 \
  --min-duration 0 --json
expect 0 '"completed_requests": 500' -- simulate --scenario interactive --qps 2 --samples 500 --json \
  --requests-out "$tmp/req.csv" --timeline "$tmp/timeline.json"
head -1 "$tmp/req.csv" | grep -qx "request_id,scheduled_s,first_token_s,completion_s,input_tokens,output_tokens,preemptions" \
  && [[ $(wc -l <"$tmp/req.csv") -eq 501 ]] || { echo "FAIL: requests CSV"; failed=$((failed + 1)); }
# Chrome trace JSON: one object holding traceEvents, one complete ("X") event per iteration.
[[ $(head -1 "$tmp/timeline.json") == '{"displayTimeUnit":"ms","traceEvents":[' && $(tail -1 "$tmp/timeline.json") == ']}' \
   && $(grep -c '"ph":"X"' "$tmp/timeline.json") -gt 100 ]] \
  || { echo "FAIL: timeline is not Chrome trace JSON"; failed=$((failed + 1)); }
"$fathom" simulate --scenario server --qps 3 --samples 300 --seed 7 --json >"$tmp/a.json"
"$fathom" simulate --scenario server --qps 3 --samples 300 --seed 7 --json >"$tmp/b.json"
cmp -s "$tmp/a.json" "$tmp/b.json" && passed=$((passed + 1)) || { echo "FAIL: same seed, different JSON"; failed=$((failed + 1)); }
expect 0 '"prefix_hit_rate"' -- simulate --model llama3.1-405b --hardware h200 --gpus 8 --weights fp8 --kv fp8 \
  --scenario replay --trace "$root/traces/data/mooncake_fast25/conversation_trace.jsonl" --prefix-caching \
  --router prefix-aware --max-batch 64 --json --samples 100
expect 0 '"completed_requests": 200' -- simulate --scenario closed-loop --clients 16 --samples 200 --json
expect 0 "disaggregated" -- simulate --disagg --prefill-instances 1 --prefill-tp 4 --prefill-ep 4 \
  --decode-tp 4 --decode-ep 4 --decode-attn-dp 4 --samples 200
expect 2 'scheduler = "fifo": unknown (one of static, prefill-first, chunked, mixed, decode-first)' -- simulate --scheduler fifo
expect 2 'runtime = "java": unknown (one of python, cpp)' -- simulate --runtime java
expect 2 "gemm_allreduce: TensorRT-LLM's gemm_allreduce_plugin is a TensorRT engine's: needs runtime cpp" -- \
  simulate --gemm-allreduce --samples 10
expect 0 "TP8 PP1" -- simulate --hardware h200 --model llama3.1-405b --tp 8 --weights fp8 --kv fp8 \
  --runtime cpp --gemm-allreduce --samples 50
expect 2 "--qps = 0: must be > 0 for the server scenario" -- simulate --scenario server
expect 2 "--qps = -2: must be > 0" -- simulate --scenario server --qps -2
expect 2 "deployment_typo.json: field 'max_batch_size': unknown" -- simulate --deployment "$data/deployment_typo.json"
expect 2 "--tp and --deployment: give the deployment in one place" -- simulate --deployment "$data/deployment_dsr1_b200.json" --tp 4
expect 2 "the replay scenario needs arrival times" -- simulate --scenario replay
expect 2 "max_batch = 0: must be >= 1" -- simulate --max-batch 0
simulate_out="$tmp/never.csv"
"$fathom" simulate --scheduler fifo --requests-out "$simulate_out" >/dev/null 2>&1
[[ ! -e "$simulate_out" && ! -e "$simulate_out.tmp" ]] || { echo "FAIL: a failed simulate left a file"; failed=$((failed + 1)); }

expect 0 '"error_bars_1sigma"' -- simulate --scenario server --qps 3 --samples 300 --error-bars --json
expect 2 "--perf-db = \"$tmp/none.db\": no such file" -- simulate --samples 100 --perf-db "$tmp/none.db"
expect 2 "--error-bars needs the calibrated cost model" -- simulate --samples 100 --cost-model roofline --error-bars

# Software stacks: each with its calibration; calibrate picks the one of its rows' round.
expect 0 "trtllm-1.2      TensorRT-LLM  MLPerf v6.0             b200,h200 " -- stack list
expect 0 "vllm-0.9-rocm   vLLM          MLPerf v5.1             mi300x,mi325x " -- stack list
expect 0 "vllm-0.14-rocm  vLLM          MLPerf v6.0             mi355x " -- stack list
expect 0 "sglang-0.5      SGLang        serving_benchmarks_aic  " -- stack list
expect 0 "vllm-0.18-cuda  vLLM          serving_benchmarks_aic  b200,h100-sxm,h200 " -- stack list
expect 0 '"calibrated_on": [' -- stack list --json
expect 0 '"iteration_overhead_us"' -- stack show trtllm-1.0
expect 0 "trtllm-1.2 / trtllm-1.0:" -- stack diff trtllm-1.0 trtllm-1.2
expect 2 '--stack = "vllm": not a known stack (trtllm-1.0, vllm-0.9-rocm, vllm-0.14-rocm, vllm-0.18-cuda, sglang-0.5, trtllm-1.2)' -- tune --stack vllm
expect 2 "--stack and --calibration: give one" -- simulate --samples 100 --stack trtllm-1.0 --calibration "$root/models/calibration/trtllm-1.0.json"
expect 0 "stack trtllm-1.2 (TensorRT-LLM" -- calibrate --results "$root/models/calibration/mlperf_v6.0.csv" \
  --setup "$root/models/calibration/published_deployments_v6.0.json" --max-requests 2000
expect 0 "stack trtllm-1.0 (TensorRT-LLM" -- calibrate --results "$root/models/calibration/mlperf_v5.1.csv" --max-requests 1000
expect 0 ", stack trtllm-1.0" -- simulate --samples 100 --stack trtllm-1.0
# --engine: the newest stack of that engine whose build runs on the GPU; an AMD GPU's default is
# vLLM on ROCm (TensorRT-LLM runs on NVIDIA's only), and its launch command is vLLM's.
expect 0 ", stack vllm-0.14-rocm" -- simulate --samples 100 --model llama2-70b --hardware mi300x --tp 1 --kv fp8
expect 0 ", stack vllm-0.18-cuda" -- simulate --samples 100 --engine vllm
expect 0 "prefill-first scheduler, batch 512, max tokens 4608, stack sglang-0.5" -- simulate --samples 100 \
  --engine sglang --model qwen3-32b --hardware h100-sxm --tp 4
expect 0 "chunked scheduler, batch 512, max tokens 4608, stack sglang-0.5" -- simulate --samples 100 \
  --engine sglang --model qwen3-32b --hardware h100-sxm --tp 4 --scheduler chunked
expect 2 "--engine = sglang: no SGLang stack runs on amd GPUs (sglang-0.5 runs on nvidia): give --stack to extrapolate to them" \
  -- simulate --samples 100 --model llama2-70b --hardware mi300x --tp 1 --kv fp8 --engine sglang
expect 2 "--engine = trtllm: no TensorRT-LLM stack runs on amd GPUs" -- tune --hardware mi300x --engine trtllm
expect 2 "--engine = sglang: no SGLang stack runs on amd GPUs" -- serve deepseek-r1 --engine sglang --hardware mi355x
expect 2 "--stack = trtllm-1.2 is a TensorRT-LLM stack, not --engine = vllm's" -- calibrate \
  --results "$root/models/calibration/mlperf_vllm_v5.1.csv" --engine vllm --stack trtllm-1.2
expect 2 "--engine = \"tgi\": must be trtllm, vllm or sglang" -- tune --engine tgi
amd_tune=(tune --model llama2-70b --hardware mi300x --gpus 8 --weights fp8 --kv fp8 --max-batch 256
  --max-num-tokens 2048 --no-disagg --samples 2000)
expect 0 "Engine: vLLM (stack vllm-0.14-rocm), the only one with a stack whose build runs on amd GPUs" -- "${amd_tune[@]}"
expect 0 "--async-scheduling" -- "${amd_tune[@]}"
expect 0 " 13 steps " -- "${amd_tune[@]}" --top 20 --stack vllm-0.9-rocm
expect 0 "--num-scheduler-steps" -- "${amd_tune[@]}" --top 20 --stack vllm-0.9-rocm
# Three engines on one GPU: tune runs each on its newest stack there and says which wins.
three_engines=(tune --model llama2-70b --hardware h200 --gpus 2 --weights fp8 --kv fp8 --max-batch 256
  --max-num-tokens 4096 --no-disagg --samples 1000)
out=$("$fathom" "${three_engines[@]}" 2>&1)
if grep -qE "^Engines \(each its newest stack on nvidia GPUs\): TensorRT-LLM \(trtllm-1.2\) [0-9,]+ tokens/s, SGLang \(sglang-0.5\) [0-9,]+ tokens/s, vLLM \(vllm-0.18-cuda\) [0-9,]+ tokens/s: (TensorRT-LLM|SGLang|vLLM) wins by [0-9.]+%$" <<<"$out" &&
   grep -qF "Launch it on " <<<"$out"; then
  passed=$((passed + 1))
else
  echo "FAIL: tune compares the engines that run on the GPU: $(grep -F Engine <<<"$out")"; failed=$((failed + 1))
fi
out=$("$fathom" "${three_engines[@]}" --engine vllm --json 2>&1)
if [[ $(jq -r '.stack + " " + .best.engine + " " + (.engines | length | tostring)' <<<"$out") == "vllm-0.18-cuda vLLM 1" ]]; then
  passed=$((passed + 1))
else
  echo "FAIL: tune --engine vllm predicts with the engine's stack alone: $(jq -c '{stack, engines}' <<<"$out")"; failed=$((failed + 1))
fi
# Measured serving points: each engine's points under its own stack, bad input named.
cat >"$tmp/points.csv" <<'CSV'
source,engine,version,hardware,model,weights,dense_weights,isl,osl,concurrency,tp,pp,attn_dp,ep,ttft_ms,tpot_ms
a,SGLang,0.5.1,h100-sxm,qwen3-32b,bf16,,1024,128,16,4,1,1,1,492.76,10.55
b,vLLM,0.12.0,h100-sxm,qwen3-32b,bf16,,1024,128,16,4,1,1,1,149.36,14.35
c,vLLM,0.12.0,h100-sxm,qwen3-32b,bf16,,1024,128,16,3,1,1,1,149.36,14.35
CSV
expect 0 "SGLang        sglang-0.5      qwen3-32b        h100-sxm       1" -- calibrate --benchmarks "$tmp/points.csv"
expect 0 "(1 not simulated)" -- calibrate --benchmarks "$tmp/points.csv" --benchmark-engine vllm
expect 0 "trtllm-1.2      all              all" -- calibrate --benchmarks "$tmp/points.csv" --stack trtllm-1.2
expect 0 '"tokens_per_s_per_gpu_median_abs_pct"' -- calibrate --benchmarks "$tmp/points.csv" --json
expect 0 "" -- calibrate --benchmarks "$tmp/points.csv" --points-out "$tmp/points_out.csv"
if grep -q '^c,vLLM,vllm-0.18-cuda,h100-sxm,qwen3-32b,,.*must divide' "$tmp/points_out.csv"; then
  passed=$((passed + 1))
else
  echo "FAIL: --points-out names why a point did not simulate: $(tail -1 "$tmp/points_out.csv")"; failed=$((failed + 1))
fi
sed 's/,16,4,1,1,1,492.76/,sixteen,4,1,1,1,492.76/' "$tmp/points.csv" >"$tmp/points_bad.csv"
expect 2 "points_bad.csv:2: column concurrency: \"sixteen\" is not a whole number from 1 to 2^30" \
  -- calibrate --benchmarks "$tmp/points_bad.csv"
sed 's/,h100-sxm,qwen3-32b,bf16,,1024,128,16,4,1,1,1,492.76/,tpu-v5,qwen3-32b,bf16,,1024,128,16,4,1,1,1,492.76/' \
  "$tmp/points.csv" >"$tmp/points_gpu.csv"
expect 2 "points_gpu.csv:2: column hardware" -- calibrate --benchmarks "$tmp/points_gpu.csv"
expect 2 "--benchmarks: not with --results or --setup" -- calibrate --benchmarks "$tmp/points.csv" \
  --results "$root/models/calibration/mlperf_v6.0.csv"
expect 2 "give the starting point, --stack or --calibration" -- calibrate --benchmarks "$tmp/points.csv" --fit
expect 0 "wrote $tmp/serving_fit.json" -- calibrate --benchmarks "$tmp/points.csv" --benchmark-engine vllm \
  --stack vllm-0.18-cuda --fit --free iteration_overhead_us --out "$tmp/serving_fit.json"
expect 0 "leave-one-model-out: the points have one model, none to leave out" -- calibrate \
  --benchmarks "$tmp/points.csv" --benchmark-engine vllm --stack vllm-0.18-cuda --cross-validate \
  --free iteration_overhead_us
expect 2 "give --results or --benchmarks" -- calibrate
expect 2 '--free = "gemm": not a fitted parameter (gemm_efficiency, memory_efficiency' -- calibrate \
  --results "$root/models/calibration/mlperf_v5.1.csv" --fit --free gemm --max-requests 100

# Four pipeline stages and two attention ranks under Poisson arrivals (the default Server tune's
# probe that once aborted): decoders move between cohorts and their slots are recycled, and a stale
# entry of one rank's cohort must not complete a sequence in another rank's cohort of that number.
cat >"$tmp/pp4.json" <<'JSON'
{"model": "deepseek-r1", "hardware": "b200", "gpus": 8, "tp": 2, "pp": 4, "ep": 2, "attn_dp": 2,
 "weights": "fp4", "kv": "fp8", "runtime": "python", "scheduler": "chunked", "max_batch": 512,
 "max_num_tokens": 4096}
JSON
expect 0 "server at 4.080 QPS, 30716 requests" -- simulate --deployment "$tmp/pp4.json" --scenario server \
  --qps 4.0795493873054083 --samples 30716

# Calibration and tuning.
expect 0 '"error_pct"' -- calibrate --results "$root/models/calibration/mlperf_v5.1.csv" --json --max-requests 2000
expect 0 '"capacity_qps_pred"' -- calibrate --results "$root/models/calibration/mlperf_v5.1.csv" --json --max-requests 2000
# Cross-validation fitted on the first 8 rows (every fold refits: on 20 rows it takes six times as
# long), each fold predicting all its group's rows: Cisco has none among the 8, so its fold is the
# fit on all of them.
expect 0 '"held_out": "Cisco"' -- calibrate --results "$root/models/calibration/mlperf_v5.1.csv" \
  --fit-rows 8 --json --cross-validate --max-requests 100 --samples 200
expect 0 "(the first 2 rows, each run as long as its MLPerf run" -- calibrate \
  --results "$root/models/calibration/mlperf_v5.1.csv" --fit --fit-rows 2 --free iteration_overhead_us \
  --max-requests 100 --samples 200 --json
expect 2 "--fit-rows = 84: must be 0 (all) to 83 (the rows of" -- calibrate \
  --results "$root/models/calibration/mlperf_v5.1.csv" --fit-rows 84
expect 2 "--max-requests = -1: must be >= 0" -- calibrate --results "$root/models/calibration/mlperf_v5.1.csv" --max-requests -1
expect 2 "--samples = 50: must be 0 (whole data sets) or >= 100" -- calibrate --results "$root/models/calibration/mlperf_v5.1.csv" --samples 50
expect 2 'adp_timeout_iters = 0: must be >= 1' -- simulate --adp-balance --adp-timeout-iters 0
expect 2 "burstgpt_sample.csv:1: missing column submitter" -- calibrate --results "$data/burstgpt_sample.csv"
# A row whose GPU count no published deployment has (a 16-GPU B300 Server) is refused before any
# simulation, naming both files, the line and the rule.
expect 2 "mlperf_unknown_size.csv:3: no entry of $root/models/calibration/published_deployments_v6.0.json deploys deepseek-r1 on 16 b300 GPUs for Server (Cisco): an entry must match the row's model, GPU, GPU count and scenario" \
  -- calibrate --results "$data/mlperf_unknown_size.csv"
expect 0 '"cost_per_million_tokens"' -- tune --model llama2-70b --hardware h200 --gpus 2 --weights fp8 \
  --max-batch 64,256 --max-num-tokens 4096 --dataset-samples 200 --json --best-out "$tmp/best.json" --db "$tmp/tune.db"
expect 0 '"evaluated": 0' -- tune --model llama2-70b --hardware h200 --gpus 2 --weights fp8 \
  --max-batch 64,256 --max-num-tokens 4096 --dataset-samples 200 --json --db "$tmp/tune.db"
expect 0 '"completed_requests": 4388' -- simulate --deployment "$tmp/best.json" --trace "$data/../../traces/data/mlperf_deepseek_r1/deepseek-r1.csv" --samples 300 --max-output 2000 --json
expect 2 '--scenario = "replay": tune supports offline, server and interactive' -- tune --scenario replay
# One notion of a run: simulate of the tuner's best (its file carries the run) prints the tuner's figures.
small_tune=(--engine trtllm --model llama2-70b --hardware h200 --gpus 2 --weights fp8 --kv fp8 --max-batch 256 --max-num-tokens 4096
            --no-disagg)
"$fathom" tune "${small_tune[@]}" --json --scenario server --best-out "$tmp/best_server.json" >"$tmp/tune_server.json" 2>/dev/null
"$fathom" simulate --deployment "$tmp/best_server.json" --json >"$tmp/sim_server.json" 2>/dev/null
# --qps alone replaces the file's run, its scenario too: the error says to name --scenario.
expect 2 "(--qps replaces the run $tmp/best_server.json records, its scenario too: name --scenario as well)" \
  -- simulate --deployment "$tmp/best_server.json" --qps 3
tuned=$(grep -m1 -o '"throughput_tokens_per_s": [0-9.]*' "$tmp/tune_server.json" | awk '{print $2}')
simulated=$(grep -m1 -o '"sustained_tokens_per_s": [0-9.]*' "$tmp/sim_server.json" | awk '{print $2}')
if [[ -n "$tuned" && "$tuned" == "$simulated" ]]; then passed=$((passed + 1)); else
  echo "FAIL: simulate of tune's best (server): $simulated tokens/s, tune said $tuned"; failed=$((failed + 1)); fi
expect 0 '"source": "the run `fathom tune` scored' -- simulate --deployment "$tmp/best_server.json" --json
# The published results nearest the question, beside the answer (Llama 2 70B on H200s: 8-GPU rows).
if jq -e '(.published.nearest | length > 0) and all(.published.nearest[]; .gpus == 8 and .scenario == "Server")
          and (.published.vs_best_pct | type == "number")' "$tmp/tune_server.json" >/dev/null; then
  passed=$((passed + 1))
else
  echo "FAIL: tune --json names the nearest published results: $(jq -c .published "$tmp/tune_server.json")"
  failed=$((failed + 1))
fi
# Error bars from the held-out published rows: Llama 2 70B on H200s is an unseen GPU and model to
# the newest stack (fitted on DeepSeek-R1 on 8xB200), and each interval holds the answer.
if jq -e '.best as $b | ($b.error_bars.qps | .low < $b.qps and .high > $b.qps and
          .extrapolates == "unseen GPU and model" and .rows >= 6)
          and ($b.error_bars.tpot_p99_ms.low < $b.tpot_p99_ms)' "$tmp/tune_server.json" >/dev/null &&
   jq -e '.error_bars.ttft_p99_ms.high > .ttft_p99_ms and (.error_bars | has("qps") | not)' \
     "$tmp/sim_server.json" >/dev/null; then
  passed=$((passed + 1))
else
  echo "FAIL: tune and simulate --json give error bars: $(jq -c .best.error_bars "$tmp/tune_server.json")"
  failed=$((failed + 1))
fi
# On a workload of the user's own, the intervals say they come from MLPerf runs.
expect 0 '"mlperf_workloads_only": true' -- simulate --deployment "$data/deployment_dsr1_b200.json" \
  --trace "$root/traces/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv" --samples 300 --json
# A GPU of a family no held-out row is on (L40S) gets the widest family's width, and says so.
expect 0 "no held-out result is on this GPU's family: as wide as the widest family's" -- simulate \
  --model llama3.1-8b --hardware l40s --tp 1 --scenario server --qps 1 --samples 200
expect 0 '"gpu_family_unseen": true' -- simulate --model llama3.1-8b --hardware l40s --tp 1 \
  --scenario server --qps 1 --samples 200 --json
# A run that falls behind its arrivals gets no latency interval (its p99s grow with its length).
if "$fathom" simulate --model llama3.1-8b --hardware l40s --tp 1 --scenario server --qps 200 \
  --samples 30000 --json | jq -e '.overloaded and .error_bars.latencies_overloaded and
     (.error_bars | has("ttft_p99_ms") or has("tpot_p99_ms") | not)' >/dev/null; then
  passed=$((passed + 1))
else
  echo "FAIL: simulate --json: an overloaded run's p99s get no interval"
  failed=$((failed + 1))
fi
# How often the intervals held on the held-out rows: near their 80% level overall.
if "$fathom" intervals --json | jq -e '.coverage[] | select(.family == "all") |
     .coverage >= 0.7 and .coverage <= 0.9 and .figures > 200' >/dev/null; then
  passed=$((passed + 1))
else
  echo "FAIL: fathom intervals --json: coverage of the held-out rows within 70-90%"
  failed=$((failed + 1))
fi
# Rows the table never held (MLPerf v6.1) are covered by the intervals the whole table gives.
if "$fathom" intervals --check "$root/models/calibration/residuals_v6.1.csv" --json |
  jq -e '.checked != null and (.coverage[] | select(.family == "all") | .figures > 400 and .coverage > 0.6)' >/dev/null; then
  passed=$((passed + 1))
else
  echo "FAIL: fathom intervals --check residuals_v6.1.csv: over 400 figures, coverage above 60%"
  failed=$((failed + 1))
fi
expect 2 "--level = 1.5: must be in (0, 1)" -- intervals --level 1.5
expect 2 "no_such.csv" -- intervals --check no_such.csv
expect 2 "is already in models/calibration/residuals.csv: --check takes rows the table does not hold" \
  -- intervals --check "$root/models/calibration/residuals.csv"
# Where the GPU time went: the parts add up to the GPUs' whole run.
if "$fathom" simulate --deployment "$data/deployment_dsr1_b200.json" --samples 200 --breakdown --json 2>/dev/null |
   jq -e '.gpu_seconds_per_million_tokens as $b | ($b.total > 0) and ($b.attention > 0)
          and ((([$b | to_entries[] | select(.key != "total") | .value] | add) - $b.total) | fabs < 1e-6 * $b.total)' \
     >/dev/null; then
  passed=$((passed + 1))
else
  echo "FAIL: simulate --breakdown --json: GPU-seconds per million tokens by part, adding up to the total"
  failed=$((failed + 1))
fi
# The GB200 rack's published results: the best is v6.1's (every 100 tokens a response), and v6.0's
# NVIDIA run, listed too, streamed every token; the configurations side by side say how each streams.
expect 0 "  v6.0 NVIDIA, GB200-NVL72_GB200-186GB_aarch64x72_TRT: 110.00 QPS (336106 tokens/s, p99 TTFT 1159 ms, TPOT 79.3 ms); TP8 PP1 EP8 attnDP8 x9 fp4, batch 512, 3456 tokens a step, fp8 KV, streams every token" \
  -- tune --engine trtllm --model deepseek-r1 --hardware gb200 --gpus 72 --scenario server \
  --max-batch 1024 --max-num-tokens 2048 --no-disagg
expect 0 "  published: TP8 PP1 EP8 attnDP8 x9 fp4, batch 512, 3456 tokens a step, fp8 KV, streams every 100 tokens" \
  -- tune --engine trtllm --model deepseek-r1 --hardware gb200 --gpus 72 --scenario server \
  --max-batch 1024 --max-num-tokens 2048 --no-disagg
expect 0 "Published (MLPerf, deepseek-r1 on 8 x b200):" -- simulate --deployment "$data/deployment_dsr1_b200.json" \
  --scenario offline --samples 200
expect 0 "with --seed changed (not the tuner's figures)" -- simulate --deployment "$tmp/best_server.json" --seed 3
"$fathom" tune "${small_tune[@]}" --json --best-out "$tmp/best_offline.json" >"$tmp/tune_offline.json" 2>/dev/null
"$fathom" simulate --deployment "$tmp/best_offline.json" --json >"$tmp/sim_offline.json" 2>/dev/null
tuned=$(grep -m1 -o '"throughput_tokens_per_s": [0-9.]*' "$tmp/tune_offline.json" | awk '{print $2}')
simulated=$(grep -m1 -o '"throughput_tokens_per_s": [0-9.]*' "$tmp/sim_offline.json" | awk '{print $2}')
# Two identical instances: the tuner simulates one and doubles it, simulate runs both (within 1%).
if awk -v a="$tuned" -v b="$simulated" 'BEGIN { exit !(a > 0 && b > 0.99 * a && b < 1.01 * a) }'; then
  passed=$((passed + 1)); else echo "FAIL: simulate of tune's best (offline): $simulated tokens/s, tune said $tuned"
  failed=$((failed + 1)); fi
# Adaptive plans: the plan file replays to the figure the search gave it; bad plans and scenarios
# without plan search say so.
"$fathom" tune "${small_tune[@]}" --adaptive --plan-out "$tmp/plan.json" --json >"$tmp/tune_adaptive.json" 2>/dev/null
"$fathom" simulate --plan "$tmp/plan.json" --json >"$tmp/sim_plan.json" 2>/dev/null
if jq -e --slurpfile s "$tmp/sim_plan.json" '.adaptive.best.throughput_tokens_per_s == $s[0].throughput_tokens_per_s
    and (.adaptive.oracle.throughput_tokens_per_s >= .adaptive.static.throughput_tokens_per_s)
    and (.adaptive.plans_simulated > 4)' "$tmp/tune_adaptive.json" >/dev/null; then
  passed=$((passed + 1)); else echo "FAIL: simulate --plan repeats tune --adaptive's figure: $(jq -c .adaptive.best.throughput_tokens_per_s "$tmp/tune_adaptive.json") vs $(jq -c .throughput_tokens_per_s "$tmp/sim_plan.json")"
  failed=$((failed + 1)); fi
jq '.switches = [{"when": "after_s", "value": 60, "kv": "recompute", "restart_s": 30, "to": (.start | del(.run) | .max_batch = 64 | .reserve = 0.2)},
                 {"when": "after_s", "value": 200, "to": (.start | del(.run) | .tp = 1 | .cuda_graph_batch_sizes = [1, 8])}]' \
  "$tmp/plan.json" >"$tmp/plan2.json"
expect 0 "1. after_s 60 -> " -- simulate --plan "$tmp/plan2.json" --samples 400
expect 0 "tokens/s against holding the start: " -- simulate --plan "$tmp/plan2.json" --samples 400 --error-bars
expect 0 "gain of the best plan +" -- tune "${small_tune[@]}" --adaptive --error-bars
expect 2 "--error-bars requires --adaptive" -- tune --error-bars
expect 0 "throughput" -- simulate --queue-order shortest-input-first --samples 400
expect 0 "restart 30.0 s" -- simulate --plan "$tmp/plan2.json" --samples 400
expect 0 "(runtime start 10 s, weights " -- simulate --plan "$tmp/plan2.json" --samples 400
jq '.switches[0].when = "whenever"' "$tmp/plan2.json" >"$tmp/plan_bad.json"
expect 2 'plan_bad.json: switches[0]: field '"'"'when'"'"' = "whenever": must be after_s' -- simulate --plan "$tmp/plan_bad.json"
expect 2 "--deployment and --plan: a plan holds its deployments" -- simulate --plan "$tmp/plan2.json" \
  --deployment "$tmp/best_offline.json"
expect 2 "--max-batch and --plan: give the deployment in one place" -- simulate --plan "$tmp/plan2.json" --max-batch 8
expect 0 "Adaptive plans (Server-type: rules on the queue's length, 2 batch-limit variants x 4 triggers" -- \
  tune --model llama2-70b --hardware h200 --gpus 2 --weights fp8 --kv fp8 --max-batch 128 256 512 \
  --max-num-tokens 4096 --no-disagg --scenario server --adaptive
expect 2 "--plan-out requires --adaptive" -- tune --plan-out "$tmp/x.json"
# Autoscaling a shifting load: replicas per phase, the plan replayed by simulate --plan.
replica="$root/docs/examples/llama2-70b-h200-tp1.json"
conv="$root/traces/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
expect 0 "every phase within the limits" -- autoscale --deployment "$replica" --trace "$conv" --phase-s 900 \
  --plan-out "$tmp/scale.json"
expect 0 "limits (p99)      TTFT 2000 ms, TPOT 200 ms: met" -- simulate --plan "$tmp/scale.json" --scenario replay \
  --trace "$conv" --ttft-ms 2000 --tpot-ms 200
expect 2 "needs arrival times" -- autoscale --deployment "$replica" \
  --trace "$root/traces/data/mlperf_deepseek_r1/deepseek-r1.csv"
expect 2 "--phase-s = -5: must be > 0" -- autoscale --deployment "$replica" --trace "$conv" --phase-s -5
expect 2 "do not keep the p99 limits" -- autoscale --deployment "$replica" --trace "$conv" --max-replicas 1
# The tuner's best names the CUDA-graph sizes its figures assumed (the stack's below the batch
# limit, then the limit), and its TensorRT-LLM launch captures those.
"$fathom" tune --max-batch 300 --max-num-tokens 4096 --no-disagg --dataset-samples 200 --max-output 2000 --json \
  --best-out "$tmp/best_graphs.json" >"$tmp/tune_graphs.json" 2>/dev/null
if tr -d ' \n' <"$tmp/best_graphs.json" | grep -qF '"cuda_graph_batch_sizes":[1,2,4,8,16,32,64,128,256,300]' &&
  grep -qF 'batch_sizes: [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]' "$tmp/tune_graphs.json"; then
  passed=$((passed + 1)); else echo "FAIL: tune's best and launch do not name its CUDA-graph sizes"
  failed=$((failed + 1)); fi
# Interactive tunes state the MTP acceptance they assumed, which --acceptance sets.
expect 0 "MTP: 3 draft tokens a step, each accepted with probability 0.60 (assumed: --acceptance)" -- \
  tune --scenario interactive --max-batch 64 --max-num-tokens 2048 --no-disagg --dataset-samples 200 \
  --max-output 2000 --acceptance 0.6
expect 2 "--acceptance = 1.5: must be in [0, 1)" -- tune --scenario interactive --acceptance 1.5
# What a newcomer trips on, said where it happens: a KV cache that thrashes, latencies past 100 s
# in seconds, an invalid run's reason, medians over no rows.
expect 0 "KV THRASHING      33.3 preemptions a request" -- simulate --model deepseek-r1 --hardware b200 --gpus 8 \
  --ep 8 --attn-dp 8
expect 0 "TTFT (s)" -- simulate
expect 0 "MLPerf valid      no: no p99 latency limits to judge it by" -- simulate --model llama2-70b --hardware h200 \
  --tp 8 --weights fp8 --scenario replay --trace "$root/traces/data/azure_llm_2023/AzureLLMInferenceTrace_code.csv"
(head -1 "$root/models/calibration/mlperf_v6.0.csv" && grep ",Server," "$root/models/calibration/mlperf_v6.0.csv") \
  >"$tmp/server_rows.csv"
expect 0 "(Offline rows none)" -- calibrate --results "$tmp/server_rows.csv" --max-requests 1000
# Every number is checked before the search starts (it runs for minutes).
expect 2 "--price = nan: must be USD per GPU-hour > 0 and finite" -- tune --price nan
expect 2 "--ttft-ms = -1: must be > 0 and finite" -- tune --ttft-ms -1
expect 2 "--tpot-ms = nan: must be > 0 and finite" -- tune --tpot-ms nan
expect 2 "--capacity-qps = -1: must be > 0 and finite" -- tune --capacity-qps -1
expect 0 "Run: whole data sets lasting 660 s" -- simulate --model llama2-70b --hardware h200 --gpus 2 --tp 2 --weights fp8
expect 0 "run length        " -- simulate --deployment "$tmp/best_offline.json"
# A search that finds nothing says why, what came closest and what to relax; --json too.
expect 2 "broke the p99 TPOT limit (5 ms) at the lowest QPS tried" -- tune "${small_tune[@]}" --scenario server --tpot-ms 5
expect 2 "a p99 TPOT limit of at least" -- tune "${small_tune[@]}" --scenario server --tpot-ms 5
expect 2 '"valid": false' -- tune "${small_tune[@]}" --json --scenario server --tpot-ms 5
expect 2 '"advice": [' -- tune "${small_tune[@]}" --json --scenario server --tpot-ms 5
expect 2 "no: does not fit in memory (lacks" -- tune --model llama3.1-405b --hardware h200 --weights fp8 --kv fp8 \
  --max-batch 64 --max-num-tokens 2048 --no-disagg --scenario server --capacity-qps 1000 --capacity-gpus 1
expect 2 "do not fit in memory (the closest, TP1 PP1 EP1" -- tune --model llama3.1-405b --hardware h200 --gpus 1 \
  --weights fp8 --max-batch 64 --max-num-tokens 2048 --no-disagg
# Validity with its reasons, overload said, timeline events counting their steps.
expect 0 "MLPerf valid      no: run" -- simulate --samples 100 --max-output 2000
expect 0 "over the 5 ms limit" -- simulate --scenario server --qps 2 --samples 200 --tpot-ms 5
expect 0 "requests were still waiting for their first token at the last arrival" -- simulate --scenario server --qps 20 --samples 3000 \
  --max-batch 32
"$fathom" simulate --samples 100 --timeline "$tmp/timeline.json" >/dev/null 2>&1
if grep -q '"steps":' "$tmp/timeline.json"; then passed=$((passed + 1)); else
  echo "FAIL: timeline events lack args.steps"; failed=$((failed + 1)); fi
# Inputs of the wrong type are errors naming the file and field, never a crash.
echo '{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":"stream 7","ts":1,"dur":2}]}' >"$tmp/kineto.json"
expect 0 "imported 1 records" -- profile import "$tmp/kineto.json" --db "$tmp/kineto.db" --hardware h100
echo '{"traceEvents":[{"ph":"X","cat":"kernel","name":5,"ts":1,"dur":2}]}' >"$tmp/kineto_bad.json"
expect 2 "kineto_bad.json: traceEvents[0]: field 'name' = 5: must be a string" -- profile import "$tmp/kineto_bad.json" \
  --db "$tmp/kineto_bad.db" --hardware h100
echo '{"model_type":"llama","hidden_size":4096,"num_hidden_layers":2,"num_attention_heads":32,"intermediate_size":11008,
  "vocab_size":32000,"quantization_config":{"quant_method":8}}' >"$tmp/quant.json"
expect 2 "quant.json: quantization_config: field 'quant_method' = 8: must be a string" -- memory --model "$tmp/quant.json"
expect 2 "--think-time = nan: must be in [0, 1e9] s" -- simulate --scenario closed-loop --clients 4 --samples 20 --think-time nan
expect 2 "--qps = inf: must be >= 0 and finite" -- simulate --scenario server --qps inf
expect 2 "kv_link_gb_per_s = 1e-300: must be 0" -- simulate --disagg --prefill-instances 1 --prefill-tp 4 --prefill-ep 4 \
  --decode-instances 1 --decode-tp 4 --decode-ep 4 --decode-attn-dp 4 --kv-link-gbps 1e-300 --scenario server --qps 1
if [[ ! -e /dev/nvidiactl ]]; then
  expect 2 "NVIDIA GPU and driver" -- profile run -- /bin/true  # the driver, or (no CUDA build) the tracer
fi
# Each model runs on its MLPerf benchmark's data set and limits; other models say what they got.
expect 0 "workload: MLPerf llama2-70b data set, OpenOrca" -- tune --model llama2-70b --hardware h200 --gpus 2 --weights fp8 \
  --max-batch 64 --max-num-tokens 4096 --dataset-samples 200
expect 0 "p99 limits TTFT 450 ms / TPOT 60 ms" -- tune --model llama2-70b --hardware b200 --gpus 2 --weights fp8 \
  --scenario interactive --max-batch 64 --max-num-tokens 4096 --dataset-samples 200 --no-disagg --tpot-ms 60
expect 0 "which no MLPerf benchmark runs" -- tune --model qwen3-235b-a22b --hardware b200 --gpus 8 --weights fp8 \
  --max-batch 64 --max-num-tokens 4096 --dataset-samples 200
expect 0 '"workload": "workload: MLPerf gpt-oss-120b data set' -- tune --model gpt-oss-120b --hardware h200 --gpus 1 \
  --weights fp8 --max-batch 64 --max-num-tokens 4096 --dataset-samples 200 --json
expect 2 '--benchmark = "mlperf": not an MLPerf benchmark fathom knows (deepseek-r1, llama2-70b' -- tune --benchmark mlperf
expect 0 '"completed_requests": 8313' -- simulate --model llama3.1-405b --hardware b200 --gpus 8 --tp 8 --weights fp8 \
  --samples 300 --json
expect 2 '--cost-model = "magic": must be calibrated or roofline' -- tune --cost-model magic

# Reports on the stored sweeps: a second sweep (server, another GPU) to compare with the first.
expect 0 "Best:" -- tune --model llama2-70b --hardware b200 --gpus 2 --weights fp8 --scenario server \
  --ttft-ms 2000 --tpot-ms 200 --max-batch 64,256 --max-num-tokens 4096 --dataset-samples 200 --db "$tmp/tune.db" \
  --frontier-csv "$tmp/frontier.csv" --runs-log "$tmp/runs.jsonl"
expect 0 "llama2-70b  2xb200  server" -- report --db "$tmp/tune.db" --list
expect 0 "llama2-70b 2xh200 offline" -- report --db "$tmp/tune.db" --top 2
expect 0 "(what-if; swept at \$3.80)" -- report --db "$tmp/tune.db" --price h200=7.6
expect 0 "wrote $tmp/report.html (6 sweeps)" -- report --db "$tmp/tune.db" --out "$tmp/report.html"
expect 0 "wrote" -- report --db "$tmp/tune.db" --out "$tmp/cost.svg" --plot cost
expect 0 "wrote" -- report --db "$tmp/tune.db" --out "$tmp/candidates.csv"
report_files_ok() {
  [[ $(grep -c "<svg" "$tmp/report.html") -eq 2 ]] && grep -q "</svg>" "$tmp/cost.svg" &&
    [[ $(head -1 "$tmp/candidates.csv" | cut -d, -f1-3) == "sweep,model,hardware" ]] &&
    [[ $(head -1 "$tmp/frontier.csv" | cut -d, -f1) == "tokens_per_s_per_gpu" ]] &&
    [[ $(grep -c '^{"stack":"[a-z0-9.-]*","config":{.*"qps":.*"outcome":"\(valid\|TTFT\|TPOT\|TTFT and TPOT\)".*"wall_s":[0-9.e-]*}$' "$tmp/runs.jsonl") -eq $(wc -l <"$tmp/runs.jsonl") ]] &&
    grep -q '"outcome":"valid"' "$tmp/runs.jsonl"
}
if report_files_ok; then passed=$((passed + 1)); else echo "FAIL: report files"; failed=$((failed + 1)); fi
expect 2 "no such results database" -- report --db "$tmp/none.db"
expect 2 '--sweep = "x": matches no sweep' -- report --db "$tmp/tune.db" --sweep x
expect 2 '--price = "h200=-1": must be USD per GPU-hour > 0' -- report --db "$tmp/tune.db" --price h200=-1
expect 2 "hardware 'tpu': unknown" -- report --db "$tmp/tune.db" --price tpu=2
expect 2 '--out = "r.pdf": must end in .html, .md, .svg or .csv' -- report --db "$tmp/tune.db" --out r.pdf
expect 2 '--plot = "pie": must be frontier or cost' -- report --db "$tmp/tune.db" --out "$tmp/x.svg" --plot pie
expect 2 '--top = 0: must be >= 1' -- report --db "$tmp/tune.db" --top 0
[[ ! -e r.pdf ]] || { echo "FAIL: r.pdf written"; failed=$((failed + 1)); }

# Online tuner on an emulated runtime: started with too few sequences a rank for 3 QPS of
# DeepSeek-R1, it raises the limit, and no request is lost.
expect 0 "0 dropped" -- online --load 600:3 --initial-batch 32 --warmup-s 300 --probe-s 300
expect 0 '"changes": ' -- online --load 300:3 --initial-batch 32 --warmup-s 300 --probe-s 300 --json --compare-static
expect 2 '--load: segment "600" is not DURATION_S:RATE' -- online --load 600
expect 2 "the choice (512 seqs, 2048 tokens) exceeds the limits the runtime started with (256 seqs, 8192 tokens)" -- online --max-batch 512
expect 2 "--window-s = 0: must be >= 1 and finite" -- online --window-s 0
expect 2 "--cv = nan: must be > 0 and finite" -- trace synth --cv nan --out "$tmp/never.jsonl"
expect 2 "--time-scale = nan: must be > 0 and finite" -- trace convert "$data/burstgpt_sample.csv" --time-scale nan --out "$tmp/never.jsonl"
expect 2 "--rate = inf: must be > 0 and at most 1e6 requests a second" -- trace convert "$data/burstgpt_sample.csv" --rate inf --out "$tmp/never.jsonl"
expect 2 "--min-input = -3: must be >= 0" -- trace convert "$data/burstgpt_sample.csv" --min-input -3 --out "$tmp/never.jsonl"
expect 2 "--window-s = 1e-06: must be >= 1 and finite" -- online --window-s 1e-6
expect 2 '--load = "": give at least one DURATION_S:RATE segment' -- online --load ""
expect 2 '--load: segment "900:nan": the duration must be > 0 and the rate >= 0, both finite' -- online --load 900:nan
expect 2 "--min-gain = -1: must be >= 0" -- online --min-gain -1
expect 2 "--history-requests = 5: must be >= --min-requests" -- online --history-requests 5
expect 0 "p99 limits TTFT 2000 ms / TPOT 200 ms" -- online --deployment "$tmp/best.json" --load 300:2 --max-output 1000

# Online tuner on a live runtime: two vLLM metric pages served in turn, limits applied by a command.
page() {  # page FINISHED RUNNING: a minimal vLLM /metrics page
  printf 'vllm:num_requests_running{model_name="m"} %s\nvllm:num_requests_waiting{model_name="m"} 0\n' "$2"
  printf 'vllm:request_success_total{finished_reason="stop",model_name="m"} %s\n' "$1"
  for h in time_to_first_token_seconds:0.5 request_time_per_output_token_seconds:0.05 \
           request_prompt_tokens:1000 request_generation_tokens:500; do
    printf 'vllm:%s_bucket{le="%s"} %s\nvllm:%s_bucket{le="+Inf"} %s\n' "${h%%:*}" "${h#*:}" "$1" "${h%%:*}" "$1"
  done
}
page 0 0 > "$tmp/page0"
page 100 20 > "$tmp/page1"
page 200 20 > "$tmp/page2"
metrics="n=\$(cat $tmp/n 2>/dev/null || echo 0); cat $tmp/page\$n; echo \$((n + 1)) > $tmp/n"
expect 0 "Tuned: 2 windows, 2 of 2 judged within both p99 limits" -- online --deployment "$tmp/best.json" \
  --metrics-cmd "$metrics" --apply-cmd "echo {max_batch} > $tmp/applied" --window-s 0.01 --windows 2 \
  --warmup-s 1 --probe-s 1
expect 2 "--metrics-cmd: give --deployment" -- online --metrics-cmd "cat $tmp/page1" --apply-cmd true
expect 2 "--load: for the emulated runtime, not with --metrics-cmd" -- online --deployment "$tmp/best.json" \
  --metrics-cmd "cat $tmp/page1" --apply-cmd true --load 60:1
expect 2 "--metrics-cmd output line 1: expected a metric name" -- online --deployment "$tmp/best.json" \
  --metrics-cmd "echo '{}'" --apply-cmd true
started=$SECONDS
expect 2 '--metrics-cmd = "sleep 60": did not finish within 0.5 s (--command-timeout); killed' -- online \
  --deployment "$tmp/best.json" --metrics-cmd "sleep 60" --apply-cmd true --command-timeout 0.5
if (( SECONDS - started < 20 )); then passed=$((passed + 1)); else echo "FAIL: a hung --metrics-cmd was not cut short"; failed=$((failed + 1)); fi

# Profiler.
expect 0 "imported 3 records" -- profile import "$data/pytorch_trace.json" --db "$tmp/prof.db"
expect 0 '"by_operator_kind"' -- profile summarize "$tmp/prof.db" --json
expect 2 "prof.db: not a fathom results database" -- report --db "$tmp/prof.db" --list
expect 2 "no such performance database" -- profile summarize "$tmp/none.db"
expect 2 "not an Nsight Systems SQLite export, a PyTorch profiler trace (JSON), a GEMM or all-reduce table" -- profile import "$data/burstgpt_sample.csv" --db "$tmp/prof.db"
# Vidur's measured H100 profiles: imported (format and GPU detected), compared, fitted, and the
# fitted operator parameters used by a simulation.
vidur="$root/profiler/data/vidur"
expect 0 "imported 1036 records" -- profile import "$vidur/h100/phi-2/mlp.csv" --db "$tmp/vidur.db"
expect 0 "imported 2979 records" -- profile import "$vidur/network/h100_dgx/all_reduce.csv" --db "$tmp/vidur.db"
expect 0 "imported 4144 records" -- profile import "$vidur/h100/Llama-2-7b-hf/mlp.csv" --db "$tmp/vidur.db"
expect 0 "collective_hop_latency_us" -- profile compare "$tmp/vidur.db" --fit --out "$tmp/h100ops.json"
# Not in sanitizer builds (FATHOM_TIMED=OFF): its three refits take 10 minutes instrumented, and the
# profiler's unit test runs the same leave-one-model-out fits on Vidur's rows.
if [[ ${FATHOM_TIMED:-ON} == ON ]]; then
  expect 0 "fitted without phi-2, its rows:" -- profile compare "$tmp/vidur.db" --fit --cross-validate
fi
expect 0 '"completed_requests": 24576' -- simulate --hardware h100-sxm --model llama2-70b --tp 8 --ep 1 --attn-dp 1 \
  --weights fp8 --kv fp8 --samples 100 --calibration "$tmp/h100ops.json" --json

# AIConfigurator's measured H200 and B200 all-reduces (TensorRT-LLM's own kernels) against the
# formula, then as a calibration's tables, which price a simulation's all-reduces.
aic="$root/profiler/data/aiconfigurator"
expect 0 "imported 69 records" -- profile import "$aic/h200/all_reduce.csv" --db "$tmp/aic.db"
expect 0 "imported 69 records" -- profile import "$aic/b200/all_reduce.csv" --db "$tmp/aic.db"
expect 0 "all_reduce bf16, <=64 KiB" -- profile compare "$tmp/aic.db" --hardware h200
expect 0 "imported 810 records" -- profile import "$aic/b200/moe.csv" --db "$tmp/moe.db"
expect 0 "moe nvfp4, tokens 17-1024" -- profile compare "$tmp/moe.db" --hardware b200
expect 0 "h200, 8 GPUs: 23 all-reduce sizes, 256 to 1073741824 bytes" -- profile tables "$tmp/aic.db" \
  --calibration "$root/models/calibration/trtllm-1.0.json" --out "$tmp/tables.json"
if grep -q '"all_reduce_tables"' "$tmp/tables.json"; then passed=$((passed + 1)); else echo "FAIL: profile tables wrote no all_reduce_tables"; failed=$((failed + 1)); fi
expect 0 "TP8 PP1" -- simulate --hardware h200 --model llama3.1-405b --tp 8 --weights fp8 --kv fp8 \
  --runtime cpp --samples 50 --calibration "$tmp/tables.json"
expect 2 "$tmp/prof.db: no all-reduce measured within one node" -- profile tables "$tmp/prof.db" --out "$tmp/none.json"
# Tables from a database of one GPU replace that GPU's and keep the others'.
expect 0 "imported 69 records" -- profile import "$aic/b200/all_reduce.csv" --db "$tmp/aic_b200.db" --hardware h200
expect 0 "h200, 4 GPUs: 23 all-reduce sizes" -- profile tables "$tmp/aic_b200.db" --calibration "$tmp/tables.json" --out "$tmp/tables2.json"
if grep -q '"b200"' "$tmp/tables2.json" && ! cmp -s "$tmp/tables.json" "$tmp/tables2.json"; then passed=$((passed + 1)); else echo "FAIL: profile tables dropped b200's tables or left h200's as they were"; failed=$((failed + 1)); fi
expect 2 "aic.db: no all-reduce measured within one node on gb200" -- profile tables "$tmp/aic.db" --hardware gb200 --out "$tmp/none.json"

# A GEMM table (timed by a known curve, see docs/profiler.md, "Test fixtures") against the cost model, and the curve fitted back.
expect 0 "left out 2 rows of int8_wo" -- profile import "$data/gemm_table.csv" --db "$tmp/gemm.db"
expect 0 "gemm bf16, M 1-16" -- profile compare "$tmp/gemm.db"
expect 0 "gemm_efficiency       0.550" -- profile compare "$tmp/gemm.db" --fit
expect 0 "fp8_gemm_efficiency   0.550" -- profile compare "$tmp/gemm.db" --fit
expect 0 '"memory_efficiency"' -- profile compare "$tmp/gemm.db" --fit --json --rows
expect 2 "$tmp/prof.db: no measured operators for h100-sxm" -- profile compare "$tmp/prof.db" --hardware h100-sxm
expect 2 "it holds none" -- profile compare "$tmp/prof.db"
printf 'op_name,gemm_dtype,m,n,k,latency\ngemm,bfloat16,8,16,x,0.1\n' >"$tmp/bad_table.csv"
expect 2 "bad_table.csv:2: k = \"x\": must be a positive integer" -- profile import "$tmp/bad_table.csv" --db "$tmp/new.db" --hardware h100-sxm
if [[ -e "$tmp/new.db" ]]; then
  echo "FAIL: a failed import left $tmp/new.db behind"
  failed=$((failed + 1))
fi
if [[ -x "$(dirname "$fathom")/fathom-ops-bench" ]]; then
  expect 0 "grouped_gemm N 4096 K 7168 groups 32" -- profile ops --list --models deepseek-r1
  expect 0 "attention_decode heads 128 kv_heads 1 d_qk 576 d_v 512" -- profile ops --list --models deepseek-r1
  expect 0 "attention_prefill heads 128 kv_heads 8 d_qk 128 d_v 128" -- profile ops --list --models llama3.1-405b
  expect 0 "all_to_all 100352 bytes per token" -- profile ops --list --models deepseek-r1
  expect 0 "all_gather 64640 bytes per token" -- profile ops --list --models deepseek-r1  # LM head: 129,280 / 8 logits x 4 B
  expect 2 "--models: model 'nosuch'" -- profile ops --list --models nosuch
else
  expect 2 "fathom was built without CUDA/CUPTI" -- profile ops --list
fi
expect 2 "--fill: bogus not in {random,zeros}" -- profile ops --list --fill bogus
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "cli: a GPU is present; the no-GPU profile check is skipped"
else
  expect 2 "fathom" -- profile ops --db "$tmp/ops.db"
fi

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
