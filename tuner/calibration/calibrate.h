// Calibration against published end-to-end results: simulate each MLPerf row under the
// deployment its submitter used and fit the cost model's stack-level parameters (Ceres) so that
// simulated throughput and p99 latencies match.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "models/cost_model.h"
#include "models/hardware.h"
#include "sim/deployment_config.h"
#include "sim/simulator.h"
#include "traces/request.h"
#include "tuner/sweep/work_pool.h"

namespace fathom::tuner {

struct PublishedResult {
  int line = 0;
  std::string round;  // the MLPerf round ("v5.1"), from the version column
  std::string submitter, system, accelerator, model, scenario;
  int gpus = 0;
  double tokens_per_s = 0;
  double ttft_p99_ms = 0, tpot_p99_ms = 0;  // 0 for Offline
  double target_qps = 0;
  double samples_per_s = 0;
  // The run's length where the results file gives it (v6.0 files do): Offline samples issued,
  // Server samples at least. 0 where unknown.
  int64_t samples_per_query = 0, min_query_count = 0;
  bool offline() const { return scenario == "Offline"; }
};

// Reads the MLPerf results CSV (columns as in models/calibration/mlperf_v5.1.csv); errors name
// file, line, column and value. The file is opened in `env` (borrowed; it must outlive the call).
Result<std::vector<PublishedResult>> LoadPublishedResults(const std::string& path,
                                                          Env* env = Env::Default());

// Which deployment and workload stand for each (model, accelerator, scenario).
struct CalibrationSetup {
  struct Entry {
    std::string model, hardware, scenario;  // scenario "*" matches all
    std::string submitter;                  // empty matches all; the first matching entry wins
    int64_t samples = 0;  // the published run's sample count, where known (0: LoadGen's rule)
    sim::DeploymentConfig deployment;
  };
  std::vector<Entry> deployments;
  std::map<std::string, std::vector<traces::Request>> workloads;  // by benchmark name
};

// Workloads are the MLPerf benchmarks' data sets (traces/benchmark.h); `samples` > 0 draws that
// many of each instead (faster, less faithful).
Result<CalibrationSetup> LoadCalibrationSetup(const std::string& path, int64_t samples,
                                              uint64_t seed);
// The published deployments of an MLPerf round's rows ("v5.1", "v6.0") shipped with fathom; for
// a results file of vLLM or SGLang rows (mlperf_vllm_*.csv, mlperf_sglang_*.csv), those of that
// engine's harnesses.
std::string DefaultSetupPath(const std::string& round, const std::string& results = "");
// The engine whose harnesses produced a results file's rows: "vLLM" for mlperf_vllm_*.csv,
// "SGLang" for mlperf_sglang_*.csv, else "TensorRT-LLM" (every other shipped row).
std::string ResultsEngine(const std::string& results);
// The row's deployment: the first entry of its model, GPU, scenario and submitter whose GPU count
// is the row's; null if none.
const CalibrationSetup::Entry* FindDeployment(const CalibrationSetup& setup,
                                              const PublishedResult& row);

struct RowPrediction {
  PublishedResult row;
  std::string deployment;  // layout summary
  int64_t requests = 0;    // samples issued in the simulated run
  double tokens_per_s = 0, ttft_p99_ms = 0, tpot_p99_ms = 0;
  // The run at the published QPS fell behind its arrivals (sim::SimulationResult::overloaded): its
  // p99s grow with the run's length and say how far short the capacity is, not what the latencies
  // are.
  bool overloaded = false;
  bool extrapolated = false;  // hardware not among the calibration's fitted hardware
  // Server and Interactive: the highest QPS whose p99s meet the benchmark's limits under the
  // submitter's configuration (0 when not computed, or for Offline), against the published QPS.
  bool has_capacity = false;
  double capacity_qps = 0;
  double CapacityErrorPct() const {
    return 100.0 * (capacity_qps - row.target_qps) / row.target_qps;
  }
  // A submitter need not push to the limits: many published runs stop with their p99s well inside
  // them (the published QPS is then a floor, not the capacity). `limit_use` is how close the
  // published run came, the larger of p99 TTFT and p99 TPOT over its limit (1: at a limit), and
  // capacity_at_use_qps the highest QPS whose p99s stay within that fraction of the limits: the
  // load at which the model runs the deployment as close to its limits as the submitter did. For a
  // run at its limits it is the capacity; one that stopped short is scored where it stopped.
  // 0 limit_use: the row has no published p99s (not computed).
  double limit_use = 0;
  bool has_capacity_at_use = false;
  double capacity_at_use_qps = 0;
  double CapacityAtUseErrorPct() const {
    return 100.0 * (capacity_at_use_qps - row.target_qps) / row.target_qps;
  }
  // The share of the run at the published QPS the busiest instance's serving front spent serving
  // responses (sim::SimulationResult::front_busy_share). A row it bounds (sim::kFrontBoundShare)
  // also gets the capacity with a front that costs nothing, at the published run's use of its
  // limits: the stack's cost a response was fitted on other hosts' rows, so the capacity lies
  // between the two, and only a measurement of this front tells where.
  double front_busy_share = 0;
  bool FrontBound() const { return front_busy_share >= sim::kFrontBoundShare; }
  bool has_front_free_capacity = false;
  double front_free_capacity_qps = 0;
  // The capacity the front-free one is set against: at the run's use of its limits where
  // computed, else at the limits.
  double CapacityAtFittedFront() const {
    return has_capacity_at_use ? capacity_at_use_qps : capacity_qps;
  }
  // Whether the published QPS lies within [CapacityAtFittedFront(), front_free_capacity_qps].
  bool PublishedWithinFrontBound() const;
  double TokensErrorPct() const {
    return 100.0 * (tokens_per_s - row.tokens_per_s) / row.tokens_per_s;
  }
  double TtftErrorPct() const {
    return row.offline() ? 0 : 100.0 * (ttft_p99_ms - row.ttft_p99_ms) / row.ttft_p99_ms;
  }
  double TpotErrorPct() const {
    return row.offline() ? 0 : 100.0 * (tpot_p99_ms - row.tpot_p99_ms) / row.tpot_p99_ms;
  }
};

// The samples a row's run issues: the published count where known (the setup's, else the results
// file's), else LoadGen's rule (Offline 1.1 x 600 s x the published sample rate, Server 600 s x
// the target QPS and at least the minimum Server run, padded to whole data sets), capped at
// `max_requests` when > 0.
int64_t RunLength(const PublishedResult& row, const CalibrationSetup::Entry& entry,
                  int64_t dataset_size, int64_t max_requests);

// The fit's residual for one published figure: log(predicted / published) made robust with a
// Cauchy loss (scale 0.2) inside the residual, so that each row's error is bounded separately and
// one row far off (an overloaded run) cannot outweigh the rest. Its square is the Cauchy loss
// a^2 log(1 + e^2 / a^2): near zero it is the log error itself, far off it grows like sqrt(log).
double RobustLogError(double predicted, double published);

// Which of CostParams::kFitted a fit frees: those `free_params` names (all when empty); an unknown
// name is an error listing the known ones.
Result<std::array<bool, models::CostParams::kNumFitted>> FreeParams(
    const std::vector<std::string>& free_params);

struct FitOutcome {
  models::Calibration calibration;
  int iterations = 0;  // solver iterations, from every start
  double initial_cost = 0, final_cost = 0;
};

// Called after each solver iteration with its number and cost (half the sum of squared residuals).
using FitProgress = std::function<void(int iteration, double cost)>;

// One fold of a cross-validation: the rows of one GPU, model or submitter held out.
struct Fold {
  std::string held_out;
  // On the other rows; an error where they are too few to fit.
  Result<FitOutcome> fit = Status::Unavailable("not fitted");
  std::vector<RowPrediction> predictions;  // the held-out rows under that fit
};
struct CrossValidation {
  std::string kind;  // "hardware", "model" or "submitter": leave-one-<kind>-out
  std::vector<Fold> folds;
};

// Runs a calibration's independent units on a work pool (threads, or the ranks of an MPI job):
// each row's simulation for one set of parameters, each row's QPS search, each cross-validation
// fold. Every process builds one from the same inputs; the coordinator calls the functions below,
// the other processes Serve. Units and results travel as text, exactly, so results do not depend
// on the number of workers. Errors name the results line or the fold. Borrows all it is given;
// one thread at a time calls it.
class Calibrator {
 public:
  // `max_requests` > 0 caps each row's run.
  Calibrator(const CalibrationSetup& setup, const models::HardwareCatalog& catalog,
             int64_t max_requests, WorkPool* pool);

