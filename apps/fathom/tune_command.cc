#include <unistd.h>

#include <cstdio>
#include <memory>

#include "apps/fathom/commands.h"
#include "apps/fathom/deployment_flags.h"
#include "apps/fathom/time_model_flags.h"
#include "apps/fathom/trace_flags.h"
#include "base/files.h"
#include "base/json_fields.h"
#include "reports/sweep_report.h"
#include "sim/mlperf.h"
#include "traces/transforms.h"
#include "tuner/launch.h"
#include "tuner/tuner.h"

namespace fathom::cli {
namespace {

struct TuneFlags {
  tuner::TuneOptions options;
  std::string scenario = "offline";
  std::string trace;
  std::string benchmark;
  TraceReadFlags read;
  TimeModelFlags time_model;
  std::vector<std::string> hardware_files;
  bool no_disagg = false;
  bool no_prune = false;
  int top = 5;
  bool json = false;
  std::string frontier_csv;
  std::string best_out;
  int64_t dataset_samples = 0;
  double capacity_qps = 0;
  std::vector<int> capacity_gpus = {1, 2, 4, 8, 16, 32, 64};
};

Status Capacity(const TuneFlags& f, const models::HardwareCatalog& catalog) {
  FATHOM_ASSIGN_OR_RETURN(tuner::CapacityPlan plan, tuner::PlanCapacity(f.options, f.capacity_qps, f.capacity_gpus, catalog));
  if (f.json) {
    OrderedJson j;
    j["target_qps"] = f.capacity_qps;
    OrderedJson steps = OrderedJson::array();
    for (const auto& s : plan.steps) {
      OrderedJson o = {{"gpus", s.gpus}, {"meets", s.meets}, {"cost_per_hour_usd", s.cost_per_hour}};
      if (s.best) o["best"] = s.best->ToJson();
      steps.push_back(o);
    }
    j["steps"] = steps;
    if (plan.chosen) {
      j["gpus"] = plan.chosen->gpus;
      j["cost_per_hour_usd"] = plan.chosen->cost_per_hour;
      j["config"] = sim::ToJson(plan.chosen->best->config);
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("Capacity plan: %s on %s for %.3f QPS within the p99 limits\n", f.options.space.model.c_str(),
                f.options.space.hardware.c_str(), f.capacity_qps);
    std::printf("%6s %10s %10s %10s\n", "GPUs", "best QPS", "$/hour", "meets");
    for (const auto& s : plan.steps) {
      std::printf("%6d %10.3f %10.2f %10s\n", s.gpus, s.best ? s.best->qps : 0.0, s.cost_per_hour, s.meets ? "yes" : "no");
    }
    if (plan.chosen) {
      std::printf("\nFewest GPUs: %d ($%.2f per hour): %s\n", plan.chosen->gpus, plan.chosen->cost_per_hour,
                  sim::ToJson(plan.chosen->best->config).dump().c_str());
    }
  }
  if (!plan.chosen) {
    return Status::InvalidArgument("no GPU count tried (up to " + std::to_string(f.capacity_gpus.back()) +
                                   ") sustains " + std::to_string(f.capacity_qps) + " QPS within the limits");
  }
  return Status::Ok();
}

Status Run(TuneFlags f) {
  tuner::TuneOptions& o = f.options;
  FATHOM_ASSIGN_OR_RETURN(o.space.scenario, sim::ParseScenario(f.scenario));
  if (o.space.scenario != sim::Scenario::kOffline && o.space.scenario != sim::Scenario::kServer &&
      o.space.scenario != sim::Scenario::kInteractive) {
    return Status::InvalidArgument("--scenario = \"" + f.scenario + "\": tune supports offline, server and interactive");
  }
  if (o.jobs < 0) return Status::InvalidArgument("--jobs = " + std::to_string(o.jobs) + ": must be >= 0");
  if (!(o.probe_duration_s > 0)) return Status::InvalidArgument("--probe-duration must be > 0");
  if (o.probe_max_samples < o.probe_min_samples) return Status::InvalidArgument("--probe-max-samples must be >= 300");
  o.space.disaggregated = !f.no_disagg;
  o.prune = !f.no_prune;
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog, LoadCatalog(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(TimeModel time_model, MakeTimeModel(f.time_model, o.space.hardware));
  o.make_time = time_model.factory;
  const std::string stack = time_model.stack;
  o.time_model_tag = f.time_model.cost_model + ":" + models::ToJson(time_model.calibration).dump();
  o.progress = !f.json && isatty(STDERR_FILENO);

  FATHOM_ASSIGN_OR_RETURN(Workload workload, LoadWorkload(o.space.model, f.benchmark, f.trace, f.read));
  o.benchmark = workload.benchmark != nullptr ? workload.benchmark->name : "";
  if (f.dataset_samples > 0) {
    const int64_t size = static_cast<int64_t>(workload.requests.size());
    auto all = traces::Repeat(std::move(workload.requests), size);
    FATHOM_ASSIGN_OR_RETURN(o.dataset, traces::SampleWithoutReplacement(*all, f.dataset_samples, o.seed));
  } else {
    o.dataset = std::move(workload.requests);
  }
  const std::string workload_note = workload.note;
  if (!f.json) std::fprintf(stderr, "fathom: %s\n", workload.note.c_str());

  if (f.capacity_qps > 0) return Capacity(f, catalog);
  FATHOM_ASSIGN_OR_RETURN(tuner::TuneResult res, tuner::Tune(o, catalog));
  const bool server = o.space.scenario != sim::Scenario::kOffline;

  if (!f.frontier_csv.empty()) {
    reports::Table csv({{"tokens_per_s_per_gpu"}, {"tokens_per_s_per_user"}, {"throughput_tokens_per_s"}, {"qps"},
                        {"cost_per_million_tokens"}, {"config", false}});
    for (const auto& c : res.frontier) {
      csv.AddRow({std::to_string(c.tokens_per_s_per_gpu), std::to_string(c.tokens_per_s_per_user),
                  std::to_string(c.throughput_tokens_per_s), std::to_string(c.qps),
                  std::to_string(c.cost_per_million_tokens), sim::ToJson(c.config).dump()});
    }
    FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.frontier_csv, csv.Csv()));
  }
  if (res.ranked.empty()) {
    return Status::InvalidArgument("no candidate is valid: none fits in memory or meets the latency limits (" +
                                   std::to_string(res.candidates) + " feasible, " + std::to_string(res.infeasible) +
                                   " infeasible)");
  }
  const tuner::CandidateResult& best = res.ranked.front();
  const tuner::LaunchCommands launch = tuner::MakeLaunchCommands(best.config);
  if (!f.best_out.empty()) FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.best_out, sim::ToJson(best.config).dump(2) + "\n"));

