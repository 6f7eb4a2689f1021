// Where GPU time went: top kernels, per NVTX range, per operator kind.
#pragma once

#include <string>
#include <vector>

#include "base/json_fields.h"
#include "models/perf_db.h"

namespace fathom::profiler {

// The operator kind a kernel implements, from its name: gemm, attention, moe, communication,
// elementwise, memcpy, memset or other.
std::string ClassifyKernel(const models::KernelRecord& k);

struct TimeShare {
  std::string key;
  int64_t count = 0;
  double total_us = 0;
  double mean_us() const { return count > 0 ? total_us / count : 0.0; }
};

struct ProfileSummary {
  double total_us = 0;
  int64_t records = 0;
  std::vector<TimeShare> kernels;  // by name, most time first
  std::vector<TimeShare> ranges;   // by NVTX range ("(none)" outside any)
  std::vector<TimeShare> kinds;    // by operator kind
  OrderedJson ToJson(size_t top) const;
};

ProfileSummary Summarize(const std::vector<models::KernelRecord>& records);

}  // namespace fathom::profiler
