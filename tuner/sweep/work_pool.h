// Work items handed out one at a time to whoever is free: threads of this process, or the ranks
// of an MPI job (mpirun, srun). One process, the coordinator (rank 0), hands out every item and
// receives every result; the others only compute. Items and results are text, so one interface
// serves both transports.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace fathom::tuner {

// A unit of work as the coordinator hands it out: its id and what a worker needs to compute it.
struct WorkUnit {
  int64_t id = 0;
  std::string assignment;
};

struct WorkHandlers {
  // Coordinator: the next unit to hand out; empty when none can start until a unit under way
  // finishes (or none is left: the run ends once none is under way either).
  std::function<Result<std::optional<WorkUnit>>()> next;
  // Any process: computes a unit.
  std::function<Result<std::string>(const WorkUnit& unit)> compute;
  // Coordinator: a unit's result.
  std::function<Status(const WorkUnit& unit, const std::string& result)> finish;
  // Coordinator: asked of each unit under way after every finish; true drops the unit, whose
  // result is no longer of use: the pool stops computing it (base/cancel.h) and never hands it
  // to finish. Empty: every unit runs to its end.
  std::function<bool(const WorkUnit& unit)> drop;
};
// Handlers' `next` for a fixed list: `items` in order, each described by assign(item).
std::function<Result<std::optional<WorkUnit>>()> EachOf(
    std::vector<int64_t> items, std::function<Result<std::string>(int64_t item)> assign);

// Thread safety: the coordinator's handlers (next, finish, drop) are called one at a time; compute
// runs concurrently with them and with itself.
//
// The coordinator may run several batches in turn, each with its own handlers; a worker runs once
// and computes every batch with its handlers, so compute must be the same function everywhere.
class WorkPool {
 public:
  virtual ~WorkPool() = default;
  // Whether this process hands out the work and receives the results.
  virtual bool coordinator() const = 0;
  // Processes (or threads) that compute.
  virtual int workers() const = 0;
  // Whether the workers are the ranks of an MPI job.
  virtual bool mpi() const = 0;
  // Coordinator: hands out units to free workers while `next` has one, and returns once it has
  // none and none is under way or, after the first error, once the units under way finished (no
  // more are started). Workers: compute what the coordinator hands out until its pool is
  // destroyed. The first error is returned.
  virtual Status Run(const WorkHandlers& handlers) = 0;
};

// Under an MPI launcher (mpirun, srun) with more than one rank, the job's ranks; else `jobs`
// threads of this process (<= 0: one per core). A job of several ranks in a build without MPI is
// an Unavailable error that says how to build with it.
Result<std::unique_ptr<WorkPool>> MakeWorkPool(int jobs);
// `jobs` threads of this process (<= 0: one per core), however it was started.
std::unique_ptr<WorkPool> MakeThreadWorkPool(int jobs);

// A pool for sizing a cluster: computes every unit here, one at a time, while keeping the clock of
// `workers` workers that would have run them, each unit taking its measured compute time on the
// first one free (the coordinator's own time is not counted). Handlers see units finish in that
// clock's order, so the schedule is the one such a pool would follow; a unit dropped frees its
// worker at the clock it was dropped.
class SchedulePool : public WorkPool {
 public:
  explicit SchedulePool(int workers) : workers_(workers) {}
  bool coordinator() const override { return true; }
  int workers() const override { return workers_; }
  bool mpi() const override { return false; }
  Status Run(const WorkHandlers& handlers) override;

  double makespan_s() const { return clock_s_; }   // when the last unit would have finished
  double compute_s() const { return compute_s_; }  // compute time of every unit

 private:
  int workers_;
  double clock_s_ = 0, compute_s_ = 0;
};

// Worker that could not get ready (e.g. its inputs did not load): fails every item it is handed
// with `why`, so that the coordinator reports it once, and returns when the coordinator is done.
Status RefuseWork(WorkPool* pool, const Status& why);

}  // namespace fathom::tuner
