// Adaptive plans: a deployment that changes configuration during a run as its triggers fire.
// `fathom tune --adaptive` searches them and writes the best to a file; `fathom simulate --plan`
// replays one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/hardware.h"
#include "sim/deployment_config.h"
#include "sim/simulator.h"

namespace fathom::sim {

// What restarting an engine in a new configuration costs: the runtime's start (process, NCCL
// communicators, memory pools), the weights copied in from host memory over the host link, and
// one CUDA-graph capture per batch size. The start and per-graph times are assumptions, not
// measurements (order of magnitude from vLLM's and TensorRT-LLM's start-up logs): a switch's
// figure is only as good as them, so plans print them and a plan file may override the total.
struct RestartEstimate {
  static constexpr double kRuntimeStartS = 10;
  static constexpr double kGraphCaptureS = 0.15;
  double start_s = kRuntimeStartS;
  double weights_s = 0;
  double graphs_s = 0;
  double total() const { return start_s + weights_s + graphs_s; }
};
RestartEstimate EstimateRestart(const ResolvedDeployment& r);
// Per-GPU bandwidth KV migrates at: one direction of the scale-up link, else the host link.
double MigrateBytesPerS(const ResolvedDeployment& r);

struct PlanStep {
  SwitchTrigger when;
  DeploymentConfig to;
  KvMove kv = KvMove::kMigrate;
  std::optional<double> restart_s;  // overrides EstimateRestart
  bool operator==(const PlanStep&) const = default;
};

struct Plan {
  DeploymentConfig start;
  std::vector<PlanStep> steps;  // fired one after another, in order
  std::optional<RunRecord> run;
  // Round again after the last step (which must return to the start's configuration): rules
  // such as "a larger batch while the queue is long, back when it is short".
  bool cycle = false;
  bool operator==(const Plan&) const = default;
};

// The plan file: {"start": <a deployment file, with its "run">, "cycle": false, "switches":
// [{"when": "after_s" | "in_system_at_most" | "in_system_at_least", "value": N, "kv": "migrate" |
// "recompute" | "drain", "restart_s": S (optional), "to": <a deployment>}]}. Errors name the file,
// the switch and the field.
Result<Plan> PlanFromJson(const Json& j, const std::string& source);
Result<Plan> LoadPlanFile(const std::string& path);
OrderedJson ToJson(const Plan& plan);

std::string_view Name(SwitchTrigger::Kind k);
std::string_view Name(KvMove m);
std::optional<KvMove> ParseKvMove(std::string_view name);  // migrate, recompute or drain
// "in_system_at_most 64", "after_s 300".
std::string Describe(const SwitchTrigger& t);

// Whether going from `a` to `b` changes only what a running engine takes in place (its batch
// limits).
bool InPlace(const DeploymentConfig& a, const DeploymentConfig& b);
// Whether it changes only how many instances of the same engine run (the GPU count).
bool ScaleOnly(const DeploymentConfig& a, const DeploymentConfig& b);

// A plan made ready to simulate: every step's deployment resolved (owned here, borrowed by the
// switches) and checked against the start (same model and GPU, aggregated).
struct ResolvedPlan {
  std::vector<std::unique_ptr<ResolvedDeployment>> deployments;  // per step
  std::vector<ConfigSwitch> switches;                            // per step
  std::vector<RestartEstimate> restarts;  // per step, modelled (a step's restart_s may override)
  bool cycle = false;                     // Plan::cycle

  // Queues the switches on a simulation of the plan's start.
  Status ScheduleOn(Simulator* simulator) const;
};
Result<ResolvedPlan> ResolvePlan(const Plan& plan, const models::HardwareCatalog& catalog,
                                 const TimeModelFactory& make_time);

}  // namespace fathom::sim
