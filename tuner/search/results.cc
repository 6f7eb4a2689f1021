#include "tuner/search/results.h"

#include <algorithm>
#include <filesystem>
#include <type_traits>
#include <variant>

namespace fathom::tuner {
namespace {

Result<bool> HasColumn(const sqlite::Database& db, const std::string& table,
                       const std::string& column) {
  FATHOM_ASSIGN_OR_RETURN(sqlite::Statement st,
                          db.Prepare("SELECT 1 FROM pragma_table_info(?) WHERE name = ?"));
  FATHOM_RETURN_IF_ERROR(st.Bind(1, table));
  FATHOM_RETURN_IF_ERROR(st.Bind(2, column));
  return st.Step();
}

}  // namespace

Result<std::unique_ptr<ResultStore>> ResultStore::Open(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Database db,
      sqlite::Database::Open(path, sqlite::Database::Mode::kReadWriteCreate, "results database"));
  FATHOM_RETURN_IF_ERROR(db.Exec(
      "CREATE TABLE IF NOT EXISTS tune_results(sweep TEXT NOT NULL, candidate TEXT NOT NULL, "
      "config TEXT NOT NULL, metrics TEXT NOT NULL, PRIMARY KEY(sweep, candidate))"));
  FATHOM_RETURN_IF_ERROR(db.Exec(
      "CREATE TABLE IF NOT EXISTS tune_sweeps(sweep TEXT PRIMARY KEY, model TEXT NOT NULL, "
      "hardware TEXT NOT NULL, "
      "gpus INTEGER NOT NULL, scenario TEXT NOT NULL, ttft_limit_ms REAL, tpot_limit_ms REAL, "
      "price_per_gpu_hour REAL NOT NULL, candidates INTEGER NOT NULL, infeasible INTEGER NOT "
      "NULL, stack TEXT, position INTEGER)"));
  // Stores written before the stack and the plan position were recorded gain the columns.
  for (const char* column : {"stack TEXT", "position INTEGER"}) {
    const std::string name = std::string(column).substr(0, std::string(column).find(' '));
    FATHOM_ASSIGN_OR_RETURN(bool present, HasColumn(db, "tune_sweeps", name));
    if (!present) {
      FATHOM_RETURN_IF_ERROR(db.Exec("ALTER TABLE tune_sweeps ADD COLUMN " + std::string(column)));
    }
  }
  FATHOM_RETURN_IF_ERROR(
      db.Exec("CREATE TABLE IF NOT EXISTS tune_complete(sweep TEXT PRIMARY KEY)"));
  return std::unique_ptr<ResultStore>(new ResultStore(std::move(db)));
}

Result<std::unique_ptr<ResultStore>> ResultStore::OpenExisting(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Database db,
      sqlite::Database::Open(path, sqlite::Database::Mode::kReadOnly, "results database"));
  if (!db.HasTable("tune_results")) {
    return Status::InvalidArgument(path +
                                   ": not a fathom results database (no tune_results table; " +
                                   "`fathom tune --db FILE` writes one)");
  }
  return std::unique_ptr<ResultStore>(new ResultStore(std::move(db)));
}

Result<std::map<std::string, Json>> ResultStore::Load(const std::string& sweep) {
  std::map<std::string, Json> out;
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement st,
      db_.Prepare("SELECT candidate, metrics FROM tune_results WHERE sweep = ?"));
  FATHOM_RETURN_IF_ERROR(st.Bind(1, sweep));
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out[st.Text(0)] = Json::parse(st.Text(1), nullptr, false);
  }
  return out;
}

StoredRow ToStoredRow(const CandidateResult& result) {
  return {sim::ToJson(result.config).dump(), result.ToJson().dump()};
}

Status ResultStore::Save(const std::string& sweep, const std::string& key,
                         const CandidateResult& result) {
  const StoredRow row = ToStoredRow(result);
  return SaveRow(sweep, key, row.config_json, row.metrics_json);
}

Status ResultStore::SaveRow(const std::string& sweep, const std::string& key,
                            const std::string& config_json, const std::string& metrics_json) {
  FATHOM_ASSIGN_OR_RETURN(sqlite::Statement st,
                          db_.Prepare("INSERT OR REPLACE INTO tune_results(sweep, candidate, "
                                      "config, metrics) VALUES(?,?,?,?)"));
  FATHOM_RETURN_IF_ERROR(st.Bind(1, sweep));
  FATHOM_RETURN_IF_ERROR(st.Bind(2, key));
  FATHOM_RETURN_IF_ERROR(st.Bind(3, config_json));
  FATHOM_RETURN_IF_ERROR(st.Bind(4, metrics_json));
  return st.Step().status();
}

