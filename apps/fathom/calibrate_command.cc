#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "apps/fathom/commands.h"
#include "base/files.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "base/parallel.h"
#include "models/cost_model.h"
#include "models/hardware.h"
#include "models/stack.h"
#include "sim/time_model.h"
#include "tuner/calibration/calibrate.h"
#include "tuner/calibration/intervals.h"
#include "tuner/calibration/serving_benchmark.h"
#include "tuner/sweep/work_pool.h"

namespace fathom::cli {
namespace {

struct CalibrateFlags {
  std::string results;
  std::string benchmarks;        // serving benchmarks instead of MLPerf rows
  std::string benchmark_engine;  // trtllm, vllm, sglang: only that engine's points
  std::string points_out;        // each point's predicted means beside the measured (CSV)
  std::string setup;
  std::string calibration;
  std::string stack;
  std::string engine;  // trtllm, vllm, sglang; empty: the results file's
  std::vector<std::string> free_params;
  std::string out;
  std::string residuals_out;
  int64_t samples = 0;       // > 0: draw this many samples from each data set
  int64_t max_requests = 0;  // > 0: cap each row's run
  int64_t fit_rows = 0;      // > 0: fits use the first this many rows only
  int jobs = 0;
  bool fit = false;
  bool cross_validate = false;
  bool json = false;
  std::vector<std::string> hardware_files;
};

OrderedJson RowJson(const tuner::RowPrediction& p) {
  OrderedJson j;
  j["line"] = p.row.line;
  j["submitter"] = p.row.submitter;
  j["accelerator"] = p.row.accelerator;
  j["model"] = p.row.model;
  j["scenario"] = p.row.scenario;
  j["deployment"] = p.deployment;
  j["requests"] = p.requests;
  j["extrapolated"] = p.extrapolated;
  auto metric = [](double published, double predicted, double err) {
    return OrderedJson{{"published", published}, {"predicted", predicted}, {"error_pct", err}};
  };
  j["tokens_per_s"] = metric(p.row.tokens_per_s, p.tokens_per_s, p.TokensErrorPct());
  if (!p.row.offline()) {
    j["ttft_p99_ms"] = metric(p.row.ttft_p99_ms, p.ttft_p99_ms, p.TtftErrorPct());
    j["tpot_p99_ms"] = metric(p.row.tpot_p99_ms, p.tpot_p99_ms, p.TpotErrorPct());
    if (p.has_capacity) {
      j["capacity_qps_pub"] = p.row.target_qps;
      j["capacity_qps_pred"] = p.capacity_qps;
      j["capacity_error_pct"] = p.CapacityErrorPct();
    }
    if (p.has_capacity_at_use) {
      j["limit_use_pub"] = p.limit_use;
      j["capacity_at_use_qps_pred"] = p.capacity_at_use_qps;
      j["capacity_at_use_error_pct"] = p.CapacityAtUseErrorPct();
    }
    j["front_busy_share"] = p.front_busy_share;
    if (p.has_front_free_capacity) {
      j["front_free_capacity_qps_pred"] = p.front_free_capacity_qps;
      j["published_within_front_bound"] = p.PublishedWithinFrontBound();
    }
  }
  // The first metric's fields at the top level too, for a flat view of each row.
  j["published"] = p.row.tokens_per_s;
  j["predicted"] = p.tokens_per_s;
  j["error_pct"] = p.TokensErrorPct();
  return j;
}

OrderedJson SummaryJson(const tuner::ErrorSummary& s) {
  return {{"tokens_per_s", s.tokens_median_abs_pct},
          {"offline_tokens_per_s", s.offline_tokens_median_abs_pct},
          {"p99_latency", s.latency_median_abs_pct},
          {"capacity_qps", s.capacity_median_abs_pct},
          {"capacity_at_use_qps", s.capacity_at_use_median_abs_pct}};
}

// Rows whose serving front is busy nearly all the time at the published QPS: their capacity is
// bounded between the stack's fitted cost a response and a front that costs nothing.
void PrintFrontBound(const std::vector<tuner::RowPrediction>& preds, const tuner::ErrorSummary& s) {
  bool first = true;
  for (const auto& p : preds) {
    if (!p.has_front_free_capacity) continue;
    if (std::exchange(first, false)) {
      std::printf(
          "bounded by the serving front (busy >= %.0f%% of the arrivals' time at the published "
          "QPS; the stack's cost a response was fitted on other hosts' rows, and only a "
          "measurement of this front says where in the bound the capacity lies):\n",
          100 * sim::kFrontBoundShare);
    }
    std::printf(
        "  line %d %s %s %s: front busy %.0f%%; capacity %.2f QPS at the fitted front, %.2f with a "
        "front that costs nothing; published %.2f, %s\n",
        p.row.line, p.row.submitter.c_str(), p.row.accelerator.c_str(), p.row.scenario.c_str(),
        100 * p.front_busy_share, p.CapacityAtFittedFront(), p.front_free_capacity_qps,
        p.row.target_qps, p.PublishedWithinFrontBound() ? "inside" : "outside");
  }
  if (s.front_bound_rows > 0) {
    std::printf("  %d of %d published capacities inside their bound\n", s.front_bound_within,
                s.front_bound_rows);
  }
}

void PrintTable(const std::vector<tuner::RowPrediction>& preds) {
  std::printf(
      "%-5s %-14s %-6s %-14s %-11s %7s %10s %10s %7s %8s %8s %7s %7s %7s %7s %7s %7s %7s %5s %7s "
      "%7s\n",
      "line", "submitter", "gpu", "model", "scenario", "samples", "tok/s pub", "tok/s sim", "err%",
      "TTFT pub", "TTFT sim", "err%", "TPOT pub", "TPOT sim", "err%", "QPS pub", "QPS max", "err%",
      "used", "QPS@use", "err%");
  for (const auto& p : preds) {
    std::printf("%-5d %-14s %-6s %-14s %-11s %7lld %10.0f %10.0f %+7.1f", p.row.line,
                p.row.submitter.c_str(), p.row.accelerator.c_str(), p.row.model.c_str(),
                p.row.scenario.c_str(), static_cast<long long>(p.requests), p.row.tokens_per_s,
                p.tokens_per_s, p.TokensErrorPct());
    if (!p.row.offline()) {
      std::printf(" %8.0f %8.0f %+7.1f %7.1f %7.1f %+7.1f", p.row.ttft_p99_ms, p.ttft_p99_ms,
                  p.TtftErrorPct(), p.row.tpot_p99_ms, p.tpot_p99_ms, p.TpotErrorPct());
      if (p.has_capacity)
        std::printf(" %7.2f %7.2f %+7.1f", p.row.target_qps, p.capacity_qps, p.CapacityErrorPct());
      if (p.has_capacity_at_use)
        std::printf(" %4.0f%% %7.2f %+7.1f", 100 * p.limit_use, p.capacity_at_use_qps,
                    p.CapacityAtUseErrorPct());
    }
    std::printf("%s\n", p.extrapolated ? "  (extrapolated)" : "");
  }
  const tuner::ErrorSummary s = tuner::Summarize(preds);
  // A median over no rows is not a figure.
  auto pct = [](double median, int rows) {
    return rows > 0 ? StrFormat("%.1f%%", median) : std::string("none");
  };
  std::printf(
      "median |error|: throughput %s (Offline rows %s), p99 latencies at the published QPS %s, "
      "Server capacity %s (at the published runs' use of their limits %s) over %d rows\n",
      pct(s.tokens_median_abs_pct, s.rows).c_str(),
      pct(s.offline_tokens_median_abs_pct, s.offline_rows).c_str(),
      pct(s.latency_median_abs_pct, s.latency_rows).c_str(),
      pct(s.capacity_median_abs_pct, s.capacity_rows).c_str(),
      pct(s.capacity_at_use_median_abs_pct, s.capacity_at_use_rows).c_str(), s.rows);
  PrintFrontBound(preds, s);
}

void PrintFit(const std::string& what, const tuner::FitOutcome& fit) {
  std::printf("%s: %d iterations, cost %.4f -> %.4f\n", what.c_str(), fit.iterations,
              fit.initial_cost, fit.final_cost);
  const auto v = fit.calibration.params.Fitted();
  for (int i = 0; i < models::CostParams::kNumFitted; ++i) {
    std::printf("  %-28s %10.4f +- %.4f\n", models::CostParams::kFitted[i], v[i],
                fit.calibration.stddev[i]);
  }
}

// A cross-validation fold's fit, printed (or why it failed) and added to `folds`; false where it
// failed.
bool AddFold(const std::string& held_out, const Result<tuner::FitOutcome>& fit, bool json,
             OrderedJson* folds) {
  if (!fit.ok()) {
    if (!json) std::printf("without %s: %s\n", held_out.c_str(), fit.status().message().c_str());
    folds->push_back({{"held_out", held_out}, {"error", fit.status().message()}});
    return false;
  }
  if (!json) PrintFit("without " + held_out, *fit);
  folds->push_back({{"held_out", held_out}, {"calibration", models::ToJson(fit->calibration)}});
  return true;
}

// A line on stderr per solver iteration: fits take minutes.
tuner::FitProgress Progress(const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  return [what, start](int iteration, double cost) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "%s: iteration %d, cost %.4f (%.0f s)\n", what.c_str(), iteration, cost,
                 s);
  };
}

