// Entry point for CUDA_INJECTION64_PATH: the CUDA driver loads libfathom_cupti.so into any
// application and calls InitializeInjection; at exit the records go to the performance
// database named by $FATHOM_PROFILE_DB (default fathom_profile.db). For NVTX ranges, also set
// NVTX_INJECTION64_PATH to libcupti.so (`fathom profile run` sets both).
#include <cstdio>
#include <cstdlib>

#include "models/perf_db.h"
#include "profiler/cupti/cupti_tracer.h"

namespace {

void FlushAtExit() {
  auto records = fathom::profiler::FlushTracing();
  const char* path = std::getenv("FATHOM_PROFILE_DB");
  const std::string db_path = path && *path ? path : "fathom_profile.db";
  if (!records.ok()) {
    std::fprintf(stderr, "fathom-cupti: %s\n", records.status().message().c_str());
    return;
  }
  auto db = fathom::models::PerfDb::Open(db_path);
  if (!db.ok() || !db->InsertKernels(*records).ok()) {
    std::fprintf(stderr, "fathom-cupti: cannot write %s\n", db_path.c_str());
    return;
  }
  const auto stats = fathom::profiler::GetTracerStats();
  std::fprintf(stderr, "fathom-cupti: %zu records to %s (%lld dropped, %lld buffers)\n", records->size(),
               db_path.c_str(), static_cast<long long>(stats.dropped), static_cast<long long>(stats.buffers));
}

}  // namespace

extern "C" int InitializeInjection(void) {
  const fathom::Status s = fathom::profiler::StartTracing();
  if (!s.ok()) {
    std::fprintf(stderr, "fathom-cupti: %s\n", s.message().c_str());
    return 0;
  }
  std::atexit(FlushAtExit);
  return 1;
}
