#include "sim/run_score.h"

#include <algorithm>

#include "base/stats.h"
#include "sim/simulator.h"

namespace fathom::sim {
namespace {

double Mean(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

}  // namespace

void RunScore::Issued(double at_s) {
  ++issued_;
  last_issue_s_ = at_s;
}

void RunScore::Completed(int64_t issue_index, double ttft_ms, double e2e_ms, double done_s,
                         int64_t input, int64_t output) {
  ttft_ms_.push_back(static_cast<float>(ttft_ms));
  e2e_ms_.push_back(static_cast<float>(e2e_ms));
  if (output > 1)
    tpot_ms_.push_back(static_cast<float>((e2e_ms - ttft_ms) / static_cast<double>(output - 1)));
  output_tokens_ += output;
  input_tokens_ += input;
  last_completion_s_ = done_s;
  if (issue_index > latest_done_index_) {
    latest_done_index_ = issue_index;
    latest_done_s_ = done_s;
  }
}

void RunScore::Fill(const ScenarioConfig& sc, const std::optional<LatencyLimits>& limits,
                    int total_gpus, bool stopped, SimulationResult* res) {
  res->completed_requests = completed();
  res->stopped_early = stopped;
  res->output_tokens = output_tokens_;
  res->input_tokens = input_tokens_;
  const bool per_sample_queries =
      sc.scenario == Scenario::kServer || sc.scenario == Scenario::kInteractive;
  res->drain_end_s = last_completion_s_;
  res->duration_s = per_sample_queries ? latest_done_s_ : res->drain_end_s;
  if (res->duration_s > 0) {
    res->throughput_tokens_per_s = output_tokens_ / res->duration_s;
    // LoadGen counts n - 1 Server samples: the last one opens the interval's end.
    const int64_t counted = per_sample_queries ? std::max<int64_t>(res->completed_requests - 1, 1)
                                               : res->completed_requests;
    res->requests_per_s = counted / res->duration_s;
  }
  res->tokens_per_s_per_gpu = res->throughput_tokens_per_s / total_gpus;
  res->sustained_tokens_per_s = res->throughput_tokens_per_s;
  if (per_sample_queries && last_issue_s_ > 0)
    res->sustained_tokens_per_s = output_tokens_ / last_issue_s_;
  res->ttft_mean_ms = Mean(ttft_ms_);
  res->tpot_mean_ms = Mean(tpot_ms_);
  res->e2e_mean_ms = Mean(e2e_ms_);
  res->ttft_p50_ms = Percentile(ttft_ms_, 0.50);
  res->ttft_p99_ms = Percentile(ttft_ms_, 0.99);
  res->tpot_p50_ms = Percentile(tpot_ms_, 0.50);
  res->tpot_p99_ms = Percentile(tpot_ms_, 0.99);
  res->e2e_p50_ms = Percentile(e2e_ms_, 0.50);
  res->e2e_p99_ms = Percentile(e2e_ms_, 0.99);
  res->limits = limits;
  if (limits) {
    res->ttft_violations = std::count_if(ttft_ms_.begin(), ttft_ms_.end(),
                                         [&](float v) { return v > limits->ttft_ms; });
    res->tpot_violations = std::count_if(tpot_ms_.begin(), tpot_ms_.end(),
                                         [&](float v) { return v > limits->tpot_ms; });
  }
  res->latency_limits_met = !stopped && limits && res->ttft_p99_ms <= limits->ttft_ms &&
                            res->tpot_p99_ms <= limits->tpot_ms;
  // LoadGen: a Server run's length is the last sample's scheduled time; an Offline one's, its
  // latency.
  res->run_length_s = per_sample_queries ? last_issue_s_ : res->duration_s;
  res->min_duration_s = sc.min_duration_s;
  res->min_duration_met = res->run_length_s >= sc.min_duration_s;
  res->mlperf_valid =
      res->min_duration_met && (sc.scenario == Scenario::kOffline || res->latency_limits_met);
}

}  // namespace fathom::sim