  // Simulates each row as long as its MLPerf run lasted; rows with identical runs share one.
  Result<std::vector<RowPrediction>> PredictRows(const std::vector<PublishedResult>& rows,
                                                 const models::Calibration& calibration) const;

  // Fills each Server/Interactive row's capacity_qps and capacity_at_use_qps: the tuner's QPS
  // search (to within 1%) on the row's deployment and benchmark, each probe as long as the row's
  // run. `at_limits` false: capacity_qps only where capacity_at_use_qps is not computed or is the
  // same search (a fit needs no more); true: the rows the serving front bounds also get
  // front_free_capacity_qps.
  Status PredictCapacity(std::vector<RowPrediction>* predictions,
                         const models::Calibration& calibration, bool at_limits = true) const;

  // Fits CostParams::kFitted over `rows` (log errors, each made robust with a Cauchy loss), from
  // the best of `start` and a coarse grid of plausible points, twice: from the best start on those
  // residuals and from the best with the Server rows' capacity too (at the published runs' use of
  // their limits, against their published QPS: a step in the parameters that the solver's
  // differences do not see, but which tells basins apart), keeping the result with the lower cost,
  // capacity included. A runtime none of the rows runs on is left unconstrained by them: it takes
  // the fitted runtime's host costs (the best evidence) unless they are held. `free_params` (names
  // of CostParams::kFitted; empty: all) are fitted and the others held at `start`'s values, as a
  // stack calibrated on few rows keeps what those rows cannot tell.
  Result<FitOutcome> FitToPublished(const std::vector<PublishedResult>& rows,
                                    const models::Calibration& start,
                                    const FitProgress& progress = {},
                                    const std::vector<std::string>& free_params = {}) const;

