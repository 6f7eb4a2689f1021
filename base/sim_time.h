// Simulated time: integer nanoseconds. The only conversions from and to seconds live here.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>

namespace fathom {

using SimTime = std::chrono::duration<int64_t, std::nano>;

// Rounds to the nearest nanosecond; `seconds` must be finite.
inline SimTime FromSeconds(double seconds) {
  return SimTime(static_cast<int64_t>(std::llround(seconds * 1e9)));
}

inline double ToSeconds(SimTime t) { return static_cast<double>(t.count()) * 1e-9; }
inline double ToMillis(SimTime t) { return static_cast<double>(t.count()) * 1e-6; }

}  // namespace fathom
