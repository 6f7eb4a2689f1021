#include "tuner/sweep/sweep.h"

#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include "base/parallel.h"
#include "tuner/search/results.h"
#include "tuner/sweep/work_pool.h"

namespace fathom::tuner {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Adds the time of each call to `*seconds`.
class Timed {
 public:
  explicit Timed(double* seconds) : seconds_(seconds), start_(Clock::now()) {}
  ~Timed() { *seconds_ += Since(start_); }

 private:
  double* seconds_;
  Clock::time_point start_;
};

// A cell's tune as a worker runs it, prepared: one job, so its search depends on nothing but its
// inputs and what is stored. Errors name the plan and the cell.
struct CellSearch {
  TuneOptions options;
  PreparedTune prepared;
};
Result<CellSearch> PrepareCell(const SweepPlan& plan, const SweepCell& cell,
                               const CellTune& cell_tune, const models::HardwareCatalog& catalog) {
  auto o = cell_tune(plan, cell);
  Status failed = o.status();
  if (o.ok()) {
    o->jobs = 1;
    o->db_path.clear();
    o->progress = nullptr;
    auto prepared = Prepare(*o, catalog);
    if (prepared.ok()) return CellSearch{std::move(*o), std::move(*prepared)};
    failed = prepared.status();
  }
  return failed.WithContext(plan.path + ": cell " + cell.Label());
}

// What the coordinator knows of each cell it runs.
struct CellRun {
  SweepCell cell;
  SweepInfo info;
};

}  // namespace

OrderedJson SweepSummary::ToJson() const {
  OrderedJson j;
  j["cells"] = cells;
  j["complete"] = complete;
  j["run"] = run;
  j["simulated"] = simulated;
  j["reused"] = reused;
  j["pruned"] = pruned;
  j["workers"] = workers;
  j["mpi"] = mpi;
  j["wall_s"] = wall_s;
  j["prepare_s"] = prepare_s;
  j["serve_s"] = serve_s;
  return j;
}