// What every process of the run loads from the flags.
struct Inputs {
  std::vector<tuner::PublishedResult> rows;
  tuner::CalibrationSetup setup;
  models::HardwareCatalog catalog;
  models::Calibration calibration;
  std::string calibration_path;
  std::string stack_note;
  // The stack whose calibration predicts (empty with --calibration), and how many of these rows
  // its fit used (the first ones, where they are its fitted results file).
  std::string stack_name;
  size_t stack_fitted_rows = 0;
};

Result<Inputs> Load(const CalibrateFlags& f) {
  if (f.samples != 0 && f.samples < 100) {
    return Status::InvalidArgument("--samples = " + std::to_string(f.samples) +
                                   ": must be 0 (whole data sets) or >= 100");
  }
  if (f.max_requests < 0)
    return Status::InvalidArgument("--max-requests = " + std::to_string(f.max_requests) +
                                   ": must be >= 0");
  if (f.jobs < 0)
    return Status::InvalidArgument("--jobs = " + std::to_string(f.jobs) + ": must be >= 0");
  Inputs in;
  FATHOM_ASSIGN_OR_RETURN(in.rows, tuner::LoadPublishedResults(f.results));
  if (f.fit_rows < 0 || f.fit_rows > static_cast<int64_t>(in.rows.size())) {
    return Status::InvalidArgument("--fit-rows = " + std::to_string(f.fit_rows) +
                                   ": must be 0 (all) to " + std::to_string(in.rows.size()) +
                                   " (the rows of " + f.results + ")");
  }
  // The rows' MLPerf round picks the default setup and stack: each round's rows run under their
  // own round's published deployments and are checked against the stack calibrated on them.
  std::set<std::string> rounds;
  for (const auto& r : in.rows) rounds.insert(r.round);
  const std::string round = rounds.size() == 1 ? *rounds.begin() : "";
  auto mixed_rounds = [&](const std::string& give) {
    return Status::InvalidArgument(
        f.results +
        (rounds.size() > 1 ? ": rows of " + std::to_string(rounds.size()) + " MLPerf rounds"
                           : std::string(": rows name no MLPerf round")) +
        " (version column): give " + give);
  };
  if (f.setup.empty() && round.empty()) return mixed_rounds("--setup");
  const std::string setup_path =
      f.setup.empty() ? tuner::DefaultSetupPath(round, f.results) : f.setup;
  FATHOM_ASSIGN_OR_RETURN(in.setup, tuner::LoadCalibrationSetup(setup_path, f.samples, 1));
  for (const tuner::PublishedResult& row : in.rows) {
    if (tuner::FindDeployment(in.setup, row) != nullptr) continue;
    return Status::InvalidArgument(
        f.results + ":" + std::to_string(row.line) + ": no entry of " + setup_path + " deploys " +
        row.model + " on " + std::to_string(row.gpus) + " " + row.accelerator + " GPUs for " +
        row.scenario + " (" + row.submitter +
        "): an entry must match the row's model, GPU, GPU count and scenario, and its submitter "
        "where it names one");
  }
  FATHOM_ASSIGN_OR_RETURN(in.catalog, models::HardwareCatalog::Load(f.hardware_files));

  // The calibration: --calibration, else --stack's, else that of the stack calibrated on the rows'
  // MLPerf round (each stack is fitted and checked on its own round's rows).
  in.calibration_path = f.calibration;
  if (in.calibration_path.empty()) {
    FATHOM_ASSIGN_OR_RETURN(std::vector<models::Stack> stacks,
                            models::LoadStacks(models::DefaultStacksPath()));
    models::Stack stack;
    std::string engine = tuner::ResultsEngine(f.results);
    if (!f.engine.empty()) {
      FATHOM_ASSIGN_OR_RETURN(engine, models::EngineNamed(f.engine));
    }
    if (!f.stack.empty()) {
      FATHOM_ASSIGN_OR_RETURN(stack,
                              models::FindStack(stacks, f.stack, f.engine.empty() ? "" : engine));
    } else {
      if (round.empty()) return mixed_rounds("--stack or --calibration");
      FATHOM_ASSIGN_OR_RETURN(stack, models::StackForRound(stacks, round, engine));
    }
    in.calibration_path = stack.CalibrationPath();
    in.stack_name = stack.name;
    namespace fs = std::filesystem;
    if (fs::path(f.results).filename() == fs::path(stack.fitted_results).filename())
      in.stack_fitted_rows = static_cast<size_t>(stack.fitted_rows);
    in.stack_note = "stack " + stack.name + " (" + stack.engine + " " + stack.version + ")";
  } else if (!f.stack.empty() || !f.engine.empty()) {
    return Status::InvalidArgument(std::string(f.stack.empty() ? "--engine" : "--stack") +
                                   " and --calibration: give one");
  }
  FATHOM_ASSIGN_OR_RETURN(in.calibration, models::LoadCalibration(in.calibration_path));
  return in;
}

