// How one model instance is laid out on GPUs, and in which formats it stores weights and KV.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "models/dtype.h"
#include "models/hardware.h"
#include "models/model_arch.h"

namespace fathom::models {

// Degrees in the engines' counting (docs/simulation.md): GPUs = tp x pp x replicas; attention data
// parallelism splits the TP group (attention TP = tp / attn_dp); experts are sharded over ep GPUs
// of the TP group (expert TP = tp / ep). Dense MLPs, shared experts, embedding and LM head follow
// the attention layout.
struct ParallelLayout {
  int gpus = 1;
  int tp = 1;
  int pp = 1;
  int ep = 1;
  int attn_dp = 1;

  int attn_tp() const { return tp / attn_dp; }
  int moe_tp() const { return tp / ep; }
  int replicas() const { return gpus / (tp * pp); }
  int gpus_per_replica() const { return tp * pp; }
  std::string ToString() const;  // "TP8 PP1 EP8 attnDP8 x1"
};

struct Precision {
  DType moe_weights = DType::kBf16;    // routed experts
  DType dense_weights = DType::kBf16;  // attention, dense MLP, shared experts
  DType kv = DType::kBf16;
  // Embedding, LM head, router and norms stay in bf16 in every published quantised checkpoint.
  static constexpr DType kHighPrecision = DType::kBf16;
};

// The built-in default deployment (docs/tuning.md): MLPerf v5.1 NVIDIA DeepSeek-R1 on 8 B200s, TP8
// + EP8 with attention data parallelism, FP4 weights and FP8 KV.
inline constexpr std::string_view kDefaultModel = "deepseek-r1";
inline constexpr std::string_view kDefaultHardware = "b200";
inline constexpr ParallelLayout kDefaultLayout = {8, 8, 1, 8, 8};
inline constexpr std::string_view kDefaultWeights = "fp4";
inline constexpr std::string_view kDefaultKv = "fp8";

// A deployment as the user asked for it (fathom's deployment flags): empty strings and 0 degrees
// were not given.
struct DeploymentRequest {
  std::string model;  // empty: the built-in default deployment
  std::string hardware;
  std::vector<std::string> hardware_files;  // GPUs added to the built-in catalogue
  int gpus = 0, tp = 0, pp = 0, ep = 0, attn_dp = 0;
  std::string weights, dense_weights, kv;
};

// A model on a GPU in one layout and precision, loaded and validated.
struct Deployment {
  ModelArch model;
  Hardware hardware;
  ParallelLayout layout;
  Precision precision;
};

// Fills what was not given, loads model and GPU, and validates the layout. Without a model, the
// built-in default deployment above fills the model, gpus, ep, attn_dp, weights and kv left out;
// then, for any model: hardware b200, pp 1, tp = gpus / pp (1 without gpus), gpus = tp x pp, ep
// and attn_dp 1, the checkpoint's own weight formats and bf16 KV. A bad format names its flag
// (--weights, --dense-weights, --kv); a bad layout the model, the degree and the rule.
Result<Deployment> ResolveDeployment(const DeploymentRequest& request);

// The engine's host side, whose per-iteration cost (scheduling, sampling, launches) is fitted
// separately: Python executors (vLLM, SGLang, TensorRT-LLM's PyTorch flow) and C++ ones
// (TensorRT-LLM's TensorRT engines).
enum class Runtime { kPython, kCpp };
Result<Runtime> ParseRuntime(std::string_view s);
std::string_view Name(Runtime r);

// Kernel fusions an engine was built with, where they change the operator list.
struct Fusions {
  // Each row-parallel GEMM (attention output, dense MLP down projection) reduces its output over
  // the tensor-parallel group itself, one kernel in place of a GEMM and an all-reduce
  // (TensorRT-LLM's gemm_allreduce_plugin: the epilogue stores each tile to NVLink multicast
  // memory, reduced in the switch). The operator is the GEMM carrying the all-reduce's fields.
  bool gemm_allreduce = false;
  bool operator==(const Fusions&) const = default;
};

// Checks the rules an engine enforces; the message names the degree, its value and the rule.
Status ValidateLayout(const ModelArch& m, const ParallelLayout& layout);

// Layers of each pipeline stage, contiguous, earlier stages taking the remainder.
std::vector<int64_t> LayersPerStage(int64_t layers, int pp);

}  // namespace fathom::models