Status ResultStore::MarkComplete(const std::string& sweep) {
  FATHOM_ASSIGN_OR_RETURN(sqlite::Statement st,
                          db_.Prepare("INSERT OR IGNORE INTO tune_complete(sweep) VALUES(?)"));
  FATHOM_RETURN_IF_ERROR(st.Bind(1, sweep));
  return st.Step().status();
}

Result<bool> ResultStore::IsComplete(const std::string& sweep) {
  FATHOM_ASSIGN_OR_RETURN(sqlite::Statement st,
                          db_.Prepare("SELECT 1 FROM tune_complete WHERE sweep = ?"));
  FATHOM_RETURN_IF_ERROR(st.Bind(1, sweep));
  return st.Step();
}

Status ResultStore::Merge(const std::vector<std::string>& paths) {
  FATHOM_RETURN_IF_ERROR(db_.Exec("BEGIN IMMEDIATE"));
  for (const std::string& path : paths) {
    if (Status merged = MergeOne(path); !merged.ok()) {
      FATHOM_RETURN_IF_ERROR(db_.Exec("ROLLBACK"));
      return merged;
    }
  }
  return db_.Exec("COMMIT");
}

Status ResultStore::MergeOne(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<ResultStore> from, OpenExisting(path));
  FATHOM_ASSIGN_OR_RETURN(std::vector<SweepInfo> infos, from->Records());
  for (const SweepInfo& info : infos) FATHOM_RETURN_IF_ERROR(Record(info));
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement rows,
      from->db_.Prepare(
          "SELECT sweep, candidate, config, metrics FROM tune_results ORDER BY rowid"));
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement mine,
      db_.Prepare("SELECT config, metrics FROM tune_results WHERE sweep = ? AND candidate = ?"));
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(bool row, rows.Step());
    if (!row) break;
    FATHOM_RETURN_IF_ERROR(mine.Reset());
    FATHOM_RETURN_IF_ERROR(mine.Bind(1, rows.Text(0)));
    FATHOM_RETURN_IF_ERROR(mine.Bind(2, rows.Text(1)));
    FATHOM_ASSIGN_OR_RETURN(bool held, mine.Step());
    if (!held) {
      FATHOM_RETURN_IF_ERROR(SaveRow(rows.Text(0), rows.Text(1), rows.Text(2), rows.Text(3)));
    } else if (mine.Text(0) != rows.Text(2) || mine.Text(1) != rows.Text(3)) {
      return Status::InvalidArgument(path + ": sweep " + rows.Text(0) + ", candidate " +
                                     rows.Text(1) + ": differs from " + db_.path() +
                                     "'s row (the stores ran different inputs under one sweep id)");
    }
  }
  if (from->db_.HasTable("tune_complete")) {
    FATHOM_ASSIGN_OR_RETURN(sqlite::Statement done,
                            from->db_.Prepare("SELECT sweep FROM tune_complete ORDER BY rowid"));
    for (;;) {
      FATHOM_ASSIGN_OR_RETURN(bool row, done.Step());
      if (!row) break;
      FATHOM_RETURN_IF_ERROR(MarkComplete(done.Text(0)));
    }
  }
  return Status::Ok();
}

