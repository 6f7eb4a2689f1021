// MLPerf Inference rules: latency limits (p99) per benchmark and scenario, LoadGen run lengths.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sim/config.h"
#include "traces/benchmark.h"

namespace fathom::sim {

using traces::LatencyLimits;

// The p99 limits of the MLPerf benchmark that runs `model` (traces/data/mlperf_benchmarks.json:
// DeepSeek-R1, Llama 2 70B, Llama 3.1 405B, Mixtral 8x7B, gpt-oss-120b) in Server or Interactive;
// none for Offline, other scenarios or other models.
std::optional<LatencyLimits> MlperfLimits(const std::string& model, Scenario scenario);

// Samples LoadGen issues (equal issue pads both to whole data sets): Offline pre-generates
// 1.1 x min_duration x the expected rate; Server issues min_duration of arrivals at `qps`.
int64_t LoadGenOfflineSamples(int64_t dataset_size, double expected_samples_per_s, double min_duration_s = 600);
int64_t LoadGenServerSamples(int64_t dataset_size, double qps, double min_duration_s = 600);

}  // namespace fathom::sim
