// What `tune` and `sweep` share: from a tune's inputs as given (flags, or a sweep plan's cell) to
// the tuner's options, with the workload and the execution-time model loaded.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "apps/fathom/time_model_flags.h"
#include "apps/fathom/trace_flags.h"
#include "base/status.h"
#include "tuner/search/tuner.h"

namespace fathom::cli {

struct TuneInputs {
  tuner::TuneOptions options;  // space (model, hardware, GPUs, knobs), limits, run lengths, seed
  std::string scenario = "offline";
  std::string trace;      // empty: the data set of the benchmark
  std::string benchmark;  // empty: the model's MLPerf benchmark
  TraceReadFlags read;
  sim::TimeModelOptions time_model;
  bool no_disagg = false;
  bool no_prune = false;
  int64_t dataset_samples = 0;  // > 0: draw this many samples from the workload (seeded)
};

struct TuneSetup {
  tuner::TuneOptions options;
  std::string workload_note;  // which workload and why, one line
  std::string stack;          // the stack whose calibration times the run; empty for none
  sim::TimeModel time_model;  // the physics behind options.make_time (for error bars)
};

// Workloads loaded once and handed out again by model, benchmark and trace, for the cells of a
// sweep, which share a few (drawing a benchmark's data set takes milliseconds). Thread-safe.
class WorkloadCache {
 public:
  Result<Workload> Load(const std::string& model, const std::string& benchmark,
                        const std::string& trace, const TraceReadFlags& flags);

 private:
  std::mutex mu_;
  std::map<std::string, Workload> loaded_;
};

// Checks the inputs and loads the workload (through `cache` where given) and the time model of
// the GPU (in `catalog`); errors name the flag and the rule.
Result<TuneSetup> SetUpTune(TuneInputs in, const models::HardwareCatalog& catalog,
                            WorkloadCache* cache = nullptr);

}  // namespace fathom::cli