  // Leave one GPU, one model, one submitter out: each fold fits on the other `rows` and predicts
  // its group's rows, those of `unfitted` (rows no fit uses) too; a group with no row in `rows`
  // is predicted by the fit on all of them. Each fold starts from the physical defaults, not from
  // a calibration the held-out rows helped fit: `calibration`'s fitted parameters (`free_params`,
  // else all) restart from them; held ones, such as measured operator parameters, stay. Folds
  // with the same training rows share one fit (one work unit); `fold_done` is called as each fit
  // finishes, with the count so far.
  Result<std::vector<CrossValidation>> CrossValidate(
      const std::vector<PublishedResult>& rows, const std::vector<PublishedResult>& unfitted,
      const models::Calibration& calibration, const std::vector<std::string>& free_params,
      const std::function<void(int done, int fits)>& fold_done = {}) const;

  // Not the coordinator: computes what the coordinator hands out until it is done.
  Status Serve() const;

  // Coordinator: the work items handed out so far, and its own time describing them and reading
  // their results (waiting aside).
  int64_t items() const { return items_; }
  double coordinator_s() const { return coordinator_s_; }

 private:
  // Runs items 0 .. n - 1, each described by assign(i), handing each result to finish(i, result).
  Status Spread(size_t n, const std::function<std::string(size_t)>& assign,
                const std::function<Status(size_t, const std::string&)>& finish) const;
  Result<std::string> Compute(const std::string& assignment) const;

  const CalibrationSetup& setup_;
  const models::HardwareCatalog& catalog_;
  int64_t max_requests_;
  WorkPool* pool_;
  mutable int64_t items_ = 0;
  mutable double coordinator_s_ = 0;
};

// Median absolute errors (%) of throughput and of the p99 latencies (server-type rows).
struct ErrorSummary {
  double tokens_median_abs_pct = 0;
  double latency_median_abs_pct = 0;
  double capacity_median_abs_pct = 0;         // over rows with a capacity
  double capacity_at_use_median_abs_pct = 0;  // over rows with published p99s
  double offline_tokens_median_abs_pct = 0;   // throughput over the Offline rows only
  int rows = 0;
  // The rows behind each median (a median over none reads 0).
  int offline_rows = 0, latency_rows = 0, capacity_rows = 0, capacity_at_use_rows = 0;
  // Rows the serving front bounds (with a front-free capacity), and those whose published QPS
  // lies within their bound.
  int front_bound_rows = 0, front_bound_within = 0;
};
ErrorSummary Summarize(const std::vector<RowPrediction>& predictions);

}  // namespace fathom::tuner
