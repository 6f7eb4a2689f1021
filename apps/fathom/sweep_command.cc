#include <unistd.h>

#include <cstdio>
#include <memory>

#include "apps/fathom/commands.h"
#include "apps/fathom/tune_setup.h"
#include "base/format.h"
#include "models/hardware.h"
#include "tuner/sweep/sweep.h"

namespace fathom::cli {
namespace {

struct SweepFlags {
  std::string plan;
  std::string db;
  int jobs = 0;
  std::string shard;
  int schedule_on = 0;
  std::vector<std::string> hardware_files;
  bool json = false;
};

// A cell as `fathom tune` would run it, with the plan's shared settings as its flags.
Result<tuner::TuneOptions> CellTune(const tuner::SweepPlan& plan, const tuner::SweepCell& cell,
                                    const models::HardwareCatalog& catalog, WorkloadCache* cache) {
  TuneInputs in;
  tuner::TuneOptions& o = in.options;
  o.space.model = cell.model;
  o.space.hardware = cell.hardware;
  o.space.gpus = cell.gpus;
  in.scenario = std::string(sim::Name(cell.scenario));
  if (!plan.weights.empty()) o.space.weights = plan.weights;
  if (!plan.kv.empty()) o.space.kv = plan.kv;
  if (!plan.max_batch.empty()) o.space.max_batch = plan.max_batch;
  if (!plan.max_num_tokens.empty()) o.space.max_num_tokens = plan.max_num_tokens;
  in.no_disagg = !plan.disaggregated;
  in.no_prune = !plan.prune;
  o.offline_samples = plan.samples;
  in.dataset_samples = plan.dataset_samples;
  o.probe_duration_s = plan.probe_duration_s.value_or(o.probe_duration_s);
  o.probe_max_samples = plan.probe_max_samples.value_or(o.probe_max_samples);
  o.qps_steps = plan.qps_steps.value_or(o.qps_steps);
  o.seed = plan.seed;
  o.ttft_limit_ms = cell.limits.ttft_ms;
  o.tpot_limit_ms = cell.limits.tpot_ms;
  if (auto price = plan.prices.find(cell.hardware); price != plan.prices.end())
    o.price_per_gpu_hour = price->second;
  in.trace = cell.trace;
  in.time_model.cost_model = plan.cost_model;
  in.time_model.stack = cell.stack;
  FATHOM_ASSIGN_OR_RETURN(TuneSetup setup, SetUpTune(std::move(in), catalog, cache));
  return std::move(setup.options);
}

// A line on stderr per cell searched, with the sweep's candidates so far, their rate and the time
// left at the rate of expected work done so far.
void PrintCellProgress(const tuner::CellProgress& p) {
  std::string best;
  if (p.best) best = StrFormat(", best %.4g %s", *p.best, p.server_like ? "QPS" : "tokens/s");
  const std::string eta = p.eta_s ? StrFormat(", about %.0f s left", *p.eta_s) : "";
  std::fprintf(
      stderr,
      "[%lld/%lld cells, %lld/%lld candidates, %.1f/s%s] %s: %lld simulated, %lld "
      "reused, %lld pruned, %lld valid%s\n",
      static_cast<long long>(p.done), static_cast<long long>(p.total),
      static_cast<long long>(p.candidates_done), static_cast<long long>(p.candidates_total),
      p.elapsed_s > 0 ? static_cast<double>(p.candidates_done) / p.elapsed_s : 0.0, eta.c_str(),
      p.label.c_str(), static_cast<long long>(p.simulated), static_cast<long long>(p.reused),
      static_cast<long long>(p.pruned), static_cast<long long>(p.valid), best.c_str());
}

Status Run(const SweepFlags& f) {
  tuner::SweepOptions options;
  options.db_path = f.db;
  options.jobs = f.jobs;
  if (f.jobs < 0)
    return Status::InvalidArgument("--jobs = " + std::to_string(f.jobs) + ": must be >= 0");
  if (!f.shard.empty()) {
    FATHOM_ASSIGN_OR_RETURN(options.shard, tuner::ParseShard(f.shard));
  }
  if (!f.json) options.progress = PrintCellProgress;
  std::optional<tuner::SchedulePool> schedule;
  if (f.schedule_on < 0) {
    return Status::InvalidArgument("--schedule-on = " + std::to_string(f.schedule_on) +
                                   ": must be >= 1");
  }
  if (f.schedule_on > 0) {
    schedule.emplace(f.schedule_on);
    options.pool = &*schedule;
  }
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  WorkloadCache workloads;
  const tuner::CellTune cell_tune = [&](const tuner::SweepPlan& plan,
                                        const tuner::SweepCell& cell) {
    return CellTune(plan, cell, catalog, &workloads);
  };
  FATHOM_ASSIGN_OR_RETURN(auto summary, tuner::RunSweep(f.plan, options, cell_tune, catalog));
  if (!summary) return Status::Ok();  // an MPI rank that only computed
  const tuner::SweepSummary& s = *summary;
  if (f.json) {
    OrderedJson j = s.ToJson();
    if (schedule) {
      j["schedule"] = {{"workers", f.schedule_on},
                       {"makespan_s", schedule->makespan_s()},
                       {"compute_s", schedule->compute_s()}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf(
      "Sweep %s%s: %lld cells, %lld already complete, %lld run on %d %s; %lld candidates "
      "simulated, "
      "%lld reused, %lld pruned; %.1f s\n",
      f.plan.c_str(), f.shard.empty() ? "" : (" shard " + f.shard).c_str(),
      static_cast<long long>(s.cells), static_cast<long long>(s.complete),
      static_cast<long long>(s.run), s.workers,
      schedule ? "scheduled workers"
      : s.mpi  ? (s.workers == 1 ? "MPI rank" : "MPI ranks")
               : (s.workers == 1 ? "thread" : "threads"),
      static_cast<long long>(s.simulated), static_cast<long long>(s.reused),
      static_cast<long long>(s.pruned), s.wall_s);
  if (schedule) {
    std::printf(
        "On %d workers it would take %.1f s (%.1f s of simulation in all, %.1f workers busy on "
        "average).\n",
        f.schedule_on, schedule->makespan_s(), schedule->compute_s(),
        schedule->makespan_s() > 0 ? schedule->compute_s() / schedule->makespan_s() : 0.0);
  }
  std::printf("Report: fathom report --db %s [--out report.html]\n", f.db.c_str());
  return Status::Ok();
}

}  // namespace

void RegisterSweep(CLI::App& app, Status* result) {
  auto f = std::make_shared<SweepFlags>();
  CLI::App* cmd =
      app.add_subcommand("sweep",
                         "Tune every cell of a plan (models x GPUs x counts x scenarios ...) "
                         "into one results store, on threads or under mpirun/srun");
  cmd->add_option("plan", f->plan, "Sweep plan (JSON; docs/sweeps.md)")->required();
  cmd->add_option("--db", f->db, "SQLite results store: a killed sweep resumes from it")
      ->required();
  cmd->add_option("--jobs", f->jobs,
                  "Threads (default: all cores): the workers without MPI; under MPI, rank 0's "
                  "for checking the cells");
  cmd->add_option(
      "--shard", f->shard,
      "Run only shard I of N (0 <= I < N) of the plan's cells, e.g. in a Slurm "
      "array of 16 tasks: --shard $SLURM_ARRAY_TASK_ID/16 (not the array's task count, which "
      "a re-run of failed tasks changes)");
  cmd->add_option("--schedule-on", f->schedule_on,
                  "Size a cluster: run the sweep here, one candidate at a time, and report how "
                  "long it would take on N workers (each candidate's measured time)");
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  cmd->add_flag("--json", f->json, "Print the summary as JSON");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