Status ResultStore::Record(const SweepInfo& info) {
  // An upsert keeps the row (and so the sweep's place in the order) when a sweep resumes.
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement st,
      db_.Prepare(
          "INSERT INTO tune_sweeps(sweep, model, hardware, gpus, scenario, ttft_limit_ms, "
          "tpot_limit_ms, price_per_gpu_hour, candidates, infeasible, stack, position) "
          "VALUES(?,?,?,?,?,?,?,?,?,?,?,?) "
          "ON CONFLICT(sweep) DO UPDATE SET model = excluded.model, hardware = excluded.hardware, "
          "gpus = excluded.gpus, scenario = excluded.scenario, ttft_limit_ms = "
          "excluded.ttft_limit_ms, "
          "tpot_limit_ms = excluded.tpot_limit_ms, price_per_gpu_hour = "
          "excluded.price_per_gpu_hour, "
          "candidates = excluded.candidates, infeasible = excluded.infeasible, "
          "stack = excluded.stack, position = excluded.position"));
  FATHOM_RETURN_IF_ERROR(st.Bind(1, info.id));
  FATHOM_RETURN_IF_ERROR(st.Bind(2, info.model));
  FATHOM_RETURN_IF_ERROR(st.Bind(3, info.hardware));
  FATHOM_RETURN_IF_ERROR(st.Bind(4, static_cast<int64_t>(info.gpus)));
  FATHOM_RETURN_IF_ERROR(st.Bind(5, std::string(sim::Name(info.scenario))));
  FATHOM_RETURN_IF_ERROR(st.Bind(6, info.ttft_limit_ms));
  FATHOM_RETURN_IF_ERROR(st.Bind(7, info.tpot_limit_ms));
  FATHOM_RETURN_IF_ERROR(st.Bind(8, info.price_per_gpu_hour));
  FATHOM_RETURN_IF_ERROR(st.Bind(9, info.candidates));
  FATHOM_RETURN_IF_ERROR(st.Bind(10, info.infeasible));
  FATHOM_RETURN_IF_ERROR(
      st.Bind(11, info.stack.empty() ? std::optional<std::string>() : info.stack));
  FATHOM_RETURN_IF_ERROR(
      st.Bind(12, info.position >= 0 ? std::optional<int64_t>(info.position) : std::nullopt));
  return st.Step().status();
}

Result<std::vector<SweepInfo>> ResultStore::Records() {
  std::vector<SweepInfo> out;
  if (db_.HasTable("tune_sweeps")) {
    // A store opened for reading may predate the stack and the plan position.
    FATHOM_ASSIGN_OR_RETURN(bool recent, HasColumn(db_, "tune_sweeps", "position"));
    FATHOM_ASSIGN_OR_RETURN(
        sqlite::Statement st,
        db_.Prepare(std::string("SELECT sweep, model, hardware, gpus, scenario, ttft_limit_ms, "
                                "tpot_limit_ms, price_per_gpu_hour, candidates, infeasible, ") +
                    (recent ? "stack, position" : "NULL AS stack, NULL AS position") +
                    // A sweep's cells in plan order, whichever process stored them first; tunes
                    // of their own after them.
                    " FROM tune_sweeps ORDER BY position IS NULL, position, rowid"));
    for (;;) {
      FATHOM_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      SweepInfo s;
      s.id = st.Text(0);
      s.model = st.Text(1);
      s.hardware = st.Text(2);
      s.gpus = static_cast<int>(st.Int(3));
      FATHOM_ASSIGN_OR_RETURN(s.scenario, sim::ParseScenario(st.Text(4)));
      if (!st.IsNull(5)) s.ttft_limit_ms = st.Double(5);
      if (!st.IsNull(6)) s.tpot_limit_ms = st.Double(6);
      s.price_per_gpu_hour = st.Double(7);
      s.candidates = st.Int(8);
      s.infeasible = st.Int(9);
      if (!st.IsNull(10)) s.stack = st.Text(10);
      if (!st.IsNull(11)) s.position = st.Int(11);
      out.push_back(s);
    }
  }
  return out;
}

Result<std::vector<StoredSweep>> ResultStore::Sweeps() {
  std::vector<StoredSweep> out;
  std::map<std::string, size_t> index;
  FATHOM_ASSIGN_OR_RETURN(std::vector<SweepInfo> infos, Records());
  for (SweepInfo& s : infos) {
    index[s.id] = out.size();
    out.push_back({std::move(s), {}});
  }
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement st,
      db_.Prepare(
          "SELECT sweep, candidate, config, metrics FROM tune_results ORDER BY sweep, candidate"));
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    const std::string id = st.Text(0);
    const Json config = Json::parse(st.Text(2), nullptr, false);
    auto d = sim::DeploymentFromJson(config, db_.path() + ": sweep " + id + ": candidate config");
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
    FATHOM_ASSIGN_OR_RETURN(
        CandidateResult r,
        CandidateFromJson(*d, metrics, db_.path() + ": sweep " + id + ": candidate metrics"));
    if (r.PrunedByRun()) continue;  // no figures to report
    out[it->second].results.push_back(std::move(r));
  }
  for (StoredSweep& s : out) {
    if (s.info.recorded) continue;
    const bool has_qps =
        std::any_of(s.results.begin(), s.results.end(), [](const auto& r) { return r.qps > 0; });
    s.info.scenario = has_qps ? sim::Scenario::kServer : sim::Scenario::kOffline;
    s.info.candidates = static_cast<int64_t>(s.results.size());
  }
  return out;
}

