// The supervisor's journal: every decision of the online controller and every change to the
// replicas (a rolling replacement, a rollback, a replica that died and its restart), one row each
// in a SQLite table, with the reason, the configuration before and after, the predicted effect
// and the observed one.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/sqlite.h"
#include "base/status.h"
#include "tuner/online/online.h"

namespace fathom::tuner {

struct JournalEntry {
  std::string event;  // hold, apply, rollback, advise, replica_died, replica_restarted
  std::string reason;
  std::optional<BatchLimits> before, after;  // the configuration (absent where it does not apply)
  // Predicted p99 margins (1 = no latency, < 0 = a limit broken) of the limits in force and of the
  // controller's best choice; the margin the window showed.
  std::optional<double> predicted_current, predicted_best, observed;
  std::optional<double> replace_s;  // wall seconds a rolling replacement took
};

// Rows of table `journal`: id, time_unix_s, event, reason, before_config, after_config (JSON),
// predicted_current_margin, predicted_best_margin, observed_margin, observed_margin_after (the
// window after a change, filled in when it ends), replace_s. Safe to use from several threads.
class Journal {
 public:
  static Result<std::unique_ptr<Journal>> Open(const std::string& path);

  Status Record(const JournalEntry& e);
  // One row for a window's decision; an apply or rollback also gets, when the next window ends,
  // that window's margin as its observed effect.
  Status RecordDecision(const Decision& d, const BatchLimits& before,
                        std::optional<double> replace_s, bool advise);

 private:
  explicit Journal(sqlite::Database db) : db_(std::move(db)) {}
  Result<int64_t> Insert(const JournalEntry& e);

  std::mutex mu_;
  sqlite::Database db_;
  std::optional<int64_t> last_change_;  // the row whose observed effect the next window gives
};

}  // namespace fathom::tuner
