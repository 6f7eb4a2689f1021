// Writes a workload as fathom's CSV (input_length,output_length[,timestamp]) or JSONL
// (arrival_s, input_tokens, output_tokens, prefix_blocks), streaming, all or nothing.
#pragma once

#include <string>

#include "base/env.h"
#include "base/status.h"
#include "traces/reader.h"

namespace fathom::traces {

// `format` must be kLengthsCsv or kJsonl. The file appears only when every request was written.
// Returns the number of requests written.
Result<int64_t> WriteTrace(TraceReader& reader, const std::string& path, TraceFormat format,
                           Env* env = Env::Default());

}  // namespace fathom::traces
