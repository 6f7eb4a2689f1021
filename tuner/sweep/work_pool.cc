#include "tuner/sweep/work_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <queue>

#include "base/parallel.h"
#include "tuner/sweep/mpi_work_pool.h"

namespace fathom::tuner {
namespace {

// Threads of this process; the coordinator's handlers run under one lock.
class ThreadWorkPool : public WorkPool {
 public:
  explicit ThreadWorkPool(int jobs) : jobs_(Workers(jobs)) {}

  bool coordinator() const override { return true; }
  int workers() const override { return jobs_; }
  bool mpi() const override { return false; }

  Status Run(const WorkHandlers& h) override {
    Status failure;
    // Keeps the first failure; says whether `s` was ok.
    auto record = [&](const Status& s) {
      if (!s.ok() && failure.ok()) failure = s;
      return s.ok();
    };
    auto next = [&]() -> std::optional<WorkUnit> {
      if (!failure.ok()) return std::nullopt;  // after an error, start nothing new
      auto unit = h.next();
      if (!record(unit.status())) return std::nullopt;
      return *unit;
    };
    auto done = [&](const WorkUnit& unit, Result<std::string> result) {
      if (record(result.status())) record(h.finish(unit, *result));
    };
    auto drop = [&](const WorkUnit& unit) { return h.drop && h.drop(unit); };
    ParallelTasks(jobs_, next, h.compute, done, drop);
    return failure;
  }

 private:
  int jobs_;
};

}  // namespace

std::function<Result<std::optional<WorkUnit>>()> EachOf(
    std::vector<int64_t> items, std::function<Result<std::string>(int64_t item)> assign) {
  return [items = std::move(items), assign = std::move(assign),
          next = size_t{0}]() mutable -> Result<std::optional<WorkUnit>> {
    if (next == items.size()) return std::optional<WorkUnit>();
    const int64_t item = items[next++];
    FATHOM_ASSIGN_OR_RETURN(std::string assignment, assign(item));
    return std::optional<WorkUnit>(WorkUnit{item, std::move(assignment)});
  };
}

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

Status SchedulePool::Run(const WorkHandlers& h) {
  struct Finishing {
    double at = 0;
    int64_t order = 0;  // ties: the one handed out first
    WorkUnit unit;
    Result<std::string> result;
    bool operator>(const Finishing& o) const { return at != o.at ? at > o.at : order > o.order; }
  };
  std::priority_queue<Finishing, std::vector<Finishing>, std::greater<>> finishing;
  Status failure;
  auto record = [&](const Status& s) {
    if (!s.ok() && failure.ok()) failure = s;
  };
  int free = workers_;
  int64_t order = 0;
  for (;;) {
    while (failure.ok() && free > 0) {
      auto unit = h.next();
      record(unit.status());
      if (!unit.ok() || !*unit) break;
      const auto start = std::chrono::steady_clock::now();
      Result<std::string> result = h.compute(**unit);
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      compute_s_ += took;
      finishing.push({clock_s_ + took, order++, std::move(**unit), std::move(result)});
      --free;
    }
    if (finishing.empty()) break;
    Finishing f = finishing.top();
    finishing.pop();
    clock_s_ = f.at;
    ++free;
    record(f.result.status());
    if (f.result.ok()) record(h.finish(f.unit, *f.result));
    if (!h.drop) continue;
    // Units dropped now stop now: their workers are free, their time past the clock not spent.
    std::vector<Finishing> kept;
    for (; !finishing.empty(); finishing.pop()) {
      const Finishing& g = finishing.top();
      if (!h.drop(g.unit)) {
        kept.push_back(g);
        continue;
      }
      compute_s_ -= g.at - clock_s_;
      ++free;
    }
    for (Finishing& g : kept) finishing.push(std::move(g));
  }
  return failure;
}

Status RefuseWork(WorkPool* pool, const Status& why) {
  WorkHandlers h;
  h.compute = [&](const WorkUnit&) -> Result<std::string> { return why; };
  return pool->Run(h);
}

}  // namespace fathom::tuner
