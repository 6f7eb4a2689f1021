// Where each GPU's memory goes: weights, activations, reserve, and what is left for KV cache.
#pragma once

#include <cstdint>
#include <string>

#include "models/deployment.h"
#include "models/hardware.h"
#include "models/model_arch.h"

namespace fathom::models {

struct MemoryOptions {
  int64_t max_num_tokens = 8192;   // tokens in one engine iteration (sizes activation buffers)
  int64_t max_batch = 256;         // sequences per attention rank (sizes the logits buffer)
  double reserve_fraction = 0.10;  // of HBM left unused, as vLLM's gpu_memory_utilization = 0.9
  // When > 0, the KV cache takes this fraction of the memory left after weights, activations and
  // runtime instead (TensorRT-LLM's kv_cache_free_gpu_memory_fraction); reserve_fraction is unused.
  double kv_free_fraction = 0;
  double runtime_overhead_bytes = 2.0 * (1 << 30);  // CUDA context, GEMM/NCCL workspaces, graphs
  int64_t min_kv_tokens = 0;  // KV that must fit besides weights; 0 means max_num_tokens
};

// Per-GPU figures for the pipeline stage that needs the most memory.
struct MemoryPlan {
  ParamCounts params;
  int worst_stage = 0;
  double attention_bytes = 0;
  double dense_mlp_bytes = 0;
  double expert_bytes = 0;
  double shared_expert_bytes = 0;
  double router_norm_bytes = 0;
  double embedding_bytes = 0;
  double lm_head_bytes = 0;
  double weights_bytes = 0;  // sum of the parts above

  // KV bytes one token occupies on this GPU, over the stage's layers (its share when KV heads are
  // split across attention TP; the whole latent when MLA is replicated across attention TP).
  double kv_bytes_per_token = 0;
  double kv_bytes_per_token_full_layers = 0;  // without sliding-window layers
  double sliding_kv_bytes = 0;  // window-capped KV of max_batch sequences in sliding layers

  double activation_bytes = 0;
  double runtime_bytes = 0;
  double reserve_bytes = 0;        // HBM left unused (with kv_free_fraction: the rest of the free)
  double kv_budget_bytes = 0;      // memory - weights - activations - runtime - reserve - sliding
  int64_t kv_capacity_tokens = 0;  // tokens this GPU's attention rank can hold (per DP rank)
  bool fits = false;
  std::string why_not;  // the rule that failed when !fits
};

MemoryPlan PlanMemory(const ModelArch& m, const Hardware& hw, const ParallelLayout& layout,
                      const Precision& precision, const MemoryOptions& options);

}  // namespace fathom::models
