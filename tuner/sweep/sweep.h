// `fathom sweep`: every cell of a plan tuned into one results store, on threads or the ranks of
// an MPI job. A unit of work is one candidate of one cell: the coordinator, the store's only
// writer, keeps each cell's search (SearchRun) and hands out candidates across cells, so a few
// long cells spread over every worker; results are taken in each cell's own order, so the store's
// rows are the same whatever ran them and pruning stays as sharp as one tune's. A killed sweep
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
#include "tuner/sweep/work_pool.h"

namespace fathom::tuner {

// A cell just searched, and how far the sweep is.
struct CellProgress {
  int64_t done = 0, total = 0;  // cells searched now, of those to search
  std::string label;            // the cell
  int64_t simulated = 0, reused = 0, pruned = 0, valid = 0;
  std::optional<double>
      best;  // the best objective when one is valid: QPS (server-type) or tokens/s
  bool server_like = false;
  // Over the whole sweep: candidates whose results were taken (simulated, reused or pruned), of
  // all; seconds since the start, and to go at the rate of expected work done so far.
  int64_t candidates_done = 0, candidates_total = 0;
  double elapsed_s = 0;
  std::optional<double> eta_s;
};

struct SweepOptions {
  std::string db_path;  // the results store (required)
  int jobs = 0;         // threads where no MPI job runs it; <= 0: one per core
  // Only the index-th of `count` shards of the distinct cells, balanced by expected cost.
  std::optional<Shard> shard;
  std::function<void(const CellProgress&)> progress;  // called after each cell; empty: none
  // Runs on this pool (e.g. a SchedulePool) instead of threads or an MPI job's ranks; borrowed.
  WorkPool* pool = nullptr;
};

// A cell's tune options (workload, time model, limits, price), built by the caller, who owns the
// policy of turning inputs into a tune (the CLI shares it with `fathom tune`).
using CellTune = std::function<Result<TuneOptions>(const SweepPlan& plan, const SweepCell& cell)>;

struct SweepSummary {
  int64_t cells = 0;                              // distinct cells of the plan (of its shard)
  int64_t complete = 0;                           // already complete in the store, skipped
  int64_t run = 0;                                // cells searched now
  int64_t simulated = 0, reused = 0, pruned = 0;  // candidates, over the cells run
  int64_t wasted = 0;        // results computed and not used (SearchRun::wasted)
  int64_t probes_ahead = 0;  // probes run ahead of a search under way (SearchRun::Task::probe)
  int64_t requeued = 0;      // results searched again once a new best made them stale
  int workers = 0;           // threads or compute ranks
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
