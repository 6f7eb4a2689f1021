// libFuzzer target: writes arbitrary bytes as a file and reads it as an Nsight Systems SQLite
// export; every kernel it reads must end after it starts.
#include <cstdint>

#include "base/fuzz/fuzz_input_file.h"
#include "profiler/import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  FuzzInputFile file(data, size, ".sqlite");
  auto kernels = profiler::ReadNsysSqlite(file.path());
  if (!kernels.ok()) return 0;
  for (const auto& k : *kernels) {
    if (k.end_ns < k.start_ns) __builtin_trap();
  }
  return 0;
}
