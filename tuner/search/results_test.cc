#include "tuner/search/results.h"

#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <filesystem>

namespace fathom::tuner {
namespace {

std::string TempDb(const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove(path);
  return path.string();
}

CandidateResult StoredResult(int max_batch, bool valid, double qps) {
  CandidateResult r;
  r.config.engine.max_batch = max_batch;
  r.valid = valid;
  r.qps = qps;
  r.throughput_tokens_per_s = 1000 * qps;
  r.tokens_per_s_per_gpu = 125 * qps;
  r.tokens_per_s_per_user = 40.0 - max_batch / 32.0;
  return r;
}

}  // namespace

TEST_CASE("ResultStore: sweeps read back with their record, in the order first recorded",
          "[tuner]") {
  const std::string path = TempDb("fathom_results_test.db");
  {
    auto store = ResultStore::Open(path);
    REQUIRE(store.ok());
    SweepInfo later{"b-sweep", "deepseek-r1", "b200", 8, sim::Scenario::kServer,
                    2000.0,    80.0,          6.5,    3, 1};
    SweepInfo first{"a-sweep",    "llama2-70b", "h200", 4, sim::Scenario::kOffline,
                    std::nullopt, std::nullopt, 3.8,    1, 0};
    REQUIRE((*store)->Record(later).ok());
    REQUIRE((*store)->Record(first).ok());
    later.candidates = 4;  // a resumed sweep updates its record and keeps its place
    REQUIRE((*store)->Record(later).ok());
    for (int b : {64, 256, 128})
      REQUIRE((*store)
                  ->Save("b-sweep", "key" + std::to_string(b), StoredResult(b, b != 128, b / 64.0))
                  .ok());
    REQUIRE((*store)->Save("a-sweep", "k", StoredResult(32, true, 0)).ok());
  }
  auto store = ResultStore::OpenExisting(path);
  REQUIRE(store.ok());
  auto sweeps = (*store)->Sweeps();
  REQUIRE(sweeps.ok());
  REQUIRE(sweeps->size() == 2);
  const StoredSweep& b = (*sweeps)[0];
  CHECK(b.info.id == "b-sweep");
  CHECK(b.info.recorded);
  CHECK(b.info.scenario == sim::Scenario::kServer);
  CHECK(b.info.candidates == 4);
  CHECK(b.info.ttft_limit_ms == 2000.0);
  CHECK(b.info.price_per_gpu_hour == 6.5);
  REQUIRE(b.results.size() == 3);
  const auto ranked = RankValid(b.results, /*server=*/true);
  REQUIRE(ranked.size() == 2);
  CHECK(ranked[0].config.engine.max_batch == 256);
  CHECK((*sweeps)[1].info.id == "a-sweep");
  CHECK_FALSE((*sweeps)[1].info.tpot_limit_ms.has_value());
  std::filesystem::remove(path);
}

TEST_CASE(
    "ResultStore: a sweep's cells read back in plan order and with their stack, whoever stored "
    "them first; a store from before both reads and gains them",
    "[tuner]") {
  const std::string path = TempDb("fathom_results_position.db");
  {
    auto store = ResultStore::Open(path);
    REQUIRE(store.ok());
    SweepInfo alone{"tune",       "llama2-70b", "h200", 4, sim::Scenario::kOffline,
                    std::nullopt, std::nullopt, 3.8,    1, 0};
    REQUIRE((*store)->Record(alone).ok());
    // Shards merged: the plan's third cell stored before its first.
    for (int64_t position : {2, 0}) {
      SweepInfo cell = alone;
      cell.id = "cell" + std::to_string(position);
      cell.position = position;
      cell.stack = position == 0 ? "trtllm-1.0" : "roofline";
      REQUIRE((*store)->Record(cell).ok());
    }
  }
  auto store = ResultStore::OpenExisting(path);
  REQUIRE(store.ok());
  auto sweeps = (*store)->Sweeps();
  REQUIRE(sweeps.ok());
  REQUIRE(sweeps->size() == 3);
  CHECK((*sweeps)[0].info.id == "cell0");
  CHECK((*sweeps)[0].info.stack == "trtllm-1.0");
  CHECK((*sweeps)[0].info.position == 0);
  CHECK((*sweeps)[1].info.id == "cell2");
  CHECK((*sweeps)[2].info.id == "tune");
  CHECK((*sweeps)[2].info.stack.empty());
  CHECK((*sweeps)[2].info.position == -1);

  // A store written before stacks and positions were recorded.
  const std::string old = TempDb("fathom_results_old_schema.db");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(old.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db,
                       "CREATE TABLE tune_results(sweep TEXT NOT NULL, candidate TEXT NOT NULL, "
                       "config TEXT NOT NULL, metrics TEXT NOT NULL, PRIMARY KEY(sweep, "
                       "candidate)); CREATE TABLE tune_sweeps(sweep TEXT PRIMARY KEY, model TEXT "
                       "NOT NULL, hardware TEXT NOT NULL, gpus INTEGER NOT NULL, scenario TEXT NOT "
                       "NULL, ttft_limit_ms REAL, tpot_limit_ms REAL, price_per_gpu_hour REAL NOT "
                       "NULL, candidates INTEGER NOT NULL, infeasible INTEGER NOT NULL); INSERT "
                       "INTO tune_sweeps VALUES('s', 'llama2-70b', 'h200', 4, 'offline', NULL, "
                       "NULL, 3.8, 1, 0)",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  auto reading = ResultStore::OpenExisting(old);
  REQUIRE(reading.ok());
  auto read = (*reading)->Sweeps();
  REQUIRE(read.ok());
  REQUIRE(read->size() == 1);
  CHECK(read->front().info.stack.empty());
  reading->reset();
  auto writing = ResultStore::Open(old);
  REQUIRE(writing.ok());
  SweepInfo resumed = read->front().info;
  resumed.stack = "trtllm-1.0";
  REQUIRE((*writing)->Record(resumed).ok());
  auto migrated = (*writing)->Sweeps();
  REQUIRE(migrated.ok());
  CHECK(migrated->front().info.stack == "trtllm-1.0");
  std::filesystem::remove(path);
  std::filesystem::remove(old);
}

TEST_CASE(
    "ResultStore: a sweep stored without a record gets model, GPUs and scenario from its "
    "candidates",
    "[tuner]") {
  const std::string path = TempDb("fathom_results_legacy.db");
  {
    auto store = ResultStore::Open(path);
    REQUIRE(store.ok());
    CandidateResult r = StoredResult(64, true, 2.5);
    r.config.model = "llama2-70b";
    r.config.hardware = "h100";
    r.config.gpus = 4;
    r.config.tp = 4;
    r.config.ep = 1;
    r.config.attn_dp = 1;
    REQUIRE((*store)->Save("old", "k", r).ok());
  }
  auto store = ResultStore::OpenExisting(path);
  REQUIRE(store.ok());
  auto sweeps = (*store)->Sweeps();
  REQUIRE(sweeps.ok());
  REQUIRE(sweeps->size() == 1);
  const SweepInfo& info = sweeps->front().info;
  CHECK_FALSE(info.recorded);
  CHECK(info.model == "llama2-70b");
  CHECK(info.hardware == "h100");
  CHECK(info.gpus == 4);
  CHECK(info.scenario == sim::Scenario::kServer);  // its candidates have a QPS
  std::filesystem::remove(path);
}

TEST_CASE(
    "ResultStore: opening a missing file or another database for reading is an error naming it",
    "[tuner]") {
  const std::string missing = TempDb("fathom_results_missing.db");
  auto none = ResultStore::OpenExisting(missing);
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().message() == missing + ": no such results database");
  CHECK_FALSE(std::filesystem::exists(missing));

  const std::string other = TempDb("fathom_results_other.db");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(other.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "CREATE TABLE kernels(name TEXT)", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  sqlite3_close(db);
  auto wrong = ResultStore::OpenExisting(other);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().message().find(other + ": not a fathom results database") == 0);
  std::filesystem::remove(other);
}

TEST_CASE(
    "CandidateFromJson: a stored row of the wrong shape is an error naming the store and field",
    "[tuner]") {
  sim::DeploymentConfig d;
  auto ok = CandidateFromJson(
      d, Json::parse(R"({"valid": true, "qps": 4.5, "run_samples": 26382})"), "s.db: sweep 1");
  REQUIRE(ok.ok());
  CHECK(ok->valid);
  CHECK(ok->qps == 4.5);
  CHECK(ok->reused);
  CHECK(CandidateFromJson(d, Json::parse(R"({"valid": "yes"})"), "s.db: sweep 1")
            .status()
            .message() == "s.db: sweep 1: field 'valid' = \"yes\": must be true or false");
  CHECK(CandidateFromJson(d, Json::parse(R"({"qps": [1]})"), "s.db: sweep 1")
            .status()
            .message()
            .find("field 'qps'") != std::string::npos);
  // A row whose metrics are not JSON at all (parsed without exceptions: discarded).
  CHECK(CandidateFromJson(d, Json::parse("{oops", nullptr, false), "s.db: sweep 1")
            .status()
            .message() == "s.db: sweep 1: expected a JSON object");
}

TEST_CASE(
    "ResultStore: a stored candidate config with an absurd layout is an error naming the store",
    "[tuner]") {
  // Found by fuzz_results_store: 65536 instances x tp 65536 overflowed int counting a pool's GPUs.
  const std::string path = TempDb("fathom_results_layout.db");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(
      sqlite3_exec(db,
                   "CREATE TABLE tune_results(sweep TEXT NOT NULL, candidate TEXT NOT NULL, config "
                   "TEXT NOT NULL, "
                   "metrics TEXT NOT NULL, PRIMARY KEY(sweep, candidate));"
                   "INSERT INTO tune_results VALUES('s', 'c', '{\"disaggregated\": {\"prefill\": "
                   "{\"instances\": 65536, \"tp\": 65536}, \"decode\": {\"tp\": 4}}}', '{}')",
                   nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  auto store = ResultStore::OpenExisting(path);
  REQUIRE(store.ok());
  CHECK((*store)->Sweeps().status().message() ==
        path +
            ": sweep s: candidate config: disaggregated.prefill: field 'instances' = 65536: "
            "instances x tp x pp = 4294967296 GPUs: must be <= 65536");
  std::filesystem::remove(path);
}

TEST_CASE(
    "ParetoFrontier: no frontier point dominates another, and every valid result is matched by one",
    "[tuner]") {
  std::vector<CandidateResult> all;
  for (int i = 0; i < 60; ++i) {
    CandidateResult r;
    r.valid = i % 7 != 0;
    r.tokens_per_s_per_gpu = 100 + (i * 37) % 53;
    r.tokens_per_s_per_user = 5 + (i * 11) % 29;
    all.push_back(r);
  }
  const auto frontier = ParetoFrontier(all);
  REQUIRE_FALSE(frontier.empty());
  auto dominates = [](const CandidateResult& a, const CandidateResult& b) {
    return a.tokens_per_s_per_gpu >= b.tokens_per_s_per_gpu &&
           a.tokens_per_s_per_user >= b.tokens_per_s_per_user &&
           (a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu ||
            a.tokens_per_s_per_user > b.tokens_per_s_per_user);
  };
  for (const auto& a : frontier) {
    CHECK(a.valid);
    for (const auto& b : frontier) CHECK_FALSE(dominates(a, b));
  }
  for (size_t i = 1; i < frontier.size(); ++i) {
    CHECK(frontier[i - 1].tokens_per_s_per_user <= frontier[i].tokens_per_s_per_user);
  }
  for (const auto& r : all) {
    if (!r.valid) continue;
    const bool covered =
        std::any_of(frontier.begin(), frontier.end(), [&](const CandidateResult& f) {
          return dominates(f, r) || (f.tokens_per_s_per_gpu == r.tokens_per_s_per_gpu &&
                                     f.tokens_per_s_per_user == r.tokens_per_s_per_user);
        });
    CHECK(covered);
  }
}

TEST_CASE("CandidateResult: a stored row reads back equal, whether valid, failed or pruned",
          "[tuner]") {
  CandidateResult valid;
  valid.config.disaggregated = true;
  valid.config.decode = {1, 4, 1, 4, 4};
  valid.config.prefill = {1, 4, 1, 1, 1};
  valid.valid = true;
  valid.throughput_tokens_per_s = 12345.678;
  valid.tokens_per_s_per_gpu = 1543.2;
  valid.loadgen_tokens_per_s = 12000.5;
  valid.tokens_per_s_per_user = 41.7;
  valid.qps = 13.143582031768943;
  valid.ttft_p99_ms = 1800.25;
  valid.tpot_p99_ms = 61.5;
  valid.cost_per_million_tokens = 0.42;
  valid.bound = 15.5;
  valid.run_samples = 26382;
  valid.run_s = 660.5;
  CandidateResult failed = valid;
  failed.valid = false;
  failed.failure = "TTFT and TPOT";
  failed.failed_qps = 2.5;
  failed.failed_ttft_p99_ms = 9000;
  failed.failed_tpot_p99_ms = 95;
  CandidateResult pruned = valid;
  pruned.valid = false;
  pruned.below_qps = 11.25;
  CandidateResult predicted = valid;  // Offline, run to its full length after the screen
  predicted.qps = 0;
  predicted.predicted_tokens_per_s = 60125.5;
  CandidateResult screened;  // Offline, stopped by the screen: its bound only
  screened.config = valid.config;
  screened.bound = 66000;
  screened.screened = true;
  for (CandidateResult r : {valid, failed, pruned, predicted, screened}) {
    const StoredRow row = ToStoredRow(r);
    auto config = sim::DeploymentFromJson(Json::parse(row.config_json), "config");
    REQUIRE(config.ok());
    auto back = CandidateFromJson(*config, Json::parse(row.metrics_json), "metrics");
    INFO(row.metrics_json);
    REQUIRE(back.ok());
    r.reused = true;  // what reading it back marks
    CHECK(*back == r);
  }
}

}  // namespace fathom::tuner
