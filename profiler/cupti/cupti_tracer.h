// The CUPTI activity tracer: kernels (concurrent), memcpy, memset, runtime and driver API calls
// and NVTX ranges, collected into a bounded pool of buffers and assembled by an ActivityLog.
// Used by the operator microbenchmarks and, injected with CUDA_INJECTION64_PATH, by any CUDA
// application (see cupti_injection.cc).
#pragma once

#include <cupti.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "models/perf_db.h"
#include "profiler/activity.h"

namespace fathom::profiler {

struct TracerOptions {
  // Memory for activity stays below buffer_bytes x max_buffers; when every buffer is in use,
  // CUPTI drops records and counts them.
  size_t buffer_bytes = 8 << 20;
  size_t max_buffers = 64;
  // Receives assembled records on CUPTI's thread once `sink_batch` of them wait, so that a long
  // trace is written as it goes; without a sink, records wait for FlushTracing.
  std::function<void(std::vector<models::KernelRecord>)> sink;
  size_t sink_batch = 1 << 16;
};

struct TracerStats {
  int64_t records = 0;  // activity records decoded
  int64_t dropped = 0;  // records CUPTI dropped because every buffer was full
  int64_t buffers = 0;  // buffers allocated (at most max_buffers)
};

// Enables the activity kinds and registers the buffer callbacks.
Status StartTracing(TracerOptions options = {});

// Flushes CUPTI and hands over every record not yet handed to the sink, each kernel with its
// innermost NVTX range.
Result<std::vector<models::KernelRecord>> FlushTracing();

TracerStats GetTracerStats();

// Adds one CUPTI activity record to `log`; kinds the tracer does not use are ignored.
void DecodeActivity(const CUpti_Activity& record, ActivityLog* log);

}  // namespace fathom::profiler
