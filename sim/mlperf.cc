#include "sim/mlperf.h"

#include <cmath>

#include "traces/transforms.h"

namespace fathom::sim {

std::optional<LatencyLimits> MlperfLimits(const std::string& benchmark, Scenario scenario) {
  struct Row {
    const char* name;
    LatencyLimits server;
    std::optional<LatencyLimits> interactive;
  };
  static const Row kRows[] = {
      {"deepseek-r1", {2000, 80}, LatencyLimits{1500, 15}},
      {"llama3.1-405b", {6000, 175}, LatencyLimits{4500, 80}},
      {"llama2-70b", {2000, 200}, LatencyLimits{450, 40}},
      {"gpt-oss-120b", {3000, 80}, LatencyLimits{2000, 15}},
      {"mixtral-8x7b", {2000, 200}, std::nullopt},
  };
  for (const Row& row : kRows) {
    if (benchmark != row.name) continue;
    if (scenario == Scenario::kServer) return row.server;
    if (scenario == Scenario::kInteractive) return row.interactive;
    return std::nullopt;
  }
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
