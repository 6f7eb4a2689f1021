// Flags that say how to read a trace, shared by `trace` and `simulate`.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "traces/benchmark.h"
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
// The workload of `tune`, `simulate` and `online`, and what it is.
struct Workload {
  std::vector<traces::Request> requests;
  const traces::Benchmark* benchmark = nullptr;  // whose data set (and p99 limits) it is
  std::string name;                              // the file, or the benchmark's data set
  std::string note;                              // one line saying which workload and why
};
// The trace at `path` when given; else the data set of the MLPerf benchmark named by `benchmark`,
// or else of the one that runs `model`; else, for a model no MLPerf benchmark runs, the
// DeepSeek-R1 reasoning set (fathom's documented default, said in the note). Read errors and
// counters are reported as for any trace.
Result<Workload> LoadWorkload(const std::string& model, const std::string& benchmark,
                              const std::string& path, const TraceReadFlags& flags);
// The benchmark a run is scored against: `benchmark` when given, else the one that runs `model`.
Result<const traces::Benchmark*> ChooseBenchmark(const std::string& model,
                                                 const std::string& benchmark);
// One line on stderr when lines were skipped, rows filtered or responses failed; silent else.
void ReportReadCounters(const std::string& path, const traces::ReadCounters& c);

// `trace synth --mix`: "0.8/0.2,0.3/0.7", each schedule segment's weights of the --from traces.
Result<std::vector<std::vector<double>>> ParseMix(const std::string& flag, const std::string& text);
// Piecewise arrival rates, DURATION_S:RATE,... (`flag` names the option in errors).
Result<std::vector<traces::RateSegment>> ParseSchedule(const std::string& flag,
                                                       const std::string& text);

}  // namespace fathom::cli
