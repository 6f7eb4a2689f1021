#include "tuner/sweep/sweep.h"

#include <sqlite3.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/cancel.h"
#include "base/files.h"
#include "models/cost_model.h"
#include "sim/time_model.h"
#include "tuner/search/results.h"
#include "tuner/sweep/work_pool.h"

namespace fathom::tuner {
namespace {

std::string TempPath(const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove(path);
  return path.string();
}

std::string WritePlan(const std::string& name, const std::string& json) {
  const std::string path = TempPath(name);
  std::ofstream(path) << json;
  return path;
}

// A small grid: Llama 2 70B on 2 and 4 H200s, Offline and Server, on a 120-request workload.
constexpr const char* kSmallPlan = R"({
  "models": ["llama2-70b"], "hardware": ["h200"], "gpus": [2, 4], "scenarios": ["offline", "server"],
  "prices": {"h200": 3.5},
  "tune": {"weights": ["fp8"], "max_batch": [16, 64, 256], "max_num_tokens": [2048, 8192], "disaggregated": false,
           "probe_duration_s": 60, "qps_steps": 5}
})";

// The cell's tune as `fathom tune` would run it on a fixed workload and the v5.1 calibration.
Result<TuneOptions> SmallCell(const SweepPlan& plan, const SweepCell& cell) {
  TuneOptions o;
  o.space.model = cell.model;
  o.space.hardware = cell.hardware;
  o.space.gpus = cell.gpus;
  o.space.scenario = cell.scenario;
  o.space.weights = plan.weights;
  o.space.max_batch = plan.max_batch;
  o.space.max_num_tokens = plan.max_num_tokens;
  o.space.disaggregated = plan.disaggregated;
  o.probe_duration_s = *plan.probe_duration_s;
  o.qps_steps = *plan.qps_steps;
  o.price_per_gpu_hour = plan.prices.at(cell.hardware);
  o.benchmark = "llama2-70b";
  for (int i = 0; i < 120; ++i) {
    traces::Request r;
    r.id = i;
    r.input_tokens = 200 + (i * 37) % 800;
    r.output_tokens = 50 + (i * 53) % 300;
    o.dataset.push_back(r);
  }
  const models::CostParams params =
      models::LoadCalibration(DataDir() + "/models/calibration/trtllm-1.0.json")->params;
  o.make_time = sim::CalibratedFactory(params, nullptr);
  return o;
}

// Every table of a results store, one line per row in key order.
std::vector<std::string> Rows(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::vector<std::string> rows;
  // A sweep's record less its plan position, which a tune of its own has not.
  for (const char* sql : {"SELECT sweep, model, hardware, gpus, scenario, ttft_limit_ms, "
                          "tpot_limit_ms, price_per_gpu_hour, candidates, infeasible, stack "
                          "FROM tune_sweeps ORDER BY sweep",
                          "SELECT * FROM tune_results ORDER BY sweep, candidate",
                          "SELECT * FROM tune_complete ORDER BY sweep"}) {
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::string row = sql;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* text = sqlite3_column_text(st, c);
        row += "|" + std::string(text != nullptr ? reinterpret_cast<const char*>(text) : "NULL");
      }
      rows.push_back(row);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return rows;
}

models::HardwareCatalog Catalog() { return *models::HardwareCatalog::LoadBuiltin(); }

}  // namespace

TEST_CASE("LoadSweepPlan: the grid in order, Offline cells holding to no limits", "[tuner]") {
  const std::string path = WritePlan("fathom_plan_grid.json", R"({
    "models": ["llama2-70b", "mixtral-8x7b"], "hardware": ["h200"], "gpus": [1, 2],
    "scenarios": ["offline", "server"], "limits": [{"ttft_ms": 2000, "tpot_ms": 200}, {"tpot_ms": 100}],
    "traces": ["t.csv"], "prices": {"h200": 3.5}, "tune": {"samples": 100, "prune": false}})");
  auto plan = LoadSweepPlan(path);
  REQUIRE(plan.ok());
  const std::vector<SweepCell> cells = plan->Cells();
  REQUIRE(cells.size() == 2 * 2 * (1 + 2));
  CHECK(cells[0].Label() == "llama2-70b on 1 x h200, offline, trace " +
                                (std::filesystem::path(path).parent_path() / "t.csv").string());
  CHECK(cells[1].scenario == sim::Scenario::kServer);
  CHECK(cells[1].limits.ttft_ms == 2000.0);
  CHECK_FALSE(cells[2].limits.ttft_ms);
  CHECK(cells[2].limits.tpot_ms == 100.0);
  CHECK(cells[3].gpus == 2);
  CHECK(cells.back().model == "mixtral-8x7b");
  CHECK(plan->samples == 100);
  CHECK_FALSE(plan->prune);
}

