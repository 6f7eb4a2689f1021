#include "tuner/calibration/intervals.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/csv.h"
#include "base/files.h"
#include "base/format.h"
#include "base/line_reader.h"
#include "base/stats.h"
#include "traces/benchmark.h"

namespace fathom::tuner {
namespace {

// Fewer comparable rows than this and the question takes rows that extrapolate further: split
// conformal at `level` has finite ends from n rows where ceil(level (n + 1)) <= n, that is
// n >= level / (1 - level) (4 at 80%, 9 at 90%), and two more so that leaving out a system's
// rows of one metric (its Server and Interactive runs) still leaves that many.
int MinRows(double level) {
  constexpr double kRound = 1e-9;  // 0.8 / 0.2 may come out a hair above 4 in doubles
  return static_cast<int>(std::ceil(level / (1 - level) - kRound)) + 2;
}

const char* const kColumns[] = {"stack",  "results",   "line",     "submitter", "system",
                                "gpu",    "gpus",      "model",    "scenario",  "fitted",
                                "metric", "published", "predicted"};

// Results tables name the benchmark ("llama2-70b-99"), fathom the model it runs: both name the
// benchmark here, a model no benchmark runs itself.
std::string BenchmarkOf(const std::string& model) {
  const traces::Benchmark* b = traces::FindBenchmark(traces::MlperfBenchmarks(), model);
  return b != nullptr ? b->name : model;
}

// One NVLink node (an HGX board, or one GPU of it) or more: a rack's scale-up domain, or racks.
bool RackScale(int gpus) { return gpus > 8; }

// Order statistic k (1-based) of sorted `v`, clamped to its ends.
double OrderStat(const std::vector<double>& v, double k) {
  const auto i = static_cast<int64_t>(k) - 1;
  return v[static_cast<size_t>(std::clamp<int64_t>(i, 0, static_cast<int64_t>(v.size()) - 1))];
}

bool Covers(const Interval& in, double published) {
  return published >= in.low && published <= in.high;
}

}  // namespace

std::vector<Residual> ResidualsOf(const RowPrediction& p, const std::string& stack,
                                  const std::string& results, bool fitted) {
  Residual base;
  base.stack = stack;
  base.results = results;
  base.line = p.row.line;
  base.submitter = p.row.submitter;
  base.system = p.row.system;
  base.gpu = p.row.accelerator;
  base.gpus = p.row.gpus;
  base.model = p.row.model;
  base.scenario = p.row.scenario;
  base.fitted = fitted;
  std::vector<Residual> out;
  auto add = [&](const char* metric, double published, double predicted) {
    if (!(published > 0) || !(predicted > 0)) return;
    Residual r = base;
    r.metric = metric;
    r.published = published;
    r.predicted = predicted;
    out.push_back(std::move(r));
  };
  if (p.row.offline()) {
    add(kOfflineTokens, p.row.tokens_per_s, p.tokens_per_s);
    return out;
  }
  if (p.has_capacity_at_use) {
    add(kCapacityQps, p.row.target_qps, p.capacity_at_use_qps);
  } else if (p.has_capacity) {
    add(kCapacityQps, p.row.target_qps, p.capacity_qps);
  }
  // An overloaded run's p99s measure its length: its capacity residual says how far off it is.
  if (p.overloaded) return out;
  add(kTtftP99, p.row.ttft_p99_ms, p.ttft_p99_ms);
  add(kTpotP99, p.row.tpot_p99_ms, p.tpot_p99_ms);
  return out;
}

std::string ResidualsCsv(const std::vector<Residual>& rows) {
  std::string out;
  for (const char* c : kColumns) out += std::string(out.empty() ? "" : ",") + c;
  out += "\n";
  for (const Residual& r : rows) {
    out += StrFormat("%s,%s,%d,%s,%s,%s,%d,%s,%s,%d,%s,%.6g,%.6g\n", r.stack.c_str(),
                     r.results.c_str(), r.line, r.submitter.c_str(), r.system.c_str(),
                     r.gpu.c_str(), r.gpus, r.model.c_str(), r.scenario.c_str(), r.fitted ? 1 : 0,
                     r.metric.c_str(), r.published, r.predicted);
  }
  return out;
}

Result<std::vector<Residual>> LoadResiduals(const std::string& path) {
  auto opened = LineReader::Open(path);
  if (!opened.ok()) return Status::NotFound(path + ": cannot open residual table");
  LineReader& lines = **opened;
  std::string_view view;
  if (!lines.Next(&view)) {
    FATHOM_RETURN_IF_ERROR(lines.status());
    return Status::InvalidArgument(path + ":1: empty file");
  }
  std::vector<std::string_view> header;
  SplitCsv(view, &header);
  const size_t n = std::size(kColumns);
  for (size_t i = 0; i < n; ++i) {
    if (i >= header.size() || header[i] != kColumns[i]) {
      return Status::InvalidArgument(path + ":1: column " + std::to_string(i + 1) + " must be " +
                                     kColumns[i]);
    }
  }
  std::vector<Residual> rows;
  std::vector<std::string_view> fields;
  int line_no = 1;
  while (lines.Next(&view)) {
    ++line_no;
    if (view.empty()) continue;
    SplitCsv(view, &fields);
    const std::vector<std::string> f(fields.begin(), fields.end());
    const std::string where = path + ":" + std::to_string(line_no);
    if (f.size() != n) {
      return Status::InvalidArgument(where + ": " + std::to_string(f.size()) +
                                     " columns, expected " + std::to_string(n));
    }
    auto number = [&](size_t col, double* out, bool positive) -> Status {
      char* end = nullptr;
      *out = std::strtod(f[col].c_str(), &end);
      if (f[col].empty() || *end != '\0' || !std::isfinite(*out) || (positive && !(*out > 0)) ||
          *out < 0) {
        return Status::InvalidArgument(where + ": column " + kColumns[col] + ": \"" + f[col] +
                                       "\" is not a " + (positive ? "positive" : "non-negative") +
                                       " number");
      }
      return Status::Ok();
    };
    Residual r;
    r.stack = f[0];
    r.results = f[1];
    double line = 0, gpus = 0, fitted = 0;
    FATHOM_RETURN_IF_ERROR(number(2, &line, false));
    r.line = static_cast<int>(line);
    r.submitter = f[3];
    r.system = f[4];
    r.gpu = f[5];
    FATHOM_RETURN_IF_ERROR(number(6, &gpus, true));
    r.gpus = static_cast<int>(gpus);
    r.model = f[7];
    r.scenario = f[8];
    FATHOM_RETURN_IF_ERROR(number(9, &fitted, false));
    if (fitted != 0 && fitted != 1)
      return Status::InvalidArgument(where + ": column fitted: \"" + f[9] + "\" must be 0 or 1");
    r.fitted = fitted == 1;
    r.metric = f[10];
    if (r.metric != kOfflineTokens && r.metric != kCapacityQps && r.metric != kTtftP99 &&
        r.metric != kTpotP99) {
      return Status::InvalidArgument(where + ": column metric: \"" + r.metric +
                                     "\" is not one of " + kOfflineTokens + ", " + kCapacityQps +
                                     ", " + kTtftP99 + ", " + kTpotP99);
    }
    FATHOM_RETURN_IF_ERROR(number(11, &r.published, true));
    FATHOM_RETURN_IF_ERROR(number(12, &r.predicted, true));
    if (r.stack.empty()) return Status::InvalidArgument(where + ": column stack: empty");
    rows.push_back(std::move(r));
  }
  FATHOM_RETURN_IF_ERROR(lines.status());
  return rows;
}

std::string DefaultResidualsPath() { return DataDir() + "/models/calibration/residuals.csv"; }

std::string DescribeUnseen(unsigned unseen) {
  std::vector<std::string> parts;
  if (unseen & kUnseenGpu) parts.push_back("GPU");
  if (unseen & kUnseenModel) parts.push_back("model");
  if (unseen & kUnseenScale) parts.push_back("scale");
  if (unseen == kSeen) return "seen GPU, model and scale";
  std::string s = "unseen ";
  for (size_t i = 0; i < parts.size(); ++i)
    s += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return s;
}

std::string GpuFamily(const std::string& gpu) {
  auto starts = [&](const char* p) { return gpu.rfind(p, 0) == 0; };
  if (starts("h100") || starts("h200") || starts("gh200") || starts("h800")) return "Hopper";
  if (starts("b300") || starts("gb300")) return "Blackwell Ultra";
  if (starts("b200") || starts("gb200") || starts("b100")) return "Blackwell";
  if (starts("mi300") || starts("mi325")) return "CDNA 3";
  if (starts("mi350") || starts("mi355")) return "CDNA 4";
  return gpu;
}

std::pair<double, double> Interval::Scaled(double figure) const {
  if (!(predicted > 0)) return {0, 0};
  return {figure * low / predicted, figure * high / predicted};
}

std::string Interval::Describe() const {
  std::string s = StrFormat("%.0f%% interval from %d held-out rows", 100 * level, rows);
  s += " (" + DescribeUnseen(unseen);
  if (same_family) s += ", on " + family + " GPUs";
  if (unseen_family) s += "; no held-out row on its GPU family: as wide as the widest family's";
  if (widened) s += "; too few such rows, so rows with " + DescribeUnseen(basis) + " too";
  if (clamped) s += "; too few for the level: their extremes";
  return s + ")";
}

OrderedJson Interval::ToJson() const {
  OrderedJson j;
  j["level"] = level;
  j["low"] = low;
  j["high"] = high;
  j["rows"] = rows;
  j["extrapolates"] = DescribeUnseen(unseen);
  j["gpu_family_only"] = same_family;
  j["gpu_family_unseen"] = unseen_family;
  j["widened"] = widened;
  j["clamped"] = clamped;
  return j;
}

ResidualTable::ResidualTable(std::vector<Residual> rows) : rows_(std::move(rows)) {
  for (const Residual& r : rows_) unseen_.push_back(UnseenOf(r.stack, r.model, r.gpu, r.gpus));
}

Result<ResidualTable> ResidualTable::LoadDefault() {
  FATHOM_ASSIGN_OR_RETURN(std::vector<Residual> rows, LoadResiduals(DefaultResidualsPath()));
  return ResidualTable(std::move(rows));
}

unsigned ResidualTable::UnseenOf(const std::string& stack, const std::string& model,
                                 const std::string& gpu, int gpus) const {
  bool gpu_seen = false, model_seen = false, scale_seen = false;
  const std::string benchmark = BenchmarkOf(model);
  for (const Residual& r : rows_) {
    if (!r.fitted || r.stack != stack) continue;
    gpu_seen |= r.gpu == gpu;
    model_seen |= BenchmarkOf(r.model) == benchmark;
    scale_seen |= RackScale(r.gpus) == RackScale(gpus);
  }
  return (gpu_seen ? 0 : kUnseenGpu) | (model_seen ? 0 : kUnseenModel) |
         (scale_seen ? 0 : kUnseenScale);
}

std::optional<Interval> ResidualTable::IntervalFor(
    const Question& q, double predicted, double level,
    const std::function<bool(const Residual&)>& skip) const {
  Interval in;
  in.level = level;
  in.predicted = predicted;
  in.unseen = UnseenOf(q.stack, q.model, q.gpu, q.gpus);
  in.family = GpuFamily(q.gpu);
  // Log errors of the held-out rows of the metric, with what each extrapolates to.
  struct Comparison {
    unsigned unseen;
    std::string family;
    double log_error;
  };
  std::vector<Comparison> held_out;
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Residual& r = rows_[i];
    if (r.fitted || r.metric != q.metric || (skip && skip(r))) continue;
    held_out.push_back({unseen_[i], GpuFamily(r.gpu), std::log(r.predicted / r.published)});
  }
  if (held_out.empty()) return std::nullopt;
  in.unseen_family = std::none_of(held_out.begin(), held_out.end(),
                                  [&](const Comparison& c) { return c.family == in.family; });
  // The question's own kind of row on its GPU family, else on any, else every kind that
  // extrapolates at least as far, else all.
  std::vector<double> errors;
  auto gather = [&](auto keep) {
    errors.clear();
    in.basis = 0;
    for (const Comparison& c : held_out) {
      if (!keep(c)) continue;
      errors.push_back(c.log_error);
      in.basis |= c.unseen;
    }
    return static_cast<int>(errors.size()) >= MinRows(level);
  };
  in.same_family =
      gather([&](const Comparison& c) { return c.unseen == in.unseen && c.family == in.family; });
  if (!in.same_family && !gather([&](const Comparison& c) { return c.unseen == in.unseen; })) {
    in.widened = true;
    if (!gather([&](const Comparison& c) { return (c.unseen & in.unseen) == in.unseen; }))
      gather([](const Comparison&) { return true; });
  }
  // The score is the size of the log error, so the interval is symmetric in log terms: rows of
  // another stack carry its misses' size, not the side they fell on. Its split-conformal order
  // statistic of some log errors, and whether the level needs more of them than there are.
  auto score_of = [&](std::vector<double> scores, bool* clamped) {
    for (double& e : scores) e = std::abs(e);
    std::sort(scores.begin(), scores.end());
    const double n = static_cast<double>(scores.size());
    constexpr double kRound = 1e-9;  // 0.8 x 20 may come out a hair above 16 in doubles
    const double k = std::ceil(level * (n + 1) - kRound);
    if (clamped != nullptr) *clamped = k > n;
    return OrderStat(scores, k);
  };
  in.rows = static_cast<int>(errors.size());
  double score = score_of(errors, &in.clamped);
  // A GPU of a family no held-out row is on may miss as any family's GPUs did: the widest of the
  // families' own intervals (their rows of the metric, whatever each extrapolates to) with rows
  // enough for the level.
  if (in.unseen_family) {
    std::map<std::string, std::vector<double>> by_family;
    for (const Comparison& c : held_out) by_family[c.family].push_back(c.log_error);
    for (const auto& [family, family_errors] : by_family) {
      if (static_cast<int>(family_errors.size()) >= MinRows(level))
        score = std::max(score, score_of(family_errors, nullptr));
    }
  }
  in.low = predicted * std::exp(-score);
  in.high = predicted * std::exp(score);
  return in;
}