  if (f.json) {
    OrderedJson j;
    OrderedJson b;
    b["config"] = sim::ToJson(best.config);
    b["throughput_tokens_per_s"] = best.throughput_tokens_per_s;
    b["tokens_per_s_per_gpu"] = best.tokens_per_s_per_gpu;
    b["tokens_per_s_per_user"] = best.tokens_per_s_per_user;
    b["qps"] = best.qps;
    b["ttft_p99_ms"] = best.ttft_p99_ms;
    b["tpot_p99_ms"] = best.tpot_p99_ms;
    b["cost_per_million_tokens"] = best.cost_per_million_tokens;
    b["run_samples"] = best.run_samples;
    b["run_s"] = best.run_s;
    b["launch"] = {{"vllm", launch.vllm}, {"sglang", launch.sglang}, {"trtllm", launch.trtllm},
                   {"trtllm_extra_options_yaml", launch.trtllm_yaml}};
    j["best"] = b;
    j["workload"] = workload_note;
    j["stack"] = stack;
    OrderedJson top = OrderedJson::array();
    for (int i = 0; i < f.top && i < static_cast<int>(res.ranked.size()); ++i) top.push_back(res.ranked[i].ToJson());
    j["top"] = top;
    OrderedJson frontier = OrderedJson::array();
    for (const auto& c : res.frontier) frontier.push_back(c.ToJson());
    j["frontier"] = frontier;
    j["candidates"] = res.candidates;
    j["evaluated"] = res.evaluated;
    j["reused"] = res.reused;
    j["pruned"] = res.pruned;
    j["infeasible"] = res.infeasible;
    j["sweep_id"] = res.sweep_id;
    j["wall_s"] = res.wall_s;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("Tune: %s on %d x %s, %s scenario%s", o.space.model.c_str(), o.space.gpus, o.space.hardware.c_str(),
              f.scenario.c_str(), stack.empty() ? "" : (", stack " + stack).c_str());
  if (server) {
    const auto limits = sim::MlperfLimits(o.benchmark, o.space.scenario);
    std::printf(", p99 limits TTFT %.0f ms / TPOT %.0f ms", o.ttft_limit_ms.value_or(limits ? limits->ttft_ms : 0),
                o.tpot_limit_ms.value_or(limits ? limits->tpot_ms : 0));
  }
  std::printf("\n%lld candidates: %lld simulated, %lld from the results store, %lld pruned by bound; %lld infeasible; %.1f s\n\n",
              static_cast<long long>(res.candidates), static_cast<long long>(res.evaluated),
              static_cast<long long>(res.reused), static_cast<long long>(res.pruned),
              static_cast<long long>(res.infeasible), res.wall_s);
  std::printf("%s", reports::RankingTable(res.ranked, f.top).Text().c_str());
  std::printf("\nBest: %.0f tokens/s (%.0f per GPU)%s, $%.3f per million tokens at $%.2f per GPU-hour\n",
              best.throughput_tokens_per_s, best.tokens_per_s_per_gpu,
              server ? (" at " + std::to_string(best.qps) + " QPS").c_str() : "", best.cost_per_million_tokens,
              best.cost_per_million_tokens * best.throughput_tokens_per_s * 3600.0 / 1e6 / best.config.TotalGpus());
  std::printf("Run behind these figures: %lld samples, %.0f s measured%s\n", static_cast<long long>(best.run_samples),
              best.run_s,
              server                 ? " (the highest-QPS probe that held the limits)"
              : o.offline_samples > 0 ? " (--samples)"
                                      : " (whole data sets lasting LoadGen's 1.1 x 600 s, or the benchmark's published run "
                                        "where longer)");
  std::printf("Deployment (fathom simulate --deployment FILE):\n%s\n", sim::ToJson(best.config).dump().c_str());
  std::printf("\nLaunch it:\n  %s\n\n  %s\n\n  %s\n  # extra.yaml:\n%s\n", launch.vllm.c_str(), launch.sglang.c_str(),
              launch.trtllm.c_str(), launch.trtllm_yaml.c_str());
  std::printf("Pareto frontier (tokens/s per GPU vs tokens/s per user): %zu points%s\n", res.frontier.size(),
              f.frontier_csv.empty() ? " (--frontier-csv FILE writes them)" : "");
  return Status::Ok();
}

}  // namespace

