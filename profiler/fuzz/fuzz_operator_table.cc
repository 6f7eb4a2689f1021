// libFuzzer target: feeds arbitrary bytes to the reader of AIConfigurator's operator tables (GEMM,
// all-reduce and MoE CSVs) as a file; every row it reads must have a positive shape and latency.
#include <cstdint>

#include "base/fuzz/fuzz_input_file.h"
#include "profiler/import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  FuzzInputFile file(data, size, ".csv");
  auto table = profiler::ReadOperatorTableCsv(file.path(), "h200");
  if (!table.ok()) return 0;
  for (const auto& r : table->rows) {
    const bool collective = r.op == "all_reduce";
    if (!(r.median_us > 0) || r.m <= 0) __builtin_trap();
    if (collective ? r.extra < 2 : (r.n <= 0 || r.k <= 0)) __builtin_trap();
    if (r.op == "moe" && r.extra <= 0) __builtin_trap();  // experts
  }
  return 0;
}