std::vector<CoverageRow> ResidualTable::Coverage(double level) const {
  return Tally(rows_, level, /*leave_own_system_out=*/true);
}

std::vector<CoverageRow> ResidualTable::CoverageOf(const std::vector<Residual>& rows,
                                                   double level) const {
  return Tally(rows, level, /*leave_own_system_out=*/false);
}

std::vector<CoverageRow> ResidualTable::Tally(const std::vector<Residual>& rows, double level,
                                              bool leave_own_system_out) const {
  struct Count {
    int rows = 0, covered = 0;
    std::vector<double> widths;
  };
  std::map<std::string, Count> tally;
  // Families by kind (all, metric, what the row extrapolates to, GPU family, model, scale, the
  // stack that predicted it), each kind's in the order first met.
  constexpr size_t kKinds = 7;
  std::vector<std::vector<std::string>> kinds(kKinds);
  for (const Residual& r : rows) {
    if (r.fitted) continue;
    const Question q{r.stack, r.model, r.gpu, r.metric, r.gpus};
    const auto in = IntervalFor(q, r.predicted, level, [&](const Residual& o) {
      return leave_own_system_out && o.submitter == r.submitter && o.system == r.system &&
             o.gpus == r.gpus;
    });
    if (!in) continue;
    const std::string families[kKinds] = {
        "all",
        "metric " + r.metric,
        DescribeUnseen(in->unseen),
        "GPU family " + GpuFamily(r.gpu),
        "model " + BenchmarkOf(r.model),
        std::string("scale ") + (RackScale(r.gpus) ? "rack" : "node"),
        "stack " + r.stack};
    for (size_t k = 0; k < kKinds; ++k) {
      auto [it, fresh] = tally.try_emplace(families[k]);
      if (fresh) kinds[k].push_back(families[k]);
      ++it->second.rows;
      it->second.covered += Covers(*in, r.published) ? 1 : 0;
      it->second.widths.push_back(100 * (in->high - in->low) / r.predicted);
    }
  }
  std::vector<CoverageRow> out;
  for (const std::vector<std::string>& families : kinds) {
    for (const std::string& family : families) {
      const Count& t = tally[family];
      out.push_back({family, t.rows, t.covered, Median(t.widths)});
    }
  }
  return out;
}

}  // namespace fathom::tuner