// Measured serving points beside their predictions, in groups of engine, predicting stack (or
// calibration), model and GPU, then by engine; returns the same as JSON.
OrderedJson PrintServing(const std::vector<tuner::ServingBenchmark>& points,
                         const std::vector<std::string>& stack_of,
                         const std::vector<Result<tuner::ServingPrediction>>& predicted,
                         const models::HardwareCatalog& catalog, bool json, std::string* csv) {
  struct Group {
    std::vector<tuner::ServingBenchmark> points;
    std::vector<tuner::ServingPrediction> predictions;
    int failed = 0;
    double peak_share_max = 0;  // tuner::MeasuredPeakShare's most over the group's points
  };
  std::vector<std::array<std::string, 4>> order;
  std::map<std::array<std::string, 4>, Group> groups;
  std::vector<std::array<std::string, 4>> engine_order;
  std::map<std::array<std::string, 4>, Group> by_engine;
  *csv =
      "source,engine,stack,hardware,model,layout,isl,osl,concurrency,ttft_ms,ttft_ms_sim,tpot_ms,"
      "tpot_ms_sim,tokens_per_s_per_gpu,tokens_per_s_per_gpu_sim,measured_peak_share,error\n";
  for (size_t i = 0; i < points.size(); ++i) {
    const tuner::ServingBenchmark& b = points[i];
    const std::array<std::string, 4> key = {b.engine, stack_of[i], b.model, b.hardware},
                                     ekey = {b.engine, stack_of[i], "all", "all"};
    if (!groups.count(key)) order.push_back(key);
    if (!by_engine.count(ekey)) engine_order.push_back(ekey);
    const double measured = tuner::ClosedLoopTokensPerSPerGpu(b, b.ttft_ms, b.tpot_ms);
    const Result<double> share = tuner::MeasuredPeakShare(b, catalog);
    const std::string share_text = share.ok() ? StrFormat("%.4f", *share) : "";
    for (Group* g : {&groups[key], &by_engine[ekey]})
      g->peak_share_max = std::max(g->peak_share_max, share.ok() ? *share : 0.0);
    const bool ok = predicted[i].ok();
    *csv +=
        StrFormat("%s,%s,%s,%s,%s,%s,%lld,%lld,%lld,%.4f,", b.source.c_str(), b.engine.c_str(),
                  stack_of[i].c_str(), b.hardware.c_str(), b.model.c_str(),
                  ok ? predicted[i]->layout.c_str() : "", static_cast<long long>(b.isl),
                  static_cast<long long>(b.osl), static_cast<long long>(b.concurrency), b.ttft_ms);
    if (!ok) {
      ++groups[key].failed;
      ++by_engine[ekey].failed;
      *csv += StrFormat(",%.4f,,%.2f,,%s,\"%s\"\n", b.tpot_ms, measured, share_text.c_str(),
                        predicted[i].status().message().c_str());
      continue;
    }
    const tuner::ServingPrediction& p = *predicted[i];
    for (Group* g : {&groups[key], &by_engine[ekey]}) {
      g->points.push_back(b);
      g->predictions.push_back(p);
    }
    *csv += StrFormat("%.4f,%.4f,%.4f,%.2f,%.2f,%s,\n", p.ttft_ms, b.tpot_ms, p.tpot_ms, measured,
                      p.tokens_per_s_per_gpu, share_text.c_str());
  }
  auto summary = [](const std::array<std::string, 4>& k, const Group& g) {
    const tuner::ServingError e = tuner::SummarizeServing(g.points, g.predictions);
    return OrderedJson{{"engine", k[0]},
                       {"stack", k[1]},
                       {"model", k[2]},
                       {"hardware", k[3]},
                       {"points", e.points},
                       {"not_simulated", g.failed},
                       {"ttft_median_abs_pct", e.ttft_median_abs_pct},
                       {"tpot_median_abs_pct", e.tpot_median_abs_pct},
                       {"tpot_median_pct", e.tpot_median_pct},
                       {"tokens_per_s_per_gpu_median_abs_pct", e.tokens_median_abs_pct},
                       {"measured_peak_share_max", g.peak_share_max}};
  };
  auto print = [](const OrderedJson& j) {
    std::printf("%-13s %-15s %-16s %-9s %6d %7.1f%% %7.1f%% %9.1f%% %+10.1f%% %8.0f%%",
                j["engine"].get<std::string>().c_str(), j["stack"].get<std::string>().c_str(),
                j["model"].get<std::string>().c_str(), j["hardware"].get<std::string>().c_str(),
                j["points"].get<int>(), j["ttft_median_abs_pct"].get<double>(),
                j["tpot_median_abs_pct"].get<double>(),
                j["tokens_per_s_per_gpu_median_abs_pct"].get<double>(),
                j["tpot_median_pct"].get<double>(),
                100 * j["measured_peak_share_max"].get<double>());
    if (j["not_simulated"].get<int>() > 0)
      std::printf("  (%d not simulated)", j["not_simulated"].get<int>());
    std::printf("\n");
  };
  OrderedJson out{{"groups", OrderedJson::array()}, {"engines", OrderedJson::array()}};
  if (!json) {
    std::printf(
        "median |error| of the means, by engine, predicting stack, model and GPU (peak: the most "
        "of its GPUs' dense peak a point's measured loop needs for its linear layers alone):\n");
    std::printf("%-13s %-15s %-16s %-9s %6s %8s %8s %10s %11s %9s\n", "engine", "stack", "model",
                "gpu", "points", "TTFT", "TPOT", "tok/s/GPU", "TPOT signed", "peak");
  }
  for (const auto& k : order) {
    out["groups"].push_back(summary(k, groups[k]));
    if (!json) print(out["groups"].back());
  }
  if (!json) std::printf("by engine:\n");
  for (const auto& k : engine_order) {
    out["engines"].push_back(summary(k, by_engine[k]));
    if (!json) print(out["engines"].back());
  }
  return out;
}

