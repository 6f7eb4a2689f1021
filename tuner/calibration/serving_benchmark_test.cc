#include "tuner/calibration/serving_benchmark.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>

#include "base/files.h"
#include "sim/time_model.h"

namespace fathom::tuner {
namespace {

const char kHeader[] =
    "source,engine,version,hardware,model,weights,dense_weights,isl,osl,concurrency,tp,pp,attn_dp,"
    "ep,ttft_ms,tpot_ms\n";

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  REQUIRE(WriteFileAtomic(path, text).ok());
  return path;
}

// Llama 3.1 8B on one H200 in FP8: small enough that a closed loop simulates in milliseconds.
ServingBenchmark Point(int64_t isl, int64_t osl, int64_t concurrency) {
  ServingBenchmark b;
  b.engine = "vLLM";
  b.hardware = "h200";
  b.model = "llama3.1-8b";
  b.weights = "fp8";
  b.isl = isl;
  b.osl = osl;
  b.concurrency = concurrency;
  b.ttft_ms = 50;
  b.tpot_ms = 10;
  return b;
}

models::Calibration Start() {
  auto c = models::LoadCalibration(DataDir() + "/models/calibration/trtllm-1.2.json");
  REQUIRE(c.ok());
  return *c;
}

}  // namespace

TEST_CASE("LoadServingBenchmarks: reads the shipped points, each engine named as stacks name it",
          "[tuner]") {
  auto points = LoadServingBenchmarks(DataDir() + "/models/calibration/serving_benchmarks_aic.csv");
  INFO(points.status().message());
  REQUIRE(points.ok());
  REQUIRE(points->size() > 2000);
  int sglang = 0, vllm = 0, trtllm = 0;
  std::set<std::string> seen;
  for (const ServingBenchmark& b : *points) {
    sglang += b.engine == "SGLang";
    vllm += b.engine == "vLLM";
    trtllm += b.engine == "TensorRT-LLM";
    CHECK(b.Gpus() >= 1);
    // Every run on a node of eight (the 2026-04-06 rows' degrees, as labelled, made TP8 runs 64
    // GPUs), and each measurement once.
    if (b.hardware != "gb200" && b.hardware != "gb300") CHECK(b.Gpus() <= 8);
    const std::string point = b.engine + b.version + b.hardware + b.model + b.weights +
                              std::to_string(b.isl) + "x" + std::to_string(b.osl) + "c" +
                              std::to_string(b.concurrency) + "tp" + std::to_string(b.tp) + "dp" +
                              std::to_string(b.attn_dp) + "ep" + std::to_string(b.ep) + "ttft" +
                              std::to_string(b.ttft_ms) + "tpot" + std::to_string(b.tpot_ms);
    CHECK(seen.insert(point).second);
  }
  CHECK(sglang > 300);
  CHECK(vllm > 500);
  CHECK(sglang + vllm + trtllm == static_cast<int>(points->size()));
}

TEST_CASE("LoadServingBenchmarks: bad input names the file, line, column and rule", "[tuner]") {
  const std::string path = TempFile(
      "fathom_serving.csv", std::string(kHeader) +
                                "a,vLLM,0.12,h200,llama3.1-8b,fp8,,1000,100,8,1,1,1,1,80.5,9.1\n"
                                "b,vLLM,0.12,h200,llama3.1-8b,fp8,,1000,100,0,1,1,1,1,80.5,9.1\n");
  auto points = LoadServingBenchmarks(path);
  REQUIRE_FALSE(points.ok());
  CHECK(points.status().message() ==
        path + ":3: column concurrency: \"0\" is not a whole number from 1 to 2^30");

  const std::string engine = TempFile(
      "fathom_serving_engine.csv",
      std::string(kHeader) + "a,TGI,2,h200,llama3.1-8b,fp8,,1000,100,8,1,1,1,1,80.5,9.1\n");
  auto bad_engine = LoadServingBenchmarks(engine);
  REQUIRE_FALSE(bad_engine.ok());
  CHECK(bad_engine.status().message() ==
        engine + ":2: column engine: \"TGI\" is not an engine (TensorRT-LLM, vLLM or SGLang)");

  const std::string time = TempFile(
      "fathom_serving_time.csv",
      std::string(kHeader) + "a,sglang,,h200,llama3.1-8b,fp8,,1000,100,8,1,1,1,1,-1,9.1\n");
  auto bad_time = LoadServingBenchmarks(time);
  REQUIRE_FALSE(bad_time.ok());
  CHECK(bad_time.status().message() == time + ":2: column ttft_ms: \"-1\" is not a time > 0");

  const std::string missing = TempFile("fathom_serving_missing.csv", "source,engine\na,vLLM\n");
  auto no_column = LoadServingBenchmarks(missing);
  REQUIRE_FALSE(no_column.ok());
  CHECK(no_column.status().message() == missing + ":1: missing column version");
}

TEST_CASE("ClosedLoopTokensPerSPerGpu: each client's request takes TTFT plus a TPOT a later token",
          "[tuner]") {
  ServingBenchmark b = Point(1000, 101, 16);
  b.tp = 2;
  // 16 clients x 101 tokens every 0.1 + 100 x 0.01 = 1.1 s, over 2 GPUs.
  CHECK(ClosedLoopTokensPerSPerGpu(b, 100, 10) == Approx(16.0 * 101 / 1.1 / 2));
}

