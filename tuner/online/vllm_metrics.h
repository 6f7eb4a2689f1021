// vLLM's Prometheus metrics as the online tuner's window: the series a window needs, checked, and
// the window between two readings. A reading may sum several engines' pages (their series side by
// side): counters, gauges and histogram buckets add up across them.
#pragma once

#include <cstdint>
#include <string>

#include "base/prometheus.h"
#include "base/status.h"
#include "tuner/online/online.h"

namespace fathom::tuner {

// vLLM's gauges of the requests running and waiting.
inline constexpr const char* kVllmRunning = "vllm:num_requests_running";
inline constexpr const char* kVllmWaiting = "vllm:num_requests_waiting";
// Finished requests' lengths a window keeps, at most (VllmWindow's `max_sample`).
inline constexpr int64_t kVllmMaxSample = 2000;

// Checks that `m` has vllm:request_success_total, vllm:num_requests_running and the TTFT and TPOT
// histograms (without them a p99 would read as 0 ms: within any limit), and that every count is
// in [0, 1e15] and every length bucket's bound a token count; errors name `source`.
Status CheckVllmMetrics(const Metrics& m, const std::string& source);

// The window from reading `before` to reading `now`, `start_s` to `end_s`. Counters and
// histograms count their change (one that went down restarted from zero; one absent from
// `before`, from zero): vllm:request_success_total by finished_reason ("abort" counts as
// dropped), vllm:time_to_first_token_seconds and vllm:request_time_per_output_token_seconds (or
// vllm:time_per_output_token_seconds) for the p99s. vllm:num_requests_running and _waiting are
// taken at `now`, and arrivals are what finished plus the change of those in the system.
// Finished requests' lengths come from the vllm:request_prompt_tokens and
// vllm:request_generation_tokens buckets, `max_sample` at most, input and output paired at random
// with `seed` (the metrics do not pair them).
Window VllmWindow(const Metrics& before, const Metrics& now, double start_s, double end_s,
                  int64_t max_sample, uint64_t seed);

}  // namespace fathom::tuner
