// Workload transforms. Streaming ones wrap a reader (constant memory); the MLPerf equal-issue
// padding and exact sampling work on a materialised dataset.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "base/status.h"
#include "traces/reader.h"

namespace fathom::traces {

// The most requests a trace tool generates, samples or repeats a data set to (a larger count is a
// typo), and the highest arrival rate it takes, in requests a second.
inline constexpr int64_t kMaxTraceRequests = 100'000'000;
inline constexpr double kMaxArrivalRate = 1e6;

// Applied in this order: length filters, Bernoulli sampling, head, time scaling, re-timing.
struct TransformOptions {
  std::optional<int64_t> min_input, max_input, min_output, max_output;  // keep within bounds
  double sample_fraction = 1.0;  // keep each request with this probability (seeded)
  std::optional<int64_t> head;   // stop after this many requests
  double time_scale = 1.0;       // multiply arrival times (0.5 = twice the rate)
  std::optional<double> rate;    // replace arrivals by a Poisson process at this rate
  uint64_t seed = 1;

  Status Validate() const;
};

// Wraps `inner` (owned). Counters are the inner reader's plus the requests filtered here.
std::unique_ptr<TraceReader> Transform(std::unique_ptr<TraceReader> inner,
                                       const TransformOptions& options);

enum class CombineMode {
  kConcat,  // one after another; each later trace's times shift to follow the previous one
  kMix,     // merged by arrival time (every input needs timestamps)
};
// Combines several readers (owned) into one stream; ids are renumbered.
std::unique_ptr<TraceReader> Combine(std::vector<std::unique_ptr<TraceReader>> inputs,
                                     CombineMode mode);

// Loops over `dataset` until `total` requests were issued, as LoadGen issues a data set of N
// samples repeatedly (sample i of the output is dataset[i % N]). Arrival times are dropped.
std::unique_ptr<TraceReader> Repeat(std::vector<Request> dataset, int64_t total);

// LoadGen's equal-issue rule: the smallest multiple of the dataset size that is >= min_count.
int64_t EqualIssueCount(int64_t dataset_size, int64_t min_count);

Result<std::vector<Request>> ReadAll(TraceReader& reader);

// `n` requests drawn without replacement (reservoir sampling), kept in trace order.
Result<std::vector<Request>> SampleWithoutReplacement(TraceReader& reader, int64_t n,
                                                      uint64_t seed);

}  // namespace fathom::traces
