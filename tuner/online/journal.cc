#include "tuner/online/journal.h"

#include <chrono>
#include <cmath>

#include "base/json_fields.h"

namespace fathom::tuner {
namespace {

std::string ConfigJson(const std::optional<BatchLimits>& l) {
  if (!l) return "";
  OrderedJson j;
  j["max_num_seqs"] = l->max_batch;
  j["max_num_batched_tokens"] = l->max_num_tokens;
  return j.dump();
}

std::optional<double> Finite(double v) {
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

}  // namespace

Result<std::unique_ptr<Journal>> Journal::Open(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(sqlite::Database db,
                          sqlite::Database::Open(path, sqlite::Database::Mode::kReadWriteCreate,
                                                 "journal (--journal)"));
  FATHOM_RETURN_IF_ERROR(db.Exec(
      "CREATE TABLE IF NOT EXISTS journal(id INTEGER PRIMARY KEY, time_unix_s REAL NOT NULL, event "
      "TEXT NOT NULL, "
      "reason TEXT NOT NULL, before_config TEXT, after_config TEXT, predicted_current_margin REAL, "
      "predicted_best_margin REAL, observed_margin REAL, observed_margin_after REAL, replace_s "
      "REAL)"));
  return std::unique_ptr<Journal>(new Journal(std::move(db)));
}

Result<int64_t> Journal::Insert(const JournalEntry& e) {
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement st,
      db_.Prepare("INSERT INTO journal(time_unix_s, event, reason, before_config, after_config, "
                  "predicted_current_margin, predicted_best_margin, observed_margin, replace_s) "
                  "VALUES(?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), ?, ?, ?, ?) RETURNING id"));
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  FATHOM_RETURN_IF_ERROR(st.Bind(1, now));
  FATHOM_RETURN_IF_ERROR(st.Bind(2, e.event));
  FATHOM_RETURN_IF_ERROR(st.Bind(3, e.reason));
  FATHOM_RETURN_IF_ERROR(st.Bind(4, ConfigJson(e.before)));
  FATHOM_RETURN_IF_ERROR(st.Bind(5, ConfigJson(e.after)));
  FATHOM_RETURN_IF_ERROR(st.Bind(6, e.predicted_current));
  FATHOM_RETURN_IF_ERROR(st.Bind(7, e.predicted_best));
  FATHOM_RETURN_IF_ERROR(st.Bind(8, e.observed));
  FATHOM_RETURN_IF_ERROR(st.Bind(9, e.replace_s));
  FATHOM_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Status::IoError(db_.path() + ": insert returned no row id");
  return st.Int(0);
}

Status Journal::Record(const JournalEntry& e) {
  std::lock_guard<std::mutex> lock(mu_);
  return Insert(e).status();
}

Status Journal::RecordDecision(const Decision& d, const BatchLimits& before,
                               std::optional<double> replace_s, bool advise) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::optional<double> observed = Finite(d.observed_margin);
  if (last_change_) {
    FATHOM_ASSIGN_OR_RETURN(
        sqlite::Statement st,
        db_.Prepare("UPDATE journal SET observed_margin_after = ? WHERE id = ?"));
    FATHOM_RETURN_IF_ERROR(st.Bind(1, observed));
    FATHOM_RETURN_IF_ERROR(st.Bind(2, *last_change_));
    FATHOM_RETURN_IF_ERROR(st.Step().status());
    last_change_.reset();
  }
  const bool change = d.action != Decision::Action::kHold;
  JournalEntry e;
  e.event = change && advise ? "advise" : std::string(Name(d.action));
  e.reason = d.reason;
  e.before = before;
  e.after = d.limits;
  e.predicted_current = Finite(d.current_margin);
  e.predicted_best = Finite(d.best_margin);
  e.observed = observed;
  e.replace_s = replace_s;
  FATHOM_ASSIGN_OR_RETURN(int64_t id, Insert(e));
  if (change && !advise) last_change_ = id;
  return Status::Ok();
}

}  // namespace fathom::tuner
