// libFuzzer target: feeds arbitrary bytes to one trace reader (FATHOM_FUZZ_FORMAT), with and
// without skip_bad_lines, and reads every request and the statistics.
#include <cstdint>
#include <cstdio>

#include "traces/reader.h"
#include "traces/stats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom::traces;
  for (bool skip : {false, true}) {
    std::FILE* f = fmemopen(const_cast<uint8_t*>(data), size, "rb");
    if (f == nullptr) return 0;
    ReadOptions options;
    options.format = *ParseTraceFormat(FATHOM_FUZZ_FORMAT);
    options.skip_bad_lines = skip;
    options.max_output = 20000;
    auto reader = OpenTraceStream(f, "fuzz", options);
    if (!reader.ok()) continue;
    StatsAccumulator stats;
    Request r;
    while (true) {
      auto more = (*reader)->Next(&r);
      if (!more.ok() || !*more) break;
      if (r.input_tokens < 1 || r.output_tokens < 1 || r.output_tokens > 20000) __builtin_trap();
      stats.Add(r);
    }
    (void)stats.Finish();
  }
  return 0;
}
