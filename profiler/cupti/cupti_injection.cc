// Entry point for CUDA_INJECTION64_PATH: the CUDA driver loads libfathom_cupti.so into any
// application and calls InitializeInjection. Records go to the performance database named by
// $FATHOM_PROFILE_DB (default fathom_profile.db) in batches as the application runs, and the
// rest at exit. For NVTX ranges, also set NVTX_INJECTION64_PATH to libcupti.so (`fathom profile
// run` sets both).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "models/perf_db.h"
#include "profiler/cupti/cupti_tracer.h"

namespace {

struct Output {
  std::mutex mu;
  std::string path;
  std::unique_ptr<fathom::models::PerfDb> db;
  int64_t written = 0;
  bool failed = false;
};

Output& Out() {
  static Output* out = new Output();  // lives until exit: CUPTI's thread may still write
  return *out;
}

void Write(std::vector<fathom::models::KernelRecord> records) {
  Output& out = Out();
  std::lock_guard<std::mutex> lock(out.mu);
  if (out.failed) return;
  if (fathom::Status s = out.db->InsertKernels(records); !s.ok()) {
    std::fprintf(stderr, "fathom-cupti: %s; tracing output stops here\n", s.message().c_str());
    out.failed = true;
    return;
  }
  out.written += static_cast<int64_t>(records.size());
}

void FlushAtExit() {
  auto records = fathom::profiler::FlushTracing();
  if (!records.ok()) {
    std::fprintf(stderr, "fathom-cupti: %s\n", records.status().message().c_str());
    return;
  }
  Write(std::move(*records));
  const auto stats = fathom::profiler::GetTracerStats();
  Output& out = Out();
  std::lock_guard<std::mutex> lock(out.mu);
  std::fprintf(stderr, "fathom-cupti: %lld records to %s (%lld dropped, %lld buffers)\n",
               static_cast<long long>(out.written), out.path.c_str(),
               static_cast<long long>(stats.dropped), static_cast<long long>(stats.buffers));
}

}  // namespace

extern "C" int InitializeInjection(void) {
  Output& out = Out();
  const char* path = std::getenv("FATHOM_PROFILE_DB");
  out.path = path && *path ? path : "fathom_profile.db";
  auto db = fathom::models::PerfDb::Open(out.path);
  if (!db.ok()) {
    std::fprintf(stderr, "fathom-cupti: %s; not tracing\n", db.status().message().c_str());
    return 0;
  }
  out.db = std::make_unique<fathom::models::PerfDb>(std::move(*db));
  fathom::profiler::TracerOptions options;
  options.sink = Write;
  if (fathom::Status s = fathom::profiler::StartTracing(std::move(options)); !s.ok()) {
    std::fprintf(stderr, "fathom-cupti: %s\n", s.message().c_str());
    return 0;
  }
  std::atexit(FlushAtExit);
  return 1;
}