// --benchmarks: each measured point predicted by its own engine's newest stack on its GPU (where
// the engine has none, the GPU's default stack, which the output names), or by --stack, --engine
// or --calibration; --fit and --cross-validate fit one starting calibration to the points.
Status RunBenchmarks(const CalibrateFlags& f) {
  if (!f.results.empty() || !f.setup.empty()) {
    return Status::InvalidArgument("--benchmarks: not with --results or --setup");
  }
  if (!f.calibration.empty() && (!f.stack.empty() || !f.engine.empty())) {
    return Status::InvalidArgument(std::string(f.stack.empty() ? "--engine" : "--stack") +
                                   " and --calibration: give one");
  }
  const bool fitting = f.fit || f.cross_validate;
  if (fitting && f.calibration.empty() && f.stack.empty()) {
    return Status::InvalidArgument(
        "--benchmarks with --fit or --cross-validate: give the starting point, --stack or "
        "--calibration");
  }
  if (f.jobs < 0)
    return Status::InvalidArgument("--jobs = " + std::to_string(f.jobs) + ": must be >= 0");
  FATHOM_ASSIGN_OR_RETURN(std::vector<tuner::ServingBenchmark> all,
                          tuner::LoadServingBenchmarks(f.benchmarks));
  std::string only, engine;
  if (!f.benchmark_engine.empty()) {
    FATHOM_ASSIGN_OR_RETURN(only, models::EngineNamed(f.benchmark_engine));
  }
  if (!f.engine.empty()) {
    FATHOM_ASSIGN_OR_RETURN(engine, models::EngineNamed(f.engine));
  }
  std::vector<tuner::ServingBenchmark> points;
  for (auto& b : all) {
    if (only.empty() || b.engine == only) points.push_back(std::move(b));
  }
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(std::vector<models::Stack> stacks,
                          models::LoadStacks(models::DefaultStacksPath()));
  // Each point's stack (or the calibration file), and its calibration.
  std::vector<std::string> stack_of(points.size());
  std::map<std::string, models::Calibration> calibrations;
  std::map<std::string, models::StackSearch> engine_of;  // how each stack's engine schedules
  for (size_t i = 0; i < points.size(); ++i) {
    const tuner::ServingBenchmark& b = points[i];
    auto gpu = catalog.Find(b.hardware);
    if (!gpu.ok()) {
      return gpu.status().WithContext(f.benchmarks + ":" + std::to_string(b.line) +
                                      ": column hardware");
    }
    std::string path = f.calibration;
    stack_of[i] = f.calibration;
    if (path.empty()) {
      models::Stack stack;
      if (!f.stack.empty()) {
        FATHOM_ASSIGN_OR_RETURN(stack, models::FindStack(stacks, f.stack, engine));
      } else {
        auto own = models::DefaultStack(stacks, engine.empty() ? b.engine : engine, gpu->vendor);
        if (!own.ok() && engine.empty()) own = models::DefaultStack(stacks, "", gpu->vendor);
        FATHOM_RETURN_IF_ERROR(own.status());
        stack = *own;
      }
      stack_of[i] = stack.name;
      path = stack.CalibrationPath();
      engine_of[stack.name] = stack.search;
    }
    if (!calibrations.count(stack_of[i])) {
      FATHOM_ASSIGN_OR_RETURN(calibrations[stack_of[i]], models::LoadCalibration(path));
    }
    engine_of.emplace(stack_of[i], models::StackSearch{});  // a calibration file: no stack's
  }
  auto predict_all = [&](const std::function<const models::Calibration&(size_t)>& calibration) {
    std::vector<Result<tuner::ServingPrediction>> out(points.size(),
                                                      Status::Unavailable("not run"));
    ParallelFor(points.size(), f.jobs, [&](size_t i) {
      out[i] = tuner::PredictServingBenchmark(
          points[i], sim::CalibratedFactory(calibration(i).params, nullptr), catalog,
          engine_of.at(stack_of[i]));
    });
    return out;
  };
  std::vector<Result<tuner::ServingPrediction>> predicted = predict_all(
      [&](size_t i) -> const models::Calibration& { return calibrations.at(stack_of[i]); });
  OrderedJson out;
  out["benchmarks"] = f.benchmarks;
  if (!f.json) {
    std::printf(
        "%s: %zu measured points (fixed lengths, a closed loop of clients; mean TTFT and "
        "TPOT), each simulated as a warmup round and %d measured rounds of its clients\n",
        f.benchmarks.c_str(), points.size(), tuner::kClosedLoopRounds);
  }
  // The points a fit can use: those that simulate under the starting calibration.
  std::vector<tuner::ServingBenchmark> fit_on;
  for (size_t i = 0; i < points.size(); ++i) {
    if (predicted[i].ok()) fit_on.push_back(points[i]);
  }
  if (fitting && !f.json) {
    std::printf("fitting on the %zu points that simulate under %s (%zu do not)\n", fit_on.size(),
                stack_of.empty() ? "nothing" : stack_of[0].c_str(), points.size() - fit_on.size());
  }
  // With --fit or --cross-validate every point has the one starting calibration.
  const std::string start_name = stack_of.empty() ? std::string() : stack_of[0];
  const models::Calibration start =
      start_name.empty() ? models::Calibration{} : calibrations.at(start_name);
  const models::StackSearch engine_start =
      start_name.empty() ? models::StackSearch{} : engine_of.at(start_name);
  if (f.fit) {
    FATHOM_ASSIGN_OR_RETURN(tuner::FitOutcome fit,
                            tuner::FitServingBenchmarks(fit_on, start, f.free_params, catalog,
                                                        engine_start, f.jobs, Progress("fit")));
    fit.calibration.note = "Fitted by `fathom calibrate --benchmarks " + f.benchmarks +
                           (only.empty() ? "" : " --benchmark-engine " + f.benchmark_engine) +
                           " --fit` on " + std::to_string(fit_on.size()) +
                           " points' mean TPOT and tokens/s a GPU from " + start_name +
                           "; stddev from Ceres's covariance.";
    if (!f.json) PrintFit("fit", fit);
    out["calibration"] = models::ToJson(fit.calibration);
    if (!f.out.empty()) {
      FATHOM_RETURN_IF_ERROR(
          WriteFileAtomic(f.out, models::ToJson(fit.calibration).dump(2) + "\n"));
      if (!f.json) std::printf("wrote %s\n", f.out.c_str());
    }
    const std::string name = f.out.empty() ? std::string("fit") : f.out;
    calibrations[name] = fit.calibration;
    engine_of[name] = engine_start;
    for (std::string& s : stack_of) s = name;
    predicted =
        predict_all([&](size_t) -> const models::Calibration& { return calibrations.at(name); });
  }
  std::string csv;
  out.update(PrintServing(points, stack_of, predicted, catalog, f.json, &csv));
  if (!f.points_out.empty()) FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.points_out, csv));
  if (f.cross_validate) {
    auto fold_done = [](const std::string& kind, const std::string& held_out) {
      std::fprintf(stderr, "cross-validation: without %s %s fitted\n", kind.c_str(),
                   held_out.c_str());
    };
    for (const tuner::ServingCrossValidation& cv : tuner::CrossValidateServing(
             fit_on, start, f.free_params, catalog, engine_start, f.jobs, fold_done)) {
      std::vector<tuner::ServingBenchmark> held;
      std::vector<Result<tuner::ServingPrediction>> held_predicted;
      std::vector<std::string> held_label;
      if (cv.folds.empty()) {
        if (!f.json) {
          std::printf("\nleave-one-%s-out: the points have one %s, none to leave out\n",
                      cv.kind.c_str(), cv.kind == "hardware" ? "GPU" : cv.kind.c_str());
        }
        out["leave_one_" + cv.kind + "_out"] = {{"folds", OrderedJson::array()}};
        continue;
      }
      OrderedJson folds = OrderedJson::array();
      if (!f.json) std::printf("\nleave-one-%s-out:\n", cv.kind.c_str());
      for (const tuner::ServingFold& fold : cv.folds) {
        if (!AddFold(fold.held_out, fold.fit, f.json, &folds)) continue;
        for (size_t i = 0; i < fold.points.size(); ++i) {
          held.push_back(fold.points[i]);
          held_predicted.push_back(fold.predictions[i]);
          held_label.push_back("without " + fold.held_out);
        }
      }
      std::string unused;
      OrderedJson j = PrintServing(held, held_label, held_predicted, catalog, f.json, &unused);
      j["folds"] = folds;
      std::vector<tuner::ServingPrediction> all_predicted;
      for (const auto& p : held_predicted) all_predicted.push_back(*p);
      const tuner::ServingError e = tuner::SummarizeServing(held, all_predicted);
      j["all"] = {{"points", e.points},
                  {"ttft_median_abs_pct", e.ttft_median_abs_pct},
                  {"tpot_median_abs_pct", e.tpot_median_abs_pct},
                  {"tokens_per_s_per_gpu_median_abs_pct", e.tokens_median_abs_pct}};
      if (!f.json) {
        std::printf(
            "leave-one-%s-out, over all %d held-out points: TTFT %.1f%%, TPOT %.1f%%, tok/s/GPU "
            "%.1f%%\n",
            cv.kind.c_str(), e.points, e.ttft_median_abs_pct, e.tpot_median_abs_pct,
            e.tokens_median_abs_pct);
      }
      out["leave_one_" + cv.kind + "_out"] = j;
    }
  }
  if (f.json) std::printf("%s\n", out.dump(2).c_str());
  return Status::Ok();
}

