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
  double qps = 0;  // Server and Interactive: the highest grid rate within the p99 limits
  double throughput_tokens_per_s = 0;  // Offline: LoadGen's figure; else sustained at `qps`
  double duration_s = 0;
  int64_t run_samples = 0;  // the run behind the figures (Server-type: its highest valid probe)
  std::optional<sim::SwitchRecord> switched;
  int64_t output_tokens = 0;
  // With a switch: the tail (trigger to end) of this run and of the static run after the same
  // trigger, in seconds and output tokens per second.
  double tail_tokens_per_s = 0;
  double static_tail_s = 0, static_tail_tokens_per_s = 0;
  double Objective(bool server) const { return server ? qps : throughput_tokens_per_s; }
  OrderedJson ToJson(double static_objective, bool server) const;
};

struct AdaptiveResult {
  bool server = false;     // plans for Server or Interactive: rules on the queue, scored by QPS
  PlanOutcome static_run;  // the static best over the whole deployment, the plans' samples
  PlanOutcome best;        // the best plan; the static run when none beats it
  std::optional<PlanOutcome> best_switch;  // the best plan that switches, better or not
  std::vector<PlanOutcome> orders;         // the start under each predicted queue order
  // The best plan with free switches, or a queue order where one beats them (no switch).
  std::optional<PlanOutcome> oracle;
  int64_t plans = 0;     // simulated
  int64_t broke = 0;     // Server-type rules that broke the p99 limits above the static best
  int64_t unusable = 0;  // plans that could not run (a variant that does not fit, say)
  std::string unusable_example;  // why the first of them could not
  int tail_configs = 0, triggers = 0;
  double wall_s = 0;
  // The best plan's gain over the static best (its objective's ratio - 1), and with error bars its
  // 1-sigma spread (GainSigma).
  std::optional<double> gain_sigma;
  // The best plan is not the static best: it switches, or orders its queue otherwise.
  bool adapted() const {
    return !best.plan.steps.empty() || !(best.plan.start == static_run.plan.start);
  }
  OrderedJson ToJson() const;
};

// Searches plans starting from `tuned`'s best. Offline: a switch for the tail and the queue
// orders. Server and Interactive: rules that cycle between the start and one of its batch-limit
// variants on the queue's length (in place, so free), each scored by the QPS search.
Result<AdaptiveResult> SearchPlans(const TuneOptions& options,
                                   const models::HardwareCatalog& catalog, const TuneResult& tuned,
                                   const AdaptiveOptions& adaptive);

// The 1-sigma spread of the best plan's gain over the static best: both evaluated again under
// each of `perturbed`'s physics (sim::PerturbedFactories: a fitted parameter one sigma up, then
// down), the halves of each pair's difference in gain added in quadrature.
Result<double> GainSigma(const AdaptiveResult& result, const TuneOptions& options,
                         const models::HardwareCatalog& catalog,
                         const std::vector<std::array<sim::TimeModelFactory, 2>>& perturbed);

}  // namespace fathom::tuner
