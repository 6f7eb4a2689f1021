#include "tuner/sweep/work_pool.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "base/parallel.h"
#include "tuner/sweep/mpi_work_pool.h"

namespace fathom::tuner {
namespace {

// Threads of this process; the coordinator's handlers run under one lock.
class ThreadWorkPool : public WorkPool {
 public:
  explicit ThreadWorkPool(int jobs)
      : jobs_(jobs > 0 ? jobs
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {}

  bool coordinator() const override { return true; }
  int workers() const override { return jobs_; }
  bool mpi() const override { return false; }

  Status Run(const std::vector<int64_t>& items, const WorkHandlers& h) override {
    std::mutex mu;
    Status failure;
    // Keeps the first failure; says whether `s` was ok.
    auto record = [&](const Status& s) {
      if (!s.ok() && failure.ok()) failure = s;
      return s.ok();
    };
    ParallelFor(items.size(), jobs_, [&](size_t i) {
      const int64_t item = items[i];
      std::string assignment;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure.ok()) return;  // after an error, start nothing new
        auto a = h.assign(item);
        if (!record(a.status())) return;
        assignment = std::move(*a);
      }
      const WorkHandlers::Emit emit = [&](const std::string& result) {
        std::lock_guard<std::mutex> lock(mu);
        Status collected = h.collect(item, result);
        record(collected);
        return collected;
      };
      auto summary = h.compute(item, assignment, emit);
      std::lock_guard<std::mutex> lock(mu);
      if (record(summary.status())) record(h.finish(item, *summary));
    });
    return failure;
  }

 private:
  int jobs_;
};

}  // namespace

namespace internal {

int LaunchedRanks() {
  // Open MPI's mpirun, MPICH's and Intel MPI's Hydra, and Slurm's srun (with PMI or PMIx).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* v = std::getenv(name)) return std::max(1, std::atoi(v));
  }
  if (std::getenv("PMIX_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr) {
    const char* tasks = std::getenv("SLURM_NTASKS");
    return tasks != nullptr ? std::max(1, std::atoi(tasks)) : 1;
  }
  return 0;
}

}  // namespace internal

Result<std::unique_ptr<WorkPool>> MakeWorkPool(int jobs) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<WorkPool> mpi, internal::MakeMpiWorkPool());
  if (mpi) return mpi;
  // An srun step of several tasks that joined no MPI job (srun without --mpi=pmix): each task
  // would run every work item, the whole plan once per task.
  const char* step_tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (step_tasks != nullptr && std::atoi(step_tasks) > 1 && internal::LaunchedRanks() == 0) {
    return Status::Unavailable(
        "started as one of " + std::string(step_tasks) +
        " srun tasks that joined no MPI job, so each would run all the work: launch with srun "
        "--mpi=pmix (or --mpi=pmi2), or give one task (--ntasks=1) and let it use threads");
  }
  return MakeThreadWorkPool(jobs);
}

std::unique_ptr<WorkPool> MakeThreadWorkPool(int jobs) {
  return std::make_unique<ThreadWorkPool>(jobs);
}

Status RefuseWork(WorkPool* pool, const Status& why) {
  WorkHandlers h;
  h.compute = [&](int64_t, const std::string&, const WorkHandlers::Emit&) -> Result<std::string> {
    return why;
  };
  return pool->Run({}, h);
}

}  // namespace fathom::tuner
