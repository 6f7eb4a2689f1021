// MLPerf Inference latency limits (p99) per benchmark and scenario.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sim/config.h"

namespace fathom::sim {

struct LatencyLimits {
  double ttft_ms = 0;
  double tpot_ms = 0;
};

// Known for deepseek-r1, llama3.1-405b, llama2-70b, gpt-oss-120b, mixtral-8x7b (Server and
// Interactive); none for Offline or other models.
std::optional<LatencyLimits> MlperfLimits(const std::string& benchmark, Scenario scenario);

// Samples LoadGen issues (equal issue pads both to whole data sets): Offline pre-generates
// 1.1 x min_duration x the expected rate; Server issues min_duration of arrivals at `qps`.
int64_t LoadGenOfflineSamples(int64_t dataset_size, double expected_samples_per_s, double min_duration_s = 600);
int64_t LoadGenServerSamples(int64_t dataset_size, double qps, double min_duration_s = 600);

}  // namespace fathom::sim
