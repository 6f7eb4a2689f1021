// What LoadGen measures of a run, from each request's times. The simulator and `fathom loadgen`
// (which measures a real endpoint) both score through it, so their figures mean the same thing.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sim/config.h"
#include "sim/mlperf.h"

namespace fathom::sim {

struct SimulationResult;

class RunScore {
 public:
  // Every request when it is issued, in issue order (seconds from the run's start).
  void Issued(double at_s);
  // A finished request: its issue index, TTFT and end-to-end latency, when it ended.
  void Completed(int64_t issue_index, double ttft_ms, double e2e_ms, double done_s, int64_t input,
                 int64_t output);

  int64_t issued() const { return issued_; }
  int64_t completed() const { return static_cast<int64_t>(e2e_ms_.size()); }
  double last_issue_s() const { return last_issue_s_; }

  // Fills the counts, LoadGen's duration and throughput, latency statistics, the p99 limits' check,
  // the run length against the minimum and MLPerf validity; `stopped`: the run ended early.
  // Reorders the latency samples (percentiles are taken in place).
  void Fill(const ScenarioConfig& scenario, const std::optional<LatencyLimits>& limits,
            int total_gpus, bool stopped, SimulationResult* res);

 private:
  std::vector<float> ttft_ms_, tpot_ms_, e2e_ms_;
  int64_t issued_ = 0;
  int64_t output_tokens_ = 0, input_tokens_ = 0;
  double last_issue_s_ = 0, last_completion_s_ = 0;
  int64_t latest_done_index_ = -1;  // issue index of the latest-issued request completed so far
  double latest_done_s_ = 0;        // and its completion time
};

}  // namespace fathom::sim
