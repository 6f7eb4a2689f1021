// Work items handed out one at a time to whoever is free: threads of this process, or the ranks
// of an MPI job (mpirun, srun). One process, the coordinator (rank 0), hands out every item and
// receives every result; the others only compute. Items and results are text, so one interface
// serves both transports.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace fathom::tuner {

struct WorkHandlers {
  // Coordinator: what a worker needs besides the item's id to compute it (e.g. what the results
  // store already holds for it).
  std::function<Result<std::string>(int64_t item)> assign;
  // Any process: computes `item`, handing each result to `emit` as soon as it is known (a failed
  // emit stops the item), and returns a summary of the item.
  using Emit = std::function<Status(const std::string& result)>;
  std::function<Result<std::string>(int64_t item, const std::string& assignment, const Emit& emit)>
      compute;
  // Coordinator: one result of `item`, in the order the item emitted them.
  std::function<Status(int64_t item, const std::string& result)> collect;
  // Coordinator: `item` finished and every result it emitted was collected.
  std::function<Status(int64_t item, const std::string& summary)> finish;
};

// Thread safety: the coordinator's handlers (assign, collect, finish) are called one at a time;
// compute runs concurrently with them and with itself.
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
  // Coordinator: computes `items` on the workers, each handed out when one is free, and returns
  // once every item finished or, after the first error, once the items under way finished (the
  // rest are not started). Workers: compute what the coordinator hands out until its pool is
  // destroyed; `items` is ignored. The first error is returned.
  virtual Status Run(const std::vector<int64_t>& items, const WorkHandlers& handlers) = 0;
};

// Under an MPI launcher (mpirun, srun) with more than one rank, the job's ranks; else `jobs`
// threads of this process (<= 0: one per core). A job of several ranks in a build without MPI is
// an Unavailable error that says how to build with it.
Result<std::unique_ptr<WorkPool>> MakeWorkPool(int jobs);
// `jobs` threads of this process (<= 0: one per core), however it was started.
std::unique_ptr<WorkPool> MakeThreadWorkPool(int jobs);

// Worker that could not get ready (e.g. its inputs did not load): fails every item it is handed
// with `why`, so that the coordinator reports it once, and returns when the coordinator is done.
Status RefuseWork(WorkPool* pool, const Status& why);

}  // namespace fathom::tuner