Status Run(const CalibrateFlags& f) {
  if (!f.benchmarks.empty()) return RunBenchmarks(f);
  if (f.results.empty()) return Status::InvalidArgument("give --results or --benchmarks");
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<tuner::WorkPool> pool, tuner::MakeWorkPool(f.jobs));
  Result<Inputs> loaded = Load(f);
  if (!pool->coordinator()) {
    // Only rank 0 reports: a rank that could not load the inputs answers each item with why.
    if (!loaded.ok()) return tuner::RefuseWork(pool.get(), loaded.status());
    return tuner::Calibrator(loaded->setup, loaded->catalog, f.max_requests, pool.get()).Serve();
  }
  FATHOM_RETURN_IF_ERROR(loaded.status());
  const std::vector<tuner::PublishedResult>& rows = loaded->rows;
  // The rows fits use (--fit-rows: the first N), and those they only predict.
  const size_t fitted_count = f.fit_rows > 0 ? static_cast<size_t>(f.fit_rows) : rows.size();
  const std::vector<tuner::PublishedResult> fit_on(rows.begin(), rows.begin() + fitted_count);
  const std::vector<tuner::PublishedResult> unfitted(rows.begin() + fitted_count, rows.end());
  models::Calibration calibration = loaded->calibration;
  const tuner::Calibrator calibrator(loaded->setup, loaded->catalog, f.max_requests, pool.get());
  if (!f.json && !loaded->stack_note.empty()) std::printf("%s\n", loaded->stack_note.c_str());
  OrderedJson out;
  out["calibration_file"] = loaded->calibration_path;
  if (f.fit) {
    FATHOM_ASSIGN_OR_RETURN(
        tuner::FitOutcome fit,
        calibrator.FitToPublished(fit_on, calibration, Progress("fit"), f.free_params));
    calibration = fit.calibration;
    calibration.note =
        "Fitted by `fathom calibrate --fit` on " + f.results + " (" +
        (unfitted.empty() ? "" : "the first ") + std::to_string(fit_on.size()) +
        " rows, each run as long as its MLPerf run" +
        (f.max_requests > 0 ? ", capped at " + std::to_string(f.max_requests) + " requests" : "") +
        "); stddev from Ceres's covariance.";
    if (!f.json) PrintFit("fit", fit);
    out["calibration"] = models::ToJson(calibration);
    if (!f.out.empty()) {
      FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.out, models::ToJson(calibration).dump(2) + "\n"));
      if (!f.json) std::printf("wrote %s\n", f.out.c_str());
    }
  }
  FATHOM_ASSIGN_OR_RETURN(std::vector<tuner::RowPrediction> preds,
                          calibrator.PredictRows(rows, calibration));
  FATHOM_RETURN_IF_ERROR(calibrator.PredictCapacity(&preds, calibration));
  if (!f.json) PrintTable(preds);
  OrderedJson jrows = OrderedJson::array();
  for (const auto& p : preds) jrows.push_back(RowJson(p));
  out["rows"] = jrows;
  const tuner::ErrorSummary summary = tuner::Summarize(preds);
  out["median_abs_error_pct"] = SummaryJson(summary);
  out["front_bound"] = {{"rows", summary.front_bound_rows},
                        {"published_within", summary.front_bound_within}};
  if (!f.residuals_out.empty()) {
    // Each row's figures against fathom's, marked fitted where this calibration's fit used it.
    const size_t fitted = f.fit ? fitted_count : loaded->stack_fitted_rows;
    const std::string stack =
        f.fit ? (f.out.empty() ? std::string("fit") : f.out)
              : (loaded->stack_name.empty() ? loaded->calibration_path : loaded->stack_name);
    std::vector<tuner::Residual> residuals;
    for (size_t i = 0; i < preds.size(); ++i) {
      for (tuner::Residual& r : tuner::ResidualsOf(
               preds[i], stack, std::filesystem::path(f.results).filename().string(), i < fitted)) {
        residuals.push_back(std::move(r));
      }
    }
    FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.residuals_out, tuner::ResidualsCsv(residuals)));
  }

  if (f.cross_validate) {
    const auto start = std::chrono::steady_clock::now();
    auto fold_done = [&](int done, int folds) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "cross-validation: %d of %d fits done (%.0f s)\n", done, folds, secs);
    };
    FATHOM_ASSIGN_OR_RETURN(
        std::vector<tuner::CrossValidation> cvs,
        calibrator.CrossValidate(fit_on, unfitted, calibration, f.free_params, fold_done));
    std::set<int> fitted_lines;
    for (const auto& r : fit_on) fitted_lines.insert(r.line);
    for (const tuner::CrossValidation& cv : cvs) {
      const std::string label = "leave-one-" + cv.kind + "-out";
      std::vector<tuner::RowPrediction> held_out, held_out_fitted;
      OrderedJson folds = OrderedJson::array();
      if (!f.json) std::printf("\n%s fits:\n", label.c_str());
      for (const tuner::Fold& fold : cv.folds) {
        if (!AddFold(fold.held_out, fold.fit, f.json, &folds)) continue;
        for (const auto& p : fold.predictions) {
          held_out.push_back(p);
          if (fitted_lines.count(p.row.line)) held_out_fitted.push_back(p);
        }
      }
      const tuner::ErrorSummary e = tuner::Summarize(held_out);
      std::string json_key = label;
      std::replace(json_key.begin(), json_key.end(), '-', '_');
      out[json_key] = SummaryJson(e);
      if (!unfitted.empty())
        out[json_key]["fitted_rows"] = SummaryJson(tuner::Summarize(held_out_fitted));
      out[json_key]["folds"] = folds;
      if (!f.json) {
        std::printf("\n%s:\n", label.c_str());
        PrintTable(held_out);
        if (!unfitted.empty()) {
          const tuner::ErrorSummary ef = tuner::Summarize(held_out_fitted);
          std::printf(
              "of which the %d rows fits use (--fit-rows): throughput %.1f%%, p99 latencies "
              "%.1f%%, Server capacity %.1f%%\n",
              ef.rows, ef.tokens_median_abs_pct, ef.latency_median_abs_pct,
              ef.capacity_median_abs_pct);
        }
      }
    }
  }
  if (f.json) std::printf("%s\n", out.dump(2).c_str());
  std::fflush(stdout);  // the table before the closing line, where both reach one terminal or file
  std::fprintf(stderr,
               "calibrate: %lld work items on %d %s; the coordinator's own time %.2f ms an item\n",
               static_cast<long long>(calibrator.items()), pool->workers(),
               pool->mpi() ? (pool->workers() == 1 ? "MPI rank" : "MPI ranks")
                           : (pool->workers() == 1 ? "thread" : "threads"),
               1e3 * calibrator.coordinator_s() / std::max<int64_t>(1, calibrator.items()));
  return Status::Ok();
}

}  // namespace

