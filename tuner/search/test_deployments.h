// Deployments the search's tests share.
#pragma once

#include "sim/deployment_config.h"

namespace fathom::tuner::testing {

// Llama 2 70B, FP8 weights and KV, on one H200: 256 sequences, 8,192 tokens a step.
inline sim::DeploymentConfig Llama70bOnOneH200() {
  sim::DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.gpus = 1;
  d.tp = d.ep = d.attn_dp = 1;
  d.weights = "fp8";
  d.kv = "fp8";
  d.engine.max_batch = 256;
  d.engine.max_num_tokens = 8192;
  return d;
}

}  // namespace fathom::tuner::testing
