// Order statistics as MLPerf LoadGen computes them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace fathom {

// LoadGen's percentile: sort, then take element floor(p * n), clamped to the last one.
// `values` is reordered (partially sorted). Returns 0 for an empty vector.
template <typename T>
T Percentile(std::vector<T>& values, double p) {
  if (values.empty()) return T{};
  size_t index = static_cast<size_t>(p * static_cast<double>(values.size()));
  index = std::min(index, values.size() - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(index),
                   values.end());
  return values[index];
}

// The median (the mean of the middle two of an even count); 0 for no values.
inline double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

}  // namespace fathom
