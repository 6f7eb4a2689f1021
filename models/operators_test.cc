#include "models/operators.h"

#include <catch2/catch.hpp>

#include "models/hardware.h"
#include "models/roofline.h"

namespace fathom::models {
namespace {

ModelArch Arch(const std::string& name) {
  auto m = LoadModel(name);
  REQUIRE(m.ok());
  return *m;
}

ParallelLayout Layout(int gpus, int tp, int ep, int dp) {
  ParallelLayout l;
  l.gpus = gpus;
  l.tp = tp;
  l.ep = ep;
  l.attn_dp = dp;
  return l;
}

BatchShape Prefill(int64_t tokens) {
  BatchShape b;
  b.Add({tokens, 0, false, true}, 0);
  return b;
}

const Operator* Find(const std::vector<Operator>& ops, std::string_view name) {
  for (const auto& op : ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("Operators: GEMM FLOPs of a prefill are 2 x active parameters per token", "[models]") {
  for (const char* name :
       {"deepseek-r1", "llama3.1-405b", "mixtral-8x7b", "qwen3-235b-a22b", "gpt-oss-120b"}) {
    INFO(name);
    const ModelArch m = Arch(name);
    OperatorBuilder builder(m, Layout(1, 1, 1, 1), Precision{});
    std::vector<Operator> ops;
    const int64_t T = 2048;
    builder.Build(Prefill(T), MoeInput{T}, 0, &ops);
    const ParamCounts c = CountParams(m);
    // One sequence samples one token: the LM head runs on one row, everything else on T.
    const double expected = 2.0 * T * (c.active - m.LmHeadParams()) + 2.0 * m.LmHeadParams();
    CHECK(GemmFlops(ops) == Approx(expected).epsilon(5e-4));  // norms and biases are not GEMMs
  }
}

TEST_CASE("Operators: causal attention FLOPs are 4 x heads x head_dim per query-key pair",
          "[models]") {
  const ModelArch m = Arch("llama3.1-405b");
  OperatorBuilder builder(m, Layout(1, 1, 1, 1), Precision{});
  std::vector<Operator> ops;
  const double T = 1000;
  builder.Build(Prefill(1000), MoeInput{1000}, 0, &ops);
  CHECK(AttentionFlops(ops) == Approx(126 * 4.0 * 128 * 128 * T * (T + 1) / 2));

  // A chunk of 100 tokens after 900 cached ones adds exactly the remaining pairs.
  BatchShape chunk;
  chunk.Add({100, 900, false, true}, 0);
  builder.Build(chunk, MoeInput{100}, 0, &ops);
  const double pairs = 100.0 * 900 + 100.0 * 101 / 2;
  CHECK(AttentionFlops(ops) == Approx(126 * 4.0 * 128 * 128 * pairs));
}

TEST_CASE("Operators: sliding-window layers attend to at most the window", "[models]") {
  const ModelArch m = Arch("gpt-oss-120b");
  OperatorBuilder builder(m, Layout(1, 1, 1, 1), Precision{});
  std::vector<Operator> ops;
  BatchShape decode;
  decode.Add({1, 5000, true, true}, m.sliding_window);
  builder.Build(decode, MoeInput{1}, 0, &ops);
  const Operator* full = Find(ops, "attn.decode");
  const Operator* window = Find(ops, "attn.decode_window");
  REQUIRE(full);
  REQUIRE(window);
  CHECK(full->count == 18);
  CHECK(window->count == 18);
  CHECK(full->flops == Approx(4.0 * 64 * 64 * 5001));
  CHECK(window->flops == Approx(4.0 * 64 * 64 * 128));
}

TEST_CASE("BatchShape: decodes summed by DecodeSums equal an Add call each, exactly", "[models]") {
  BatchShape each, summed;
  DecodeSums sums;
  each.Add({2048, 100, false, true}, 0);  // a prefill chunk beside them
  summed.Add({2048, 100, false, true}, 0);
  for (int64_t i = 0; i < 1000; ++i) {
    const int64_t tokens = 1 + i % 4, context = 17 + 7919 * i % 20000;
    each.Add({tokens, context, true, true}, 0);
    sums.Add(tokens, context);
  }
  summed.AddDecodes(sums);
  CHECK(summed.tokens == each.tokens);
  CHECK(summed.sequences == each.sequences);
  CHECK(summed.sampled_tokens == each.sampled_tokens);
  CHECK(summed.decode_tokens == each.decode_tokens);
  CHECK(summed.decode_sequences == each.decode_sequences);
  CHECK(summed.decode_pairs == each.decode_pairs);  // integers: the same doubles, not just close
  CHECK(summed.decode_pairs_window == each.decode_pairs_window);
  CHECK(summed.decode_kv == each.decode_kv);
  CHECK(summed.decode_kv_window == each.decode_kv_window);
  CHECK(summed.prefill_pairs == each.prefill_pairs);
}

TEST_CASE("Operators: DeepSeek-R1 with TP8/EP8 and attention DP", "[models]") {
  const ModelArch m = Arch("deepseek-r1");
  OperatorBuilder builder(m, Layout(8, 8, 8, 8),
                          Precision{DType::kNvfp4, DType::kNvfp4, DType::kFp8});
  std::vector<Operator> ops;
  BatchShape b;
  for (int i = 0; i < 64; ++i) b.Add({1, 2000, true, true}, 0);
  builder.Build(b, MoeInput{512}, 0, &ops);  // 8 ranks x 64 decode tokens reach the MoE layers
  CHECK(Find(ops, "attn.all_reduce") == nullptr);  // attention TP = 1
  const Operator* q = Find(ops, "attn.q_b_proj");
  REQUIRE(q);
  CHECK(q->n == 128 * 192);  // all heads on every GPU
  CHECK(q->m == 64);
  CHECK(q->count == 61);
  const Operator* attn = Find(ops, "attn.decode");
  REQUIRE(attn);
  CHECK(attn->bytes >= 64 * 2001 * 576 * 1.0);  // reads the latent cache in FP8
  REQUIRE(Find(ops, "attn.absorb_uk"));
  const Operator* up = Find(ops, "moe.experts_gate_up");
  REQUIRE(up);
  CHECK(up->kind == OpKind::kGroupedGemm);
  CHECK(up->groups == 32);
  CHECK(up->m == 512);  // 512 tokens x top-8 / 8 GPUs
  CHECK(up->n == 2 * 2048);
  CHECK(up->count == 58);
  CHECK(up->active_groups > 29);  // 4,096 copies over 256 experts: nearly all are hit
  const Operator* dispatch = Find(ops, "moe.dispatch");
  REQUIRE(dispatch);
  CHECK(dispatch->comm == CommKind::kAllToAll);
  CHECK(dispatch->comm_bytes == Approx(64.0 * 8 * 7168 * 2 * 7 / 8));
  REQUIRE(Find(ops, "moe.combine"));
  CHECK(Find(ops, "mlp.gate_up")->count == 3);
  CHECK(Find(ops, "mlp.gate_up")->n == 2 * 18432);  // dense layers follow the attention layout
  CHECK(Find(ops, "lm_head")->n == 129280);
}

TEST_CASE("Operators: Llama 3.1 405B with TP8", "[models]") {
  const ModelArch m = Arch("llama3.1-405b");
  OperatorBuilder builder(m, Layout(8, 8, 1, 1), Precision{DType::kFp8, DType::kFp8, DType::kFp8});
  std::vector<Operator> ops;
  builder.Build(Prefill(4096), MoeInput{4096}, 0, &ops);
  CHECK(Find(ops, "attn.qkv_proj")->n == (16 + 2) * 128);
  CHECK(Find(ops, "attn.o_proj")->k == 16 * 128);
  CHECK(Find(ops, "mlp.gate_up")->n == 2 * 53248 / 8);
  CHECK(Find(ops, "mlp.down")->k == 53248 / 8);
  const Operator* ar = Find(ops, "attn.all_reduce");
  REQUIRE(ar);
  CHECK(ar->ranks == 8);
  CHECK(ar->count == 126);
  CHECK(ar->comm_bytes == 4096.0 * 16384 * 2);
  CHECK(Find(ops, "mlp.all_reduce")->count == 126);
  CHECK(Find(ops, "lm_head")->n == 128256 / 8);
  CHECK(Find(ops, "lm_head.all_gather"));
  CHECK(Find(ops, "pp.send") == nullptr);

  // Built with the GEMM + all-reduce fusion, the row-parallel GEMMs carry their all-reduces: one
  // kernel each, the other operators unchanged.
  OperatorBuilder fused(m, Layout(8, 8, 1, 1), Precision{DType::kFp8, DType::kFp8, DType::kFp8},
                        Fusions{.gemm_allreduce = true});
  std::vector<Operator> fused_ops;
  fused.Build(Prefill(4096), MoeInput{4096}, 0, &fused_ops);
  CHECK(fused_ops.size() == ops.size() - 2);
  CHECK(Find(fused_ops, "attn.all_reduce") == nullptr);
  CHECK(Find(fused_ops, "mlp.all_reduce") == nullptr);
  for (std::string_view name : {"attn.o_proj", "mlp.down"}) {
    const Operator* gemm = Find(fused_ops, name);
    REQUIRE(gemm);
    CHECK(gemm->kind == OpKind::kGemm);
    CHECK(gemm->flops == Find(ops, name)->flops);
    CHECK(gemm->comm == CommKind::kAllReduce);
    CHECK(gemm->comm_bytes == 4096.0 * 16384 * 2);
    CHECK(gemm->ranks == 8);
    CHECK(gemm->span == 8);
  }
  CHECK(Find(fused_ops, "attn.qkv_proj")->comm == CommKind::kNone);
  CHECK(Find(fused_ops, "embedding.all_reduce"));  // not a GEMM's
}

TEST_CASE("RooflineModel: never faster than FLOPs / peak or bytes / bandwidth, monotone in batch",
          "[models]") {
  const ModelArch m = Arch("llama2-70b");
  auto catalog = HardwareCatalog::LoadBuiltin();
  const Hardware hw = *catalog->Find("h200");
  const Precision p{DType::kFp8, DType::kFp8, DType::kFp8};
  RooflineModel roofline(m, hw, Layout(1, 1, 1, 1), p);
  std::vector<Operator> ops;
  double last = 0;
  for (int batch : {1, 8, 64, 256}) {
    BatchShape b;
    for (int i = 0; i < batch; ++i) b.Add({1, 1000, true, true}, 0);
    const double t = ToSeconds(roofline.StageTime(std::span<const BatchShape>(&b, 1), 0));
    roofline.builder().Build(b, MoeInput{b.tokens}, 0, &ops);
    double flops = 0, bytes = 0;
    for (const auto& op : ops) {
      flops += op.flops * op.count;
      bytes += op.bytes * op.count;
    }
    CHECK(t >= flops / hw.PeakFlops(DType::kFp8) - 1e-9);  // time is rounded to 1 ns
    CHECK(t >= bytes / hw.hbm_bytes_per_s - 1e-9);
    CHECK(t > last);
    last = t;
  }
  // Decode at batch 1 reads every weight once: about 70 GB / 4.8 TB/s.
  BatchShape one;
  one.Add({1, 100, true, true}, 0);
  CHECK(ToSeconds(roofline.StageTime(std::span<const BatchShape>(&one, 1), 0)) ==
        Approx(69e9 / 4.8e12).epsilon(0.03));
}

}  // namespace fathom::models

namespace fathom::models {

TEST_CASE(
    "OperatorBuilder: Build is its four runs in order, and a prefilling rank is priced as its "
    "list's sum to the bit",
    "[models]") {
  auto catalog = HardwareCatalog::LoadBuiltin();
  const Hardware hw = *catalog->Find("b200");
  struct Case {
    std::string model;
    ParallelLayout layout;
    Precision precision;
  };
  ParallelLayout llama = Layout(8, 4, 1, 1);
  llama.pp = 2;
  ParallelLayout gpt = Layout(4, 2, 2, 1);
  gpt.pp = 2;
  const std::vector<Case> cases = {
      {"deepseek-r1", Layout(8, 8, 8, 8), {DType::kNvfp4, DType::kNvfp4, DType::kFp8}},
      {"llama2-70b", llama, {DType::kFp8, DType::kFp8, DType::kFp8}},      // GQA, two stages
      {"gpt-oss-120b", gpt, {DType::kBf16, DType::kBf16, DType::kBf16}}};  // sliding window
  for (const Case& c : cases) {
    INFO(c.model);
    const ModelArch m = Arch(c.model);
    RooflineModel model(m, hw, c.layout, c.precision);
    const OperatorBuilder& builder = model.builder();
    const int64_t window = m.sliding_window;
    std::vector<Operator> all, run;
    uint64_t x = 12345;
    auto draw = [&](int64_t n) {  // a small LCG: the same shapes every run
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(n));
    };
    for (int shape = 0; shape < 60; ++shape) {
      // Prompt chunks with cached tokens before them and decodes beside them; token counts
      // repeat (a few values), so the cached runs are used as well as filled.
      BatchShape b;
      const int64_t chunk = 64 * (1 + draw(4));
      b.Add({chunk, draw(3000), false, draw(2) == 0}, window);
      for (int64_t d = draw(4) * 8; d > 0; --d) b.Add({1, 100 + draw(5000), true, true}, window);
      for (int stage = 0; stage < builder.num_stages(); ++stage) {
        builder.Build(b, MoeInput{0}, stage, &all, OpScope::kWithoutExperts);
        std::vector<Operator> runs;
        for (const auto r : {OperatorBuilder::Run::kHead, OperatorBuilder::Run::kAttention,
                             OperatorBuilder::Run::kBody, OperatorBuilder::Run::kTail}) {
          builder.BuildRun(r, b, MoeInput{0}, stage, &run, OpScope::kWithoutExperts);
          runs.insert(runs.end(), run.begin(), run.end());
        }
        REQUIRE(runs.size() == all.size());
        for (size_t i = 0; i < all.size(); ++i) {
          CHECK(runs[i].name == all[i].name);
          CHECK(runs[i].count == all[i].count);
          CHECK(runs[i].flops == all[i].flops);
          CHECK(runs[i].bytes == all[i].bytes);
          CHECK(runs[i].comm_bytes == all[i].comm_bytes);
        }
        // The stage's time: the list's seconds summed in its order, then the routed experts'.
        double sum = 0;
        for (const auto& op : all) sum += model.OpSeconds(op) * static_cast<double>(op.count);
        builder.BuildExperts(b.tokens, stage, &run);
        double experts = 0;
        for (const auto& op : run) experts += model.OpSeconds(op) * static_cast<double>(op.count);
        CHECK(model.StageTime(std::span<const BatchShape>(&b, 1), stage) ==
              FromSeconds(sum + experts));
      }
    }
  }
}

}  // namespace fathom::models
