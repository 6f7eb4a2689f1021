// Error bars beside fathom's answers (tune, simulate): 80% intervals from the shipped held-out
// published results (tuner/calibration/intervals.h).
#pragma once

#include <functional>
#include <string>

#include "base/json_fields.h"
#include "base/status.h"
#include "sim/config.h"
#include "sim/deployment_config.h"
#include "tuner/calibration/intervals.h"
#include "tuner/search/tuner.h"

namespace fathom::cli {

struct IntervalNote {
  std::string text;  // empty where the stack has no residuals (a calibration file, the roofline)
  OrderedJson json;  // {"tokens_per_s": {...}, "qps": {...}, ...}; null where none
};

// What a run or a tune found on `config` under `stack`. Offline: tokens/s. Server and
// Interactive: with `capacity` (a tune's highest QPS within the limits) the QPS and its tokens/s,
// and the p99 TTFT and TPOT at it; without (a run at a rate asked for), the p99s only.
struct Answer {
  sim::Scenario scenario = sim::Scenario::kOffline;
  bool capacity = false;
  double tokens_per_s = 0, qps = 0, ttft_p99_ms = 0, tpot_p99_ms = 0;
  bool own_trace = false;  // a workload of the user's, not an MLPerf data set
  // The run fell behind its arrivals: its p99s grow with its length, so they get no interval
  // (tuner::ResidualsOf leaves such runs' latencies out of the held-out rows too).
  bool overloaded = false;
};

Result<IntervalNote> DescribeIntervals(const std::string& stack,
                                       const sim::DeploymentConfig& config, const Answer& answer);

// A report's error bars (reports::ReportOptions::error_bars) from `table` (borrowed): each sweep's
// best QPS (Server, Interactive) or tokens/s (Offline) as "low-high unit".
std::function<std::string(const tuner::SweepInfo&, const tuner::CandidateResult&)> ReportErrorBars(
    const tuner::ResidualTable* table);

}  // namespace fathom::cli
