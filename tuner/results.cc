#include "tuner/results.h"

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>

namespace fathom::tuner {
namespace {

// A prepared statement, finalized when it goes out of scope.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &st_, nullptr); }
  ~Statement() { sqlite3_finalize(st_); }
  bool ok() const { return st_ != nullptr; }
  void Bind(int i, const std::string& s) { sqlite3_bind_text(st_, i, s.c_str(), -1, SQLITE_TRANSIENT); }
  void Bind(int i, double v) { sqlite3_bind_double(st_, i, v); }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(st_, i, v); }
  void BindOptional(int i, const std::optional<double>& v) {
    if (v) {
      Bind(i, *v);
    } else {
      sqlite3_bind_null(st_, i);
    }
  }
  int Step() { return sqlite3_step(st_); }
  std::string Text(int i) const {
    const auto* t = sqlite3_column_text(st_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  std::optional<double> OptionalDouble(int i) const {
    if (sqlite3_column_type(st_, i) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_double(st_, i);
  }
  double Double(int i) const { return sqlite3_column_double(st_, i); }
  int64_t Int(int i) const { return sqlite3_column_int64(st_, i); }

 private:
  sqlite3_stmt* st_ = nullptr;
};

bool HasTable(sqlite3* db, const char* name) {
  Statement st(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  st.Bind(1, std::string(name));
  return st.ok() && st.Step() == SQLITE_ROW;
}

}  // namespace

Result<std::unique_ptr<ResultStore>> ResultStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    const std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::IoError(path + ": cannot open results database: " + msg);
  }
  std::unique_ptr<ResultStore> store(new ResultStore(db, path));
  FATHOM_RETURN_IF_ERROR(store->Exec(
      "CREATE TABLE IF NOT EXISTS tune_results(sweep TEXT NOT NULL, candidate TEXT NOT NULL, "
      "config TEXT NOT NULL, metrics TEXT NOT NULL, PRIMARY KEY(sweep, candidate))"));
  FATHOM_RETURN_IF_ERROR(store->Exec(
      "CREATE TABLE IF NOT EXISTS tune_sweeps(sweep TEXT PRIMARY KEY, model TEXT NOT NULL, hardware TEXT NOT NULL, "
      "gpus INTEGER NOT NULL, scenario TEXT NOT NULL, ttft_limit_ms REAL, tpot_limit_ms REAL, "
      "price_per_gpu_hour REAL NOT NULL, candidates INTEGER NOT NULL, infeasible INTEGER NOT NULL)"));
  return store;
}

Result<std::unique_ptr<ResultStore>> ResultStore::OpenExisting(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) return Status::NotFound(path + ": no such results database");
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    const std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::IoError(path + ": cannot open results database: " + msg);
  }
  std::unique_ptr<ResultStore> store(new ResultStore(db, path));
  if (!HasTable(db, "tune_results")) {
    return Status::InvalidArgument(path + ": not a fathom results database (no tune_results table; " +
                                   "`fathom tune --db FILE` writes one)");
  }
  return store;
}

ResultStore::~ResultStore() { sqlite3_close(db_); }

Status ResultStore::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : "error";
    sqlite3_free(err);
    return Status::IoError(path_ + ": " + msg);
  }
  return Status::Ok();
}

std::map<std::string, Json> ResultStore::Load(const std::string& sweep) {
  std::map<std::string, Json> out;
  Statement st(db_, "SELECT candidate, metrics FROM tune_results WHERE sweep = ?");
  st.Bind(1, sweep);
  while (st.Step() == SQLITE_ROW) out[st.Text(0)] = Json::parse(st.Text(1), nullptr, false);
  return out;
}

Status ResultStore::Save(const std::string& sweep, const std::string& key, const CandidateResult& result) {
  Statement st(db_, "INSERT OR REPLACE INTO tune_results(sweep, candidate, config, metrics) VALUES(?,?,?,?)");
  st.Bind(1, sweep);
  st.Bind(2, key);
  st.Bind(3, sim::ToJson(result.config).dump());
  st.Bind(4, result.ToJson().dump());
  if (st.Step() != SQLITE_DONE) return Status::IoError(path_ + ": cannot store a result: " + sqlite3_errmsg(db_));
  return Status::Ok();
}

Status ResultStore::Record(const SweepInfo& info) {
  // An upsert keeps the row (and so the sweep's place in the order) when a sweep resumes.
  Statement st(db_,
               "INSERT INTO tune_sweeps(sweep, model, hardware, gpus, scenario, ttft_limit_ms, tpot_limit_ms, "
               "price_per_gpu_hour, candidates, infeasible) VALUES(?,?,?,?,?,?,?,?,?,?) "
               "ON CONFLICT(sweep) DO UPDATE SET model = excluded.model, hardware = excluded.hardware, "
               "gpus = excluded.gpus, scenario = excluded.scenario, ttft_limit_ms = excluded.ttft_limit_ms, "
               "tpot_limit_ms = excluded.tpot_limit_ms, price_per_gpu_hour = excluded.price_per_gpu_hour, "
               "candidates = excluded.candidates, infeasible = excluded.infeasible");
  st.Bind(1, info.id);
  st.Bind(2, info.model);
  st.Bind(3, info.hardware);
  st.Bind(4, static_cast<int64_t>(info.gpus));
  st.Bind(5, std::string(sim::Name(info.scenario)));
  st.BindOptional(6, info.ttft_limit_ms);
  st.BindOptional(7, info.tpot_limit_ms);
  st.Bind(8, info.price_per_gpu_hour);
  st.Bind(9, info.candidates);
  st.Bind(10, info.infeasible);
  if (st.Step() != SQLITE_DONE) return Status::IoError(path_ + ": cannot record the sweep: " + sqlite3_errmsg(db_));
  return Status::Ok();
}

