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

}  // namespace fathom
