#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>

#include "apps/fathom/commands.h"
#include "apps/fathom/deployment_flags.h"
#include "base/files.h"
#include "base/json_fields.h"
#include "models/cost_model.h"
#include "models/stack.h"
#include "tuner/calibrate.h"

namespace fathom::cli {
namespace {

struct CalibrateFlags {
  std::string results;
  std::string setup;
  std::string calibration;
  std::string stack;
  std::vector<std::string> free_params;
  std::string out;
  int64_t samples = 0;       // > 0: draw this many samples from each data set
  int64_t max_requests = 0;  // > 0: cap each row's run
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
  }
  // The first metric's fields at the top level too, for a flat view of each row.
  j["published"] = p.row.tokens_per_s;
  j["predicted"] = p.tokens_per_s;
  j["error_pct"] = p.TokensErrorPct();
  return j;
}

void PrintTable(const std::vector<tuner::RowPrediction>& preds) {
  std::printf("%-5s %-14s %-6s %-14s %-11s %7s %10s %10s %7s %8s %8s %7s %7s %7s %7s %7s %7s %7s\n", "line",
              "submitter", "gpu", "model", "scenario", "samples", "tok/s pub", "tok/s sim", "err%", "TTFT pub", "TTFT sim",
              "err%", "TPOT pub", "TPOT sim", "err%", "QPS pub", "QPS max", "err%");
  for (const auto& p : preds) {
    std::printf("%-5d %-14s %-6s %-14s %-11s %7lld %10.0f %10.0f %+7.1f", p.row.line, p.row.submitter.c_str(),
                p.row.accelerator.c_str(), p.row.model.c_str(), p.row.scenario.c_str(),
                static_cast<long long>(p.requests), p.row.tokens_per_s,
                p.tokens_per_s, p.TokensErrorPct());
    if (!p.row.offline()) {
      std::printf(" %8.0f %8.0f %+7.1f %7.1f %7.1f %+7.1f", p.row.ttft_p99_ms, p.ttft_p99_ms, p.TtftErrorPct(),
                  p.row.tpot_p99_ms, p.tpot_p99_ms, p.TpotErrorPct());
      if (p.has_capacity) std::printf(" %7.2f %7.2f %+7.1f", p.row.target_qps, p.capacity_qps, p.CapacityErrorPct());
    }
    std::printf("%s\n", p.extrapolated ? "  (extrapolated)" : "");
  }
  const tuner::ErrorSummary s = tuner::Summarize(preds);
  std::printf("median |error|: throughput %.1f%% (Offline rows %.1f%%), p99 latencies at the published QPS %.1f%%, "
              "Server capacity %.1f%% over %d rows\n",
              s.tokens_median_abs_pct, s.offline_tokens_median_abs_pct, s.latency_median_abs_pct,
              s.capacity_median_abs_pct, s.rows);
}

void PrintFit(const std::string& what, const tuner::FitOutcome& fit) {
  std::printf("%s: %d iterations, cost %.4f -> %.4f\n", what.c_str(), fit.iterations, fit.initial_cost, fit.final_cost);
  const auto v = fit.calibration.params.Fitted();
  for (int i = 0; i < models::CostParams::kNumFitted; ++i) {
    std::printf("  %-28s %10.4f +- %.4f\n", models::CostParams::kFitted[i], v[i], fit.calibration.stddev[i]);
  }
}

// A line on stderr per solver iteration: fits take minutes.
tuner::FitProgress Progress(const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  return [what, start](int iteration, double cost) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "%s: iteration %d, cost %.4f (%.0f s)\n", what.c_str(), iteration, cost, s);
  };
}

