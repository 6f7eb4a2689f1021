#include "tuner/sweep/sweep.h"

#include <chrono>
#include <map>
#include <memory>
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

// A cell's tune, prepared: one job (the sweep's workers are its threads), no store (the sweep's
// coordinator keeps it). Errors name the plan and the cell.
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

// Expected cost of a whole cell (SearchRun::ExpectedCost from nothing stored).
Result<double> CellCost(const CellSearch& c, const models::HardwareCatalog& catalog) {
  const SearchLog none;
  FATHOM_ASSIGN_OR_RETURN(SearchRun run, SearchRun::Start(c.options, catalog, c.prepared, none));
  return run.ExpectedCost();
}

// What the coordinator knows of each cell it runs.
struct CellRun {
  SweepCell cell;
  std::shared_ptr<const CellSearch> search;
  std::optional<SearchRun> run;  // from the cell's stored results
  SearchLog log;
  double cost = 0;  // expected cost left (SearchRun::ExpectedCost), updated as results come
};

// A unit handed out: a cell's candidate.
struct OutUnit {
  int64_t cell = 0;
  SearchRun::Task task;
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
  j["wasted"] = wasted;
  j["probes_ahead"] = probes_ahead;
  j["requeued"] = requeued;
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
  std::unique_ptr<WorkPool> owned;
  if (options.pool == nullptr) {
    FATHOM_ASSIGN_OR_RETURN(owned, MakeWorkPool(options.jobs));
  }
  WorkPool* pool = options.pool != nullptr ? options.pool : owned.get();
  // Workers read the plan when their first unit comes, after the coordinator has checked it, and
  // prepare each cell once (the coordinator's threads share its prepared cells).
  std::optional<SweepPlan> plan;
  std::vector<SweepCell> cells;
  std::map<int64_t, std::shared_ptr<const CellSearch>> prepared;
  std::mutex plan_mu;
  auto load_plan = [&]() -> Status {
    if (plan) return Status::Ok();
    FATHOM_ASSIGN_OR_RETURN(SweepPlan p, LoadSweepPlan(plan_path));
    cells = p.Cells();
    plan = std::move(p);
    return Status::Ok();
  };
  auto cell_search = [&](int64_t item) -> Result<std::shared_ptr<const CellSearch>> {
    std::lock_guard<std::mutex> lock(plan_mu);
    if (auto it = prepared.find(item); it != prepared.end()) return it->second;
    FATHOM_RETURN_IF_ERROR(load_plan());
    if (item < 0 || item >= static_cast<int64_t>(cells.size())) {
      return Status::InvalidArgument(plan_path + ": has no cell " + std::to_string(item) +
                                     " (did the plan change while the sweep ran?)");
    }
    FATHOM_ASSIGN_OR_RETURN(CellSearch c, PrepareCell(*plan, cells[item], cell_tune, catalog));
    auto shared = std::make_shared<const CellSearch>(std::move(c));
    prepared.emplace(item, shared);
    return shared;
  };

