// Adaptive plans (fathom tune --adaptive): the tuned static best as a start, and a switch to
// another configuration for the part of the run where the workload differs. Offline's run ends in
// a thin tail of long reasoning traces that no longer fill the batch: the plan search tries, for
// that tail, the configurations the static search found fastest per user and per GPU, at triggers
// from the start's running capacity down, each with its real switch cost (the pipelines drain,
// the running sequences' KV migrates, the engines restart), and bounds what switching could gain
// with the same plans at no cost (the oracle).
#pragma once

#include <optional>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/hardware.h"
#include "sim/plan.h"
#include "tuner/search/tuner.h"

namespace fathom::tuner {

struct AdaptiveOptions {
  int tail_configs = 8;  // configurations tried for the tail: half fastest per user, half per GPU
  // Triggers: a completion leaves at most this fraction of the start's running capacity.
  std::vector<double> trigger_fractions = {1, 0.5, 0.25, 0.125};
  sim::KvMove kv = sim::KvMove::kMigrate;
  std::optional<double> restart_s;  // default: sim::EstimateRestart
  // The start also tried with the queue taken by predicted output length, longest and shortest
  // first, with this predictor error (sim::EngineConfig::prediction_sigma).
  double prediction_sigma = sim::EngineConfig().prediction_sigma;
};

// One plan's run.
struct PlanOutcome {
  sim::Plan plan;
  double throughput_tokens_per_s = 0;  // LoadGen's Offline figure, over all GPUs
  double duration_s = 0;
  std::optional<sim::SwitchRecord> switched;
  // With a switch: how long the static run took from the same trigger to its end.
  double static_tail_s = 0;
  OrderedJson ToJson(double static_tokens_per_s) const;
};

struct AdaptiveResult {
  PlanOutcome static_run;  // the static best over the whole deployment, the plans' samples
  PlanOutcome best;        // the best plan; the static run when none beats it
  std::optional<PlanOutcome> best_switch;  // the best plan that switches, better or not
  std::vector<PlanOutcome> orders;         // the start under each predicted queue order
  std::optional<PlanOutcome> oracle;       // the best plan with free switches
  int64_t plans = 0;                       // simulated
  int tail_configs = 0, triggers = 0;
  double wall_s = 0;
  bool adapted() const { return !(best.plan == static_run.plan); }
  OrderedJson ToJson() const;
};

// Searches plans starting from `tuned`'s best (Offline).
Result<AdaptiveResult> SearchPlans(const TuneOptions& options,
                                   const models::HardwareCatalog& catalog, const TuneResult& tuned,
                                   const AdaptiveOptions& adaptive);

}  // namespace fathom::tuner
