#include "tuner/calibration/serving_benchmark.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string_view>
#include <utility>

#include "base/csv.h"
#include "base/line_reader.h"
#include "base/parallel.h"
#include "base/stats.h"
#include "models/stack.h"
#include "sim/simulator.h"
#include "sim/time_model.h"
#include "sim/workload.h"
#include "traces/request.h"
#include "tuner/calibration/ceres_fit.h"

namespace fathom::tuner {

double ClosedLoopTokensPerSPerGpu(const ServingBenchmark& b, double ttft_ms, double tpot_ms) {
  const double request_s = (ttft_ms + static_cast<double>(b.osl - 1) * tpot_ms) / 1000.0;
  if (!(request_s > 0) || b.Gpus() <= 0) return 0;
  return static_cast<double>(b.concurrency * b.osl) / request_s / b.Gpus();
}

Result<double> MeasuredPeakShare(const ServingBenchmark& b,
                                 const models::HardwareCatalog& catalog) {
  const std::string at = "line " + std::to_string(b.line) + ": column ";
  const Result<models::ModelArch> m = models::LoadModel(b.model);
  if (!m.ok()) return m.status().WithContext(at + "model");
  const Result<models::Hardware> hw = catalog.Find(b.hardware);
  if (!hw.ok()) return hw.status().WithContext(at + "hardware");
  FATHOM_ASSIGN_OR_RETURN(const models::DType weights,
                          models::ParseDType(b.weights, at + "weights"));
  const auto active = static_cast<double>(models::CountParams(*m).active);
  const auto lm_head = static_cast<double>(m->LmHeadParams());
  const double flops =
      2.0 * (static_cast<double>(b.isl) * (active - lm_head) + static_cast<double>(b.osl) * active);
  const double requests_per_s =
      ClosedLoopTokensPerSPerGpu(b, b.ttft_ms, b.tpot_ms) * b.Gpus() / static_cast<double>(b.osl);
  return requests_per_s * flops / (b.Gpus() * hw->PeakFlops(weights));
}

Result<std::vector<ServingBenchmark>> LoadServingBenchmarks(const std::string& path, Env* env) {
  auto opened = LineReader::Open(path, env);
  if (!opened.ok()) return Status::NotFound(path + ": cannot open serving-benchmark file");
  LineReader& lines = **opened;
  std::string_view line;
  if (!lines.Next(&line)) {
    FATHOM_RETURN_IF_ERROR(lines.status());
    return Status::InvalidArgument(path + ":1: empty file");
  }
  std::vector<std::string_view> fields;
  SplitCsv(line, &fields);
  const std::vector<std::string> header(fields.begin(), fields.end());
  const char* kColumns[] = {"source",        "engine", "version", "hardware",    "model", "weights",
                            "dense_weights", "isl",    "osl",     "concurrency", "tp",    "pp",
                            "attn_dp",       "ep",     "ttft_ms", "tpot_ms"};
  std::vector<int> col;
  for (const char* c : kColumns) {
    auto it = std::find(header.begin(), header.end(), c);
    if (it == header.end()) return Status::InvalidArgument(path + ":1: missing column " + c);
    col.push_back(static_cast<int>(it - header.begin()));
  }
  std::vector<ServingBenchmark> out;
  while (lines.Next(&line)) {
    if (line.empty()) continue;
    const int n = static_cast<int>(lines.line_number());
    const std::string where = path + ":" + std::to_string(n);
    SplitCsv(line, &fields);
    if (fields.size() < header.size()) {
      return Status::InvalidArgument(where + ": " + std::to_string(fields.size()) +
                                     " columns, expected " + std::to_string(header.size()));
    }
    auto text = [&](int k) { return std::string(fields[col[k]]); };
    auto bad = [&](int k, const char* rule) {
      return Status::InvalidArgument(where + ": column " + kColumns[k] + ": \"" + text(k) + "\" " +
                                     rule);
    };
    auto count = [&](int k, int64_t* v) -> Status {
      if (!ParseNonNegativeInt(fields[col[k]], v) || *v < 1 || *v > (int64_t{1} << 30)) {
        return bad(k, "is not a whole number from 1 to 2^30");
      }
      return Status::Ok();
    };
    auto millis = [&](int k, double* v) -> Status {
      if (!ParseFiniteDouble(fields[col[k]], v) || !(*v > 0)) return bad(k, "is not a time > 0");
      return Status::Ok();
    };
    ServingBenchmark b;
    b.line = n;
    b.source = text(0);
    auto engine = models::EngineNamed(models::EngineFlag(text(1)));
    if (!engine.ok()) return bad(1, "is not an engine (TensorRT-LLM, vLLM or SGLang)");
    b.engine = *engine;
    b.version = text(2);
    b.hardware = text(3);
    b.model = text(4);
    b.weights = text(5);
    b.dense_weights = text(6);
    if (b.hardware.empty()) return bad(3, "is empty");
    if (b.model.empty()) return bad(4, "is empty");
    if (b.weights.empty()) return bad(5, "is empty");
    FATHOM_RETURN_IF_ERROR(count(7, &b.isl));
    FATHOM_RETURN_IF_ERROR(count(8, &b.osl));
    FATHOM_RETURN_IF_ERROR(count(9, &b.concurrency));
    int* degrees[] = {&b.tp, &b.pp, &b.attn_dp, &b.ep};
    for (int k = 10; k < 14; ++k) {
      int64_t v = 0;
      FATHOM_RETURN_IF_ERROR(count(k, &v));
      if (v > 1024) return bad(k, "is not a parallel degree from 1 to 1,024");
      *degrees[k - 10] = static_cast<int>(v);
    }
    FATHOM_RETURN_IF_ERROR(millis(14, &b.ttft_ms));
    FATHOM_RETURN_IF_ERROR(millis(15, &b.tpot_ms));
    out.push_back(std::move(b));
  }
  FATHOM_RETURN_IF_ERROR(lines.status());
  return out;
}

sim::DeploymentConfig BenchmarkDeployment(const ServingBenchmark& b,
                                          const models::StackSearch& engine) {
  sim::DeploymentConfig d;
  d.model = b.model;
  d.hardware = b.hardware;
  d.gpus = b.Gpus();
  d.tp = b.tp;
  d.pp = b.pp;
  d.ep = b.ep;
  d.attn_dp = b.attn_dp;
  d.weights = b.weights;
  d.dense_weights = b.dense_weights;
  const bool fp8_kv = b.engine == "TensorRT-LLM" && b.weights != "bf16";
  d.kv = fp8_kv ? "fp8" : "bf16";
  d.runtime = models::Runtime::kPython;
  d.engine.scheduler =
      engine.prefill_first ? sim::SchedulerKind::kPrefillFirst : sim::SchedulerKind::kChunked;
  d.engine.max_num_tokens = 8192;
  d.engine.max_batch = (b.concurrency + b.attn_dp - 1) / b.attn_dp;
  d.engine.async_scheduling = engine.async_scheduling;
  return d;
}

Result<ServingPrediction> PredictServingBenchmark(const ServingBenchmark& b,
                                                  const sim::TimeModelFactory& make_time,
                                                  const models::HardwareCatalog& catalog,
                                                  const models::StackSearch& engine) {
  const std::string where = "serving benchmark line " + std::to_string(b.line);
  auto resolved = sim::Resolve(BenchmarkDeployment(b, engine), catalog, make_time);
  if (!resolved.ok()) return resolved.status().WithContext(where);
  sim::ScenarioConfig sc;
  sc.scenario = sim::Scenario::kClosedLoop;
  sc.clients = static_cast<int>(b.concurrency);
  sc.min_duration_s = 0;
  (*resolved)->spec.scenario = sc;
  traces::Request request;
  request.input_tokens = b.isl;
  request.output_tokens = b.osl;
  const int64_t warmup = b.concurrency;
  const int64_t n = warmup + b.concurrency * kClosedLoopRounds;
  ServingPrediction p;
  p.layout = (*resolved)->layout.ToString();
  sim::Simulator simulator(std::move((*resolved)->spec), sim::CyclingSource({request}, n, 1));
  double ttft_s = 0, tpot_s = 0;
  simulator.set_on_complete([&](const sim::RequestRecord& r) {
    if (r.id < warmup) return;  // ids are issue order
    ++p.requests;
    ttft_s += r.first_token_s - r.issue_s;
    if (r.output > 1) tpot_s += (r.done_s - r.first_token_s) / static_cast<double>(r.output - 1);
  });
  auto result = simulator.Run();
  if (!result.ok()) return result.status().WithContext(where);
  if (p.requests == 0) return Status::Unavailable(where + ": no measured request completed");
  p.ttft_ms = 1e3 * ttft_s / static_cast<double>(p.requests);
  p.tpot_ms = 1e3 * tpot_s / static_cast<double>(p.requests);
  p.tokens_per_s_per_gpu = ClosedLoopTokensPerSPerGpu(b, p.ttft_ms, p.tpot_ms);
  return p;
}

std::vector<Result<ServingPrediction>> PredictServingBenchmarks(
    const std::vector<ServingBenchmark>& points, const sim::TimeModelFactory& make_time,
    const models::HardwareCatalog& catalog, const models::StackSearch& engine, int jobs) {
  std::vector<Result<ServingPrediction>> out(points.size(), Status::Unavailable("not run"));
  ParallelFor(points.size(), jobs, [&](size_t i) {
    out[i] = PredictServingBenchmark(points[i], make_time, catalog, engine);
  });
  return out;
}

namespace {

using Params = std::array<double, models::CostParams::kNumFitted>;

// Robust log errors of every point's mean TPOT and tokens/s a GPU at the free parameters `z` (the
// others held at `x`); false where the parameters are invalid or a point does not simulate.
struct ServingResidual {
  const std::vector<ServingBenchmark>* points;
  const models::HardwareCatalog* catalog;
  models::Calibration base;
  Params x;
  std::vector<int> free;
  models::StackSearch engine;
  int jobs;