namespace {

// A stored candidate's figures, each named once for writing and reading (its deployment is stored
// apart). Written when `stored` says so: a pruned candidate's bound, a failed one's failure and,
// where a probe broke the limits, that probe's figures.
using Member = std::variant<bool CandidateResult::*, double CandidateResult::*,
                            int64_t CandidateResult::*, std::string CandidateResult::*>;
struct CandidateField {
  const char* name;
  Member member;
  bool (*stored)(const CandidateResult&);
};

bool Always(const CandidateResult&) { return true; }
bool Probed(const CandidateResult& r) { return r.below_qps > 0; }
bool Predicted(const CandidateResult& r) { return r.predicted_tokens_per_s > 0; }
bool Screened(const CandidateResult& r) { return r.screened; }
bool Failed(const CandidateResult& r) { return !r.valid && !r.PrunedByRun(); }
bool FailedProbe(const CandidateResult& r) { return Failed(r) && r.failed_qps > 0; }

const CandidateField kCandidateFields[] = {
    {"valid", &CandidateResult::valid, Always},
    {"throughput_tokens_per_s", &CandidateResult::throughput_tokens_per_s, Always},
    {"tokens_per_s_per_gpu", &CandidateResult::tokens_per_s_per_gpu, Always},
    {"loadgen_tokens_per_s", &CandidateResult::loadgen_tokens_per_s, Always},
    {"tokens_per_s_per_user", &CandidateResult::tokens_per_s_per_user, Always},
    {"qps", &CandidateResult::qps, Always},
    {"ttft_p99_ms", &CandidateResult::ttft_p99_ms, Always},
    {"tpot_p99_ms", &CandidateResult::tpot_p99_ms, Always},
    {"cost_per_million_tokens", &CandidateResult::cost_per_million_tokens, Always},
    {"bound", &CandidateResult::bound, Always},
    {"run_samples", &CandidateResult::run_samples, Always},
    {"run_s", &CandidateResult::run_s, Always},
    {"below_qps", &CandidateResult::below_qps, Probed},
    {"predicted_tokens_per_s", &CandidateResult::predicted_tokens_per_s, Predicted},
    {"screened", &CandidateResult::screened, Screened},
    {"failure", &CandidateResult::failure, Failed},
    {"failed_qps", &CandidateResult::failed_qps, FailedProbe},
    {"failed_ttft_p99_ms", &CandidateResult::failed_ttft_p99_ms, FailedProbe},
    {"failed_tpot_p99_ms", &CandidateResult::failed_tpot_p99_ms, FailedProbe},
};

}  // namespace

OrderedJson CandidateResult::ToJson() const {
  OrderedJson j;
  j["config"] = sim::ToJson(config);
  for (const CandidateField& field : kCandidateFields) {
    if (!field.stored(*this)) continue;
    std::visit([&](auto member) { j[field.name] = this->*member; }, field.member);
  }
  return j;
}

Result<CandidateResult> CandidateFromJson(const sim::DeploymentConfig& config, const Json& j,
                                          const std::string& source) {
  JsonFields f(j, source);
  CandidateResult r;
  r.config = config;
  for (const CandidateField& field : kCandidateFields) {
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(r.*member)>;
          if constexpr (std::is_same_v<T, bool>) {
            r.*member = f.Bool(field.name, false);
          } else if constexpr (std::is_same_v<T, int64_t>) {
            r.*member = f.Int(field.name, 0);
          } else if constexpr (std::is_same_v<T, std::string>) {
            r.*member = f.String(field.name, "");
          } else {
            r.*member = f.Double(field.name, 0.0);
          }
        },
        field.member);
  }
  // Stores written before LoadGen's figure was kept: it was the throughput.
  if (!j.contains("loadgen_tokens_per_s")) r.loadgen_tokens_per_s = r.throughput_tokens_per_s;
  FATHOM_RETURN_IF_ERROR(f.status());
  r.reused = true;
  return r;
}

}  // namespace fathom::tuner
