// libFuzzer target: feeds arbitrary bytes to one trace reader (FATHOM_FUZZ_FORMAT), with and
// without skip_bad_lines, and reads every request and the statistics.
#include <cstdint>

#include "traces/reader.h"
#include "traces/stats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom::traces;
  for (bool skip : {false, true}) {
    ReadOptions options;
    options.format = *ParseTraceFormat(FATHOM_FUZZ_FORMAT);
    options.skip_bad_lines = skip;
    options.max_output = 20000;
    auto reader = OpenTraceStream(
        fathom::NewMemoryFile({reinterpret_cast<const char*>(data), size}), "fuzz", options);
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
