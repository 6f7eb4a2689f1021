#include "profiler/compare.h"

#include <catch2/catch.hpp>

#include "models/fit.h"

namespace fathom::profiler {
namespace {

models::Hardware H100() { return *(*models::HardwareCatalog::LoadBuiltin()).Find("h100-sxm"); }

// GEMM and grouped GEMM rows timed as the cost model prices them with `truth`, p10/p90 at -/+5%.
std::vector<models::OpMeasurement> Rows(const models::CostParams& truth) {
  std::vector<models::OpMeasurement> rows;
  for (int64_t m : {1, 8, 64, 512, 4096}) {
    for (auto [op, groups] : {std::pair<const char*, int64_t>{"gemm", 0}, {"grouped_gemm", 8}}) {
      models::OpMeasurement r;
      r.hardware = "h100-sxm";
      r.op = op;
      r.dtype = "bf16";
      r.m = m;
      r.n = 7168;
      r.k = 2048;
      r.extra = groups;
      r.median_us = models::OperatorSeconds(*models::MeasuredOperator(r), H100(), truth, 1) * 1e6;
      r.p10_us = r.median_us * 0.95;
      r.p90_us = r.median_us * 1.05;
      rows.push_back(r);
    }
  }
  models::OpMeasurement collective;
  collective.op = "all_reduce";
  collective.dtype = "bf16";
  collective.m = 1 << 20;
  collective.median_us = 30;
  rows.push_back(collective);
  return rows;
}

}  // namespace

TEST_CASE("CompareWithModel: the model's own prices compare exactly; a slower GPU shows as a bias", "[profiler]") {
  const models::CostParams params;
  auto same = CompareWithModel(Rows(params), H100(), params);
  REQUIRE(same.ok());
  REQUIRE(same->rows.size() == 10);
  CHECK(same->not_compared.at("all_reduce") == 1);
  REQUIRE(same->by_kind.size() == 2);
  CHECK(same->by_kind[0].key == "gemm bf16");
  CHECK(same->by_kind[1].key == "grouped_gemm bf16");
  for (const auto& g : same->by_kind) {
    CHECK(g.rows == 5);
    CHECK(g.median_abs_pct == Approx(0).margin(1e-9));
    CHECK(g.within_spread == 5);
  }
  CHECK(same->by_m.front().key == "gemm bf16, M 1-16");
  CHECK(same->by_m.front().rows == 2);

  // Measured on a GPU whose large GEMMs reach half the efficiency the model assumes: large-M
  // rows come out 50% fast in the model (their time halves), small-M rows (streaming weights)
  // hardly change.
  models::CostParams slow = params;
  slow.gemm_efficiency = params.gemm_efficiency / 2;
  auto biased = CompareWithModel(Rows(slow), H100(), params);
  REQUIRE(biased.ok());
  std::map<std::string, ComparisonGroup> by_m;
  for (const auto& g : biased->by_m) by_m[g.key] = g;
  CHECK(by_m["gemm bf16, M >1024"].median_pct == Approx(-50).margin(1));
  CHECK(by_m["gemm bf16, M 1-16"].median_abs_pct < 1);
  CHECK(biased->by_kind[0].worst_pct < -40);
  const auto json = biased->ToJson(true);
  CHECK(json["rows"].size() == 10);
  CHECK(json["not_compared"]["all_reduce"] == 1);
}

TEST_CASE("CompareWithModel: a row without a positive latency is refused with its shape", "[profiler]") {
  auto rows = Rows(models::CostParams{});
  rows[0].median_us = 0;
  auto c = CompareWithModel(rows, H100(), models::CostParams{});
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message() == "gemm bf16 1x7168x2048: median_us must be positive");
}

}  // namespace fathom::profiler
