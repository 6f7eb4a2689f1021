#include "tuner/search/launch.h"

#include <cmath>

#include "base/format.h"
#include "models/roofline.h"

namespace fathom::tuner {
namespace {

struct Pool {
  int tp, pp, ep, attn_dp, instances;
  int64_t max_batch;
  // What each engine's memory flag must say for the KV cache the deployment plans: the share of
  // each GPU's HBM for engines that size their memory so (vLLM's gpu_memory_utilization, SGLang's
  // mem_fraction_static), and the KV cache's share of the memory the weights leave for
  // TensorRT-LLM (free_gpu_memory_fraction).
  double hbm_share, kv_free;
};

// The memory flags of a pool from the memory plan the simulator runs it with (`plan`, null where
// the deployment does not resolve), rounded down to the hundredth they print; without a plan, the
// reserve's share of HBM and, for TensorRT-LLM, the deployment's kv_free_fraction or that share.
Pool MakePool(const sim::DeploymentConfig& d, int tp, int pp, int ep, int attn_dp, int instances,
              int64_t max_batch, const models::MemoryPlan* plan, double hbm_bytes) {
  const double reserve_share = 1.0 - d.engine.reserve_fraction;
  Pool p{tp,
         pp,
         ep,
         attn_dp,
         instances,
         max_batch,
         reserve_share,
         d.engine.kv_free_fraction > 0 ? d.engine.kv_free_fraction : reserve_share};
  if (plan == nullptr || !(plan->kv_budget_bytes > 0)) return p;
  auto hundredths = [](double x) { return std::floor(x * 100.0 + 1e-6) / 100.0; };
  p.hbm_share = hundredths(1.0 - plan->reserve_bytes / hbm_bytes);
  if (d.engine.kv_free_fraction <= 0) {
    p.kv_free = hundredths(plan->kv_budget_bytes / (plan->kv_budget_bytes + plan->reserve_bytes));
  }
  return p;
}

std::string Vllm(const std::string& id, const sim::DeploymentConfig& d, const Pool& p,
                 const char* role) {
  // vLLM counts attention DP as data-parallel ranks of tensor-parallel size tp / dp.
  const int dp = p.attn_dp;
  std::string s = "vllm serve " + id;
  s += StrFormat(" --tensor-parallel-size %d", p.tp / dp);
  // vLLM quantizes a higher-precision checkpoint to FP8 as it loads it.
  const auto served = FromHuggingFaceId(id);
  if (d.weights == "fp8" && served && served->weights != "fp8") s += " --quantization fp8";
  if (p.pp > 1) s += StrFormat(" --pipeline-parallel-size %d", p.pp);
  if (dp > 1) s += StrFormat(" --data-parallel-size %d", dp);
  if (p.ep > 1) s += " --enable-expert-parallel";
  s += StrFormat(" --max-num-seqs %lld --max-num-batched-tokens %lld",
                 static_cast<long long>(p.max_batch),
                 static_cast<long long>(d.engine.max_num_tokens));
  if (d.engine.scheduler == sim::SchedulerKind::kChunked) s += " --enable-chunked-prefill";
  if (d.kv == "fp8") s += " --kv-cache-dtype fp8";
  s += StrFormat(" --gpu-memory-utilization %.2f", p.hbm_share);
  if (d.engine.prefix_caching) s += " --enable-prefix-caching";
  if (d.engine.scheduler_steps > 1)
    s += StrFormat(" --num-scheduler-steps %d", d.engine.scheduler_steps);
  if (d.engine.async_scheduling) s += " --async-scheduling";
  if (d.engine.mtp_depth > 0) {
    s += StrFormat(
        " --speculative-config '{\"method\": \"deepseek_mtp\", \"num_speculative_tokens\": %d}'",
        d.engine.mtp_depth);
  }
  if (role != nullptr) s += std::string("  # ") + role;
  return s;
}

std::string Sglang(const std::string& id, const sim::DeploymentConfig& d, const Pool& p,
                   const char* role) {
  std::string s = "python -m sglang.launch_server --model-path " + id;
  s += StrFormat(" --tp %d", p.tp);
  if (p.pp > 1) s += StrFormat(" --pp-size %d", p.pp);
  if (p.attn_dp > 1) s += StrFormat(" --dp %d --enable-dp-attention", p.attn_dp);
  if (p.ep > 1) s += StrFormat(" --ep-size %d", p.ep);
  s += StrFormat(" --max-running-requests %lld --chunked-prefill-size %lld",
                 static_cast<long long>(p.max_batch * p.attn_dp),
                 static_cast<long long>(d.engine.max_num_tokens));
  if (d.kv == "fp8") s += " --kv-cache-dtype fp8_e4m3";
  s += StrFormat(" --mem-fraction-static %.2f", p.hbm_share);
  if (!d.engine.prefix_caching) s += " --disable-radix-cache";
  if (d.engine.mtp_depth > 0) {
    s += StrFormat(
        " --speculative-algorithm EAGLE --speculative-num-steps %d --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens %d",
        d.engine.mtp_depth, d.engine.mtp_depth + 1);
  }
  if (role != nullptr) s += StrFormat(" --disaggregation-mode %s", role);
  return s;
}

std::string TrtllmYaml(const sim::DeploymentConfig& d, const Pool& p) {
  std::string y;
  y += StrFormat("tensor_parallel_size: %d\n", p.tp);
  y += StrFormat("pipeline_parallel_size: %d\n", p.pp);
  y += StrFormat("moe_expert_parallel_size: %d\n", p.ep);
  y += StrFormat("enable_attention_dp: %s\n", p.attn_dp > 1 ? "true" : "false");
  if (p.attn_dp > 1 && d.engine.adp_balance) {
    y += StrFormat(
        "attention_dp_config:\n  enable_balance: true\n  batching_wait_iters: %lld\n  "
        "timeout_iters: %lld\n",
        static_cast<long long>(d.engine.adp_batching_wait_iters),
        static_cast<long long>(d.engine.adp_timeout_iters));
  }
  y += StrFormat("max_batch_size: %lld\n", static_cast<long long>(p.max_batch));
  y += StrFormat("max_num_tokens: %lld\n", static_cast<long long>(d.engine.max_num_tokens));
  y += StrFormat("enable_chunked_prefill: %s\n",
                 d.engine.scheduler == sim::SchedulerKind::kChunked ? "true" : "false");
  if (d.runtime == models::Runtime::kCpp) {
    // TensorRT engines: no PyTorch-flow CUDA graphs (the C++ executor runs the engine).
    if (d.fusions.gemm_allreduce)
      y += "build_config:\n  plugin_config:\n    gemm_allreduce_plugin: bfloat16\n";
  } else if (d.engine.cuda_graph_batch_sizes.empty()) {
    y += "cuda_graph_config:\n  enable_padding: true\n";
    y += StrFormat("  max_batch_size: %lld\n", static_cast<long long>(p.max_batch));
  } else {
    y += "cuda_graph_config:\n  enable_padding: true\n";
    std::string sizes;
    for (int64_t b : d.engine.cuda_graph_batch_sizes)
      sizes += (sizes.empty() ? "" : ", ") + std::to_string(b);
    y += "  batch_sizes: [" + sizes + "]\n";
  }
  y += "kv_cache_config:\n";
  y += StrFormat("  dtype: %s\n", d.kv == "fp8" ? "fp8" : "auto");
  y += StrFormat("  free_gpu_memory_fraction: %.2f\n", p.kv_free);
  y += StrFormat("  enable_block_reuse: %s\n", d.engine.prefix_caching ? "true" : "false");
  if (d.engine.mtp_depth > 0) {
    y += StrFormat("speculative_config:\n  decoding_type: MTP\n  num_nextn_predict_layers: %d\n",
                   d.engine.mtp_depth);
  }
  return y;
}

std::string Trtllm(const std::string& id, const sim::DeploymentConfig& d, const Pool& p,
                   const std::string& yaml_name) {
  return StrFormat(
      "trtllm-serve %s --backend %s --tp_size %d --pp_size %d --ep_size %d --max_batch_size "
      "%lld "
      "--max_num_tokens %lld --kv_cache_free_gpu_memory_fraction %.2f --extra_llm_api_options %s",
      id.c_str(), d.runtime == models::Runtime::kCpp ? "tensorrt" : "pytorch", p.tp, p.pp, p.ep,
      static_cast<long long>(p.max_batch), static_cast<long long>(d.engine.max_num_tokens),
      p.kv_free, yaml_name.c_str());
}

}  // namespace

namespace {

// Built-in models and the repositories they are served from: (model, FP4 checkpoint, default).
struct Repo {
  const char* model;
  const char* fp4;         // NVIDIA's FP4 checkpoint, if any
  const char* checkpoint;  // the original
  const char* native;      // the original's weight format
};
constexpr Repo kRepos[] = {
    {"deepseek-r1", "nvidia/DeepSeek-R1-FP4", "deepseek-ai/DeepSeek-R1", "fp8"},
    {"llama3.1-405b", "nvidia/Llama-3.1-405B-Instruct-FP4", "meta-llama/Llama-3.1-405B-Instruct",
     "bf16"},
    {"llama2-70b", nullptr, "meta-llama/Llama-2-70b-chat-hf", "bf16"},
    {"gpt-oss-120b", nullptr, "openai/gpt-oss-120b", "mxfp4"},
    {"qwen3-235b-a22b", nullptr, "Qwen/Qwen3-235B-A22B", "bf16"},
    {"mixtral-8x7b", nullptr, "mistralai/Mixtral-8x7B-Instruct-v0.1", "bf16"},
    {"gpt-oss-20b", nullptr, "openai/gpt-oss-20b", "mxfp4"},
    {"kimi-k2", nullptr, "moonshotai/Kimi-K2-Instruct", "fp8"},
    {"qwen3-32b", nullptr, "Qwen/Qwen3-32B", "bf16"},
    {"qwen3-30b-a3b", nullptr, "Qwen/Qwen3-30B-A3B", "bf16"},
    {"llama4-scout", nullptr, "meta-llama/Llama-4-Scout-17B-16E-Instruct", "bf16"},
    {"llama4-maverick", nullptr, "meta-llama/Llama-4-Maverick-17B-128E-Instruct", "bf16"},
    {"gemma3-27b", nullptr, "google/gemma-3-27b-it", "bf16"},
};

}  // namespace

std::string HuggingFaceId(const std::string& model, const std::string& weights) {
  const bool fp4 = weights == "fp4" || weights == "nvfp4";
  for (const Repo& r : kRepos) {
    if (model == r.model) return fp4 && r.fp4 != nullptr ? r.fp4 : r.checkpoint;
  }
  return model;
}

std::optional<ServedModel> FromHuggingFaceId(const std::string& id) {
  for (const Repo& r : kRepos) {
    if (r.fp4 != nullptr && id == r.fp4) return ServedModel{r.model, "fp4"};
    if (id == r.checkpoint || id == r.model) return ServedModel{r.model, r.native};
  }
  return std::nullopt;
}

int Instances(const sim::DeploymentConfig& d) { return d.gpus / (d.tp * d.pp); }

LaunchCommands MakeLaunchCommands(const sim::DeploymentConfig& d,
                                  const models::HardwareCatalog& catalog) {
  const std::string id = HuggingFaceId(d.model, d.weights);
  // The simulator's memory plans (its time models are not needed here: the roofline's are cheap).
  const auto resolved =
      sim::Resolve(d, catalog,
                   [](const models::ModelArch& m, const models::Hardware& hw,
                      const models::ParallelLayout& l, const models::Precision& p, models::Runtime,
                      models::Fusions) -> std::unique_ptr<models::ExecutionTimeModel> {
                     return std::make_unique<models::RooflineModel>(m, hw, l, p);
                   });
  const sim::ResolvedDeployment* r = resolved.ok() ? resolved->get() : nullptr;
  const double hbm_bytes = r != nullptr ? r->hardware.memory_bytes : 0;
  LaunchCommands c;
  if (!d.disaggregated) {
    const Pool p = MakePool(d, d.tp, d.pp, d.ep, d.attn_dp, Instances(d), d.engine.max_batch,
                            r != nullptr ? &r->plan : nullptr, hbm_bytes);
    const std::string replicas =
        p.instances > 1 ? StrFormat("  # one per replica, %d replicas", p.instances) : "";
    c.vllm = Vllm(id, d, p, nullptr) + replicas;
    c.sglang = Sglang(id, d, p, nullptr) + replicas;
    c.trtllm = Trtllm(id, d, p, "extra.yaml") + replicas;
    c.trtllm_yaml = TrtllmYaml(d, p);
    return c;
  }
  const Pool prefill =
      MakePool(d, d.prefill.tp, d.prefill.pp, d.prefill.ep, d.prefill.attn_dp, d.prefill.instances,
               d.engine.max_batch, r != nullptr ? &r->plan : nullptr, hbm_bytes);
  const int64_t decode_batch = d.decode_max_batch > 0 ? d.decode_max_batch : d.engine.max_batch;
  const Pool decode =
      MakePool(d, d.decode.tp, d.decode.pp, d.decode.ep, d.decode.attn_dp, d.decode.instances,
               decode_batch, r != nullptr ? &r->decode_plan : nullptr, hbm_bytes);
  c.vllm = Vllm(id, d, prefill, "prefill pool (with a KV connector, e.g. --kv-transfer-config)") +
           "\n" + Vllm(id, d, decode, "decode pool");
  c.sglang = Sglang(id, d, prefill, "prefill") + "\n" + Sglang(id, d, decode, "decode");
  c.trtllm = Trtllm(id, d, prefill, "prefill.yaml") + "\n" + Trtllm(id, d, decode, "decode.yaml");
  c.trtllm_yaml =
      "# prefill.yaml\n" + TrtllmYaml(d, prefill) + "# decode.yaml\n" + TrtllmYaml(d, decode);
  return c;
}

}  // namespace fathom::tuner