  WorkHandlers h;
  h.compute = [&](const WorkUnit& unit) -> Result<std::string> {
    const Json a = Json::parse(unit.assignment);
    const int64_t item = a.at("cell").get<int64_t>();
    FATHOM_ASSIGN_OR_RETURN(std::shared_ptr<const CellSearch> c, cell_search(item));
    const auto& feasible = c->prepared.candidates.feasible;
    const auto candidate = a.at("candidate").get<size_t>();
    if (candidate >= feasible.size()) {
      return Status::InvalidArgument(plan_path + ": cell " + cells[item].Label() +
                                     " has no candidate " + std::to_string(candidate));
    }
    const std::string where = plan_path + ": cell " + cells[item].Label();
    if (a.contains("probe")) {  // a probe ahead of the candidate's search (SearchRun::Task::probe)
      ProbeMemo ran;            // with how near the run came to its batch limits, for its siblings
      auto p =
          RunProbe(feasible[candidate], c->options, catalog, a.at("probe").get<int64_t>(), &ran);
      if (!p.ok()) return p.status().WithContext(where);
      return OrderedJson{{"probe", p->ToJson()}, {"probes", ran.ToJson()}}.dump();
    }
    // The candidate, with the probes run on it so far (its search takes them from there); back go
    // its result and every probe it holds now.
    ProbeMemo memo;
    FATHOM_RETURN_IF_ERROR(memo.AddJson(a.value("probes", Json::object()), where));
    auto r = Evaluate(feasible[candidate], c->options, catalog, a.at("beat").get<double>(), &memo);
    if (!r.ok()) return r.status().WithContext(where);
    return OrderedJson{{"metrics", OrderedJson::parse(ToStoredRow(*r).metrics_json)},
                       {"probes", memo.ToJson()}}
        .dump();
  };
  if (!pool->coordinator()) {
    FATHOM_RETURN_IF_ERROR(pool->Run(h));
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
  struct Built {
    Result<CellSearch> search = Status::Unavailable("not built");
    Result<double> cost = 0.0;
  };
  std::vector<Built> built(cells.size());
  ParallelFor(cells.size(), options.jobs, [&](size_t i) {
    built[i].search = PrepareCell(*plan, cells[i], cell_tune, catalog);
    if (built[i].search.ok()) built[i].cost = CellCost(*built[i].search, catalog);
  });
  std::map<int64_t, CellRun> runs;
  std::set<std::string> seen;
  std::vector<int64_t> distinct;
  std::vector<double> costs;
  for (size_t i = 0; i < cells.size(); ++i) {
    FATHOM_RETURN_IF_ERROR(built[i].search.status());
    FATHOM_ASSIGN_OR_RETURN(double cost, built[i].cost);
    if (!seen.insert(built[i].search->prepared.info.id).second) continue;  // an earlier cell's tune
    distinct.push_back(static_cast<int64_t>(i));
    costs.push_back(cost);
  }
  const std::vector<int> shard_of = BalanceShards(costs, options.shard ? options.shard->count : 1);
  for (size_t d = 0; d < distinct.size(); ++d) {
    if (options.shard && shard_of[d] != options.shard->index) continue;
    const int64_t i = distinct[d];
    CellRun& run = runs[i];
    run.cell = cells[i];
    run.search = std::make_shared<const CellSearch>(std::move(*built[i].search));
    run.cost = costs[d];
    prepared.emplace(i, run.search);
  }
  summary.cells = static_cast<int64_t>(runs.size());
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<ResultStore> store, ResultStore::Open(options.db_path));
  int64_t to_run = 0, candidates = 0;
  double total_cost = 0;
  for (auto& [i, run] : runs) {
    SweepInfo info = run.search->prepared.info;
    info.position = i;
    FATHOM_RETURN_IF_ERROR(store->Record(info));
    FATHOM_ASSIGN_OR_RETURN(bool complete, store->IsComplete(info.id));
    if (complete) {
      ++summary.complete;
      continue;
    }
    FATHOM_ASSIGN_OR_RETURN(run.log.stored, store->Load(info.id));
    run.log.source = options.db_path;
    run.log.save = [&store, id = info.id](const std::string& key, const CandidateResult& r) {
      return store->Save(id, key, r);
    };
    FATHOM_ASSIGN_OR_RETURN(SearchRun search, SearchRun::Start(run.search->options, catalog,
                                                               run.search->prepared, run.log));
    run.run.emplace(std::move(search));
    run.cost = run.run->ExpectedCost();
    total_cost += run.cost;
    candidates += run.run->size();
    ++to_run;
  }
  summary.prepare_s = Since(prepare_start);