Result<std::optional<SweepSummary>> RunSweep(const std::string& plan_path,
                                             const SweepOptions& options, const CellTune& cell_tune,
                                             const models::HardwareCatalog& catalog) {
  const auto start = Clock::now();
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<WorkPool> pool, MakeWorkPool(options.jobs));
  // Workers read the plan when their first cell comes, after the coordinator has checked it.
  std::optional<SweepPlan> plan;
  std::vector<SweepCell> cells;
  std::mutex plan_mu;
  auto load_plan = [&]() -> Status {
    std::lock_guard<std::mutex> lock(plan_mu);
    if (plan) return Status::Ok();
    FATHOM_ASSIGN_OR_RETURN(SweepPlan p, LoadSweepPlan(plan_path));
    cells = p.Cells();
    plan = std::move(p);
    return Status::Ok();
  };

  WorkHandlers h;
  h.compute = [&](int64_t item, const std::string& assignment,
                  const WorkHandlers::Emit& emit) -> Result<std::string> {
    FATHOM_RETURN_IF_ERROR(load_plan());
    if (item < 0 || item >= static_cast<int64_t>(cells.size())) {
      return Status::InvalidArgument(plan_path + ": has no cell " + std::to_string(item) +
                                     " (did the plan change while the sweep ran?)");
    }
    const SweepCell& cell = cells[item];
    FATHOM_ASSIGN_OR_RETURN(CellSearch c, PrepareCell(*plan, cell, cell_tune, catalog));
    const TuneOptions& o = c.options;
    SearchLog log;
    log.stored = Json::parse(assignment).get<std::map<std::string, Json>>();
    log.source = options.db_path;
    log.save = [&](const std::string& key, const CandidateResult& r) {
      const StoredRow row = ToStoredRow(r);
      return emit(
          Json{{"key", key}, {"config", row.config_json}, {"metrics", row.metrics_json}}.dump());
    };
    auto res = Search(o, catalog, c.prepared, log);
    if (!res.ok()) return res.status().WithContext(plan_path + ": cell " + cell.Label());
    Json summary = {{"simulated", res->evaluated},
                    {"reused", res->reused},
                    {"pruned", res->pruned},
                    {"valid", res->ranked.size()}};
    if (!res->ranked.empty())
      summary["best"] = res->ranked.front().Objective(ServerLike(o.space.scenario));
    return summary.dump();
  };
  if (!pool->coordinator()) {
    FATHOM_RETURN_IF_ERROR(pool->Run({}, h));
    return std::optional<SweepSummary>();
  }

  // Build and check every cell before touching the store.
  const auto prepare_start = Clock::now();
  SweepSummary summary;
  summary.workers = pool->workers();
  summary.mpi = pool->mpi();
  FATHOM_RETURN_IF_ERROR(load_plan());
  for (const auto& [gpu, usd] : plan->prices) {
    if (!catalog.Find(gpu).ok()) {
      return Status::InvalidArgument(plan_path + ": field 'prices." + gpu +
                                     "': no such GPU (fathom hardware list)");
    }
  }
  // Cells are built in parallel (loading workloads and enumerating spaces takes milliseconds a
  // cell, and the workers wait for it), then taken in plan order.
  std::vector<std::optional<Result<SweepInfo>>> infos(cells.size());
  ParallelFor(cells.size(), options.jobs, [&](size_t i) {
    auto c = PrepareCell(*plan, cells[i], cell_tune, catalog);
    infos[i] = c.ok() ? Result<SweepInfo>(c->prepared.info) : Result<SweepInfo>(c.status());
  });
  std::map<int64_t, CellRun> runs;
  std::set<std::string> seen;
  int64_t distinct = 0;
  for (size_t i = 0; i < cells.size(); ++i) {
    FATHOM_ASSIGN_OR_RETURN(SweepInfo info, *infos[i]);
    if (!seen.insert(info.id).second) continue;  // the same tune as an earlier cell
    const bool mine = !options.shard || distinct % options.shard->count == options.shard->index;
    ++distinct;
    if (mine) runs[static_cast<int64_t>(i)] = {cells[i], info};
  }
  summary.cells = static_cast<int64_t>(runs.size());
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<ResultStore> store, ResultStore::Open(options.db_path));
  std::vector<int64_t> items;
  for (const auto& [i, run] : runs) {
    FATHOM_RETURN_IF_ERROR(store->Record(run.info));
    FATHOM_ASSIGN_OR_RETURN(bool complete, store->IsComplete(run.info.id));
    if (complete) {
      ++summary.complete;
    } else {
      items.push_back(i);
    }
  }
  summary.prepare_s = Since(prepare_start);

  h.assign = [&](int64_t item) -> Result<std::string> {
    Timed t(&summary.serve_s);
    FATHOM_ASSIGN_OR_RETURN(auto stored, store->Load(runs.at(item).info.id));
    return Json(stored).dump();
  };
  h.collect = [&](int64_t item, const std::string& result) {
    Timed t(&summary.serve_s);
    const Json r = Json::parse(result);
    return store->SaveRow(runs.at(item).info.id, r.at("key").get<std::string>(),
                          r.at("config").get<std::string>(), r.at("metrics").get<std::string>());
  };
  h.finish = [&](int64_t item, const std::string& text) {
    Timed t(&summary.serve_s);
    FATHOM_RETURN_IF_ERROR(store->MarkComplete(runs.at(item).info.id));
    const Json s = Json::parse(text);
    summary.simulated += s.at("simulated").get<int64_t>();
    summary.reused += s.at("reused").get<int64_t>();
    summary.pruned += s.at("pruned").get<int64_t>();
    ++summary.run;
    if (options.progress) {
      const CellRun& run = runs.at(item);
      CellProgress p{summary.run,
                     static_cast<int64_t>(items.size()),
                     run.cell.Label(),
                     s.at("simulated").get<int64_t>(),
                     s.at("reused").get<int64_t>(),
                     s.at("pruned").get<int64_t>(),
                     s.at("valid").get<int64_t>(),
                     std::nullopt,
                     run.info.ServerLike()};
      if (s.contains("best")) p.best = s.at("best").get<double>();
      options.progress(p);
    }
    return Status::Ok();
  };
  FATHOM_RETURN_IF_ERROR(pool->Run(items, h));
  summary.wall_s = Since(start);
  return std::optional<SweepSummary>(summary);
}

}  // namespace fathom::tuner