TEST_CASE(
    "LoadSweepPlan: a bad plan is an error naming the file, the field, the value and the rule",
    "[tuner]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"models": ["llama2-70b"], "hardware": ["h200"], "gpus": [0], "scenarios": ["offline"]})",
       "field 'gpus[0]' = 0: must be an integer from 1 to 2^30"},
      {R"({"models": [], "hardware": ["h200"], "gpus": [1], "scenarios": ["offline"]})",
       "field 'models' = []: must be a non-empty array of strings"},
      {R"({"models": ["m"], "hardware": ["h200"], "gpu": [1], "scenarios": ["offline"]})",
       "field 'gpu': unknown field"},
      {R"({"models": ["m"], "hardware": ["h200"], "gpus": [1], "scenarios": ["single-stream"]})",
       "field 'scenarios[0]' = \"single-stream\": must be offline, server or interactive"},
      {R"({"models": ["m"], "hardware": ["h"], "gpus": [1], "scenarios": ["server"], "limits": [{"tpot_ms": -1}]})",
       "limits[0]: field 'tpot_ms' = -1: must be a finite number of milliseconds > 0"},
      {R"({"models": ["m"], "hardware": ["h"], "gpus": [1], "scenarios": ["server"], "prices": {"h": 0}})",
       "field 'prices.h' = 0: must be USD per GPU-hour > 0"},
      {R"({"models": ["m"], "hardware": ["h"], "gpus": [1], "scenarios": ["server"], "tune": {"qps_steps": 0}})",
       "tune: field 'qps_steps' = 0: must be from 1 to 64"},
  };
  for (const auto& [json, message] : cases) {
    INFO(json);
    const std::string path = WritePlan("fathom_plan_bad.json", json);
    auto plan = LoadSweepPlan(path);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.status().message().find(path) == 0);
    CHECK_THAT(plan.status().message(), Catch::Contains(message));
  }
}

TEST_CASE("ParseShard: I/N with 0 <= I < N", "[tuner]") {
  auto s = ParseShard("2/5");
  REQUIRE(s.ok());
  CHECK(s->index == 2);
  CHECK(s->count == 5);
  for (const char* bad : {"5/5", "-1/2", "1", "1/0", "a/b", "1/2x", ""}) {
    INFO(bad);
    CHECK_FALSE(ParseShard(bad).ok());
  }
}

TEST_CASE("BalanceShards: the costliest first, each to the least-loaded shard", "[tuner]") {
  // Every 2nd item (0, 2, 4 and 1, 3) would load the shards 20 and 2.
  const std::vector<double> costs = {10, 1, 9, 1, 1};
  const std::vector<int> shard = BalanceShards(costs, 2);
  double load[2] = {0, 0};
  for (size_t i = 0; i < costs.size(); ++i) load[shard[i]] += costs[i];
  CHECK(load[0] == 11);
  CHECK(load[1] == 11);
  CHECK(shard[0] != shard[2]);  // the two costly items apart
  CHECK(BalanceShards({}, 3).empty());
}

