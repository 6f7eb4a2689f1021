// The MLPerf Inference LLM benchmarks (traces/data/mlperf_benchmarks.json): each one's data set,
// p99 latency limits and run rules, so that a model is simulated on the workload its benchmark
// runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "traces/request.h"

namespace fathom::traces {

struct LatencyLimits {
  double ttft_ms = 0;
  double tpot_ms = 0;
};

struct Benchmark {
  std::string name;                    // "llama2-70b"
  std::vector<std::string> models;     // model names (and result-table spellings) it runs
  std::string dataset;                 // what the data set is
  std::string source;                  // where the figures come from
  int64_t samples = 0;                 // data-set size (LoadGen's performance sample count)
  double reference_output_tokens = 0;  // mean output tokens a sample of the reference
  // Per-sample lengths from a shipped trace, or a drawn data set: lognormal inputs (the mean and
  // log-space sigma) and outputs of the reference mean (after the cap), lognormal (output_sigma)
  // or from published quantiles (probability, length as a multiple of the mean; linear between
  // points).
  std::string trace;
  double input_mean = 0, input_sigma = 0, output_sigma = 0;
  std::vector<std::pair<double, double>> output_quantiles;
  int64_t max_input = 0, max_output = 0;
  std::vector<std::string> assumed;  // fields not published: estimates
  std::optional<LatencyLimits> server, interactive;
  int64_t server_min_query_count = 0;  // 0: one data set
  double offline_run_s = 0;            // published Offline runs' length where above LoadGen's 660 s

  // "per-sample lengths", or how outputs and inputs are drawn ("outputs from published latency
  // percentiles, lognormal inputs (assumed: ...)").
  std::string LengthsNote() const;
};

// Reads a benchmark file; errors name the file, the entry, the field and the rule.
Result<std::vector<Benchmark>> LoadBenchmarks(const std::string& path);
std::string DefaultBenchmarksPath();
// The shipped benchmarks, read once (empty, with the error on stderr, if the file is broken).
const std::vector<Benchmark>& MlperfBenchmarks();

// The benchmark that runs `model` (a benchmark name or one of its model names); null if none.
const Benchmark* FindBenchmark(const std::vector<Benchmark>& benchmarks, const std::string& model);

// The benchmark's data set: its trace (outputs capped), or `samples` draws (seed 1, the same set
// every time) whose mean output equals the reference after the cap.
Result<std::vector<Request>> BenchmarkDataset(const Benchmark& b);

}  // namespace fathom::traces
