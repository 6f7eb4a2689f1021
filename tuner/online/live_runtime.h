// A live serving runtime for the online tuner, reached through two commands: one prints its
// Prometheus metrics (vLLM's names), the other applies new batch limits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/prometheus.h"
#include "base/status.h"
#include "tuner/online/online.h"
#include "tuner/online/vllm_metrics.h"

namespace fathom::tuner {

struct LiveRuntimeOptions {
  std::string metrics_cmd;  // prints the metrics, e.g. curl -s http://localhost:8000/metrics
  std::string apply_cmd;    // {max_batch} and {max_num_tokens} are replaced by the new limits
  double window_s = 60;
  double command_timeout_s = 30;  // either command not done by then is killed and stops the loop
  int64_t max_sample = kVllmMaxSample;  // finished requests' lengths kept per window, at most
  // Waits out a window (seconds); the default sleeps. Tests pass one that returns at once.
  std::function<void(double)> wait;
  Env* env = Env::Default();  // borrowed: runs the two commands
};

// Reads vLLM's metrics: vllm:request_success_total (by finished_reason; "abort" counts as
// dropped), vllm:num_requests_running and _waiting, and the histograms
// vllm:time_to_first_token_seconds, vllm:request_time_per_output_token_seconds (or
// vllm:time_per_output_token_seconds), vllm:request_prompt_tokens and
// vllm:request_generation_tokens. Finished requests' lengths come from the length histograms'
// buckets (input and output paired at random: the metrics do not pair them).
class LiveRuntime : public ServingRuntime {
 public:
  // Takes the first scrape, which the first window is measured from.
  static Result<std::unique_ptr<LiveRuntime>> Create(LiveRuntimeOptions options);

  Result<std::optional<Window>> Observe() override;
  Result<ApplyOutcome> Apply(const BatchLimits& limits) override;

 private:
  explicit LiveRuntime(LiveRuntimeOptions options) : options_(std::move(options)) {}
  Result<Metrics> Scrape() const;

  LiveRuntimeOptions options_;
  Metrics last_;
  double elapsed_s_ = 0;
  uint64_t pairing_seed_ = 1;
};

}  // namespace fathom::tuner
