#include "traces/stats.h"

#include <algorithm>
#include <cmath>

namespace fathom::traces {

void IntDistribution::Add(int64_t v) {
  if (v < kDense) {
    if (v >= static_cast<int64_t>(dense_.size()))
      dense_.resize(std::min<int64_t>(kDense, 2 * v + 64), 0);
    ++dense_[v];
  } else {
    ++sparse_[v];
  }
  ++count_;
  sum_ += v;
  max_ = std::max(max_, v);
}

int64_t IntDistribution::Percentile(double p) const {
  if (count_ == 0) return 0;
  const int64_t index = std::min<int64_t>(static_cast<int64_t>(p * count_), count_ - 1);
  int64_t seen = 0;
  for (int64_t v = 0; v < static_cast<int64_t>(dense_.size()); ++v) {
    seen += dense_[v];
    if (seen > index) return v;
  }
  for (const auto& [v, n] : sparse_) {
    seen += n;
    if (seen > index) return v;
  }
  return max_;
}

void StatsAccumulator::Add(const Request& r) {
  input_.Add(r.input_tokens);
  output_.Add(r.output_tokens);
  if (r.arrival_s) {
    const double t = *r.arrival_s;
    if (timed_ == 0) {
      first_ = t;
    } else {
      const double gap = t - last_;
      ++gaps_;
      const double delta = gap - gap_mean_;
      gap_mean_ += delta / gaps_;
      gap_m2_ += delta * (gap - gap_mean_);
    }
    last_ = t;
    ++timed_;
  }
  for (uint64_t block : r.prefix_blocks) {
    ++blocks_;
    if (!seen_blocks_.insert(block).second) ++repeated_blocks_;
  }
  ++requests_;
}

TraceStats StatsAccumulator::Finish() const {
  TraceStats s;
  s.requests = requests_;
  s.timed = requests_ > 0 && timed_ == requests_;
  if (s.timed) {
    s.duration_s = last_ - first_;
    s.rate_per_s = s.duration_s > 0 ? requests_ / s.duration_s : 0.0;
    if (gaps_ > 1 && gap_mean_ > 0) s.burstiness_cv = std::sqrt(gap_m2_ / (gaps_ - 1)) / gap_mean_;
  }
  auto summary = [](const IntDistribution& d) {
    return LengthSummary{d.mean(), d.Percentile(0.5), d.Percentile(0.9), d.Percentile(0.99),
                         d.max()};
  };
  s.input = summary(input_);
  s.output = summary(output_);
  s.prefix_blocks = blocks_;
  s.prefix_reuse_ratio = blocks_ > 0 ? static_cast<double>(repeated_blocks_) / blocks_ : 0.0;
  return s;
}

}  // namespace fathom::traces