Result<std::vector<StoredSweep>> ResultStore::Sweeps() {
  std::vector<StoredSweep> out;
  std::map<std::string, size_t> index;
  if (HasTable(db_, "tune_sweeps")) {
    Statement st(db_,
                 "SELECT sweep, model, hardware, gpus, scenario, ttft_limit_ms, tpot_limit_ms, price_per_gpu_hour, "
                 "candidates, infeasible FROM tune_sweeps ORDER BY rowid");
    while (st.Step() == SQLITE_ROW) {
      SweepInfo s;
      s.id = st.Text(0);
      s.model = st.Text(1);
      s.hardware = st.Text(2);
      s.gpus = static_cast<int>(st.Int(3));
      FATHOM_ASSIGN_OR_RETURN(s.scenario, sim::ParseScenario(st.Text(4)));
      s.ttft_limit_ms = st.OptionalDouble(5);
      s.tpot_limit_ms = st.OptionalDouble(6);
      s.price_per_gpu_hour = st.Double(7);
      s.candidates = st.Int(8);
      s.infeasible = st.Int(9);
      index[s.id] = out.size();
      out.push_back({s, {}});
    }
  }
  Statement st(db_, "SELECT sweep, candidate, config, metrics FROM tune_results ORDER BY sweep, candidate");
  while (st.Step() == SQLITE_ROW) {
    const std::string id = st.Text(0);
    const Json config = Json::parse(st.Text(2), nullptr, false);
    auto d = sim::DeploymentFromJson(config, path_ + ": sweep " + id + ": candidate config");
    if (!d.ok()) return d.status();
    const Json metrics = Json::parse(st.Text(3), nullptr, false);
    auto [it, added] = index.try_emplace(id, out.size());
    if (added) {
      StoredSweep legacy;
      legacy.info.id = id;
      legacy.info.recorded = false;
      legacy.info.model = d->model;
      legacy.info.hardware = d->hardware;
      legacy.info.gpus = d->TotalGpus();
      out.push_back(legacy);
    }
    FATHOM_ASSIGN_OR_RETURN(CandidateResult r, CandidateFromJson(*d, metrics, path_ + ": sweep " + id + ": candidate metrics"));
    if (r.below_qps > 0) continue;  // pruned by a probe: no figures to report
    out[it->second].results.push_back(std::move(r));
  }
  for (StoredSweep& s : out) {
    if (s.info.recorded) continue;
    const bool has_qps = std::any_of(s.results.begin(), s.results.end(), [](const auto& r) { return r.qps > 0; });
    s.info.scenario = has_qps ? sim::Scenario::kServer : sim::Scenario::kOffline;
    s.info.candidates = static_cast<int64_t>(s.results.size());
  }
  return out;
}

Result<CandidateResult> CandidateFromJson(const sim::DeploymentConfig& config, const Json& j,
                                          const std::string& source) {
  JsonFields f(j, source);
  CandidateResult r;
  r.config = config;
  r.valid = f.Bool("valid", false);
  r.throughput_tokens_per_s = f.Double("throughput_tokens_per_s", 0.0);
  r.tokens_per_s_per_gpu = f.Double("tokens_per_s_per_gpu", 0.0);
  r.loadgen_tokens_per_s = f.Double("loadgen_tokens_per_s", r.throughput_tokens_per_s);
  r.tokens_per_s_per_user = f.Double("tokens_per_s_per_user", 0.0);
  r.qps = f.Double("qps", 0.0);
  r.ttft_p99_ms = f.Double("ttft_p99_ms", 0.0);
  r.tpot_p99_ms = f.Double("tpot_p99_ms", 0.0);
  r.cost_per_million_tokens = f.Double("cost_per_million_tokens", 0.0);
  r.bound = f.Double("bound", 0.0);
  r.run_samples = f.Int("run_samples", 0);
  r.run_s = f.Double("run_s", 0.0);
  r.failure = f.String("failure", "");
  r.failed_qps = f.Double("failed_qps", 0.0);
  r.failed_ttft_p99_ms = f.Double("failed_ttft_p99_ms", 0.0);
  r.failed_tpot_p99_ms = f.Double("failed_tpot_p99_ms", 0.0);
  r.below_qps = f.Double("below_qps", 0.0);
  FATHOM_RETURN_IF_ERROR(f.status());
  r.reused = true;
  return r;
}

}  // namespace fathom::tuner