Status Run(const CalibrateFlags& f) {
  if (f.samples != 0 && f.samples < 100) {
    return Status::InvalidArgument("--samples = " + std::to_string(f.samples) + ": must be 0 (whole data sets) or >= 100");
  }
  if (f.max_requests < 0) return Status::InvalidArgument("--max-requests = " + std::to_string(f.max_requests) + ": must be >= 0");
  if (f.jobs < 0) return Status::InvalidArgument("--jobs = " + std::to_string(f.jobs) + ": must be >= 0");
  FATHOM_ASSIGN_OR_RETURN(std::vector<tuner::PublishedResult> rows, tuner::LoadPublishedResults(f.results));
  // The rows' MLPerf round picks the default setup and stack: each round's rows run under their
  // own round's published deployments and are checked against the stack calibrated on them.
  std::set<std::string> rounds;
  for (const auto& r : rows) rounds.insert(r.round);
  const std::string round = rounds.size() == 1 ? *rounds.begin() : "";
  auto mixed_rounds = [&](const std::string& give) {
    return Status::InvalidArgument(f.results +
                                   (rounds.size() > 1 ? ": rows of " + std::to_string(rounds.size()) + " MLPerf rounds"
                                                      : std::string(": rows name no MLPerf round")) +
                                   " (version column): give " + give);
  };
  if (f.setup.empty() && round.empty()) return mixed_rounds("--setup");
  FATHOM_ASSIGN_OR_RETURN(tuner::CalibrationSetup setup,
                          tuner::LoadCalibrationSetup(f.setup.empty() ? tuner::DefaultSetupPath(round) : f.setup, f.samples, 1));
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog, LoadCatalog(f.hardware_files));

  // The calibration: --calibration, else --stack's, else that of the stack calibrated on the rows'
  // MLPerf round (each stack is fitted and checked on its own round's rows).
  std::string calibration_path = f.calibration;
  std::string stack_note;
  if (calibration_path.empty()) {
    FATHOM_ASSIGN_OR_RETURN(std::vector<models::Stack> stacks, models::LoadStacks(models::DefaultStacksPath()));
    models::Stack stack;
    if (!f.stack.empty()) {
      FATHOM_ASSIGN_OR_RETURN(stack, models::FindStack(stacks, f.stack));
    } else {
      if (round.empty()) return mixed_rounds("--stack or --calibration");
      FATHOM_ASSIGN_OR_RETURN(stack, models::StackForRound(stacks, round));
    }
    calibration_path = stack.CalibrationPath();
    stack_note = "stack " + stack.name + " (" + stack.engine + " " + stack.version + ")";
  } else if (!f.stack.empty()) {
    return Status::InvalidArgument("--stack and --calibration: give one");
  }
  FATHOM_ASSIGN_OR_RETURN(models::Calibration calibration, models::LoadCalibration(calibration_path));
  if (!f.json && !stack_note.empty()) std::printf("%s\n", stack_note.c_str());
  OrderedJson out;
  out["calibration_file"] = calibration_path;
  if (f.fit) {
    FATHOM_ASSIGN_OR_RETURN(tuner::FitOutcome fit,
                            tuner::FitToPublished(rows, setup, catalog, calibration, f.max_requests, f.jobs, Progress("fit"),
                                                  f.free_params));
    calibration = fit.calibration;
    calibration.note = "Fitted by `fathom calibrate --fit` on " + f.results + " (" + std::to_string(rows.size()) +
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
                          tuner::PredictRows(rows, setup, catalog, calibration, f.max_requests, f.jobs));
  FATHOM_RETURN_IF_ERROR(tuner::PredictCapacity(&preds, setup, catalog, calibration, f.max_requests, f.jobs));
  if (!f.json) PrintTable(preds);
  OrderedJson jrows = OrderedJson::array();
  for (const auto& p : preds) jrows.push_back(RowJson(p));
  out["rows"] = jrows;
  const tuner::ErrorSummary s = tuner::Summarize(preds);
  out["median_abs_error_pct"] = {{"tokens_per_s", s.tokens_median_abs_pct},
                                 {"offline_tokens_per_s", s.offline_tokens_median_abs_pct},
                                 {"p99_latency", s.latency_median_abs_pct},
                                 {"capacity_qps", s.capacity_median_abs_pct}};

  if (f.cross_validate) {
    // Leave one model, one GPU, one submitter out: fit on the other rows, predict the held-out
    // rows. Each fold starts from the physical defaults, not from a calibration the held-out rows
    // helped fit: the fitted parameters (--free's, else all) restart from them; held ones, such as
    // measured operator parameters, stay. The folds repeat the shipped procedure.
    models::Calibration neutral = calibration;
    {
      auto x = neutral.params.Fitted();
      const auto defaults = models::CostParams{}.Fitted();
      for (int k = 0; k < models::CostParams::kNumFitted; ++k) {
        const bool free = f.free_params.empty() || std::find(f.free_params.begin(), f.free_params.end(),
                                                             models::CostParams::kFitted[k]) != f.free_params.end();
        if (free) x[k] = defaults[k];
      }
      neutral.params.SetFitted(x);
    }
    struct FoldKind {
      const char* name;
      std::string (*key)(const tuner::PublishedResult&);
    };
    const FoldKind kinds[] = {{"hardware", [](const tuner::PublishedResult& r) { return r.accelerator; }},
                              {"model", [](const tuner::PublishedResult& r) { return r.model; }},
                              {"submitter", [](const tuner::PublishedResult& r) { return r.submitter; }}};
    for (const FoldKind& kind : kinds) {
      const std::string label = std::string("leave-one-") + kind.name + "-out";
      std::set<std::string> keys;
      for (const auto& r : rows) keys.insert(kind.key(r));
      std::vector<tuner::RowPrediction> held_out;
      OrderedJson folds = OrderedJson::array();
      if (!f.json) std::printf("\n%s fits:\n", label.c_str());
      for (const auto& key : keys) {
        std::vector<tuner::PublishedResult> train, test;
        for (const auto& r : rows) (kind.key(r) == key ? test : train).push_back(r);
        if (train.empty()) continue;
        auto fit = tuner::FitToPublished(train, setup, catalog, neutral, f.max_requests, f.jobs,
                                         Progress("without " + key), f.free_params);
        if (!fit.ok()) {
          // Too few rows left to fit (one GPU or submitter holds most of them): said, not fatal.
          if (!f.json) std::printf("without %s: %s\n", key.c_str(), fit.status().message().c_str());
          folds.push_back({{"held_out", key}, {"error", fit.status().message()}});
          continue;
        }
        if (!f.json) PrintFit("without " + key, *fit);
        folds.push_back({{"held_out", key}, {"calibration", models::ToJson(fit->calibration)}});
        FATHOM_ASSIGN_OR_RETURN(auto p, tuner::PredictRows(test, setup, catalog, fit->calibration, f.max_requests, f.jobs));
        FATHOM_RETURN_IF_ERROR(tuner::PredictCapacity(&p, setup, catalog, fit->calibration, f.max_requests, f.jobs));
        held_out.insert(held_out.end(), p.begin(), p.end());
      }
      const tuner::ErrorSummary cv = tuner::Summarize(held_out);
      std::string json_key = label;
      std::replace(json_key.begin(), json_key.end(), '-', '_');
      out[json_key] = {{"tokens_per_s", cv.tokens_median_abs_pct},
                       {"offline_tokens_per_s", cv.offline_tokens_median_abs_pct},
                       {"p99_latency", cv.latency_median_abs_pct},
                       {"capacity_qps", cv.capacity_median_abs_pct},
                       {"folds", folds}};
      if (!f.json) {
        std::printf("\n%s:\n", label.c_str());
        PrintTable(held_out);
      }
    }
  }
  if (f.json) std::printf("%s\n", out.dump(2).c_str());
  return Status::Ok();
}

}  // namespace

