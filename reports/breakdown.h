// Where a run's GPU time went: GPU-seconds per million output tokens by operator class, host time,
// attention-DP imbalance and idle time, side by side for several runs, and the parts that set two
// runs apart (a claim to check on hardware, credited to mechanisms).
#pragma once

#include <string>
#include <vector>

#include "base/json_fields.h"
#include "reports/table.h"
#include "sim/simulator.h"

namespace fathom::reports {

struct BreakdownRun {
  std::string label;
  const sim::SimulationResult* run = nullptr;  // borrowed; run with EngineConfig::cost_breakdown
  int gpus = 0;                                // the deployment's
};

// One row per part, one column per run: GPU-seconds per million output tokens (the parts add up to
// the GPUs' whole time, drain included), then tokens/s and the mean latencies, which hold the
// queueing and the serving front.
Table BreakdownTable(const std::vector<BreakdownRun>& runs);

// The parts in which `ours` spends fewer GPU-seconds per million tokens than `theirs`, largest
// first, and the share of the difference each makes: "attention: 41.2 fewer GPU-s per million
// tokens (38% of the gain)". Parts costing more are listed after them.
std::string CreditLines(const BreakdownRun& ours, const BreakdownRun& theirs);

// {"gemm": ..., ..., "idle": ..., "total": ...}: GPU-seconds per million output tokens.
OrderedJson BreakdownJson(const BreakdownRun& run);

}  // namespace fathom::reports