void RegisterTune(CLI::App& app, Status* result) {
  auto f = std::make_shared<TuneFlags>();
  tuner::SearchSpace& s = f->options.space;
  CLI::App* cmd = app.add_subcommand("tune", "Search for the best deployment under MLPerf's rules (the main job)");
  cmd->add_option("--model", s.model, "Built-in model or config.json path")->capture_default_str();
  cmd->add_option("--hardware", s.hardware, "GPU name")->capture_default_str();
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  cmd->add_option("--gpus", s.gpus, "GPUs to deploy on")->capture_default_str();
  cmd->add_option("--scenario", f->scenario, "offline, server or interactive")->capture_default_str();
  cmd->add_option("--trace", f->trace, "Workload file (default: the data set of the model's MLPerf benchmark)");
  cmd->add_option("--benchmark", f->benchmark, "MLPerf benchmark whose data set and p99 limits to use (default: the model's)");
  AddTraceReadFlags(cmd, &f->read);
  cmd->add_option("--ttft-ms", f->options.ttft_limit_ms, "p99 TTFT limit (default: the MLPerf benchmark's)");
  cmd->add_option("--tpot-ms", f->options.tpot_limit_ms, "p99 TPOT limit (default: the MLPerf benchmark's)");
  cmd->add_option("--weights", s.weights, "Weight formats to try (default: fp4 and fp8 where fp4 is supported, else fp8)")->delimiter(',');
  cmd->add_option("--kv", s.kv, "KV-cache formats to try")->delimiter(',')->capture_default_str();
  cmd->add_option("--max-batch", s.max_batch, "Batch limits to try")->delimiter(',')->capture_default_str();
  cmd->add_option("--max-num-tokens", s.max_num_tokens, "Token budgets to try")->delimiter(',')->capture_default_str();
  cmd->add_flag("--no-disagg", f->no_disagg, "Skip disaggregated prefill/decode candidates");
  cmd->add_flag("--no-prune", f->no_prune, "Simulate every feasible candidate (no bound pruning)");
  cmd->add_option("--samples", f->options.offline_samples, "Offline: requests per run (default: whole data sets per instance lasting LoadGen's 1.1 x 600 s, or the benchmark's published run where longer)");
  cmd->add_option("--dataset-samples", f->dataset_samples, "Draw this many samples from the trace (seeded)");
  cmd->add_option("--probe-duration", f->options.probe_duration_s, "Server: seconds of arrivals per QPS probe")
      ->capture_default_str();
  cmd->add_option("--probe-max-samples", f->options.probe_max_samples, "Server: requests per QPS probe at most")
      ->capture_default_str();
  cmd->add_option("--qps-steps", f->options.qps_steps, "Server: bisection steps")->capture_default_str();
  cmd->add_option("--jobs", f->options.jobs, "Worker threads (default: all cores)");
  cmd->add_option("--db", f->options.db_path, "SQLite results store: resume an interrupted sweep, never re-simulate");
  cmd->add_option("--sweep-id", f->options.sweep_id, "Name of the sweep in the store (default: derived from inputs)");
  cmd->add_option("--price", f->options.price_per_gpu_hour, "USD per GPU-hour (default: the hardware file's)");
  cmd->add_option("--seed", f->options.seed, "Random seed")->capture_default_str();
  cmd->add_option("--top", f->top, "Rows in the table")->capture_default_str();
  cmd->add_option("--capacity-qps", f->capacity_qps,
                  "Capacity planning: the fewest GPUs that sustain this QPS within the limits (server/interactive)");
  cmd->add_option("--capacity-gpus", f->capacity_gpus, "GPU counts to try, in increasing order")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--frontier-csv", f->frontier_csv, "Write the Pareto frontier as CSV");
  cmd->add_option("--best-out", f->best_out, "Write the best deployment as JSON");
  AddTimeModelFlags(cmd, &f->time_model);
  cmd->add_flag("--json", f->json, "Print JSON");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
