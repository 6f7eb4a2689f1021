#include "sim/time_model.h"

#include <catch2/catch.hpp>

namespace fathom::sim {

TEST_CASE("MakeTimeModel: the newest stack's calibration by default; bad choices name the flags",
          "[sim]") {
  auto calibrated = MakeTimeModel({}, "b200");
  INFO(calibrated.status().message());
  REQUIRE(calibrated.ok());
  CHECK_FALSE(calibrated->roofline);
  CHECK_FALSE(calibrated->stack.empty());
  CHECK(calibrated->factory);
  // A stack's runtimes for a model: its Python runtime, and its C++ executor where the stack
  // builds the model as TensorRT engines (the Llamas, not DeepSeek-R1); one runtime without a
  // stack.
  using models::Runtime;
  CHECK(calibrated->Runtimes("llama") == std::vector<Runtime>{Runtime::kPython, Runtime::kCpp});
  CHECK(calibrated->Runtimes("deepseek_v3") == std::vector<Runtime>{Runtime::kPython});
  TimeModelOptions o;
  o.cost_model = "roofline";
  auto roofline = MakeTimeModel(o, "b200");
  REQUIRE(roofline.ok());
  CHECK(roofline->roofline);
  CHECK(roofline->Runtimes("llama") == std::vector<Runtime>{Runtime::kPython});
  o.stack = calibrated->stack;
  CHECK(MakeTimeModel(o, "b200").status().message() ==
        "--stack and --calibration apply to the calibrated cost model, not the roofline");
  o = {};
  o.cost_model = "fitted";
  CHECK(MakeTimeModel(o, "b200").status().message() ==
        "--cost-model = \"fitted\": must be calibrated or roofline");
  o = {};
  o.perf_db = "/nonexistent/perf.db";
  CHECK(MakeTimeModel(o, "b200").status().message() ==
        "--perf-db = \"/nonexistent/perf.db\": no such file");
}

}  // namespace fathom::sim
