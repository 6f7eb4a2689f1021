// The Prometheus text exposition format (what a /metrics page serves): samples by name, and
// histograms summed over their series with their deltas and quantiles; metrics written in it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace fathom {

// Samples by metric name (histograms as their _bucket, _sum and _count series).
struct MetricSample {
  std::map<std::string, std::string> labels;
  double value = 0;
};
using Metrics = std::map<std::string, std::vector<MetricSample>>;

// Errors name `source`, the line and what was expected there.
Result<Metrics> ParsePrometheusText(std::string_view text, const std::string& source);

// A histogram summed over its series: cumulative counts by upper bound (the last is +Inf).
struct Histogram {
  std::vector<std::pair<double, double>> buckets;
  double count = 0;
};
// Absent when the metrics have no `<name>_bucket` series; a series whose `le` is not a number
// (or is NaN) is left out.
std::optional<Histogram> FindHistogram(const Metrics& m, const std::string& name);
// The change from `before` (a counter reset counts from zero).
Histogram Delta(const Histogram& now, const std::optional<Histogram>& before);
// Prometheus's histogram_quantile: linear within the bucket that holds the q-th observation;
// the largest finite bound when that is the +Inf bucket; 0 when empty.
double Quantile(const Histogram& h, double q);

// Appends a metric's HELP and TYPE lines, then a sample per (labels, value); labels as written
// between the braces (`a="x",b="y"`), empty for none. Whole values print exactly.
void AppendMetric(std::string* out, const std::string& name, const std::string& type,
                  const std::string& help,
                  const std::vector<std::pair<std::string, double>>& samples);

}  // namespace fathom
