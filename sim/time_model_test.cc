#include "sim/time_model.h"

#include <catch2/catch.hpp>

namespace fathom::sim {

TEST_CASE("MakeTimeModel: the newest stack's calibration by default; bad choices name the flags",
          "[sim]") {
  const auto catalog = models::HardwareCatalog::LoadBuiltin();
  REQUIRE(catalog.ok());
  auto calibrated = MakeTimeModel({}, *catalog, "b200");
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
  auto roofline = MakeTimeModel(o, *catalog, "b200");
  REQUIRE(roofline.ok());
  CHECK(roofline->roofline);
  CHECK(roofline->Runtimes("llama") == std::vector<Runtime>{Runtime::kPython});
  o.stack = calibrated->stack;
  CHECK(MakeTimeModel(o, *catalog, "b200").status().message() ==
        "--engine, --stack and --calibration apply to the calibrated cost model, not the "
        "roofline");
  o = {};
  o.cost_model = "fitted";
  CHECK(MakeTimeModel(o, *catalog, "b200").status().message() ==
        "--cost-model = \"fitted\": must be calibrated or roofline");
  o = {};
  o.perf_db = "/nonexistent/perf.db";
  CHECK(MakeTimeModel(o, *catalog, "b200").status().message() ==
        "--perf-db = \"/nonexistent/perf.db\": no such file");
  CHECK(MakeTimeModel({}, *catalog, "h9000").status().message().find("h9000") != std::string::npos);
}

TEST_CASE(
    "MakeTimeModel: the default stack is one whose build runs on the GPU, --engine picks an "
    "engine's newest there, --stack wins",
    "[sim]") {
  const auto catalog = models::HardwareCatalog::LoadBuiltin();
  REQUIRE(catalog.ok());
  auto nvidia = MakeTimeModel({}, *catalog, "b200");
  REQUIRE(nvidia.ok());
  CHECK(nvidia->stack == "trtllm-1.2");
  CHECK(nvidia->engine == "TensorRT-LLM");
  CHECK(nvidia->search.scheduler_steps == std::vector<int>{1});
  CHECK(nvidia->search.attention_dp_balance);
  CHECK_FALSE(nvidia->search.async_scheduling);
  // TensorRT-LLM runs on NVIDIA GPUs only: an AMD GPU gets the newest vLLM on ROCm, with what its
  // search tries (V1's async scheduling; no TensorRT-LLM attention-DP balancing), and the older
  // build by name its multi-step counts.
  auto amd = MakeTimeModel({}, *catalog, "mi300x");
  REQUIRE(amd.ok());
  CHECK(amd->stack == "vllm-0.14-rocm");
  CHECK(amd->engine == "vLLM");
  CHECK(amd->search.scheduler_steps == std::vector<int>{1});
  CHECK(amd->search.async_scheduling);
  CHECK_FALSE(amd->search.attention_dp_balance);
  TimeModelOptions o;
  o.stack = "vllm-0.9-rocm";
  auto v0 = MakeTimeModel(o, *catalog, "mi300x");
  REQUIRE(v0.ok());
  CHECK(v0->search.scheduler_steps == std::vector<int>{1, 7, 13});
  CHECK_FALSE(v0->search.async_scheduling);
  o = {};
  o.engine = "trtllm";
  CHECK(MakeTimeModel(o, *catalog, "h200")->stack == "trtllm-1.2");
  CHECK(MakeTimeModel(o, *catalog, "mi325x").status().message() ==
        "--engine = trtllm: no TensorRT-LLM stack runs on amd GPUs (trtllm-1.0 runs on nvidia; "
        "trtllm-1.2 runs on nvidia): give --stack to extrapolate to them");
  o.engine = "vllm";
  CHECK(MakeTimeModel(o, *catalog, "mi355x")->stack == "vllm-0.14-rocm");
  CHECK(MakeTimeModel(o, *catalog, "b200")->stack == "vllm-0.18-cuda");
  o.engine = "sglang";
  CHECK(MakeTimeModel(o, *catalog, "h100-sxm")->stack == "sglang-0.5");
  CHECK(MakeTimeModel(o, *catalog, "h100-sxm")->search.prefill_first);
  CHECK(MakeTimeModel(o, *catalog, "mi355x").status().message() ==
        "--engine = sglang: no SGLang stack runs on amd GPUs (sglang-0.5 runs on nvidia): give "
        "--stack to extrapolate to them");
  o.engine = "tgi";
  CHECK(MakeTimeModel(o, *catalog, "b200").status().message() ==
        "--engine = \"tgi\": must be trtllm, vllm or sglang");
  // A named stack wins (an extrapolation to GPUs its build does not run on), but must be of the
  // engine asked for.
  o = {};
  o.stack = "vllm-0.9-rocm";
  CHECK(MakeTimeModel(o, *catalog, "b200")->stack == "vllm-0.9-rocm");
  o.engine = "trtllm";
  CHECK(MakeTimeModel(o, *catalog, "b200").status().message() ==
        "--stack = vllm-0.9-rocm is a vLLM stack, not --engine = trtllm's");
  o = {};
  o.engine = "vllm";
  o.calibration = "models/calibration/vllm-0.9-rocm.json";
  CHECK(MakeTimeModel(o, *catalog, "mi300x").status().message() ==
        "--engine and --calibration: give one");
}

}  // namespace fathom::sim
