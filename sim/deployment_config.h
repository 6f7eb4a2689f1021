// A whole deployment as a file: model, GPU, layout, precision, engine knobs, router and
// disaggregation. `fathom simulate --deployment` reads it; the tuner writes it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/deployment.h"
#include "models/execution_time.h"
#include "models/hardware.h"
#include "models/memory.h"
#include "models/model_arch.h"
#include "sim/simulator.h"

namespace fathom::sim {

struct PoolLayout {
  int instances = 1;
  int tp = 1, pp = 1, ep = 1, attn_dp = 1;
};

struct DeploymentConfig {
  std::string model = "deepseek-r1";
  std::string hardware = "b200";
  int gpus = 8;
  int tp = 8, pp = 1, ep = 8, attn_dp = 8;
  std::string weights = "fp4";
  std::string dense_weights;  // empty: same as weights
  std::string kv = "fp8";
  models::Runtime runtime = models::Runtime::kPython;
  EngineConfig engine;
  RouterKind router = RouterKind::kLeastOutstanding;
  bool disaggregated = false;
  PoolLayout prefill, decode;    // disaggregated pools (gpus, tp... above are then ignored)
  int64_t decode_max_batch = 0;  // 0: engine.max_batch
  double kv_link_gb_per_s = 0;   // per GPU; 0: the GPU's scale-out bandwidth

  int TotalGpus() const;
};

// Unknown fields are errors: a typo must not silently fall back to a default.
Result<DeploymentConfig> DeploymentFromJson(const Json& j, const std::string& source);
Result<DeploymentConfig> LoadDeploymentFile(const std::string& path);
OrderedJson ToJson(const DeploymentConfig& d);

using TimeModelFactory = std::function<std::unique_ptr<models::ExecutionTimeModel>(
    const models::ModelArch&, const models::Hardware&, const models::ParallelLayout&, const models::Precision&,
    models::Runtime)>;

// Everything a simulation of one deployment needs, owned in one place.
struct ResolvedDeployment {
  models::ModelArch model;
  models::Hardware hardware;
  models::Precision precision;
  models::ParallelLayout layout;         // aggregated, or the prefill pool's
  models::ParallelLayout decode_layout;  // disaggregated only
  models::MemoryPlan plan, decode_plan;
  std::unique_ptr<models::ExecutionTimeModel> time, decode_time;
  SimulationSpec spec;  // points into the time models above; scenario left to the caller
};

// Loads model and GPU, validates layouts and memory, and builds the simulation's pools.
Result<std::unique_ptr<ResolvedDeployment>> Resolve(const DeploymentConfig& d, const models::HardwareCatalog& catalog,
                                                    const TimeModelFactory& make_time);

}  // namespace fathom::sim
