// Calibration against published end-to-end results: simulate each MLPerf row under the
// deployment its submitter used and fit the cost model's stack-level parameters (Ceres) so that
// simulated throughput and p99 latencies match.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/cost_model.h"
#include "models/hardware.h"
#include "sim/deployment_config.h"
#include "traces/request.h"

namespace fathom::tuner {

struct PublishedResult {
  int line = 0;
  std::string submitter, system, accelerator, model, scenario;
  int gpus = 0;
  double tokens_per_s = 0;
  double ttft_p99_ms = 0, tpot_p99_ms = 0;  // 0 for Offline
  double target_qps = 0;
  double samples_per_s = 0;
  bool offline() const { return scenario == "Offline"; }
};

// Reads the MLPerf results CSV (columns as in models/calibration/mlperf_v5.1.csv); errors name
// file, line, column and value.
Result<std::vector<PublishedResult>> LoadPublishedResults(const std::string& path);

// Which deployment and workload stand for each (model, accelerator, scenario).
struct CalibrationSetup {
  struct Entry {
    std::string model, hardware, scenario;  // scenario "*" matches all
    sim::DeploymentConfig deployment;
  };
  std::vector<Entry> deployments;
  std::map<std::string, std::vector<traces::Request>> workloads;  // by benchmark model name
};

Result<CalibrationSetup> LoadCalibrationSetup(const std::string& path, int64_t samples, uint64_t seed);
std::string DefaultSetupPath();

struct RowPrediction {
  PublishedResult row;
  std::string deployment;  // layout summary
  double tokens_per_s = 0, ttft_p99_ms = 0, tpot_p99_ms = 0;
  bool extrapolated = false;  // hardware not among the calibration's fitted hardware
  double TokensErrorPct() const { return 100.0 * (tokens_per_s - row.tokens_per_s) / row.tokens_per_s; }
  double TtftErrorPct() const { return row.offline() ? 0 : 100.0 * (ttft_p99_ms - row.ttft_p99_ms) / row.ttft_p99_ms; }
  double TpotErrorPct() const { return row.offline() ? 0 : 100.0 * (tpot_p99_ms - row.tpot_p99_ms) / row.tpot_p99_ms; }
};

// Each row runs as long as MLPerf's 600 s minimum asks (600 s x the published sample rate, or x
// the target QPS), capped at `max_requests` to bound the cost of a fit.
Result<std::vector<RowPrediction>> PredictRows(const std::vector<PublishedResult>& rows, const CalibrationSetup& setup,
                                              const models::HardwareCatalog& catalog,
                                              const models::Calibration& calibration, int64_t max_requests);

struct FitOutcome {
  models::Calibration calibration;
  int iterations = 0;
  double initial_cost = 0, final_cost = 0;
};

// Fits CostParams::kFitted over `rows` (log errors, Huber loss), starting from `start`.
Result<FitOutcome> FitToPublished(const std::vector<PublishedResult>& rows, const CalibrationSetup& setup,
                                  const models::HardwareCatalog& catalog, const models::Calibration& start,
                                  int64_t max_requests);

// Median absolute errors (%) of throughput and of the p99 latencies (server-type rows).
struct ErrorSummary {
  double tokens_median_abs_pct = 0;
  double latency_median_abs_pct = 0;
  int rows = 0;
};
ErrorSummary Summarize(const std::vector<RowPrediction>& predictions);

}  // namespace fathom::tuner
