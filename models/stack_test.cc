#include "models/stack.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>

#include "base/files.h"
#include "models/cost_model.h"

namespace fathom::models {

TEST_CASE("Stacks: each shipped stack has a calibration, the newest is the default", "[stack]") {
  auto stacks = LoadStacks(DefaultStacksPath());
  REQUIRE(stacks.ok());
  REQUIRE(stacks->size() >= 2);
  for (const Stack& s : *stacks) {
    INFO(s.name);
    // The rows its fit used are shipped: among the rows of its MLPerf round, or, for a stack
    // calibrated on measured serving points, among the points of its engine.
    std::ifstream fitted(DataDir() + "/" + s.fitted_results);
    REQUIRE(fitted.good());
    std::string line, first_row;
    int rows = -1, engine_rows = 0;  // rows: less the header
    while (std::getline(fitted, line)) {
      if (rows == 0) first_row = line;
      rows += line.empty() ? 0 : 1;
      engine_rows += line.find("," + s.engine + ",") != std::string::npos;
    }
    if (s.calibrated_on.empty()) {
      CHECK(s.fitted_results == "models/calibration/serving_benchmarks_aic.csv");
      CHECK(s.fitted_rows <= engine_rows);
    } else {
      CHECK(s.fitted_rows <= rows);
      CHECK(first_row.rfind(s.calibrated_on.front() + ",", 0) == 0);
    }
    auto c = LoadCalibration(s.CalibrationPath());
    INFO(c.status().message());
    REQUIRE(c.ok());
    // The CUDA-graph sizes the stack documents are the ones its calibration simulates.
    CHECK(s.features.at("cuda_graph_batch_sizes").get<std::vector<int64_t>>() ==
          c->params.cuda_graph_batch_sizes);
  }
  CHECK(DefaultCalibrationPath() == stacks->back().CalibrationPath());
  // MLPerf ran the Llamas as TensorRT engines under the C++ executor, DeepSeek-R1 on PyTorch;
  // vLLM is a Python runtime for every model.
  for (const Stack& s : *stacks) {
    INFO(s.name);
    const bool trtllm = s.engine == "TensorRT-LLM";
    CHECK(s.cpp_model_types ==
          (trtllm ? std::vector<std::string>{"llama", "mixtral"} : std::vector<std::string>{}));
    CHECK(s.ToJson().at("cpp_runtime_model_types").size() == (trtllm ? 2 : 0));
  }
  CHECK(stacks->back().name == "trtllm-1.2");
  CHECK(StackForRound(*stacks, "v5.1")->name == "trtllm-1.0");
  CHECK(StackForRound(*stacks, "v6.0")->name == "trtllm-1.2");
  CHECK(StackForRound(*stacks, "v5.1", "vLLM")->name == "vllm-0.9-rocm");
  CHECK(StackForRound(*stacks, "v6.0", "vLLM")->name == "vllm-0.14-rocm");
  CHECK(DefaultStack(*stacks, "", "nvidia")->name == "trtllm-1.2");
  CHECK(DefaultStack(*stacks, "", "amd")->name == "vllm-0.14-rocm");
  CHECK(DefaultStack(*stacks, "", "intel")->name == "trtllm-1.2");  // runs nowhere: the newest
  CHECK(DefaultStack(*stacks, "vLLM", "amd")->name == "vllm-0.14-rocm");
  CHECK(DefaultStack(*stacks, "vLLM", "nvidia")->name == "vllm-0.18-cuda");
  CHECK(DefaultStack(*stacks, "SGLang", "nvidia")->name == "sglang-0.5");
  CHECK_FALSE(DefaultStack(*stacks, "SGLang", "amd").ok());
  CHECK(EnginesOn(*stacks, "nvidia") == std::vector<std::string>{"TensorRT-LLM", "SGLang", "vLLM"});
  CHECK(EnginesOn(*stacks, "amd") == std::vector<std::string>{"vLLM"});
  CHECK(EnginesOn(*stacks, "intel").empty());
  for (const char* flag : {"trtllm", "vllm", "sglang"})
    CHECK(EngineFlag(*EngineNamed(flag)) == flag);
  CHECK_THAT(StackForRound(*stacks, "v4.0").status().message(),
             Catch::Contains("no TensorRT-LLM stack is calibrated on MLPerf v4.0"));
  CHECK_THAT(FindStack(*stacks, "vllm-9").status().message(),
             Catch::Contains("--stack = \"vllm-9\": not a known stack (trtllm-1.0, vllm-0.9-rocm, "
                             "vllm-0.14-rocm, vllm-0.18-cuda, sglang-0.5, trtllm-1.2"));
  // Each stack is its own calibration: v6.0's engine is not v5.1's.
  CHECK(LoadCalibration(stacks->front().CalibrationPath())->params.iteration_overhead_us !=
        LoadCalibration(stacks->back().CalibrationPath())->params.iteration_overhead_us);
}

TEST_CASE("Stacks: a broken stacks file names the entry and the field", "[stack]") {
  const std::string path =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/fathom_stacks.json";
  std::ofstream(path)
      << R"({"stacks": [{"name": "a", "engine": "e", "version": "1", "calibration": "c.json"}]})";
  auto bad = LoadStacks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::Contains("stacks[0]") && Catch::Contains("'calibrated_on'"));
  std::ofstream(path)
      << R"({"stacks": [{"name": "a", "engine": "e", "version": "1", "calibration": "c.json",
                              "vendors": ["nvidia"], "calibrated_on": ["v1"],
                              "fitted_on": {"results": "r.csv", "rows": 1}},
                             {"name": "a", "engine": "e", "version": "2", "calibration": "c.json",
                              "vendors": ["nvidia"], "calibrated_on": ["v2"],
                              "fitted_on": {"results": "r.csv", "rows": 1}}]})";
  bad = LoadStacks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("stacks[1]") && Catch::Contains("twice"));
  std::ofstream(path) << R"({"stacks": [{"name": "a", "engine": "e", "version": "1",
                              "calibration": "c.json", "calibrated_on": ["v1"],
                              "fitted_on": {"results": "r.csv", "rows": 1}, "vendors": ["nvidia"],
                              "cpp_runtime_model_types": ["llama", 7]}]})";
  bad = LoadStacks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == path +
                                      ": stacks[0]: field 'cpp_runtime_model_types': must be an "
                                      "array of model_type strings");
  // The rows its fit used: where the error bars' held-out rows start.
  std::ofstream(path) << R"({"stacks": [{"name": "a", "engine": "e", "version": "1",
                              "calibration": "c.json", "calibrated_on": ["v1"]}]})";
  bad = LoadStacks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::Contains("stacks[0]") && Catch::Contains("'fitted_on': missing"));
  std::ofstream(path) << R"({"stacks": [{"name": "a", "engine": "e", "version": "1",
                              "calibration": "c.json", "calibrated_on": ["v1"],
                              "fitted_on": {"results": "r.csv", "rows": 0}}]})";
  bad = LoadStacks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("fitted_on: field 'rows': 0"));
  // Which GPUs its build runs on decides where it is the default.
  std::ofstream(path) << R"({"stacks": [{"name": "a", "engine": "e", "version": "1",
                              "calibration": "c.json", "calibrated_on": ["v1"],
                              "fitted_on": {"results": "r.csv", "rows": 1}}]})";
  bad = LoadStacks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::Contains("stacks[0]") && Catch::Contains("'vendors': missing"));
  std::ofstream(path) << R"({"stacks": [{"name": "a", "engine": "e", "version": "1",
                              "calibration": "c.json", "calibrated_on": ["v1"], "vendors": ["amd"],
                              "fitted_on": {"results": "r.csv", "rows": 1},
                              "search": {"scheduler_steps": [1, 65]}}]})";
  bad = LoadStacks(path);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        path + ": stacks[0]: search: field 'scheduler_steps': 65 (must be in [1, 64])");
  std::remove(path.c_str());
}

}  // namespace fathom::models