void RegisterCalibrate(CLI::App& app, Status* result) {
  auto f = std::make_shared<CalibrateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Compare the cost model with published MLPerf results, and fit it (--fit)");
  cmd->add_option("--results", f->results, "Published results CSV (e.g. models/calibration/mlperf_v5.1.csv)")->required();
  cmd->add_option("--setup", f->setup, "Deployments and run lengths of the rows (default: models/calibration/published_deployments_ROUND.json for the rows' MLPerf round)");
  cmd->add_option("--calibration", f->calibration, "Starting calibration file (default: --stack's)");
  cmd->add_option("--stack", f->stack,
                  "Software stack whose calibration to use (fathom stack list; default: the one calibrated on the rows' MLPerf round)");
  cmd->add_option("--free", f->free_params,
                  "With --fit and --cross-validate: the parameters to fit, the others held (default: all)")
      ->delimiter(',');
  cmd->add_flag("--fit", f->fit, "Fit the stack-level parameters with Ceres");
  cmd->add_option("--out", f->out, "With --fit: write the fitted calibration here");
  cmd->add_flag("--cross-validate", f->cross_validate,
                "Also report leave-one-model-out, leave-one-hardware-out and leave-one-submitter-out errors");
  cmd->add_option("--samples", f->samples, "Draw this many samples from each data set (default: whole data sets)");
  cmd->add_option("--max-requests", f->max_requests, "Cap each row's run (default: as long as the MLPerf run)");
  cmd->add_option("--jobs", f->jobs, "Simulations in parallel (default: all cores)");
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  cmd->add_flag("--json", f->json, "Print JSON");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