  // Units go out fewest results ahead of them first (work a single-threaded search would do next),
  // then from the cell with the most expected work left, then in plan order.
  std::map<int64_t, OutUnit> out;
  int64_t next_id = 0, taken = 0;
  for (const auto& [i, run] : runs) {
    if (run.run) taken += run.run->taken();
  }
  auto finish_cell = [&](int64_t item, CellRun& run) -> Status {
    FATHOM_RETURN_IF_ERROR(store->MarkComplete(run.search->prepared.info.id));
    const TuneResult r = run.run->Outcome();
    summary.simulated += r.evaluated;
    summary.reused += r.reused;
    summary.pruned += r.pruned;
    summary.wasted += run.run->wasted();
    summary.probes_ahead += run.run->probes_ahead();
    summary.requeued += run.run->requeued();
    ++summary.run;
    if (options.progress) {
      CellProgress p;
      p.done = summary.run;
      p.total = to_run;
      p.label = run.cell.Label();
      p.simulated = r.evaluated;
      p.reused = r.reused;
      p.pruned = r.pruned;
      p.valid = static_cast<int64_t>(r.ranked.size());
      if (!r.ranked.empty()) p.best = r.ranked.front().Objective(run.run->server());
      p.server_like = run.search->prepared.info.ServerLike();
      p.candidates_done = taken;
      p.candidates_total = candidates;
      p.elapsed_s = Since(start);
      double left = 0;
      for (const auto& [j, other] : runs) left += other.run && !other.run->done() ? other.cost : 0;
      if (total_cost > left && total_cost > 0) p.eta_s = p.elapsed_s * left / (total_cost - left);
      options.progress(p);
    }
    run.run.reset();
    return Status::Ok();
  };
  // Cells whose every candidate was stored or pruned finish at once.
  for (auto& [i, run] : runs) {
    if (run.run && run.run->done()) FATHOM_RETURN_IF_ERROR(finish_cell(i, run));
  }
  h.next = [&]() -> Result<std::optional<WorkUnit>> {
    Timed t(&summary.serve_s);
    CellRun* chosen = nullptr;
    int64_t chosen_item = 0;
    std::optional<SearchRun::Task> chosen_task;
    for (auto& [i, run] : runs) {
      if (!run.run) continue;
      std::optional<SearchRun::Task> task = run.run->Peek();
      if (!task) continue;
      if (!chosen_task || task->ahead < chosen_task->ahead ||
          (task->ahead == chosen_task->ahead && run.cost > chosen->cost)) {
        chosen = &run;
        chosen_item = i;
        chosen_task = task;
      }
    }
    if (!chosen_task) return std::optional<WorkUnit>();
    chosen->run->Take(*chosen_task);
    const int64_t id = next_id++;
    out[id] = {chosen_item, *chosen_task};
    Json a = {
        {"cell", chosen_item}, {"candidate", chosen_task->candidate}, {"beat", chosen_task->beat}};
    if (chosen_task->probe) {
      a["probe"] = *chosen_task->probe;
    } else if (const OrderedJson probes = chosen->run->Memo(chosen_task->candidate)->ToJson();
               !probes.empty()) {
      a["probes"] = Json::parse(probes.dump());
    }
    return std::optional<WorkUnit>(WorkUnit{id, a.dump()});
  };
  h.finish = [&](const WorkUnit& unit, const std::string& result) -> Status {
    Timed t(&summary.serve_s);
    const OutUnit u = out.at(unit.id);
    out.erase(unit.id);
    CellRun& run = runs.at(u.cell);
    if (!run.run) {  // a candidate pruned before its turn, in a cell since finished
      ++summary.wasted;
      return Status::Ok();
    }
    const std::string where = "a worker's result for cell " + run.cell.Label();
    FATHOM_ASSIGN_OR_RETURN(const Json back, ParseJson(result, where));
    if (u.task.probe) {
      FATHOM_ASSIGN_OR_RETURN(ProbeOutcome p,
                              ProbeOutcome::FromJson(back.value("probe", Json()), where));
      FATHOM_RETURN_IF_ERROR(
          run.run->Memo(u.task.candidate)->AddJson(back.value("probes", Json::object()), where));
      run.run->FinishProbe(u.task, p);
      return Status::Ok();
    }
    FATHOM_RETURN_IF_ERROR(
        run.run->Memo(u.task.candidate)->AddJson(back.value("probes", Json::object()), where));
    const auto& config = run.search->prepared.candidates.feasible[u.task.candidate];
    FATHOM_ASSIGN_OR_RETURN(CandidateResult r,
                            CandidateFromJson(config, back.value("metrics", Json()), where));
    const int64_t before = run.run->taken();
    FATHOM_RETURN_IF_ERROR(run.run->Finish(u.task, std::move(r)));
    taken += run.run->taken() - before;
    run.cost = run.run->ExpectedCost();
    if (run.run->done()) return finish_cell(u.cell, run);
    return Status::Ok();
  };
  // A unit whose cell has finished stops, and so does one its search will not use
  // (SearchRun::Drop).
  h.drop = [&](const WorkUnit& unit) {
    Timed t(&summary.serve_s);
    const auto it = out.find(unit.id);
    CellRun& run = runs.at(it->second.cell);
    if (run.run && !run.run->Drop(it->second.task)) return false;
    if (!run.run) ++summary.wasted;
    out.erase(it);
    return true;
  };
  FATHOM_RETURN_IF_ERROR(pool->Run(h));
  summary.wall_s = Since(start);
  return std::optional<SweepSummary>(summary);
}

}  // namespace fathom::tuner
