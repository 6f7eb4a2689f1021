#include "profiler/cupti/cupti_tracer.h"

#include <cstdlib>
#include <mutex>
#include <string>

namespace fathom::profiler {
namespace {

struct State {
  std::mutex mu;
  TracerOptions options;
  std::vector<uint8_t*> free_buffers;
  TracerStats stats;
  ActivityLog log;
  bool started = false;
};

State& S() {
  static State* s = new State();  // lives until exit: callbacks may run during teardown
  return *s;
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *max_records = 0;
  if (!s.free_buffers.empty()) {
    *buffer = s.free_buffers.back();
    s.free_buffers.pop_back();
  } else if (s.stats.buffers < static_cast<int64_t>(s.options.max_buffers)) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, s.options.buffer_bytes));
    ++s.stats.buffers;
  } else {
    *buffer = nullptr;  // bounded memory: CUPTI drops and counts what does not fit
  }
  *size = *buffer ? s.options.buffer_bytes : 0;
}

// A memcpy or memset record (the two share these fields).
template <typename Activity>
models::KernelRecord Transfer(const Activity& a, const char* kind) {
  models::KernelRecord out;
  out.kind = kind;
  out.name = kind;
  out.start_ns = static_cast<int64_t>(a.start);
  out.end_ns = static_cast<int64_t>(a.end);
  out.device = static_cast<int32_t>(a.deviceId);
  out.stream = static_cast<int32_t>(a.streamId);
  out.correlation = a.correlationId;
  out.source = "cupti";
  return out;
}

void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                              size_t valid) {
  State& s = S();
  std::vector<models::KernelRecord> ready;
  std::function<void(std::vector<models::KernelRecord>)> sink;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      DecodeActivity(*record, &s.log);
      ++s.stats.records;
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
      s.stats.dropped += dropped;
    s.free_buffers.push_back(buffer);
    if (s.options.sink && s.log.pending_records() >= s.options.sink_batch) {
      ready = s.log.Take(/*final=*/false);
      sink = s.options.sink;
    }
  }
  // Outside the lock: the application's threads ask for buffers meanwhile.
  if (!ready.empty()) sink(std::move(ready));
}

Status Check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return Status::Ok();
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  return Status::Unavailable(std::string(what) + " failed: " + (msg ? msg : "unknown CUPTI error") +
                             " (is an NVIDIA driver installed and a GPU visible?)");
}

}  // namespace

void DecodeActivity(const CUpti_Activity& record, ActivityLog* log) {
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
      models::KernelRecord out;
      out.name = k.name ? k.name : "";
      out.start_ns = static_cast<int64_t>(k.start);
      out.end_ns = static_cast<int64_t>(k.end);
      out.device = static_cast<int32_t>(k.deviceId);
      out.stream = static_cast<int32_t>(k.streamId);
      out.correlation = k.correlationId;
      out.grid[0] = k.gridX;
      out.grid[1] = k.gridY;
      out.grid[2] = k.gridZ;
      out.block[0] = k.blockX;
      out.block[1] = k.blockY;
      out.block[2] = k.blockZ;
      out.source = "cupti";
      log->AddRecord(std::move(out));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      log->AddRecord(Transfer(reinterpret_cast<const CUpti_ActivityMemcpy6&>(record), "memcpy"));
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      log->AddRecord(Transfer(reinterpret_cast<const CUpti_ActivityMemset4&>(record), "memset"));
      break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto& a = reinterpret_cast<const CUpti_ActivityAPI&>(record);
      log->AddLaunch(a.correlationId, a.threadId, static_cast<int64_t>(a.start));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMarker2&>(record);
      if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
        log->OpenRange(m.id, m.objectId.pt.threadId, static_cast<int64_t>(m.timestamp),
                       m.name ? m.name : "");
      } else if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        log->CloseRange(m.id, static_cast<int64_t>(m.timestamp));
      }
      break;
    }
    default:
      break;
  }
}

Status StartTracing(TracerOptions options) {
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.started) return Status::Ok();
    s.options = std::move(options);
    s.started = true;
  }
  FATHOM_RETURN_IF_ERROR(Check(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted),
                               "cuptiActivityRegisterCallbacks"));
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                  CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_MARKER}) {
    FATHOM_RETURN_IF_ERROR(Check(cuptiActivityEnable(kind), "cuptiActivityEnable"));
  }
  return Status::Ok();
}

Result<std::vector<models::KernelRecord>> FlushTracing() {
  FATHOM_RETURN_IF_ERROR(
      Check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll"));
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.log.Take(/*final=*/true);
}

TracerStats GetTracerStats() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

}  // namespace fathom::profiler
