// libFuzzer target: feeds arbitrary bytes to the PyTorch profiler (Kineto) Chrome-trace importer
// as a file; every kernel it reads must end after it starts.
#include <cstdint>

#include "base/fuzz/fuzz_input_file.h"
#include "profiler/import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  FuzzInputFile file(data, size, ".json");
  auto kernels = profiler::ReadPytorchTrace(file.path());
  if (!kernels.ok()) return 0;
  for (const auto& k : *kernels) {
    if (k.end_ns < k.start_ns) __builtin_trap();
  }
  return 0;
}
