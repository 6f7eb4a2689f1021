// The CUPTI activity tracer: kernels (concurrent), memcpy, memset, runtime API and NVTX ranges,
// collected into a bounded pool of buffers. Used by the operator microbenchmarks and, injected
// with CUDA_INJECTION64_PATH, by any CUDA application (see cupti_injection.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "models/perf_db.h"

namespace fathom::profiler {

struct TracerStats {
  int64_t records = 0;
  int64_t dropped = 0;      // records CUPTI dropped because every buffer was full
  int64_t buffers = 0;      // buffers allocated (at most max_buffers)
};

// Enables the activity kinds and registers the buffer callbacks. Memory stays below
// buffer_bytes x max_buffers; when all buffers are in use, CUPTI drops records and counts them.
Status StartTracing(size_t buffer_bytes = 8 << 20, size_t max_buffers = 64);

// Flushes CUPTI and hands over the records completed so far, each kernel with its innermost
// NVTX range (the range open on the launching thread when the launch call began).
Result<std::vector<models::KernelRecord>> FlushTracing();

TracerStats GetTracerStats();

}  // namespace fathom::profiler
