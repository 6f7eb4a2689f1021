// Summary statistics of a workload, accumulated in one streaming pass.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_set>
#include <vector>

#include "traces/reader.h"
#include "traces/request.h"

namespace fathom::traces {

// Exact order statistics of non-negative integers in memory proportional to distinct values.
class IntDistribution {
 public:
  void Add(int64_t v);
  int64_t count() const { return count_; }
  double mean() const { return count_ > 0 ? static_cast<double>(sum_) / count_ : 0.0; }
  int64_t max() const { return max_; }
  // LoadGen's rule: the element at index floor(p * n) of the sorted values.
  int64_t Percentile(double p) const;

 private:
  static constexpr int64_t kDense = 1 << 17;
  std::vector<int64_t> dense_;  // counts of values below kDense, grown on demand
  std::map<int64_t, int64_t> sparse_;
  int64_t count_ = 0;
  int64_t sum_ = 0;
  int64_t max_ = 0;
};

struct LengthSummary {
  double mean = 0;
  int64_t p50 = 0, p90 = 0, p99 = 0, max = 0;
};

struct TraceStats {
  int64_t requests = 0;
  bool timed = false;     // every request had an arrival time
  double duration_s = 0;  // last arrival - first arrival
  double rate_per_s = 0;  // requests / duration
  LengthSummary input, output;
  double burstiness_cv = 0;       // std / mean of inter-arrival gaps (1 for Poisson)
  double prefix_reuse_ratio = 0;  // prefix blocks whose id appeared earlier / all blocks
  int64_t prefix_blocks = 0;
};

class StatsAccumulator {
 public:
  void Add(const Request& r);
  TraceStats Finish() const;

 private:
  IntDistribution input_, output_;
  int64_t requests_ = 0;
  int64_t timed_ = 0;
  double first_ = 0, last_ = 0;
  // Welford over inter-arrival gaps.
  int64_t gaps_ = 0;
  double gap_mean_ = 0, gap_m2_ = 0;
  std::unordered_set<uint64_t> seen_blocks_;
  int64_t blocks_ = 0, repeated_blocks_ = 0;
};

}  // namespace fathom::traces