TEST_CASE("MeasuredPeakShare: a loop's linear-layer FLOPs over its GPUs' dense peak", "[tuner]") {
  auto catalog = models::HardwareCatalog::LoadBuiltin();
  REQUIRE(catalog.ok());
  // vLLM's Llama 3.1 8B point at 2,000 x 100 tokens, 64 clients, on one H200 in FP8: TTFT 121.73
  // ms, TPOT 9.74 ms, so 64 / (0.12173 + 99 x 0.00974) = 58.93 requests a second. A token
  // multiplies 32 x 218.1M layer parameters (q and o 4096 x 4096, k and v 4096 x 1024, the MLP 3 x
  // 4096 x 14336), and a generated one also the 128,256 x 4096 LM head: 2 x (2000 x 6.979G + 100 x
  // 7.504G) = 29.42 TFLOP a request, 1.734 PFLOP/s of the H200's 1,979 dense FP8.
  ServingBenchmark b = Point(2000, 100, 64);
  b.ttft_ms = 121.73;
  b.tpot_ms = 9.74;
  const Result<double> share = MeasuredPeakShare(b, *catalog);
  REQUIRE(share.ok());
  CHECK(*share == Approx(0.876).epsilon(0.005));
  // The same loop on two GPUs needs half of their peak; in BF16, twice as much of one's.
  b.tp = 2;
  CHECK(*MeasuredPeakShare(b, *catalog) == Approx(*share / 2));
  b.tp = 1;
  b.weights = "bf16";
  CHECK(*MeasuredPeakShare(b, *catalog) == Approx(*share * 1979.0 / 989.0).epsilon(0.01));
  b.model = "no-such-model";
  b.line = 7;
  const Result<double> unknown = MeasuredPeakShare(b, *catalog);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message().find("line 7: column model") != std::string::npos);
}

TEST_CASE(
    "PredictServingBenchmark: the measured rounds after the warmup, and a busier loop waits "
    "longer for each token",
    "[tuner][sim]") {
  auto catalog = models::HardwareCatalog::Load({});
  REQUIRE(catalog.ok());
  const auto make_time = sim::CalibratedFactory(Start().params, nullptr);
  auto one = PredictServingBenchmark(Point(1024, 64, 1), make_time, *catalog, {});
  auto busy = PredictServingBenchmark(Point(1024, 64, 64), make_time, *catalog, {});
  INFO(one.status().message());
  REQUIRE(one.ok());
  REQUIRE(busy.ok());
  CHECK(one->requests == kClosedLoopRounds);
  CHECK(busy->requests == 64 * kClosedLoopRounds);
  CHECK(one->layout == "TP1 PP1 EP1 attnDP1 x1");
  CHECK(busy->tpot_ms > one->tpot_ms);
  CHECK(busy->ttft_ms > one->ttft_ms);
  CHECK(busy->tokens_per_s_per_gpu > 10 * one->tokens_per_s_per_gpu);
  // Alone, a request's first token is its prompt's prefill: more than the decode step after it.
  CHECK(one->ttft_ms > one->tpot_ms);
  // A layout the model does not allow names the point's line.
  ServingBenchmark bad = Point(1024, 64, 1);
  bad.line = 7;
  bad.tp = 3;
  auto refused = PredictServingBenchmark(bad, make_time, *catalog, {});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("serving benchmark line 7") != std::string::npos);
}

TEST_CASE("FitServingBenchmarks: recovers the host time per iteration the points were made with",
          "[tuner][sim]") {
  auto catalog = models::HardwareCatalog::Load({});
  REQUIRE(catalog.ok());
  models::Calibration truth = Start();
  truth.params.iteration_overhead_us = 3000;
  std::vector<ServingBenchmark> points = {Point(512, 32, 1), Point(512, 32, 8), Point(2048, 32, 4),
                                          Point(512, 64, 32)};
  const auto made = PredictServingBenchmarks(points, sim::CalibratedFactory(truth.params, nullptr),
                                             *catalog, {}, 2);
  for (size_t i = 0; i < points.size(); ++i) {
    REQUIRE(made[i].ok());
    points[i].ttft_ms = made[i]->ttft_ms;
    points[i].tpot_ms = made[i]->tpot_ms;
  }
  models::Calibration start = Start();
  start.params.iteration_overhead_us = 500;
  auto fit = FitServingBenchmarks(points, start, {"iteration_overhead_us"}, *catalog, {}, 2);
  INFO(fit.status().message());
  REQUIRE(fit.ok());
  CHECK(fit->calibration.params.iteration_overhead_us == Approx(3000).epsilon(0.05));
  CHECK(fit->final_cost < fit->initial_cost);
  // Held parameters stay where they started.
  CHECK(fit->calibration.params.eager_launch_us == start.params.eager_launch_us);

  auto unknown = FitServingBenchmarks(points, start, {"warp_speed"}, *catalog, {}, 2);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message().find("--free = \"warp_speed\": not a fitted parameter") == 0);
}

TEST_CASE("CrossValidateServing: a fold a model, none for a single GPU", "[tuner][sim]") {
  auto catalog = models::HardwareCatalog::Load({});
  REQUIRE(catalog.ok());
  std::vector<ServingBenchmark> points = {Point(512, 32, 1), Point(512, 32, 8)};
  ServingBenchmark other = Point(512, 32, 4);
  other.model = "qwen3-32b";
  other.weights = "bf16";
  points.push_back(other);
  points.push_back(Point(1024, 32, 2));
  const auto cvs =
      CrossValidateServing(points, Start(), {"iteration_overhead_us"}, *catalog, {}, 2);
  REQUIRE(cvs.size() == 2);
  CHECK(cvs[0].kind == "model");
  REQUIRE(cvs[0].folds.size() == 2);
  CHECK(cvs[0].folds[1].held_out == "qwen3-32b");
  REQUIRE(cvs[0].folds[1].fit.ok());
  CHECK(cvs[0].folds[1].points.size() == 1);
  CHECK(cvs[0].folds[1].predictions.size() == 1);
  CHECK(cvs[1].kind == "hardware");
  CHECK(cvs[1].folds.empty());
}

}  // namespace fathom::tuner
