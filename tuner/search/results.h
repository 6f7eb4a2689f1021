// The tuner's results store: one SQLite file with every simulated candidate of every sweep,
// written as each completes (so an interrupted sweep resumes), and a record of what each sweep
// searched (so reports can read it back).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/sqlite.h"
#include "base/status.h"
#include "sim/config.h"
#include "tuner/search/tuner.h"

namespace fathom::tuner {

struct StoredSweep {
  SweepInfo info;
  std::vector<CandidateResult> results;  // every simulated candidate, valid or not, in key order
};

class ResultStore {
 public:
  // Opens or creates the store at `path`.
  static Result<std::unique_ptr<ResultStore>> Open(const std::string& path);
  // Opens an existing store without writing to it; a missing file or one that is not a results
  // store is an error naming the path.
  static Result<std::unique_ptr<ResultStore>> OpenExisting(const std::string& path);

  // The stored metrics of a sweep's candidates, by candidate key.
  Result<std::map<std::string, Json>> Load(const std::string& sweep);
  // Thread-compatible, not thread-safe: callers serialise writes.
  Status Save(const std::string& sweep, const std::string& key, const CandidateResult& result);
  // The same row as Save, from the JSON texts StoredRow gives (what a sweep's compute ranks send).
  Status SaveRow(const std::string& sweep, const std::string& key, const std::string& config_json,
                 const std::string& metrics_json);
  Status Record(const SweepInfo& info);
  // Marks a sweep whose search ran to its end; `fathom sweep` skips it when run again.
  Status MarkComplete(const std::string& sweep);
  Result<bool> IsComplete(const std::string& sweep);

  // Copies every sweep, row and completion mark of the stores at `paths` into this one (`fathom
  // merge`), all or nothing; a row this store already holds must be identical, else the error
  // names the file, the sweep and the candidate.
  Status Merge(const std::vector<std::string>& paths);

  // Every sweep in the store, in the order they were first recorded.
  Result<std::vector<StoredSweep>> Sweeps();

 private:
  explicit ResultStore(sqlite::Database db) : db_(std::move(db)) {}
  Result<std::vector<SweepInfo>> Records();  // tune_sweeps, in the order first recorded
  Status MergeOne(const std::string& path);

  sqlite::Database db_;
};

// A result as the two JSON texts of its row in the store (deployment, metrics).
struct StoredRow {
  std::string config_json, metrics_json;
};
StoredRow ToStoredRow(const CandidateResult& result);

// A stored candidate's metrics back into a result for `config`; a field of the wrong type (a
// corrupt or foreign row) is an error naming `source` and the field.
Result<CandidateResult> CandidateFromJson(const sim::DeploymentConfig& config, const Json& metrics,
                                          const std::string& source);

}  // namespace fathom::tuner
