// Replica counts over a time-varying trace (a day of traffic whose rate and mix shift): per phase,
// the fewest replicas of one deployment that keep the p99 limits with the phase alone (the
// oracle: switches free), the fewest the whole trace needs held all along (the static fleet), and
// a plan that scales at the phase boundaries by rolling replacement (sim::KvMove::kDrain), checked
// on the whole trace and given a replica more in any phase whose requests break a limit.
#pragma once

#include <optional>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/hardware.h"
#include "sim/plan.h"
#include "traces/reader.h"

namespace fathom::tuner {

struct AutoscaleOptions {
  double phase_s = 3600;
  int max_replicas = 64;
  double ttft_limit_ms = 0, tpot_limit_ms = 0;  // p99 limits, both > 0
  std::optional<double> restart_s;              // a new replica's start; default: modelled
  int repair_rounds = 8;  // plan checks on the whole trace, a replica more each where one breaks
};

struct PhaseReplicas {
  double start_s = 0, end_s = 0;
  int64_t requests = 0;
  double mean_input = 0, mean_output = 0;
  int oracle = 0;                           // the fewest that keep the limits, the phase alone
  int planned = 0;                          // the plan's
  double ttft_p99_ms = 0, tpot_p99_ms = 0;  // in the plan's run, of the requests arriving in it
};

struct AutoscaleResult {
  int gpus_per_replica = 1;
  double restart_s = 0;
  bool restart_modelled = true;
  int static_replicas = 0;  // the fewest the whole trace needs held all along
  double static_ttft_p99_ms = 0, static_tpot_p99_ms = 0;
  std::vector<PhaseReplicas> phases;
  sim::Plan plan;
  bool plan_within_limits = false;  // every phase's p99s in the plan's run
  double gpu_hours_static = 0, gpu_hours_plan = 0, gpu_hours_oracle = 0;
  int64_t simulations = 0;
  OrderedJson ToJson() const;
};

// `replica`'s GPU count is ignored: a deployment of r replicas has r x tp x pp GPUs. `trace`
// needs arrival times. Errors: a phase that even max_replicas cannot serve within the limits.
Result<AutoscaleResult> PlanReplicas(const sim::DeploymentConfig& replica,
                                     const std::vector<traces::Request>& trace,
                                     const AutoscaleOptions& options,
                                     const models::HardwareCatalog& catalog,
                                     const sim::TimeModelFactory& make_time);

}  // namespace fathom::tuner
