// Flags that say how to read a trace, shared by `trace` and `simulate`.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "traces/reader.h"
#include "traces/synth.h"

namespace fathom::cli {

struct TraceReadFlags {
  std::string format = "auto";
  bool skip_bad_lines = false;
  std::optional<int64_t> max_output;
  std::string model_filter;
  std::string log_type_filter;
};

void AddTraceReadFlags(CLI::App* cmd, TraceReadFlags* flags);
Result<traces::ReadOptions> ToReadOptions(const TraceReadFlags& flags);
Result<std::unique_ptr<traces::TraceReader>> OpenTraceWithFlags(const std::string& path,
                                                                const TraceReadFlags& flags);
// The workload of `tune`, `simulate` and `online`: the trace at `path`, or when it is empty the
// built-in MLPerf DeepSeek-R1 set with outputs capped at 20,000 (unless --max-output says
// otherwise); `*opened` gets the path read.
Result<std::unique_ptr<traces::TraceReader>> OpenWorkload(const std::string& path, const TraceReadFlags& flags,
                                                          std::string* opened);
// One line on stderr when lines were skipped, rows filtered or responses failed; silent else.
void ReportReadCounters(const std::string& path, const traces::ReadCounters& c);

// Piecewise arrival rates, DURATION_S:RATE,... (`flag` names the option in errors).
Result<std::vector<traces::RateSegment>> ParseSchedule(const std::string& flag, const std::string& text);

}  // namespace fathom::cli
