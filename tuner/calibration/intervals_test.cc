#include "tuner/calibration/intervals.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

namespace fathom::tuner {
namespace {

// A held-out (or fitted) figure predicted `ratio` times the published 100.
Residual Row(const std::string& gpu, int gpus, const std::string& model, double ratio,
             bool fitted = false, const std::string& metric = kOfflineTokens) {
  static int line = 1;
  Residual r;
  r.stack = "s";
  r.results = "r.csv";
  r.line = ++line;
  r.submitter = "sub" + std::to_string(line);
  r.system = "sys" + std::to_string(line);
  r.gpu = gpu;
  r.gpus = gpus;
  r.model = model;
  r.scenario = "Offline";
  r.fitted = fitted;
  r.metric = metric;
  r.published = 100;
  r.predicted = 100 * ratio;
  return r;
}

const CoverageRow* Family(const std::vector<CoverageRow>& rows, const std::string& family) {
  for (const CoverageRow& r : rows) {
    if (r.family == family) return &r;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("Intervals: split conformal order statistics of the rows like the question",
          "[intervals]") {
  // Fitted on b200 x8 DeepSeek-R1: those rows set what is seen and are never comparisons.
  std::vector<Residual> rows = {Row("b200", 8, "deepseek-r1", 2.0, true)};
  // 19 held-out rows on the seen system, ratios 0.91 ... 1.09.
  for (int i = 0; i < 19; ++i) rows.push_back(Row("b200", 8, "deepseek-r1", 0.91 + 0.01 * i));
  // Rows on an unseen GPU, far off.
  for (int i = 0; i < 12; ++i) rows.push_back(Row("gb300", 8, "deepseek-r1", 1.3 + 0.05 * i));
  const ResidualTable table(rows);
  CHECK(table.UnseenOf("s", "deepseek-r1", "b200", 4) == kSeen);  // one node: the same scale
  CHECK(table.UnseenOf("s", "deepseek-r1", "b200", 72) == kUnseenScale);
  CHECK(table.UnseenOf("s", "llama2-70b", "gb300", 8) == (kUnseenGpu | kUnseenModel));
  CHECK(table.UnseenOf("other", "deepseek-r1", "b200", 8) ==
        (kUnseenGpu | kUnseenModel | kUnseenScale));

  // n = 19 at 80%: the 16th smallest |log ratio| (ceil(0.8 x 20)), that of 1.08.
  const auto in = table.IntervalFor({"s", "deepseek-r1", "b200", kOfflineTokens, 8}, 1000);
  REQUIRE(in);
  CHECK(in->rows == 19);
  CHECK_FALSE(in->widened);
  CHECK_FALSE(in->clamped);
  CHECK(in->low == Approx(1000 / 1.08));
  CHECK(in->high == Approx(1080));
  CHECK(in->Scaled(500).first == Approx(500 / 1.08));
  CHECK(in->same_family);

  // The unseen GPU's rows came out 30-85% high: its 11th of 12 (ceil(0.8 x 13)), 1.8.
  const auto far = table.IntervalFor({"s", "deepseek-r1", "gb300", kOfflineTokens, 8}, 1000);
  REQUIRE(far);
  CHECK(far->rows == 12);
  CHECK(far->low == Approx(1000 / 1.8));
  CHECK(far->high == Approx(1800));

  // No row of the metric: no interval.
  CHECK_FALSE(table.IntervalFor({"s", "deepseek-r1", "b200", kCapacityQps, 8}, 10));
}

TEST_CASE("Intervals: too few rows like the question take rows that extrapolate further",
          "[intervals]") {
  std::vector<Residual> rows = {Row("b200", 8, "deepseek-r1", 1.0, true)};
  for (int i = 0; i < 12; ++i) rows.push_back(Row("b200", 8, "deepseek-r1", 0.95 + 0.01 * i));
  for (int i = 0; i < 3; ++i) rows.push_back(Row("b300", 8, "deepseek-r1", 1.2));
  for (int i = 0; i < 8; ++i) rows.push_back(Row("gb300", 72, "deepseek-r1", 0.5 + 0.05 * i));
  const ResidualTable table(rows);
  // Three rows on an unseen GPU at one node's scale: with the unseen GPU at rack scale, 11.
  const auto in = table.IntervalFor({"s", "deepseek-r1", "b300", kOfflineTokens, 8}, 100);
  REQUIRE(in);
  CHECK(in->unseen == kUnseenGpu);
  CHECK(in->widened);
  CHECK(in->basis == (kUnseenGpu | kUnseenScale));
  CHECK(in->rows == 11);
  CHECK_THAT(in->Describe(), Catch::Contains("unseen GPU") && Catch::Contains("too few"));
  // A model no held-out row extrapolates to: every held-out row.
  const auto none = table.IntervalFor({"s", "gpt-oss-120b", "b200", kOfflineTokens, 8}, 100);
  REQUIRE(none);
  CHECK(none->rows == 23);
  CHECK(none->widened);
}

TEST_CASE("Intervals: a GPU of a family no held-out row is on takes the widest family's width",
          "[intervals]") {
  // Fitted on a B200 and an MI355X: B300 rows (an unseen GPU) within 5%, MI355X rows (seen) off
  // by up to 1.6x.
  std::vector<Residual> rows = {Row("b200", 8, "deepseek-r1", 1.0, true),
                                Row("mi355x", 8, "deepseek-r1", 1.0, true)};
  for (int i = 0; i < 12; ++i) rows.push_back(Row("b300", 8, "deepseek-r1", 0.95 + 0.01 * i));
  for (int i = 0; i < 12; ++i) rows.push_back(Row("mi355x", 8, "deepseek-r1", 1.05 + 0.05 * i));
  const ResidualTable table(rows);
  // An unseen GPU of a family with rows: that family's unseen-GPU rows, the 11th of 12
  // (ceil(0.8 x 13)), 0.95.
  const auto b300 = table.IntervalFor({"s", "deepseek-r1", "b300", kOfflineTokens, 8}, 100);
  REQUIRE(b300);
  CHECK_FALSE(b300->unseen_family);
  CHECK(b300->high == Approx(100 / 0.95));
  // An unseen GPU of a family no row is on: its kind of row is the same narrow B300 rows, but
  // it may miss as the CDNA 4 GPUs did (their 11th of 12, 1.55).
  const auto rtx = table.IntervalFor({"s", "deepseek-r1", "rtx-pro-6000", kOfflineTokens, 8}, 100);
  REQUIRE(rtx);
  CHECK(rtx->unseen_family);
  CHECK(rtx->rows == 12);
  CHECK(rtx->high == Approx(155));
  CHECK(rtx->low == Approx(100 / 1.55));
  CHECK_THAT(rtx->Describe(), Catch::Contains("no held-out row on its GPU family"));
  CHECK(rtx->ToJson()["gpu_family_unseen"] == true);
}

TEST_CASE("Intervals: on exchangeable errors the intervals hold at their level", "[intervals]") {
  // 400 systems, two figures each, log errors N(0, 0.15): leave-one-system-out coverage near 80%.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0, 0.15);
  std::vector<Residual> rows = {Row("b200", 8, "deepseek-r1", 1.0, true)};
  for (int i = 0; i < 400; ++i) {
    Residual r = Row("b200", 8, "deepseek-r1", std::exp(noise(rng)));
    rows.push_back(r);
    r.predicted = 100 * std::exp(noise(rng));
    r.line += 1000;
    rows.push_back(r);
  }
  const std::vector<CoverageRow> coverage = ResidualTable(rows).Coverage(0.8);
  const CoverageRow* all = Family(coverage, "all");
  REQUIRE(all != nullptr);
  const CoverageRow* stack = Family(coverage, "stack s");  // by the stack that predicted them
  REQUIRE(stack != nullptr);
  CHECK(stack->rows == all->rows);
  CHECK(all->rows == 800);
  CHECK(static_cast<double>(all->covered) / all->rows == Approx(0.8).margin(0.04));
  // About 2 x 1.2816 x 0.15 in log terms.
  CHECK(all->median_width_pct == Approx(100 * (std::exp(0.192) - std::exp(-0.192))).epsilon(0.15));
  CHECK(Family(coverage, "GPU family Blackwell") != nullptr);
  CHECK(Family(coverage, "scale node") != nullptr);
}

TEST_CASE("Intervals: rows the table does not hold are covered by intervals from all of it",
          "[intervals]") {
  // The table: 19 held-out rows 0.91 ... 1.09 of the seen system: an 80% interval of +-8%.
  std::vector<Residual> rows = {Row("b200", 8, "deepseek-r1", 1.0, true)};
  for (int i = 0; i < 19; ++i) rows.push_back(Row("b200", 8, "deepseek-r1", 0.91 + 0.01 * i));
  const ResidualTable table(rows);
  // New rows: three inside +-8%, two outside, one fitted (never a comparison).
  const std::vector<Residual> fresh = {
      Row("b200", 8, "deepseek-r1", 1.05),  Row("b200", 8, "deepseek-r1", 0.95),
      Row("b200", 8, "deepseek-r1", 1.079), Row("b200", 8, "deepseek-r1", 1.2),
      Row("b200", 8, "deepseek-r1", 0.8),   Row("b200", 8, "deepseek-r1", 2.0, true)};
  const std::vector<CoverageRow> coverage = table.CoverageOf(fresh, 0.8);
  const CoverageRow* all = Family(coverage, "all");
  REQUIRE(all != nullptr);
  const CoverageRow* stack = Family(coverage, "stack s");
  REQUIRE(stack != nullptr);
  CHECK(stack->rows == all->rows);
  CHECK(all->rows == 5);
  CHECK(all->covered == 3);
  CHECK(all->median_width_pct == Approx(100 * (1.08 - 1 / 1.08)));
  // Leaving each row's own system out, as Coverage does, would change nothing here: every new row
  // names its own system. The table's own coverage is of its 19 rows alone.
  const std::vector<CoverageRow> own_coverage = table.Coverage(0.8);
  const CoverageRow* own = Family(own_coverage, "all");
  REQUIRE(own != nullptr);
  CHECK(own->rows == 19);
}

TEST_CASE("Intervals: the shipped held-out rows cover near their level, wider where extrapolating",
          "[intervals]") {
  auto table = ResidualTable::LoadDefault();
  INFO(table.status().message());
  REQUIRE(table.ok());
  // Every shipped stack has its fitted rows in the table, and held-out rows of every metric.
  for (const char* stack : {"trtllm-1.0", "trtllm-1.2"}) {
    INFO(stack);
    CHECK(table->UnseenOf(stack, "deepseek-r1", "b200", 8) == kSeen);
  }
  const std::vector<CoverageRow> coverage = table->Coverage(0.8);
  const CoverageRow* all = Family(coverage, "all");
  REQUIRE(all != nullptr);
  // By the stack that predicted them too, every held-out row under one of them.
  int by_stack = 0;
  for (const char* stack : {"trtllm-1.0", "trtllm-1.2", "vllm-0.9-rocm", "vllm-0.14-rocm"}) {
    const CoverageRow* row = Family(coverage, std::string("stack ") + stack);
    REQUIRE(row != nullptr);
    by_stack += row->rows;
  }
  CHECK(by_stack == all->rows);
  const double share = static_cast<double>(all->covered) / all->rows;
  CHECK(share >= 0.7);
  CHECK(share <= 0.9);
  // DeepSeek-R1 Offline on the stack's own 8xB200 against a GB300 rack it never saw.
  const auto seen =
      table->IntervalFor({"trtllm-1.2", "deepseek-r1", "b200", kOfflineTokens, 8}, 1000);
  const auto rack =
      table->IntervalFor({"trtllm-1.2", "deepseek-r1", "gb300", kOfflineTokens, 72}, 1000);
  REQUIRE(seen);
  REQUIRE(rack);
  CHECK(rack->unseen == (kUnseenGpu | kUnseenScale));
  CHECK((rack->high - rack->low) > (seen->high - seen->low));
  CHECK(seen->same_family);  // Blackwell rows enough
}

TEST_CASE("ResidualsOf: a run that fell behind its arrivals gives its capacity, not its p99s",
          "[intervals]") {
  RowPrediction p;
  p.row.line = 7;
  p.row.scenario = "Server";
  p.row.accelerator = "gb200";
  p.row.gpus = 72;
  p.row.target_qps = 45;
  p.row.ttft_p99_ms = 1158.9;
  p.row.tpot_p99_ms = 37.1;
  p.has_capacity = true;
  p.capacity_qps = 16.6;
  p.ttft_p99_ms = 3.1e6;  // an hour of queue: the run's length, not a latency
  p.tpot_p99_ms = 40.2;
  auto metrics = [&] {
    std::vector<std::string> m;
    for (const Residual& r : ResidualsOf(p, "trtllm-1.2", "r.csv", false)) m.push_back(r.metric);
    return m;
  };
  CHECK(metrics() == std::vector<std::string>{kCapacityQps, kTtftP99, kTpotP99});
  p.overloaded = true;
  CHECK(metrics() == std::vector<std::string>{kCapacityQps});
}

TEST_CASE("Intervals: a broken residual table names the file, line and column", "[intervals]") {
  const std::string path =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/fathom_resid.csv";
  const std::string header =
      "stack,results,line,submitter,system,gpu,gpus,model,scenario,fitted,metric,published,"
      "predicted\n";
  std::ofstream(path) << header << "s,r.csv,2,a,b,b200,8,m,Offline,0,tokens,10,11\n";
  auto bad = LoadResiduals(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::StartsWith(path + ":2: column metric: \"tokens\" is not one of"));
  std::ofstream(path) << header << "s,r.csv,2,a,b,b200,8,m,Offline,0,offline_tokens_per_s,0,11\n";
  bad = LoadResiduals(path);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == path + ":2: column published: \"0\" is not a positive number");
  std::ofstream(path) << "stack,results\n";
  bad = LoadResiduals(path);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == path + ":1: column 3 must be line");
  // What calibrate writes reads back.
  std::vector<Residual> rows = {Row("b200", 8, "deepseek-r1", 1.1, true, kTpotP99)};
  std::ofstream(path) << ResidualsCsv(rows);
  auto back = LoadResiduals(path);
  REQUIRE(back.ok());
  REQUIRE(back->size() == 1);
  CHECK(back->front().fitted);
  CHECK(back->front().metric == kTpotP99);
  CHECK(back->front().predicted == Approx(110));
  std::remove(path.c_str());
}

}  // namespace fathom::tuner