TEST_CASE("WorkPool on threads: units handed out as they become ready, each computed once",
          "[tuner]") {
  auto pool = MakeWorkPool(3);
  REQUIRE(pool.ok());
  REQUIRE((*pool)->coordinator());
  // Two chains of 5 units: a chain's next unit is ready only once its last one finished.
  std::map<int64_t, std::string> finished;
  int64_t handed[2] = {0, 0};
  bool out[2] = {false, false};
  WorkHandlers h;
  h.next = [&]() -> Result<std::optional<WorkUnit>> {
    for (int chain = 0; chain < 2; ++chain) {
      if (out[chain] || handed[chain] == 5) continue;
      out[chain] = true;
      const int64_t id = 10 * chain + handed[chain]++;
      return std::optional<WorkUnit>(WorkUnit{id, std::to_string(id * 10)});
    }
    return std::optional<WorkUnit>();
  };
  h.compute = [](const WorkUnit& unit) -> Result<std::string> { return unit.assignment + "!"; };
  h.finish = [&](const WorkUnit& unit, const std::string& result) {
    CHECK(result == std::to_string(unit.id * 10) + "!");
    CHECK(finished.emplace(unit.id, result).second);
    out[unit.id / 10] = false;
    return Status::Ok();
  };
  REQUIRE((*pool)->Run(h).ok());
  CHECK(finished.size() == 10);
  CHECK(finished.count(14) == 1);

  // An error stops the pool from starting new units and is returned.
  std::atomic<int> computed{0};
  h.next = EachOf({0, 1, 2}, [](int64_t item) -> Result<std::string> { return std::string(); });
  h.compute = [&](const WorkUnit& unit) -> Result<std::string> {
    ++computed;
    if (unit.id == 0) return Status::InvalidArgument("cell 0 is bad");
    return std::string("done");
  };
  h.finish = [](const WorkUnit&, const std::string&) { return Status::Ok(); };
  auto one = MakeWorkPool(1);
  REQUIRE(one.ok());
  const Status s = (*one)->Run(h);
  CHECK(s.message() == "cell 0 is bad");
  CHECK(computed == 1);
}

// Unit 0 computes until it is cancelled (or 30 s pass), unit 1 at once; once unit 1 is back the
// coordinator drops unit 0.
WorkHandlers DropTheSlowUnit(std::vector<int64_t>* finished, std::atomic<bool>* cancelled) {
  WorkHandlers h;
  h.next = EachOf({0, 1}, [](int64_t) -> Result<std::string> { return std::string(); });
  h.compute = [cancelled](const WorkUnit& unit) -> Result<std::string> {
    const auto start = std::chrono::steady_clock::now();
    while (unit.id == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
      if (CancelRequested()) {
        *cancelled = true;
        return Status::Unavailable("cancelled");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return std::string("done");
  };
  h.finish = [finished](const WorkUnit& unit, const std::string&) {
    finished->push_back(unit.id);
    return Status::Ok();
  };
  h.drop = [finished](const WorkUnit& unit) { return unit.id == 0 && !finished->empty(); };
  return h;
}

TEST_CASE("WorkPool: a unit dropped under way stops, and its result is never taken", "[tuner]") {
  std::vector<int64_t> finished;
  std::atomic<bool> cancelled{false};
  const auto start = std::chrono::steady_clock::now();
  auto pool = MakeWorkPool(2);
  REQUIRE(pool.ok());
  REQUIRE((*pool)->Run(DropTheSlowUnit(&finished, &cancelled)).ok());  // its error dropped too
  CHECK(finished == std::vector<int64_t>{1});
  CHECK(cancelled);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));

  // The schedule frees the dropped unit's worker at the clock it was dropped: unit 1's end.
  finished.clear();
  cancelled = false;
  SchedulePool schedule(2);
  WorkHandlers h = DropTheSlowUnit(&finished, &cancelled);
  h.compute = [](const WorkUnit& unit) -> Result<std::string> {
    std::this_thread::sleep_for(std::chrono::milliseconds(unit.id == 0 ? 300 : 1));
    return std::string("done");
  };
  REQUIRE(schedule.Run(h).ok());
  CHECK(finished == std::vector<int64_t>{1});
  CHECK(schedule.makespan_s() < 0.1);
  CHECK(schedule.compute_s() < 0.2);
}

