#include "profiler/compare.h"

#include <catch2/catch.hpp>

#include "models/fit.h"

namespace fathom::profiler {
namespace {

models::Hardware H100() { return *(*models::HardwareCatalog::LoadBuiltin()).Find("h100-sxm"); }

// GEMM, grouped GEMM, MoE, attention and all-reduce rows timed as the cost model prices them with
// `truth` (collectives whole: no overlap), p10/p90 at -/+5%, and one row of a kind the model
// does not price.
std::vector<models::OpMeasurement> Rows(models::CostParams truth) {
  truth.comm_overlap = 0;
  std::vector<models::OpMeasurement> rows;
  auto add = [&](const char* op, int64_t m, int64_t n, int64_t k, int64_t extra, const char* dims) {
    models::OpMeasurement r;
    r.hardware = "h100-sxm";
    r.op = op;
    r.dtype = "bf16";
    r.m = m;
    r.n = n;
    r.k = k;
    r.extra = extra;
    r.dims = dims;
    const auto ops = models::MeasuredOperators(r);
    REQUIRE(ops.ok());
    for (const models::Operator& op : *ops)
      r.median_us += models::OperatorSeconds(op, H100(), truth, 1) * 1e6;
    r.p10_us = r.median_us * 0.95;
    r.p90_us = r.median_us * 1.05;
    rows.push_back(r);
  };
  for (int64_t m : {1, 8, 64, 512, 4096}) {
    add("gemm", m, 7168, 2048, 0, "");
    add("grouped_gemm", m, 7168, 2048, 8, "");
  }
  for (int64_t context : {512, 16384}) {
    add("attention_decode", 64, context, 1, 0, "heads=16 kv_heads=1 d_qk=576 d_v=512 v_in_k=1");
    add("attention_prefill", 1, context, context, 0,
        "heads=16 kv_heads=16 d_qk=192 d_v=128 causal=1");
  }
  for (int64_t bytes : {16 << 10, 1 << 20, 256 << 20}) add("all_reduce", bytes, 0, 0, 8, "");
  for (int64_t tokens : {16, 1024, 8192}) add("moe", tokens, 2048, 7168, 256, "topk=8 tp=1 ep=8");
  models::OpMeasurement unknown;
  unknown.op = "moe_dispatch";
  unknown.dtype = "bf16";
  unknown.m = 1 << 20;
  unknown.median_us = 30;
  rows.push_back(unknown);
  return rows;
}

}  // namespace

TEST_CASE("CompareWithModel: the model's own prices compare exactly; a slower GPU shows as a bias",
          "[profiler]") {
  const models::CostParams params;
  auto same = CompareWithModel(Rows(params), H100(), params);
  REQUIRE(same.ok());
  REQUIRE(same->rows.size() == 20);
  CHECK(same->not_compared.at("moe_dispatch") == 1);
  REQUIRE(same->by_kind.size() == 6);
  const std::vector<std::pair<std::string, int>> kinds = {
      {"all_reduce bf16", 3}, {"attention_decode bf16", 2}, {"attention_prefill bf16", 2},
      {"gemm bf16", 5},       {"grouped_gemm bf16", 5},     {"moe bf16", 3}};
  for (size_t i = 0; i < kinds.size(); ++i) {
    const auto& g = same->by_kind[i];
    CHECK(g.key == kinds[i].first);
    CHECK(g.rows == kinds[i].second);
    CHECK(g.median_abs_pct == Approx(0).margin(1e-9));
    CHECK(g.within_spread == g.rows);
  }
  std::vector<std::string> sizes;
  for (const auto& g : same->by_size) sizes.push_back(g.key);
  CHECK(sizes ==
        std::vector<std::string>{
            "all_reduce bf16, <=64 KiB", "all_reduce bf16, 64 KiB-4 MiB", "all_reduce bf16, >4 MiB",
            "attention_decode bf16, K/V 1-1024", "attention_decode bf16, K/V >8192",
            "attention_prefill bf16, K/V 1-1024", "attention_prefill bf16, K/V >8192",
            "gemm bf16, M 1-16", "gemm bf16, M 17-128", "gemm bf16, M 129-1024",
            "gemm bf16, M >1024", "grouped_gemm bf16, M 1-16", "grouped_gemm bf16, M 17-128",
            "grouped_gemm bf16, M 129-1024", "grouped_gemm bf16, M >1024", "moe bf16, tokens 1-16",
            "moe bf16, tokens 17-1024", "moe bf16, tokens >4096"});

  // Measured on a GPU whose large GEMMs reach half the efficiency the model assumes: large-M
  // rows come out nearly 50% fast in the model (their math halves, the few percent of weight
  // streaming beside it does not), small-M rows (streaming weights) hardly change.
  models::CostParams slow = params;
  slow.gemm_efficiency = params.gemm_efficiency / 2;
  auto biased = CompareWithModel(Rows(slow), H100(), params);
  REQUIRE(biased.ok());
  std::map<std::string, ComparisonGroup> by_size;
  for (const auto& g : biased->by_size) by_size[g.key] = g;
  CHECK(by_size["gemm bf16, M >1024"].median_pct < -45);
  CHECK(by_size["gemm bf16, M >1024"].median_pct > -50);
  CHECK(by_size["gemm bf16, M 1-16"].median_abs_pct < 1);
  CHECK(by_size["attention_decode bf16, K/V >8192"].median_abs_pct <
        1e-9);  // attention is not a GEMM
  CHECK(biased->by_kind[3].worst_pct < -40);
  const auto json = biased->ToJson(true);
  CHECK(json["rows"].size() == 20);
  CHECK(json["not_compared"]["moe_dispatch"] == 1);
}

TEST_CASE(
    "CompareWithModel: a row without a positive latency or with a bad shape is refused with its "
    "shape",
    "[profiler]") {
  auto rows = Rows(models::CostParams{});
  rows[0].median_us = 0;
  auto c = CompareWithModel(rows, H100(), models::CostParams{});
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message() == "gemm bf16 1x7168x2048: median_us must be positive");

  rows = Rows(models::CostParams{});
  rows[10].dims = "heads=16 d_qk=576 d_v=512";
  c = CompareWithModel(rows, H100(), models::CostParams{});
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message() ==
        "attention_decode 64x512x1 (heads=16 d_qk=576 d_v=512): dims must give positive heads, "
        "kv_heads, d_qk and d_v");
}

}  // namespace fathom::profiler
