// Entry point for CUDA_INJECTION64_PATH: the CUDA driver loads libfathom_cupti.so into any
// application and calls InitializeInjection. Records go to the performance database named by
// $FATHOM_PROFILE_DB (default fathom_profile.db) in batches as the application runs, and the
// rest at exit. For NVTX ranges, also set NVTX_INJECTION64_PATH to this library (`fathom profile
// run` sets both).
#include <cupti.h>
#include <dlfcn.h>

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

// NVTX's entry point. Naming libcupti.so in NVTX_INJECTION64_PATH can load a second copy of CUPTI
// beside the one the application already holds (PyTorch loads its own wheel's), whose ranges then
// reach no tracer: seen on an H100, every kernel of a traced PyTorch run outside any range. This
// hands NVTX to the CUPTI the tracer's own calls resolve to, whichever copy that is.
extern "C" int InitializeInjectionNvtx2(const void* get_export_table) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&cuptiActivityEnable), &info) == 0 || !info.dli_fname) {
    std::fprintf(stderr, "fathom-cupti: CUPTI not found in the process; NVTX ranges not traced\n");
    return 0;
  }
  void* cupti = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  using Init = int (*)(const void*);
  auto init = cupti ? reinterpret_cast<Init>(dlsym(cupti, "InitializeInjectionNvtx2")) : nullptr;
  if (!init) {
    std::fprintf(stderr, "fathom-cupti: %s has no NVTX entry point; NVTX ranges not traced\n",
                 info.dli_fname);
    return 0;
  }
  return init(get_export_table);
}
