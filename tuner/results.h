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
#include "tuner/tuner.h"


namespace fathom::tuner {

// What a sweep searched, as of its latest run.
struct SweepInfo {
  std::string id;
  std::string model, hardware;
  int gpus = 0;
  sim::Scenario scenario = sim::Scenario::kOffline;
  std::optional<double> ttft_limit_ms, tpot_limit_ms;  // the p99 limits held to (server-type)
  double price_per_gpu_hour = 0;                       // what costs were computed at
  int64_t candidates = 0, infeasible = 0;              // feasible and infeasible in the space
  // False for sweeps stored by a fathom that kept no record: model, GPU and GPU count then come
  // from the candidates, the scenario from whether they have a QPS, and the rest is unknown.
  bool recorded = true;

  bool ServerLike() const { return tuner::ServerLike(scenario); }
};

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
  Status Record(const SweepInfo& info);

  // Every sweep in the store, in the order they were first recorded.
  Result<std::vector<StoredSweep>> Sweeps();

 private:
  explicit ResultStore(sqlite::Database db) : db_(std::move(db)) {}

  sqlite::Database db_;
};

// A stored candidate's metrics back into a result for `config`; a field of the wrong type (a
// corrupt or foreign row) is an error naming `source` and the field.
Result<CandidateResult> CandidateFromJson(const sim::DeploymentConfig& config, const Json& metrics,
                                          const std::string& source);

}  // namespace fathom::tuner
