// libFuzzer target: writes arbitrary bytes as a file and reads it as the tuner's results store:
// every sweep, and every sweep's stored metrics.
#include <cstdint>

#include "base/fuzz/fuzz_input_file.h"
#include "tuner/search/results.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  FuzzInputFile file(data, size, ".db");
  auto store = tuner::ResultStore::OpenExisting(file.path());
  if (!store.ok()) return 0;
  auto sweeps = (*store)->Sweeps();
  if (!sweeps.ok()) return 0;
  for (const auto& sweep : *sweeps) (void)(*store)->Load(sweep.info.id);
  return 0;
}
