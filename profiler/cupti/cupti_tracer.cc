#include "profiler/cupti/cupti_tracer.h"

#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace fathom::profiler {
namespace {

struct Range {
  uint64_t start = 0, end = 0;
  std::string name;
};

struct State {
  std::mutex mu;
  size_t buffer_bytes = 0, max_buffers = 0;
  std::vector<uint8_t*> free_buffers;
  int64_t allocated = 0;
  TracerStats stats;
  std::vector<models::KernelRecord> records;
  std::map<uint32_t, std::pair<uint32_t, uint64_t>> launches;  // correlation -> (thread, API start)
  std::map<uint32_t, Range> open_markers;                       // marker id -> range being built
  std::map<uint32_t, uint32_t> marker_thread;                   // marker id -> thread
  std::map<uint32_t, std::vector<Range>> ranges;                // thread -> finished ranges
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
  } else if (s.allocated < static_cast<int64_t>(s.max_buffers)) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, s.buffer_bytes));
    ++s.allocated;
    s.stats.buffers = s.allocated;
  } else {
    *buffer = nullptr;  // bounded memory: CUPTI drops and counts what does not fit
  }
  *size = *buffer ? s.buffer_bytes : 0;
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

void Record(State& s, CUpti_Activity* r) {
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(r);
      models::KernelRecord out;
      out.name = k->name ? k->name : "";
      out.start_ns = static_cast<int64_t>(k->start);
      out.end_ns = static_cast<int64_t>(k->end);
      out.device = static_cast<int32_t>(k->deviceId);
      out.stream = static_cast<int32_t>(k->streamId);
      out.correlation = k->correlationId;
      out.grid[0] = k->gridX;
      out.grid[1] = k->gridY;
      out.grid[2] = k->gridZ;
      out.block[0] = k->blockX;
      out.block[1] = k->blockY;
      out.block[2] = k->blockZ;
      out.source = "cupti";
      s.records.push_back(std::move(out));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      s.records.push_back(Transfer(*reinterpret_cast<CUpti_ActivityMemcpy6*>(r), "memcpy"));
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      s.records.push_back(Transfer(*reinterpret_cast<CUpti_ActivityMemset4*>(r), "memset"));
      break;
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      auto* a = reinterpret_cast<CUpti_ActivityAPI*>(r);
      const uint32_t thread = a->threadId;
      const uint64_t start = a->start;
      s.launches[a->correlationId] = {thread, start};
      break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      auto* m = reinterpret_cast<CUpti_ActivityMarker2*>(r);
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
        const uint64_t timestamp = m->timestamp;
        const uint32_t thread = m->objectId.pt.threadId;
        s.open_markers[m->id] = Range{timestamp, 0, m->name ? m->name : ""};
        s.marker_thread[m->id] = thread;
      } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        auto it = s.open_markers.find(m->id);
        if (it != s.open_markers.end()) {
          it->second.end = m->timestamp;
          s.ranges[s.marker_thread[m->id]].push_back(it->second);
          s.open_markers.erase(it);
          s.marker_thread.erase(m->id);
        }
      }
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    Record(s, record);
    ++s.stats.records;
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) s.stats.dropped += dropped;
  s.free_buffers.push_back(buffer);
}

Status Check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return Status::Ok();
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  return Status::Unavailable(std::string(what) + " failed: " + (msg ? msg : "unknown CUPTI error") +
                             " (is an NVIDIA driver installed and a GPU visible?)");
}

}  // namespace

Status StartTracing(size_t buffer_bytes, size_t max_buffers) {
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.started) return Status::Ok();
    s.buffer_bytes = buffer_bytes;
    s.max_buffers = max_buffers;
    s.started = true;
  }
  FATHOM_RETURN_IF_ERROR(Check(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted),
                               "cuptiActivityRegisterCallbacks"));
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_MARKER}) {
    FATHOM_RETURN_IF_ERROR(Check(cuptiActivityEnable(kind), "cuptiActivityEnable"));
  }
  return Status::Ok();
}

Result<std::vector<models::KernelRecord>> FlushTracing() {
  FATHOM_RETURN_IF_ERROR(Check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll"));
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& [thread, list] : s.ranges) {
    std::sort(list.begin(), list.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  }
  std::vector<models::KernelRecord> out;
  out.swap(s.records);
  for (auto& k : out) {
    auto launch = s.launches.find(static_cast<uint32_t>(k.correlation));
    if (launch == s.launches.end()) continue;
    auto ranges = s.ranges.find(launch->second.first);
    if (ranges == s.ranges.end()) continue;
    const Range* best = nullptr;
    for (const Range& r : ranges->second) {
      if (r.start > launch->second.second) break;
      if (r.end >= launch->second.second && (!best || r.start >= best->start)) best = &r;
    }
    if (best) k.nvtx_range = best->name;
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return out;
}

TracerStats GetTracerStats() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

}  // namespace fathom::profiler
