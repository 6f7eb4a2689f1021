// A whole deployment as a file: model, GPU, layout, precision, engine knobs, router and
// disaggregation. `fathom simulate --deployment` reads it; the tuner writes it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
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
  bool operator==(const PoolLayout&) const = default;
};

struct DeploymentConfig {
  // The built-in default deployment.
  std::string model{models::kDefaultModel};
  std::string hardware{models::kDefaultHardware};
  int gpus = models::kDefaultLayout.gpus;
  int tp = models::kDefaultLayout.tp, pp = models::kDefaultLayout.pp,
      ep = models::kDefaultLayout.ep, attn_dp = models::kDefaultLayout.attn_dp;
  std::string weights{models::kDefaultWeights};
  std::string dense_weights;  // empty: same as weights
  std::string kv{models::kDefaultKv};
  models::Runtime runtime = models::Runtime::kPython;
  models::Fusions fusions;
  EngineConfig engine;
  RouterKind router = RouterKind::kLeastOutstanding;
  bool disaggregated = false;
  PoolLayout prefill, decode;    // disaggregated pools (gpus, tp... above are then ignored)
  int64_t decode_max_batch = 0;  // 0: engine.max_batch
  double kv_link_gb_per_s = 0;   // per GPU; 0: the GPU's scale-out bandwidth

  int TotalGpus() const;
  bool operator==(const DeploymentConfig&) const = default;
};

// The run a deployment's figures came from, kept beside it in the file the tuner writes (its
// "run" field) so that `fathom simulate --deployment FILE` repeats that run and prints the same
// figures: scenario, arrival rate, samples issued, seed, and the workload, limits and stack.
struct RunRecord {
  Scenario scenario = Scenario::kOffline;
  double qps = 0;       // Server and Interactive
  int64_t samples = 0;  // issued over the whole deployment
  uint64_t seed = 1;
  std::string benchmark;  // whose data set and limits; empty for none
  std::string trace;      // the workload file, where not the benchmark's data set
  std::string stack;      // software stack of the cost model; empty for an explicit calibration
  std::optional<double> ttft_limit_ms, tpot_limit_ms;  // given by the user, not the benchmark's
  bool operator==(const RunRecord&) const = default;
};

struct DeploymentFile {
  DeploymentConfig config;
  std::optional<RunRecord> run;
};

// Unknown fields are errors: a typo must not silently fall back to a default.
Result<DeploymentConfig> DeploymentFromJson(const Json& j, const std::string& source);
Result<DeploymentFile> LoadDeploymentFile(const std::string& path);
// The same from JSON already read; `source` names it in errors.
Result<DeploymentFile> DeploymentFileFromJson(const Json& j, const std::string& source);
OrderedJson ToJson(const DeploymentConfig& d);
// The deployment with its run in a "run" field.
OrderedJson ToJson(const DeploymentConfig& d, const RunRecord& run);

using TimeModelFactory = std::function<std::unique_ptr<models::ExecutionTimeModel>(
    const models::ModelArch&, const models::Hardware&, const models::ParallelLayout&,
    const models::Precision&, models::Runtime, models::Fusions)>;

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
Result<std::unique_ptr<ResolvedDeployment>> Resolve(const DeploymentConfig& d,
                                                    const models::HardwareCatalog& catalog,
                                                    const TimeModelFactory& make_time);

}  // namespace fathom::sim
