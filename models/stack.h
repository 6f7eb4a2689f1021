// Software stacks: the engine and release a deployment runs on, each with its own calibration
// (models/stacks.json). The same GPUs served DeepSeek-R1 1.7x faster Offline one MLPerf round
// later with the same deployment shape: the engine is an input, like the hardware.
#pragma once

#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"

namespace fathom::models {

// What the tuner tries on a stack beyond the deployment's shape ("search" in stacks.json).
struct StackSearch {
  // Multi-step counts (vLLM V0's num_scheduler_steps, sim::EngineConfig::scheduler_steps); {1}:
  // the engine has none.
  std::vector<int> scheduler_steps = {1};
  bool attention_dp_balance = true;  // TensorRT-LLM's attention-DP balancing exists
  // vLLM V1's async scheduling on every candidate (sim::EngineConfig::async_scheduling): the
  // host's work beside the GPU's, never slower in the model.
  bool async_scheduling = false;
  // Waiting prompts run in prefill-only batches ahead of the decodes (SGLang's default: no mixed
  // chunks), not as chunks beside them (sim::SchedulerKind::kPrefillFirst).
  bool prefill_first = false;
};

struct Stack {
  std::string name;                        // "trtllm-1.2"
  std::string engine;                      // "TensorRT-LLM"
  std::vector<std::string> vendors;        // GPU vendors its build runs on ("nvidia", "amd")
  std::string version;                     // release and toolchain
  std::vector<std::string> calibrated_on;  // MLPerf rounds whose rows fitted it ("v6.0")
  std::string calibration;                 // calibration file, relative to the data directory
  // The rows its fit used: the first `fitted_rows` of this results file (relative to the data
  // directory); every other shipped row is held out of it.
  std::string fitted_results;
  int fitted_rows = 0;
  // The config.json model_types the release also serves as TensorRT engines under its C++
  // executor; every model runs on its Python runtime.
  std::vector<std::string> cpp_model_types;
  StackSearch search;
  OrderedJson features;  // what the release offers, from its harness configs
  std::string sources;

  bool RunsOn(const std::string& vendor) const;
  std::string CalibrationPath() const;
  OrderedJson ToJson() const;
};

// The stacks, newest last; errors name the file, the entry and the field.
Result<std::vector<Stack>> LoadStacks(const std::string& path);
std::string DefaultStacksPath();  // models/stacks.json
// `name` among `stacks`; an unknown name is an error listing the known ones, and so is a stack
// not of `engine` ("vLLM") where one is given.
Result<Stack> FindStack(const std::vector<Stack>& stacks, const std::string& name,
                        const std::string& engine = "");
// The engine a --engine value names: trtllm, vllm, sglang -> "TensorRT-LLM", "vLLM", "SGLang"; an
// error for any other.
Result<std::string> EngineNamed(const std::string& flag);
// The value of --engine that names `engine` ("vLLM" -> "vllm").
std::string EngineFlag(const std::string& engine);
// The stack a run on a `vendor`'s GPUs gets without --stack: the newest of `engine` (any engine
// when empty) whose build runs there. Without an engine, a GPU no stack runs on (a vendor of the
// user's own hardware file) gets the newest stack; with one, that is an error naming the stacks
// of the engine and where they run.
Result<Stack> DefaultStack(const std::vector<Stack>& stacks, const std::string& engine,
                           const std::string& vendor);
// The engines with a stack that runs on `vendor`'s GPUs, newest stack's engine first.
std::vector<std::string> EnginesOn(const std::vector<Stack>& stacks, const std::string& vendor);
// The stack of `engine` ("TensorRT-LLM", "vLLM") calibrated on MLPerf round `round` ("v5.1");
// an error when none is.
Result<Stack> StackForRound(const std::vector<Stack>& stacks, const std::string& round,
                            const std::string& engine = "TensorRT-LLM");

}  // namespace fathom::models
