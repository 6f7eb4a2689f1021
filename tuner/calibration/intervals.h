// Error bars: how far fathom's figures stray from published results it was not fitted on, and
// the interval that puts around a new prediction.
//
// Each shipped MLPerf row that no fit used is a held-out comparison (models/calibration/
// residuals.csv, written by `fathom calibrate --residuals-out`): fathom's prediction under the
// submitter's deployment against the published figure. A question's interval is split conformal
// prediction (Vovk et al. 2005; Lei et al., "Distribution-free predictive inference for
// regression", JASA 2018) with the absolute log error as the score, on the comparable held-out
// rows: those of the same metric that their stack extrapolates to as the question's does (an
// unseen GPU, model or scale), on the question's GPU family where there are enough. For n such
// scores and level L, predicted x exp(-+ s_(ceil(L (n+1)))) holds the published figure with
// probability at least L for exchangeable rows. A question that extrapolates further takes rows
// that extrapolate as far, so its interval is as wide as the misses there were; one on a GPU
// family no held-out row is on (other memory, other links), as wide as the widest family's.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "tuner/calibration/calibrate.h"

namespace fathom::tuner {

// The figures an interval can be asked for (the metric column of the residual table).
inline constexpr const char* kOfflineTokens = "offline_tokens_per_s";
inline constexpr const char* kCapacityQps = "capacity_qps";  // Server and Interactive
inline constexpr const char* kTtftP99 = "ttft_p99_ms";       // at the published QPS
inline constexpr const char* kTpotP99 = "tpot_p99_ms";

struct Residual {
  std::string stack;    // whose calibration predicted it
  std::string results;  // the shipped results file, by name
  int line = 0;
  std::string submitter, system, gpu, model, scenario;
  int gpus = 0;
  bool fitted = false;  // a row the stack's fit used: in-sample, never a comparison
  std::string metric;
  double published = 0, predicted = 0;
};

// One residual per figure of a calibrate row: Offline tokens/s; for Server and Interactive the
// capacity (at the published run's use of its limits where its p99s are published, else at the
// limits) against the published QPS, and the p99 TTFT and TPOT at the published QPS where the run
// there kept up with its arrivals (RowPrediction::overloaded). So the latencies' intervals are
// for runs that keep up: a question whose run does not gets none (its latencies grow with its
// length), as the rows whose runs did not gave none.
std::vector<Residual> ResidualsOf(const RowPrediction& p, const std::string& stack,
                                  const std::string& results, bool fitted);
std::string ResidualsCsv(const std::vector<Residual>& rows);  // with its header
// Errors name the file, line and column.
Result<std::vector<Residual>> LoadResiduals(const std::string& path);
std::string DefaultResidualsPath();  // models/calibration/residuals.csv in the data folder

// What a question extrapolates to, against the rows its stack was fitted on.
inline constexpr unsigned kSeen = 0, kUnseenGpu = 1, kUnseenModel = 2, kUnseenScale = 4;
std::string DescribeUnseen(unsigned unseen);  // "seen GPU, model and scale", "unseen GPU and scale"

struct Question {
  std::string stack, model, gpu, metric;  // model: fathom's name or the benchmark's
  int gpus = 0;
};

struct Interval {
  double level = 0.8;
  double predicted = 0, low = 0, high = 0;
  int rows = 0;              // held-out rows it rests on
  unsigned unseen = 0;       // what the question extrapolates to
  unsigned basis = 0;        // what those rows extrapolate to (at least the question's)
  std::string family;        // the question's GPU family
  bool same_family = false;  // the rows are all on it (where enough are)
  // No held-out row of the metric is on the question's GPU family: the interval is at least as
  // wide as each family's with rows enough.
  bool unseen_family = false;
  bool widened = false;  // too few rows like the question: rows that extrapolate further
  bool clamped = false;  // too few rows for the level: the extremes of those there are
  // [low, high] scaled as `predicted` to `figure` (a QPS's tokens/s).
  std::pair<double, double> Scaled(double figure) const;
  std::string Describe() const;  // "80% interval from 24 held-out rows (seen GPU, model and scale)"
  OrderedJson ToJson() const;
};

struct CoverageRow {
  std::string family;  // "all", "metric offline_tokens_per_s", "GPU family Blackwell", ...
  int rows = 0, covered = 0;
  double median_width_pct = 0;  // (high - low) / predicted
};

class ResidualTable {
 public:
  explicit ResidualTable(std::vector<Residual> rows);
  static Result<ResidualTable> LoadDefault();

  const std::vector<Residual>& rows() const { return rows_; }
  // What a question on `stack` extrapolates to (everything, for a stack with no fitted rows).
  unsigned UnseenOf(const std::string& stack, const std::string& model, const std::string& gpu,
                    int gpus) const;
  // The interval around `predicted`, or nothing when no held-out row has the metric. Rows for
  // which `skip` holds are left out (coverage leaves each row's own system out).
  std::optional<Interval> IntervalFor(const Question& q, double predicted, double level = 0.8,
                                      const std::function<bool(const Residual&)>& skip = {}) const;
  // Each held-out row's interval from the others (its own system's rows left out), and the share
  // of rows whose published figure it holds: over all rows, by metric, by what the row
  // extrapolates to, by GPU family, by model, by scale and by the stack that predicted it.
  std::vector<CoverageRow> Coverage(double level = 0.8) const;
  // The same for held-out rows this table does not hold (published after it was written): each
  // one's interval from the whole table, as a new question's is.
  std::vector<CoverageRow> CoverageOf(const std::vector<Residual>& rows, double level = 0.8) const;

 private:
  // Coverage of the held-out `rows`, each interval from this table (less the row's own system's
  // rows where asked).
  std::vector<CoverageRow> Tally(const std::vector<Residual>& rows, double level,
                                 bool leave_own_system_out) const;

  std::vector<Residual> rows_;
  std::vector<unsigned> unseen_;  // UnseenOf each row
};

// "Hopper", "Blackwell", "Blackwell Ultra", "CDNA 3", or the GPU's own name.
std::string GpuFamily(const std::string& gpu);

}  // namespace fathom::tuner