  Result<models::Calibration> At(const double* z) const {
    Params at = x;
    for (size_t i = 0; i < free.size(); ++i) at[free[i]] = z[i];
    return CalibrationAt(base, at);
  }
  bool operator()(double const* const* z, double* residuals) const {
    auto c = At(z[0]);
    if (!c.ok()) return false;
    const auto predicted = PredictServingBenchmarks(
        *points, sim::CalibratedFactory(c->params, nullptr), *catalog, engine, jobs);
    for (size_t i = 0; i < predicted.size(); ++i) {
      if (!predicted[i].ok()) return false;
      const ServingBenchmark& b = (*points)[i];
      residuals[2 * i] = RobustLogError(predicted[i]->tpot_ms, b.tpot_ms);
      residuals[2 * i + 1] = RobustLogError(predicted[i]->tokens_per_s_per_gpu,
                                            ClosedLoopTokensPerSPerGpu(b, b.ttft_ms, b.tpot_ms));
    }
    return true;
  }
};

}  // namespace

Result<FitOutcome> FitServingBenchmarks(const std::vector<ServingBenchmark>& points,
                                        const models::Calibration& start,
                                        const std::vector<std::string>& free_params,
                                        const models::HardwareCatalog& catalog,
                                        const models::StackSearch& engine, int jobs,
                                        const FitProgress& progress) {
  FATHOM_ASSIGN_OR_RETURN(const auto free, FreeParams(free_params));
  std::vector<int> free_indices;
  for (int k = 0; k < models::CostParams::kNumFitted; ++k) {
    if (free[k]) free_indices.push_back(k);
  }
  const int n_free = static_cast<int>(free_indices.size());
  const int residuals = 2 * static_cast<int>(points.size());
  if (residuals < n_free) {
    return Status::InvalidArgument("a fit of " + std::to_string(n_free) +
                                   " parameters needs at least " + std::to_string(n_free) +
                                   " residuals (two a point)");
  }
  const auto first = PredictServingBenchmarks(points, sim::CalibratedFactory(start.params, nullptr),
                                              catalog, engine, jobs);
  for (const auto& p : first) FATHOM_RETURN_IF_ERROR(p.status());

  const ServingResidual f{&points,      &catalog, start, start.params.Fitted(),
                          free_indices, engine,   jobs};
  std::vector<double> z;
  for (int k : free_indices) z.push_back(f.x[k]);
  ceres::Solver::Options options;
  options.max_num_iterations = 25;
  options.function_tolerance = 1e-4;
  ProgressCallback callback(progress);
  if (progress) options.callbacks.push_back(&callback);
  ceres::Solver::Summary summary;
  auto problem = BoundedProblem(new ServingResidual(f), residuals, free_indices, &z);
  ceres::Solve(options, problem.get(), &summary);
  if (!summary.IsSolutionUsable())
    return Status::InvalidArgument("serving-benchmark fit failed: " + summary.message);
  FitOutcome out;
  FATHOM_ASSIGN_OR_RETURN(out.calibration, f.At(z.data()));
  out.iterations = static_cast<int>(summary.iterations.size());
  out.initial_cost = summary.initial_cost;
  out.final_cost = summary.final_cost;
  const std::vector<double> spreads =
      FreeSpreads(problem.get(), &z, summary.final_cost, residuals - n_free);
  for (size_t i = 0; i < spreads.size(); ++i) out.calibration.stddev[free_indices[i]] = spreads[i];
  return out;
}

std::vector<ServingCrossValidation> CrossValidateServing(
    const std::vector<ServingBenchmark>& points, const models::Calibration& start,
    const std::vector<std::string>& free_params, const models::HardwareCatalog& catalog,
    const models::StackSearch& engine, int jobs,
    const std::function<void(const std::string& kind, const std::string& held_out)>& fold_done) {
  struct Kind {
    const char* name;
    std::string (*key)(const ServingBenchmark&);
  };
  const Kind kinds[] = {{"model", [](const ServingBenchmark& b) { return b.model; }},
                        {"hardware", [](const ServingBenchmark& b) { return b.hardware; }}};
  // Each fold starts its free parameters from the physical defaults, not from a calibration the
  // held-out points helped fit (as Calibrator::CrossValidate does).
  models::Calibration neutral = start;
  if (auto free = FreeParams(free_params); free.ok()) {
    auto x = neutral.params.Fitted();
    const auto defaults = models::CostParams{}.Fitted();
    for (int k = 0; k < models::CostParams::kNumFitted; ++k) {
      if ((*free)[k]) x[k] = defaults[k];
    }
    neutral.params.SetFitted(x);
  }
  std::vector<ServingCrossValidation> out;
  for (const Kind& kind : kinds) {
    std::vector<std::string> groups;
    for (const ServingBenchmark& b : points) {
      if (std::find(groups.begin(), groups.end(), kind.key(b)) == groups.end())
        groups.push_back(kind.key(b));
    }
    ServingCrossValidation cv;
    cv.kind = kind.name;
    if (groups.size() < 2) {
      out.push_back(std::move(cv));
      continue;
    }
    for (const std::string& group : groups) {
      ServingFold fold;
      fold.held_out = group;
      std::vector<ServingBenchmark> train;
      for (const ServingBenchmark& b : points) {
        (kind.key(b) == group ? fold.points : train).push_back(b);
      }
      fold.fit = FitServingBenchmarks(train, neutral, free_params, catalog, engine, jobs);
      if (fold.fit.ok()) {
        for (auto& p : PredictServingBenchmarks(
                 fold.points, sim::CalibratedFactory(fold.fit->calibration.params, nullptr),
                 catalog, engine, jobs)) {
          if (!p.ok()) {
            fold.fit = p.status();
            fold.predictions.clear();
            break;
          }
          fold.predictions.push_back(*p);
        }
      }
      if (fold_done) fold_done(kind.name, group);
      cv.folds.push_back(std::move(fold));
    }
    out.push_back(std::move(cv));
  }
  return out;
}

ServingError SummarizeServing(const std::vector<ServingBenchmark>& points,
                              const std::vector<ServingPrediction>& predictions) {
  std::vector<double> ttft, tpot, tokens, tpot_signed;
  for (size_t i = 0; i < points.size() && i < predictions.size(); ++i) {
    const ServingBenchmark& b = points[i];
    const ServingPrediction& p = predictions[i];
    auto pct = [](double predicted, double measured) {
      return 100.0 * (predicted - measured) / measured;
    };
    ttft.push_back(std::abs(pct(p.ttft_ms, b.ttft_ms)));
    tpot_signed.push_back(pct(p.tpot_ms, b.tpot_ms));
    tpot.push_back(std::abs(tpot_signed.back()));
    tokens.push_back(
        std::abs(pct(p.tokens_per_s_per_gpu, ClosedLoopTokensPerSPerGpu(b, b.ttft_ms, b.tpot_ms))));
  }
  ServingError e;
  e.points = static_cast<int>(ttft.size());
  e.ttft_median_abs_pct = Median(ttft);
  e.tpot_median_abs_pct = Median(tpot);
  e.tokens_median_abs_pct = Median(tokens);
  e.tpot_median_pct = Median(tpot_signed);
  return e;
}

}  // namespace fathom::tuner
