#include "models/memory.h"

#include <catch2/catch.hpp>

#include "models/hardware.h"

namespace fathom::models {
namespace {

struct ModelOnGpu {
  ModelArch model;
  Hardware hw;
};

ModelOnGpu Make(const std::string& model, const std::string& gpu) {
  auto m = LoadModel(model);
  REQUIRE(m.ok());
  auto catalog = HardwareCatalog::LoadBuiltin();
  REQUIRE(catalog.ok());
  auto hw = catalog->Find(gpu);
  REQUIRE(hw.ok());
  return {*m, *hw};
}

ParallelLayout Layout(int gpus, int tp, int pp, int ep, int dp) {
  ParallelLayout l;
  l.gpus = gpus;
  l.tp = tp;
  l.pp = pp;
  l.ep = ep;
  l.attn_dp = dp;
  return l;
}

}  // namespace

TEST_CASE("PlanMemory: DeepSeek-R1 MLA cache is 576 values per layer, replicated over attention TP",
          "[models]") {
  ModelOnGpu s = Make("deepseek-r1", "b200");
  Precision p{DType::kNvfp4, DType::kNvfp4, DType::kFp8};
  const MemoryPlan dp8 = PlanMemory(s.model, s.hw, Layout(8, 8, 1, 8, 8), p, {});
  CHECK(dp8.kv_bytes_per_token == Approx(61 * 576 * 1.0));
  const MemoryPlan tp8 = PlanMemory(s.model, s.hw, Layout(8, 8, 1, 8, 1), p, {});
  CHECK(tp8.kv_bytes_per_token == Approx(61 * 576 * 1.0));  // latent is not split across TP
  // Attention DP replicates attention weights on every GPU: more weight bytes per GPU.
  const ModelArch& m = s.model;
  const double fp4 = BytesPerElement(DType::kNvfp4);
  const double sharded = m.QProjParams() + m.KvProjParams() + m.OProjParams();
  CHECK(dp8.attention_bytes == Approx(61 * (m.LoraDownParams() + sharded) * fp4));
  CHECK(tp8.attention_bytes == Approx(61 * (m.LoraDownParams() + sharded / 8) * fp4));
  CHECK(dp8.weights_bytes > tp8.weights_bytes);
  // Experts: 32 of 256 per GPU in either layout.
  CHECK(dp8.expert_bytes == Approx(tp8.expert_bytes));
  CHECK(dp8.expert_bytes == Approx(58.0 * 32 * 3 * 7168 * 2048 * (0.5 + 1.0 / 16)));
  CHECK(dp8.fits);
  CHECK(dp8.kv_capacity_tokens > 1'000'000);
}

TEST_CASE("PlanMemory: weights of every GPU add up to the whole model under pure TP and PP",
          "[models]") {
  ModelOnGpu s = Make("llama3.1-405b", "h200");
  Precision p{DType::kFp8, DType::kFp8, DType::kFp8};
  const ParamCounts c = CountParams(s.model);
  const MemoryPlan one = PlanMemory(s.model, s.hw, Layout(1, 1, 1, 1, 1), p, {});
  // On one GPU, every parameter is stored once: linears in fp8, embedding/head/norms in bf16.
  const double high = 2.0 * (s.model.EmbeddingParams() + s.model.LmHeadParams()) +
                      2.0 * (s.model.layers * s.model.LayerNormParams() + s.model.hidden);
  const double linear = static_cast<double>(c.total) - s.model.EmbeddingParams() -
                        s.model.LmHeadParams() - s.model.layers * s.model.LayerNormParams() -
                        s.model.hidden;
  CHECK(one.weights_bytes == Approx(high + linear * BytesPerElement(DType::kFp8)).epsilon(1e-9));
  CHECK_FALSE(one.fits);
  CHECK(one.why_not.find("weights") != std::string::npos);

  const MemoryPlan tp8 = PlanMemory(s.model, s.hw, Layout(8, 8, 1, 1, 1), p, {});
  // Norms are replicated; everything else is split 8 ways (8 KV heads: one per GPU).
  const double norms = 2.0 * (s.model.layers * s.model.LayerNormParams() + s.model.hidden);
  CHECK(tp8.weights_bytes == Approx((one.weights_bytes - norms) / 8 + norms).epsilon(1e-9));
  CHECK(tp8.kv_bytes_per_token == Approx(126 * 2 * 1 * 128 * 1.0));
  CHECK(tp8.fits);

  // PP2 x TP4: the worst stage holds 63 layers plus the embedding or the head.
  const MemoryPlan pp2 = PlanMemory(s.model, s.hw, Layout(8, 4, 2, 1, 1), p, {});
  CHECK(pp2.kv_bytes_per_token == Approx(63 * 2 * 2 * 128 * 1.0));
  CHECK(pp2.weights_bytes == Approx(tp8.weights_bytes).epsilon(0.03));
}

TEST_CASE("PlanMemory: sliding-window layers hold at most the window per sequence", "[models]") {
  ModelOnGpu s = Make("gpt-oss-120b", "h100-sxm");
  Precision p{DType::kMxfp4, DType::kBf16, DType::kBf16};
  MemoryOptions o;
  o.max_batch = 64;
  const MemoryPlan plan = PlanMemory(s.model, s.hw, Layout(1, 1, 1, 1, 1), p, o);
  const double per_layer = 2 * 8 * 64 * 2.0;
  CHECK(plan.kv_bytes_per_token_full_layers == Approx(18 * per_layer));
  CHECK(plan.kv_bytes_per_token == Approx(36 * per_layer));
  CHECK(plan.sliding_kv_bytes == Approx(64.0 * 128 * 18 * per_layer));
  CHECK(plan.fits);  // 120B in MXFP4 fits one 80 GB GPU, as OpenAI ships it
  CHECK(plan.weights_bytes < 66e9);
}

TEST_CASE("PlanMemory: capacity = what is left after weights, activations, runtime and reserve",
          "[models]") {
  ModelOnGpu s = Make("llama2-70b", "h200");
  Precision p{DType::kFp8, DType::kFp8, DType::kFp8};
  const MemoryPlan plan = PlanMemory(s.model, s.hw, Layout(1, 1, 1, 1, 1), p, {});
  const double left =
      s.hw.memory_bytes * 0.9 - plan.weights_bytes - plan.activation_bytes - plan.runtime_bytes;
  CHECK(plan.kv_budget_bytes == Approx(left));
  CHECK(plan.kv_capacity_tokens == static_cast<int64_t>(left / (80 * 2 * 8 * 128)));
}

TEST_CASE("PlanMemory: a KV fraction of free memory takes that share of what weights leave",
          "[models]") {
  // TensorRT-LLM's kv_cache_free_gpu_memory_fraction: the MLPerf B200 Llama 2 harness sets 0.95.
  ModelOnGpu s = Make("llama2-70b", "b200");
  Precision p{DType::kNvfp4, DType::kNvfp4, DType::kFp8};
  MemoryOptions o;
  o.kv_free_fraction = 0.95;
  const MemoryPlan plan = PlanMemory(s.model, s.hw, Layout(1, 1, 1, 1, 1), p, o);
  const double free =
      s.hw.memory_bytes - plan.weights_bytes - plan.activation_bytes - plan.runtime_bytes;
  CHECK(plan.kv_budget_bytes == Approx(0.95 * free));
  CHECK(plan.reserve_bytes == Approx(0.05 * free));
  // More KV than 10% of HBM held back leaves: 180 GB less 40 GB of FP4 weights, 9% more.
  const MemoryPlan reserved = PlanMemory(s.model, s.hw, Layout(1, 1, 1, 1, 1), p, {});
  CHECK(plan.kv_capacity_tokens > reserved.kv_capacity_tokens * 1.05);
  CHECK(plan.kv_capacity_tokens < reserved.kv_capacity_tokens * 1.15);
}

TEST_CASE("ValidateLayout: impossible layouts name the degree, the value and the rule",
          "[models]") {
  ModelOnGpu s = Make("deepseek-r1", "b200");
  CHECK(ValidateLayout(s.model, Layout(8, 8, 1, 8, 8)).ok());
  CHECK(ValidateLayout(s.model, Layout(8, 3, 1, 1, 1)).message() ==
        "gpus = 8: must be a multiple of tp x pp (3): GPUs = tp x pp x replicas");
  CHECK(ValidateLayout(s.model, Layout(6, 6, 1, 6, 1)).message() ==
        "attention tp (tp / attn_dp) = 6: must divide num_attention_heads (128)");
  ModelOnGpu x = Make("mixtral-8x7b", "h100-sxm");
  CHECK(ValidateLayout(x.model, Layout(16, 16, 1, 16, 1)).message() ==
        "ep = 16: must divide the number of experts (8)");
  CHECK(ValidateLayout(s.model, Layout(8, 8, 1, 8, 3)).message() ==
        "attn_dp = 3: must divide tp (8): attention data parallelism splits the tensor-parallel "
        "group");
  CHECK(ValidateLayout(s.model, Layout(64, 1, 64, 1, 1)).message() ==
        "pp = 64: must be <= num_hidden_layers (61)");
  ModelOnGpu l = Make("llama2-70b", "h200");
  CHECK(ValidateLayout(l.model, Layout(8, 8, 1, 2, 1)).message() ==
        "ep = 2: must be 1: llama2-70b has no experts");
  CHECK(ValidateLayout(l.model, Layout(6, 6, 1, 1, 1))
            .message()
            .find("must divide num_attention_heads (64)") != std::string::npos);
}

}  // namespace fathom::models
