// A sweep plan: a grid of tunes (models x hardware x GPU counts x scenarios x stacks x p99 limits
// x traces) sharing one set of tune settings, read from a JSON file (docs/sweeps.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/config.h"

namespace fathom::tuner {

// p99 limits of a server-type cell; an empty one is the MLPerf benchmark's.
struct SweepLimits {
  std::optional<double> ttft_ms, tpot_ms;
};

// One tune of the grid.
struct SweepCell {
  std::string model, hardware;
  int gpus = 0;
  sim::Scenario scenario = sim::Scenario::kOffline;
  std::string stack;  // empty: the newest
  SweepLimits limits;
  std::string trace;  // empty: the data set of the model's MLPerf benchmark

  // "llama2-70b on 2 x h200, server" and whatever else the cell sets.
  std::string Label() const;
};

struct SweepPlan {
  std::string path;  // the plan file, named in errors
  // The grid's axes, each in the order given.
  std::vector<std::string> models, hardware;
  std::vector<int> gpus;
  std::vector<sim::Scenario> scenarios;
  std::vector<std::string> stacks;  // empty: the newest stack only
  std::vector<SweepLimits> limits;  // server-type cells only; empty: the benchmark's
  std::vector<std::string>
      traces;  // resolved against the plan's folder; empty: the model's data set
  std::map<std::string, double> prices;  // USD per GPU-hour by GPU; others: the hardware file's
  // The tune settings every cell shares (`fathom tune`'s flags of the same names).
  std::vector<std::string> weights, kv;
  std::vector<int64_t> max_batch, max_num_tokens;
  bool disaggregated = true;
  bool prune = true;
  int64_t samples = 0, dataset_samples = 0;
  std::optional<double> probe_duration_s;
  std::optional<int64_t> probe_max_samples;
  std::optional<int> qps_steps;
  uint64_t seed = 1;
  std::string cost_model = "calibrated";

  // Every cell, models outermost, then hardware, GPU counts, scenarios, stacks, limits (one cell
  // for Offline, which holds to none) and traces.
  std::vector<SweepCell> Cells() const;
};

// Reads and checks a whole plan; an error names the file, the field, the value and the rule.
Result<SweepPlan> LoadSweepPlan(const std::string& path);

// "--shard I/N": the I-th of N shards (0 <= I < N).
struct Shard {
  int index = 0, count = 1;
};
Result<Shard> ParseShard(const std::string& text);

// Which of `shards` shards runs each item of `costs`: the costliest first, each to the shard with
// the least cost so far (ties to the lower index), so every process computes the same split.
std::vector<int> BalanceShards(const std::vector<double>& costs, int shards);

}  // namespace fathom::tuner
