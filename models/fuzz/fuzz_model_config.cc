// libFuzzer target: feeds arbitrary bytes to the model config reader (a Hugging Face config.json)
// as a file, and counts the parameters of every model it accepts.
#include <cstdint>

#include "base/fuzz/fuzz_input_file.h"
#include "models/model_arch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  FuzzInputFile file(data, size, ".json");
  auto model = models::LoadModel(file.path());
  if (!model.ok()) return 0;
  const models::ParamCounts params = models::CountParams(*model);
  if (!(params.total >= 0)) __builtin_trap();
  return 0;
}
