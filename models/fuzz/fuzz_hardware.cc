// libFuzzer target: feeds arbitrary bytes to the hardware file reader (models/hardware/*.json) as
// a file, and takes every peak and a cost of each GPU it accepts.
#include <cmath>
#include <cstdint>

#include "base/fuzz/fuzz_input_file.h"
#include "models/hardware.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  using models::DType;
  FuzzInputFile file(data, size, ".json");
  auto hw = models::LoadHardwareFile(file.path());
  if (!hw.ok()) return 0;
  for (DType t :
       {DType::kFp32, DType::kBf16, DType::kFp16, DType::kFp8, DType::kNvfp4, DType::kMxfp4}) {
    if (!(hw->PeakFlops(t) > 0) || !std::isfinite(hw->PeakFlops(t))) __builtin_trap();
  }
  if (!std::isfinite(models::CostPerMillionTokens(hw->price_per_gpu_hour_usd, 1000.0)))
    __builtin_trap();
  return 0;
}