void RegisterCalibrate(CLI::App& app, Status* result) {
  auto f = std::make_shared<CalibrateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Compare the cost model with published MLPerf results, and fit it (--fit)");
  cmd->add_option("--results", f->results,
                  "Published results CSV (e.g. models/calibration/mlperf_v5.1.csv)");
  cmd->add_option("--benchmarks", f->benchmarks,
                  "Instead of MLPerf rows, score measured serving points: fixed lengths, a closed "
                  "loop of clients, mean TTFT and TPOT (models/calibration/"
                  "serving_benchmarks_aic.csv); each predicted by its engine's newest stack on its "
                  "GPU, the GPU's default where the engine has none (--stack, --engine: one for "
                  "all)");
  cmd->add_option("--benchmark-engine", f->benchmark_engine,
                  "With --benchmarks: only the points of this engine (trtllm, vllm or sglang)");
  cmd->add_option("--points-out", f->points_out,
                  "With --benchmarks: write each point's measured and predicted means (CSV)");
  cmd->add_option(
      "--setup", f->setup,
      "Deployments and run lengths of the rows (default: "
      "models/calibration/published_deployments_ROUND.json for the rows' MLPerf round)");
  cmd->add_option("--calibration", f->calibration,
                  "Starting calibration file (default: --stack's)");
  cmd->add_option(
      "--engine", f->engine,
      "trtllm, vllm or sglang: the stack of that engine calibrated on the rows' MLPerf "
      "round (default: the engine that produced the rows, vLLM for mlperf_vllm_*.csv, SGLang for "
      "mlperf_sglang_*.csv)");
  cmd->add_option("--stack", f->stack,
                  "Software stack whose calibration to use (fathom stack list; default: the one "
                  "of --engine calibrated on the rows' MLPerf round)");
  cmd->add_option(
         "--free", f->free_params,
         "With --fit and --cross-validate: the parameters to fit, the others held (default: all)")
      ->delimiter(',');
  cmd->add_flag("--fit", f->fit, "Fit the stack-level parameters with Ceres");
  cmd->add_option("--out", f->out, "With --fit: write the fitted calibration here");
  cmd->add_option("--residuals-out", f->residuals_out,
                  "Write each row's figures beside fathom's as a residual table (CSV; "
                  "models/calibration/residuals.csv is the shipped rows', behind the error bars)");
  cmd->add_flag(
      "--cross-validate", f->cross_validate,
      "Also report leave-one-model-out, leave-one-hardware-out and leave-one-submitter-out errors");
  cmd->add_option("--fit-rows", f->fit_rows,
                  "Fit (--fit, and each --cross-validate fold) on the first N rows only; the "
                  "others are predicted, never fitted (default: all)");
  cmd->add_option("--samples", f->samples,
                  "Draw this many samples from each data set (default: whole data sets)");
  cmd->add_option("--max-requests", f->max_requests,
                  "Cap each row's run (default: as long as the MLPerf run)");
  cmd->add_option("--jobs", f->jobs,
                  "Threads computing rows, QPS searches and cross-validation folds (default: "
                  "all cores); under mpirun/srun the ranks other than 0 compute instead");
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  cmd->add_flag("--json", f->json, "Print JSON");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
