// `fathom sweep`: every cell of a plan tuned into one results store, on threads or the ranks of
// an MPI job. A cell is one work item: its candidates are searched in order on one worker (so the
// store's rows are the same whatever ran them, and pruning stays as sharp as one tune's), each
// result going to the coordinator, the store's only writer, as it completes. A killed sweep
// resumes from the store: finished cells are skipped, stored candidates are not simulated again.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/hardware.h"
#include "tuner/search/tuner.h"
#include "tuner/sweep/sweep_plan.h"

namespace fathom::tuner {

// A cell just searched, and how far the sweep is.
struct CellProgress {
  int64_t done = 0, total = 0;  // cells searched now, of those to search
  std::string label;            // the cell
  int64_t simulated = 0, reused = 0, pruned = 0, valid = 0;
  std::optional<double>
      best;  // the best objective when one is valid: QPS (server-type) or tokens/s
  bool server_like = false;
};

struct SweepOptions {
  std::string db_path;         // the results store (required)
  int jobs = 0;                // threads where no MPI job runs it; <= 0: one per core
  std::optional<Shard> shard;  // only every count-th distinct cell, from the index-th
  std::function<void(const CellProgress&)> progress;  // called after each cell; empty: none
};

// A cell's tune options (workload, time model, limits, price), built by the caller, who owns the
// policy of turning inputs into a tune (the CLI shares it with `fathom tune`).
using CellTune = std::function<Result<TuneOptions>(const SweepPlan& plan, const SweepCell& cell)>;

struct SweepSummary {
  int64_t cells = 0;                              // distinct cells of the plan (of its shard)
  int64_t complete = 0;                           // already complete in the store, skipped
  int64_t run = 0;                                // cells searched now
  int64_t simulated = 0, reused = 0, pruned = 0;  // candidates, over the cells run
  int workers = 0;                                // threads or compute ranks
  bool mpi = false;
  double wall_s = 0;  // from the start (MPI's included) to the last cell stored
  // The coordinator's own work: reading the plan and building, checking and recording every cell
  // (prepare), and handing out cells and storing their results (serve).
  double prepare_s = 0, serve_s = 0;
  OrderedJson ToJson() const;
};

// Runs the plan at `plan_path`. Every cell is built and checked before the store is touched, so a
// bad plan writes nothing. Returns the summary on the coordinator and nothing on an MPI job's
// other ranks (they compute until the coordinator stops them).
Result<std::optional<SweepSummary>> RunSweep(const std::string& plan_path,
                                             const SweepOptions& options, const CellTune& cell_tune,
                                             const models::HardwareCatalog& catalog);

}  // namespace fathom::tuner
