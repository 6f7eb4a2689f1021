#include "sim/mlperf.h"

#include <algorithm>
#include <cmath>

#include "traces/transforms.h"

namespace fathom::sim {

std::optional<LatencyLimits> MlperfLimits(const std::string& model, Scenario scenario) {
  const traces::Benchmark* b = traces::FindBenchmark(traces::MlperfBenchmarks(), model);
  if (b == nullptr) return std::nullopt;
  if (scenario == Scenario::kServer) return b->server;
  if (scenario == Scenario::kInteractive) return b->interactive;
  return std::nullopt;
}

int64_t LoadGenOfflineSamples(int64_t dataset_size, double expected_samples_per_s,
                              double min_duration_s) {
  return traces::EqualIssueCount(
      dataset_size, static_cast<int64_t>(std::ceil(1.1 * min_duration_s * expected_samples_per_s)));
}

int64_t LoadGenServerSamples(int64_t dataset_size, double qps, double min_duration_s,
                             int64_t min_query_count) {
  const int64_t arrivals = static_cast<int64_t>(std::min(std::ceil(min_duration_s * qps), 1e15));
  return traces::EqualIssueCount(dataset_size, std::max(arrivals, min_query_count));
}

bool P99ClearlyBroken(int64_t violations, int64_t requests) {
  constexpr double kShare = 0.01;  // a p99 allows 1% over
  if (requests <= 0 || violations <= kShare * static_cast<double>(requests)) return false;
  const double q = std::min(1.0, static_cast<double>(violations) / static_cast<double>(requests));
  const double kl =
      q * std::log(q / kShare) + (q < 1 ? (1 - q) * std::log((1 - q) / (1 - kShare)) : 0.0);
  return static_cast<double>(requests) * kl >= std::log(1e6);
}

double OfflineRunTargetS(const traces::Benchmark* benchmark, double min_duration_s) {
  return std::max(1.1 * min_duration_s, benchmark != nullptr ? benchmark->offline_run_s : 0.0);
}

Result<int64_t> OfflineRunSamples(
    int64_t dataset_size, double target_s,
    const std::function<Result<std::optional<double>>(int64_t samples)>& lasted) {
  constexpr int kMaxRounds = 6;
  constexpr int64_t kMaxPasses = 1000;
  int64_t passes = 1;
  for (int round = 0; round < kMaxRounds; ++round) {
    FATHOM_ASSIGN_OR_RETURN(std::optional<double> seconds, lasted(passes * dataset_size));
    if (!seconds || *seconds >= target_s || passes >= kMaxPasses || round + 1 == kMaxRounds) break;
    passes = std::min(
        kMaxPasses,
        std::max(passes + 1,
                 static_cast<int64_t>(std::ceil(passes * target_s / std::max(*seconds, 1e-9)))));
  }
  return passes * dataset_size;
}

}  // namespace fathom::sim