TEST_CASE(
    "RunSweep: the store holds each cell's tune row for row whatever the threads, and a rerun "
    "skips them all",
    "[tuner]") {
  const std::string plan_path = WritePlan("fathom_sweep_plan.json", kSmallPlan);
  auto plan = LoadSweepPlan(plan_path);
  REQUIRE(plan.ok());
  // Each cell tuned on its own, one job, into one store.
  const std::string tuned = TempPath("fathom_sweep_tuned.db");
  for (const SweepCell& cell : plan->Cells()) {
    auto o = SmallCell(*plan, cell);
    REQUIRE(o.ok());
    o->jobs = 1;
    o->db_path = tuned;
    REQUIRE(Tune(*o, Catalog()).ok());
    auto store = ResultStore::Open(tuned);
    REQUIRE(store.ok());
    REQUIRE((*store)->MarkComplete(Prepare(*o, Catalog())->info.id).ok());
  }
  const std::string swept = TempPath("fathom_sweep_swept.db");
  SweepOptions options;
  options.db_path = swept;
  options.jobs = 2;
  auto first = RunSweep(plan_path, options, SmallCell, Catalog());
  REQUIRE(first.ok());
  REQUIRE(*first);
  CHECK((*first)->cells == 4);
  CHECK((*first)->run == 4);
  CHECK((*first)->simulated > 0);
  CHECK(Rows(swept) == Rows(tuned));

  auto again = RunSweep(plan_path, options, SmallCell, Catalog());
  REQUIRE(again.ok());
  CHECK((*again)->complete == 4);
  CHECK((*again)->run == 0);
  CHECK((*again)->simulated == 0);
  CHECK(Rows(swept) == Rows(tuned));

  SECTION("shards merged hold what one run holds") {
    const std::string merged = TempPath("fathom_sweep_merged.db");
    std::vector<std::string> shards;
    int64_t cells = 0;
    for (int i = 0; i < 3; ++i) {
      options.db_path = TempPath("fathom_sweep_shard" + std::to_string(i) + ".db");
      options.shard = Shard{i, 3};
      auto run = RunSweep(plan_path, options, SmallCell, Catalog());
      REQUIRE(run.ok());
      // Balanced by expected cost: with 4 cells on 3 shards, none is left empty.
      CHECK((*run)->cells >= 1);
      cells += (*run)->cells;
      shards.push_back(options.db_path);
    }
    CHECK(cells == 4);
    auto store = ResultStore::Open(merged);
    REQUIRE(store.ok());
    REQUIRE((*store)->Merge(shards).ok());
    std::vector<std::string> want = Rows(tuned), got = Rows(merged);
    CHECK(got == want);
    // Reports list the merged sweeps in plan order, as they list one process's.
    auto ids = [](const std::string& path) {
      std::vector<std::string> out;
      auto s = ResultStore::OpenExisting(path);
      REQUIRE(s.ok());
      auto sweeps = (*s)->Sweeps();
      REQUIRE(sweeps.ok());
      for (const StoredSweep& sweep : *sweeps) out.push_back(sweep.info.id);
      return out;
    };
    CHECK(ids(merged) == ids(swept));
  }
}

TEST_CASE(
    "ResultStore::Merge: a row that differs from the one held is an error, and nothing is merged",
    "[tuner]") {
  const std::string a = TempPath("fathom_merge_a.db"), b = TempPath("fathom_merge_b.db"),
                    out = TempPath("fathom_merge_out.db");
  CandidateResult r;
  r.valid = true;
  r.qps = 1;
  {
    auto store = ResultStore::Open(a);
    REQUIRE(store.ok());
    REQUIRE((*store)->Save("s", "k", r).ok());
    REQUIRE((*store)->Save("s", "k2", r).ok());
    r.qps = 2;
    auto other = ResultStore::Open(b);
    REQUIRE(other.ok());
    REQUIRE((*other)->Save("s", "k", r).ok());
  }
  auto store = ResultStore::Open(out);
  REQUIRE(store.ok());
  const Status s = (*store)->Merge({a, b});
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), Catch::StartsWith(b + ": sweep s, candidate k: differs from " + out));
  auto sweeps = (*store)->Sweeps();
  REQUIRE(sweeps.ok());
  CHECK(sweeps->empty());
}

}  // namespace fathom::tuner
