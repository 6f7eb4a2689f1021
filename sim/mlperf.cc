#include "sim/mlperf.h"

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

int64_t LoadGenOfflineSamples(int64_t dataset_size, double expected_samples_per_s, double min_duration_s) {
  return traces::EqualIssueCount(dataset_size,
                                 static_cast<int64_t>(std::ceil(1.1 * min_duration_s * expected_samples_per_s)));
}

int64_t LoadGenServerSamples(int64_t dataset_size, double qps, double min_duration_s) {
  return traces::EqualIssueCount(dataset_size, static_cast<int64_t>(std::ceil(min_duration_s * qps)));
}

}  // namespace fathom::sim
