// Ready-to-run launch commands for a deployment on real engines.
#pragma once

#include <optional>
#include <string>

#include "models/hardware.h"
#include "sim/deployment_config.h"

namespace fathom::tuner {

struct LaunchCommands {
  std::string vllm;         // vllm serve ...
  std::string sglang;       // python -m sglang.launch_server ...
  std::string trtllm;       // trtllm-serve ... --extra_llm_api_options extra.yaml
  std::string trtllm_yaml;  // the extra options file
};

// Flag names follow the engines' documentation (vLLM engine arguments, SGLang server arguments,
// trtllm-serve options and LlmArgs). Disaggregated deployments get one command per pool. Each
// engine's memory flag gives it the KV cache the deployment plans (`catalog` holds its GPU).
LaunchCommands MakeLaunchCommands(const sim::DeploymentConfig& d,
                                  const models::HardwareCatalog& catalog);

// Engine instances (replicas) of an aggregated deployment: one per tp x pp GPUs.
int Instances(const sim::DeploymentConfig& d);

// The Hugging Face repository a built-in model is served from (the name itself otherwise).
std::string HuggingFaceId(const std::string& model, const std::string& weights);

// The other way: the built-in model a repository (or a built-in name) serves, and the weight
// format its checkpoint holds.
struct ServedModel {
  std::string model;
  std::string weights;
};
std::optional<ServedModel> FromHuggingFaceId(const std::string& id);

}  // namespace fathom::tuner
