// libFuzzer target: feeds arbitrary bytes to the Prometheus text parser and takes every histogram's
// quantiles and deltas; a parsed page must hold only named samples.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "base/prometheus.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = ParsePrometheusText(text, "fuzz");
  if (!m.ok()) return 0;
  for (const auto& [name, samples] : *m) {
    if (name.empty() || samples.empty()) __builtin_trap();
    const std::string_view n(name);
    if (n.size() > 7 && n.substr(n.size() - 7) == "_bucket") {
      auto h = FindHistogram(*m, std::string(n.substr(0, n.size() - 7)));
      if (!h) __builtin_trap();
      for (double q : {0.0, 0.5, 0.99, 1.0}) (void)Quantile(*h, q);
      (void)Quantile(Delta(*h, h), 0.99);
    }
  }
  return 0;
}
