// MLPerf Inference rules: latency limits (p99) per benchmark and scenario, LoadGen run lengths.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/status.h"
#include "sim/config.h"
#include "traces/benchmark.h"

namespace fathom::sim {

using traces::LatencyLimits;

// The p99 limits of the MLPerf benchmark that runs `model` (traces/data/mlperf_benchmarks.json:
// DeepSeek-R1, Llama 2 70B, Llama 3.1 405B, Mixtral 8x7B, gpt-oss-120b) in Server or Interactive;
// none for Offline, other scenarios or other models.
std::optional<LatencyLimits> MlperfLimits(const std::string& model, Scenario scenario);

// Samples LoadGen issues (equal issue pads both to whole data sets): Offline pre-generates
// 1.1 x min_duration x the expected rate; Server issues min_duration of arrivals at `qps`, and at
// least the benchmark's minimum query count.
int64_t LoadGenOfflineSamples(int64_t dataset_size, double expected_samples_per_s,
                              double min_duration_s = 600);
int64_t LoadGenServerSamples(int64_t dataset_size, double qps, double min_duration_s = 600,
                             int64_t min_query_count = 0);

// Whether `violations` of a limit among `requests` rule out a p99 within it: were each request
// over the limit independently with probability 1%, so many would come up less than once in a
// million runs (Chernoff's bound on the binomial tail, exp(-n KL(v/n || 1%)), which errs toward
// "not ruled out"). A run's requests not yet over a limit count as within it, which errs the same
// way, as does a run's start (an empty system answers fastest).
bool P99ClearlyBroken(int64_t violations, int64_t requests);

// How long an Offline run lasts when sized as a submitter sizes it: LoadGen's 1.1 x the minimum
// run (its sample count is what the expected rate gives over that time when the rate is the run's
// own), or the benchmark's published run length where longer (`benchmark` may be null).
double OfflineRunTargetS(const traces::Benchmark* benchmark, double min_duration_s = 600);

// The fewest whole data sets of `dataset_size` samples whose Offline run lasts `target_s`: each
// round simulates `lasted(samples)` (the run's measured seconds, or nullopt when the deployment
// cannot serve it, which ends the search) and extrapolates from it. `fathom tune` and `fathom
// simulate` both size their Offline runs this way, so they agree.
Result<int64_t> OfflineRunSamples(
    int64_t dataset_size, double target_s,
    const std::function<Result<std::optional<double>>(int64_t samples)>& lasted);

}  // namespace fathom::sim
