// The one random-number generator of a run: seeded explicitly, identical streams on every
// platform (the distributions are written out here rather than taken from <random>, whose
// algorithms differ between standard libraries).
#pragma once

#include <cmath>
#include <cstdint>

namespace fathom {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  // splitmix64: tiny, fast, passes BigCrush; good for simulation streams.
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t Below(uint64_t n) { return static_cast<uint64_t>(Uniform() * static_cast<double>(n)); }
  double Exponential(double rate) { return -std::log1p(-Uniform()) / rate; }
  double Normal() {
    // Box-Muller; the second value is dropped to keep the stream position simple.
    const double u1 = 1.0 - Uniform();
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  // Gamma(shape, scale) by Marsaglia and Tsang.
  double Gamma(double shape, double scale) {
    if (shape < 1.0) return Gamma(shape + 1.0, scale) * std::pow(1.0 - Uniform(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    while (true) {
      double x, v;
      do {
        x = Normal();
        v = 1.0 + c * x;
      } while (v <= 0);
      v = v * v * v;
      const double u = 1.0 - Uniform();
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v * scale;
    }
  }
  double Weibull(double shape, double scale) {
    return scale * std::pow(-std::log1p(-Uniform()), 1.0 / shape);
  }

 private:
  uint64_t state_;
};

}  // namespace fathom
