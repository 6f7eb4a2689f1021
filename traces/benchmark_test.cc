#include "traces/benchmark.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "base/files.h"

namespace fathom::traces {
namespace {

double MeanOutput(const std::vector<Request>& data) {
  double sum = 0;
  for (const auto& r : data) sum += static_cast<double>(r.output_tokens);
  return sum / static_cast<double>(data.size());
}

}  // namespace

TEST_CASE("Benchmarks: every MLPerf LLM data set has its size and reference output per sample",
          "[benchmark]") {
  const auto& all = MlperfBenchmarks();
  REQUIRE(all.size() == 5);
  for (const Benchmark& b : all) {
    INFO(b.name);
    auto data = BenchmarkDataset(b);
    REQUIRE(data.ok());
    CHECK(static_cast<int64_t>(data->size()) == b.samples);
    // The real set's capped mean is the reference (3886.2274); the lognormal sets are matched to
    // it.
    CHECK(MeanOutput(*data) == Approx(b.reference_output_tokens).epsilon(0.005));
    for (const Request& r : *data) {
      REQUIRE(r.output_tokens >= 1);
      REQUIRE(r.output_tokens <= b.max_output);
      REQUIRE(r.input_tokens >= 1);
    }
    CHECK(b.server.has_value());
    // The same set every time (seed 1), whatever else ran.
    CHECK(BenchmarkDataset(b)->front().output_tokens == data->front().output_tokens);
  }
}

TEST_CASE("Benchmarks: a data set drawn from output quantiles has those quantiles", "[benchmark]") {
  const Benchmark* b = FindBenchmark(MlperfBenchmarks(), "llama2-70b");
  REQUIRE(b != nullptr);
  REQUIRE_FALSE(b->output_quantiles.empty());
  CHECK_THAT(b->LengthsNote(), Catch::Contains("published latency percentiles"));
  auto data = BenchmarkDataset(*b);
  REQUIRE(data.ok());
  std::vector<int64_t> out;
  for (const Request& r : *data) out.push_back(r.output_tokens);
  std::sort(out.begin(), out.end());
  auto at = [&](double p) {
    return static_cast<double>(out[static_cast<size_t>(p * static_cast<double>(out.size()))]);
  };
  // The table's multiples of the mean (0.866 at p50, 1.811 at p90, 3.345 at p99), the mean being
  // the reference; a lognormal of the same mean and median would put p99 near 2.8.
  const double mean = b->reference_output_tokens;
  CHECK(at(0.5) == Approx(0.866 * mean).epsilon(0.03));
  CHECK(at(0.9) == Approx(1.811 * mean).epsilon(0.03));
  CHECK(at(0.99) == Approx(3.345 * mean).epsilon(0.03));
  CHECK(MeanOutput(*data) == Approx(mean).epsilon(0.005));
}

TEST_CASE("Benchmarks: gpt-oss-120b's set has its published input quartiles and output spread",
          "[benchmark]") {
  const Benchmark* b = FindBenchmark(MlperfBenchmarks(), "gpt-oss-120b");
  REQUIRE(b != nullptr);
  CHECK(b->assumed.empty());  // both sides published
  auto data = BenchmarkDataset(*b);
  REQUIRE(data.ok());
  std::vector<int64_t> in;
  double out_sum = 0, out_sq = 0;
  for (const Request& r : *data) {
    in.push_back(r.input_tokens);
    out_sum += static_cast<double>(r.output_tokens);
    out_sq += static_cast<double>(r.output_tokens) * static_cast<double>(r.output_tokens);
  }
  std::sort(in.begin(), in.end());
  auto at = [&](double p) {
    return static_cast<double>(in[static_cast<size_t>(p * static_cast<double>(in.size()))]);
  };
  // mlcommons/inference's plot of the performance set: quartiles 3,492, 4,593 and 6,046, max
  // 15,330; TEST09 logs: outputs with a standard deviation of about 255 around 1,300.
  CHECK(at(0.25) == Approx(3492).epsilon(0.04));
  CHECK(at(0.5) == Approx(4593).epsilon(0.04));
  CHECK(at(0.75) == Approx(6046).epsilon(0.04));
  CHECK(in.back() <= 15330);
  const double n = static_cast<double>(data->size()), mean = out_sum / n;
  CHECK(std::sqrt(out_sq / n - mean * mean) / mean == Approx(0.19).epsilon(0.1));
}

TEST_CASE("Benchmarks: a model finds its benchmark by name or by a result table's spelling",
          "[benchmark]") {
  const auto& all = MlperfBenchmarks();
  REQUIRE(FindBenchmark(all, "llama2-70b-99") != nullptr);
  CHECK(FindBenchmark(all, "llama2-70b-99")->name == "llama2-70b");
  CHECK(FindBenchmark(all, "deepseek-r1")->server_min_query_count == 26382);
  CHECK(FindBenchmark(all, "llama2-70b")->interactive->tpot_ms == 40);
  CHECK(FindBenchmark(all, "mixtral-8x7b")->interactive == std::nullopt);
  CHECK(FindBenchmark(all, "qwen3-235b-a22b") == nullptr);
}

TEST_CASE("Benchmarks: a broken benchmark file names the entry, the field and the rule",
          "[benchmark]") {
  const std::string path =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/fathom_bench.json";
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  write(
      R"({"benchmarks": [{"name": "x", "dataset": "d", "samples": 0, "reference_output_tokens": 10,
            "lengths": {"input_mean": 5, "input_sigma": 1, "output_sigma": 1, "max_input": 10, "max_output": 100}}]})");
  auto bad = LoadBenchmarks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::Contains("benchmarks[0]") && Catch::Contains("'samples'"));
  write(
      R"({"benchmarks": [{"name": "x", "dataset": "d", "samples": 5, "reference_output_tokens": 10}]})");
  bad = LoadBenchmarks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("'lengths'"));
  write(
      R"({"benchmarks": [{"name": "x", "dataset": "d", "samples": 5, "reference_output_tokens": 200,
            "lengths": {"input_mean": 5, "input_sigma": 1, "output_sigma": 1, "max_input": 10, "max_output": 100},
            "server": {"ttft_ms": -1, "tpot_ms": 5}}]})");
  bad = LoadBenchmarks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("server"));
  for (const char* table : {"[[0, 0.1], [0.5, 2], [0.4, 3], [1, 4]]", "[[0, 0.1], [0.5, 2]]",
                            "[[0, 0.1], [0.5, 2], [1, 1]]", "[[0.1, 0.1], [1, 2]]", "[[0, 1]]"}) {
    INFO(table);
    write(std::string(R"({"benchmarks": [{"name": "x", "dataset": "d", "samples": 5,
            "reference_output_tokens": 10, "lengths": {"input_mean": 5, "input_sigma": 1,
            "max_input": 10, "max_output": 100, "output_quantiles": )") +
          table + "}}]}");
    bad = LoadBenchmarks(path);
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.status().message(),
               Catch::Contains("benchmarks[0].lengths") && Catch::Contains("'output_quantiles'"));
  }
  std::remove(path.c_str());
}

}  // namespace fathom::traces
