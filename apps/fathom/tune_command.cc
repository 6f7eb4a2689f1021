#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>

#include "apps/fathom/commands.h"
#include "apps/fathom/interval_note.h"
#include "apps/fathom/published_note.h"
#include "apps/fathom/tune_setup.h"
#include "base/files.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "models/hardware.h"
#include "models/stack.h"
#include "reports/breakdown.h"
#include "reports/sweep_report.h"
#include "sim/mlperf.h"
#include "sim/plan.h"
#include "tuner/search/adaptive.h"
#include "tuner/search/launch.h"
#include "tuner/search/tuner.h"

namespace fathom::cli {
namespace {

struct TuneFlags {
  TuneInputs in;
  std::vector<std::string> hardware_files;
  int top = 5;
  bool json = false;
  std::string frontier_csv;
  std::string best_out;
  std::string runs_log;
  // Adaptive plans.
  bool adaptive = false;
  bool error_bars = false;  // with --adaptive: the best plan's gain +- 1 sigma
  std::string plan_out;
  std::string kv_move = "migrate";
  std::optional<double> restart_s;
  double capacity_qps = 0;
  std::vector<int> capacity_gpus = {1, 2, 4, 8, 16, 32, 64};
};

// Why a GPU count has no valid deployment, in one cell.
std::string CapacityShortfall(const tuner::SearchFailure& why) {
  if (why.closest) {
    return "no: none meets the limits (closest: p99 TTFT " +
           FormatCount(why.closest->failed_ttft_p99_ms) + " ms, TPOT " +
           StrFormat("%.1f", why.closest->failed_tpot_p99_ms) + " ms)";
  }
  if (why.unservable > 0) return "no: a request needs more KV cache than one rank holds";
  return "no: does not fit in memory (lacks " + HumanBytes(why.least_shortfall_bytes) + " per GPU)";
}

Status Capacity(const TuneFlags& f, const models::HardwareCatalog& catalog) {
  FATHOM_ASSIGN_OR_RETURN(
      tuner::CapacityPlan plan,
      tuner::PlanCapacity(f.in.options, f.capacity_qps, f.capacity_gpus, catalog));
  if (f.json) {
    OrderedJson j;
    j["target_qps"] = f.capacity_qps;
    OrderedJson steps = OrderedJson::array();
    for (const auto& s : plan.steps) {
      OrderedJson o = {
          {"gpus", s.gpus}, {"meets", s.meets}, {"cost_per_hour_usd", s.cost_per_hour}};
      if (s.best) o["best"] = s.best->ToJson();
      if (s.failure) o["failure"] = s.failure->ToJson();
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
    std::printf("Capacity plan: %s on %s for %.3f QPS within the p99 limits\n",
                f.in.options.space.model.c_str(), f.in.options.space.hardware.c_str(),
                f.capacity_qps);
    std::printf("%6s %10s %10s  %s\n", "GPUs", "best QPS", "$/hour", "meets");
    for (const auto& s : plan.steps) {
      std::printf("%6d %10s %10.2f  %s\n", s.gpus,
                  s.best ? StrFormat("%.3f", s.best->qps).c_str() : "-", s.cost_per_hour,
                  s.meets  ? "yes"
                  : s.best ? "no"
                           : CapacityShortfall(*s.failure).c_str());
    }
    if (plan.chosen) {
      std::printf("\nFewest GPUs: %d ($%.2f per hour): %s\n", plan.chosen->gpus,
                  plan.chosen->cost_per_hour,
                  sim::ToJson(plan.chosen->best->config).dump().c_str());
    }
  }
  if (!plan.chosen) {
    return Status::InvalidArgument("no GPU count tried (up to " +
                                   std::to_string(f.capacity_gpus.back()) + ") sustains " +
                                   StrFormat("%g", f.capacity_qps) + " QPS within the limits");
  }
  return Status::Ok();
}

// A search that found nothing valid says why, on the terminal or as JSON, and fails.
Status ExplainFailure(const TuneFlags& f, const tuner::TuneResult& res,
                      const std::string& workload_note, const std::string& stack) {
  const tuner::SearchFailure& why = *res.failure;
  if (f.json) {
    OrderedJson j;
    j["valid"] = false;
    j["failure"] = why.ToJson();
    j["workload"] = workload_note;
    j["stack"] = stack;
    j["candidates"] = res.candidates;
    j["evaluated"] = res.evaluated;
    j["reused"] = res.reused;
    j["infeasible"] = res.infeasible;
    j["sweep_id"] = res.sweep_id;
    j["wall_s"] = res.wall_s;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    const tuner::TuneOptions& o = f.in.options;
    std::printf("Tune: %s on %d x %s, %s scenario%s\n", o.space.model.c_str(), o.space.gpus,
                o.space.hardware.c_str(), f.in.scenario.c_str(),
                stack.empty() ? "" : (", stack " + stack).c_str());
    std::printf(
        "%lld candidates: %lld simulated, %lld from the results store; %lld infeasible; %.1f s\n\n",
        static_cast<long long>(res.candidates), static_cast<long long>(res.evaluated),
        static_cast<long long>(res.reused), static_cast<long long>(res.infeasible), res.wall_s);
    std::printf("No candidate is valid:\n");
    if (why.out_of_memory > 0) {
      std::printf("  %lld do not fit in memory (the closest, %s, lacks %s per GPU)\n",
                  static_cast<long long>(why.out_of_memory), why.least_shortfall.c_str(),
                  HumanBytes(why.least_shortfall_bytes).c_str());
    }
    if (why.ttft_limit_ms) {
      std::printf("  %lld broke the p99 TTFT limit (%s ms) at the lowest QPS tried\n",
                  static_cast<long long>(why.ttft_broken), FormatCount(*why.ttft_limit_ms).c_str());
    }
    if (why.tpot_limit_ms) {
      std::printf("  %lld broke the p99 TPOT limit (%s ms) at the lowest QPS tried\n",
                  static_cast<long long>(why.tpot_broken), FormatCount(*why.tpot_limit_ms).c_str());
    }
    if (why.unservable > 0) {
      std::printf("  %lld could not serve the requests at all\n",
                  static_cast<long long>(why.unservable));
    }
    if (why.closest) {
      const tuner::CandidateResult& c = *why.closest;
      std::printf(
          "Closest: %s, batch %lld, tokens %lld at %.3g QPS: p99 TTFT %s ms, p99 TPOT %.1f ms (%s "
          "broke)\n",
          reports::LayoutLabel(c.config).c_str(), static_cast<long long>(c.config.engine.max_batch),
          static_cast<long long>(c.config.engine.max_num_tokens), c.failed_qps,
          FormatCount(c.failed_ttft_p99_ms).c_str(), c.failed_tpot_p99_ms, c.failure.c_str());
      std::printf("  %s\n", sim::ToJson(c.config).dump().c_str());
    }
    if (!why.advice.empty()) std::printf("To find one, try:\n");
    for (const std::string& a : why.advice) std::printf("  - %s\n", a.c_str());
  }
  return Status::InvalidArgument("no candidate is valid (" + std::to_string(res.candidates) +
                                 " feasible, " + std::to_string(res.infeasible) +
                                 " infeasible): see the reasons above");
}

// A progress bar on stderr, redrawn after each candidate of a search and ended with its last.
std::function<void(const tuner::TuneProgress&)> ProgressBar(bool server) {
  return [server](const tuner::TuneProgress& p) {
    const int width = 30;
    const int filled = static_cast<int>(width * p.done / std::max<int64_t>(1, p.total));
    std::fprintf(stderr,
                 "\r[%s%s] %lld/%lld  simulated %lld, reused %lld, pruned %lld, best %.1f %s",
                 std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                 static_cast<long long>(p.done), static_cast<long long>(p.total),
                 static_cast<long long>(p.simulated), static_cast<long long>(p.reused),
                 static_cast<long long>(p.pruned), p.best, server ? "QPS" : "tok/s");
    if (p.done == p.total) std::fprintf(stderr, "\n");
  };
}

// The deployment with the CUDA-graph batch sizes its figures assumed (its stack's, when it names
// none), so that the launch command captures those and `simulate --deployment` replays them.
Result<sim::DeploymentConfig> WithCudaGraphSizes(sim::DeploymentConfig d,
                                                 const models::HardwareCatalog& catalog,
                                                 const sim::TimeModelFactory& make_time) {
  if (d.runtime != models::Runtime::kPython || !d.engine.cuda_graph_batch_sizes.empty()) return d;
  FATHOM_ASSIGN_OR_RETURN(auto resolved, sim::Resolve(d, catalog, make_time));
  d.engine.cuda_graph_batch_sizes = sim::CudaGraphSizes(d.engine, *resolved->time);
  return d;
}

// The adaptive search's answer beside the static best: the plan, what it gains and where.
// Server-type: the queue rules beside the static best.
void PrintQueueRules(const tuner::AdaptiveResult& a) {
  const double base = a.static_run.qps;
  std::printf(
      "\nAdaptive plans (%s: rules on the queue's length, %d batch-limit variants x %d triggers, "
      "switched in place): %lld QPS searches in %.1f s\n",
      "Server-type", a.tail_configs, a.triggers, static_cast<long long>(a.plans), a.wall_s);
  std::printf("  static best       %8.2f QPS (%.0f tokens/s)\n", base,
              a.static_run.throughput_tokens_per_s);
  auto describe = [&](const char* name, const tuner::PlanOutcome& p) {
    const sim::PlanStep& up = p.plan.steps[0];
    const sim::PlanStep& down = p.plan.steps[1];
    std::printf(
        "  %-17s %8.2f QPS (%+.1f%%, %.0f tokens/s): batch %lld, %lld tokens a step while at least "
        "%.0f requests are in the system, back to batch %lld, %lld tokens at %.0f\n",
        name, p.qps, 100 * (p.qps / base - 1), p.throughput_tokens_per_s,
        static_cast<long long>(up.to.engine.max_batch),
        static_cast<long long>(up.to.engine.max_num_tokens), up.when.value,
        static_cast<long long>(down.to.engine.max_batch),
        static_cast<long long>(down.to.engine.max_num_tokens), down.when.value);
  };
  if (a.adapted()) {
    describe("best rule", a.best);
  } else {
    std::printf(
        "  best plan         the static best: no rule holds the p99 limits a grid step (2%%) "
        "above its QPS (%lld broke them there, %lld could not run%s)\n",
        static_cast<long long>(a.broke), static_cast<long long>(a.unusable),
        a.unusable > 0 ? (": " + a.unusable_example).c_str() : "");
    if (a.best_switch) describe("best rule", *a.best_switch);
  }
}

// With --error-bars: the best plan's gain and its 1-sigma spread.
void PrintGainSigma(const tuner::AdaptiveResult& a) {
  if (!a.gain_sigma) return;
  std::printf(
      "  gain of the best plan %+.1f%% +- %.1f%% (1 sigma: both rerun with each fitted cost "
      "parameter one sigma up and down)\n",
      100 * (a.best.Objective(a.server) / a.static_run.Objective(a.server) - 1),
      100 * *a.gain_sigma);
}

void PrintAdaptive(const tuner::AdaptiveResult& a, const std::string& plan_out) {
  if (a.server) {
    PrintQueueRules(a);
    PrintGainSigma(a);
    if (!plan_out.empty()) {
      std::printf("  plan written to %s (`fathom simulate --plan %s` replays it)\n",
                  plan_out.c_str(), plan_out.c_str());
    }
    return;
  }
  const double base = a.static_run.throughput_tokens_per_s;
  auto pct = [&](double v) { return 100 * (v / base - 1); };
  std::printf(
      "\nAdaptive plans (Offline: a switch for the thin tail; %d configurations x %d triggers, "
      "each with its switch cost and free): %lld runs in %.1f s\n",
      a.tail_configs, a.triggers, static_cast<long long>(a.plans), a.wall_s);
  std::printf("  static best       %10.0f tokens/s, %.0f s (the whole deployment, same samples)\n",
              base, a.static_run.duration_s);
  auto describe = [&](const char* name, const tuner::PlanOutcome& p) {
    const sim::PlanStep& step = p.plan.steps.front();
    const sim::SwitchRecord& sw = *p.switched;
    std::printf(
        "  %-17s %10.0f tokens/s (%+.1f%%), %.0f s: at %s (%.0f s in) switch to %s, batch %lld\n"
        "  %17s before it %.0f tokens/s; the tail %.0f s at %.0f tokens/s, the static run's "
        "%.0f s at %.0f; switch %.1f s (pipelines drained %.1f s, restart and KV %.1f s)\n",
        name, p.throughput_tokens_per_s, pct(p.throughput_tokens_per_s), p.duration_s,
        sim::Describe(step.when).c_str(), sw.triggered_s, reports::LayoutLabel(step.to).c_str(),
        static_cast<long long>(step.to.engine.max_batch), "",
        sw.triggered_s > 0 ? static_cast<double>(sw.generated_before) / sw.triggered_s : 0.0,
        p.duration_s - sw.triggered_s, p.tail_tokens_per_s, p.static_tail_s,
        p.static_tail_tokens_per_s, sw.resumed_s - sw.triggered_s, sw.stopped_s - sw.triggered_s,
        sw.resumed_s - sw.stopped_s);
  };
  for (const tuner::PlanOutcome& o : a.orders) {
    std::printf(
        "  %-17s %10.0f tokens/s (%+.1f%%), %.0f s: the static best taking its queue by "
        "predicted output length (log-normal error sigma %.1f, assumed)\n",
        std::string(sim::Name(o.plan.start.engine.queue_order)).c_str(), o.throughput_tokens_per_s,
        pct(o.throughput_tokens_per_s), o.duration_s, o.plan.start.engine.prediction_sigma);
  }
  if (a.adapted() && !a.best.plan.steps.empty()) {
    describe("best plan", a.best);
  } else if (a.adapted()) {
    std::printf("  best plan         the static best with its queue %s\n",
                std::string(sim::Name(a.best.plan.start.engine.queue_order)).c_str());
  } else {
    std::printf("  best plan         the static best: no switch gains what it costs\n");
    if (a.best_switch) describe("best switch", *a.best_switch);
  }
  if (a.oracle && a.oracle->switched) {
    describe("oracle (free)", *a.oracle);
    // The bound of any tail policy at that trigger: the static run's tail tokens at the rate the
    // run held before it.
    const sim::SwitchRecord& sw = *a.oracle->switched;
    const double before = static_cast<double>(sw.generated_before) / sw.triggered_s;
    const double tail_tokens = a.oracle->static_tail_s * a.oracle->static_tail_tokens_per_s;
    if (before > 0 && tail_tokens > 0) {
      const double bound_s =
          a.static_run.duration_s - a.oracle->static_tail_s + tail_tokens / before;
      std::printf(
          "  %17s a tail as fast as the run before it would gain at most %+.1f%%: the bound of any "
          "tail policy at this trigger\n",
          "", 100 * (a.static_run.duration_s / bound_s - 1));
    }
  } else if (a.oracle) {
    std::printf("  oracle            %10.0f tokens/s (%+.1f%%): a queue order, no switch\n",
                a.oracle->throughput_tokens_per_s, pct(a.oracle->throughput_tokens_per_s));
  }
  PrintGainSigma(a);
  if (!plan_out.empty()) {
    std::printf("  plan written to %s (`fathom simulate --plan %s` replays it)\n", plan_out.c_str(),
                plan_out.c_str());
  }
}

// The engines a tune compares: without --engine, --stack or --calibration, each engine with a
// stack whose build runs on the GPU (newest stack's first); else only the one asked for (empty:
// the time model's own choice).
Result<std::vector<std::string>> EnginesToTune(const TuneFlags& f,
                                               const models::HardwareCatalog& catalog) {
  const sim::TimeModelOptions& tm = f.in.time_model;
  if (tm.cost_model != "calibrated" || !tm.engine.empty() || !tm.stack.empty() ||
      !tm.calibration.empty() || f.capacity_qps > 0)
    return std::vector<std::string>{""};
  FATHOM_ASSIGN_OR_RETURN(models::Hardware gpu, catalog.Find(f.in.options.space.hardware));
  FATHOM_ASSIGN_OR_RETURN(std::vector<models::Stack> stacks,
                          models::LoadStacks(models::DefaultStacksPath()));
  std::vector<std::string> engines = models::EnginesOn(stacks, gpu.vendor);
  if (engines.empty()) engines = {""};  // no stack runs there: the time model's default
  return engines;
}

// One engine's search, with what set it up.
struct EngineTune {
  TuneSetup setup;  // setup.time_model.engine: as the stack names it; empty without a stack
  tuner::TuneResult res;
  const std::string& engine() const { return setup.time_model.engine; }
  // The tune's objective at its best: Offline tokens/s, else QPS; 0 without a valid deployment.
  double Figure(bool server) const {
    if (res.ranked.empty()) return 0;
    return server ? res.ranked.front().qps : res.ranked.front().throughput_tokens_per_s;
  }
};

// "Engines: TensorRT-LLM (trtllm-1.2) 58,053 tokens/s, vLLM (...) 41,020 tokens/s: TensorRT-LLM
// wins by 41.5%", or which single engine predicted and why no other did.
std::string EnginesLine(const std::vector<EngineTune>& tunes, size_t winner, bool server,
                        const std::string& vendor) {
  const EngineTune& w = tunes[winner];
  if (tunes.size() == 1) {
    return "Engine: " + w.engine() + " (stack " + w.setup.stack +
           "), the only one with a stack whose build runs on " + vendor +
           " GPUs (--engine or --stack to choose)\n";
  }
  std::string line = "Engines (each its newest stack on " + vendor + " GPUs):";
  double runner_up = 0;
  for (size_t i = 0; i < tunes.size(); ++i) {
    const double x = tunes[i].Figure(server);
    line += StrFormat(
        "%s %s (%s) %s", i == 0 ? "" : ",", tunes[i].engine().c_str(), tunes[i].setup.stack.c_str(),
        x > 0 ? (server ? StrFormat("%.2f QPS", x) : FormatCount(x) + " tokens/s").c_str()
              : "no valid deployment");
    if (i != winner) runner_up = std::max(runner_up, x);
  }
  if (runner_up > 0) {
    line += StrFormat(": %s wins by %.1f%%", w.engine().c_str(),
                      100.0 * (w.Figure(server) / runner_up - 1.0));
  } else {
    line += ": only " + w.engine() + " has a valid deployment";
  }
  return line + "\n";
}

// Every simulation the tunes run, one JSON object a line (--runs-log), in the order they end.
class RunsLog {
 public:
  std::function<void(const tuner::TuneRun&)> For(const std::string& stack) {
    return [this, stack](const tuner::TuneRun& r) {
      OrderedJson j;
      j["stack"] = stack;
      j.update(r.ToJson());
      const std::string line = j.dump() + "\n";
      std::lock_guard<std::mutex> lock(mu_);
      lines_ += line;
    };
  }
  Status Write(const std::string& path) {
    if (path.empty()) return Status::Ok();
    std::lock_guard<std::mutex> lock(mu_);
    return WriteFileAtomic(path, lines_);
  }

 private:
  std::mutex mu_;
  std::string lines_;
};

Status Run(TuneFlags f) {
  if (!(f.capacity_qps >= 0 && std::isfinite(f.capacity_qps))) {
    return Status::InvalidArgument(
        StrFormat("--capacity-qps = %g: must be > 0 and finite", f.capacity_qps));
  }
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(const std::vector<std::string> engines, EnginesToTune(f, catalog));
  std::vector<EngineTune> tunes;
  RunsLog runs;
  for (const std::string& engine : engines) {
    TuneInputs in = f.in;
    if (!engine.empty()) in.time_model.engine = models::EngineFlag(engine);
    FATHOM_ASSIGN_OR_RETURN(TuneSetup setup, SetUpTune(std::move(in), catalog));
    tuner::TuneOptions& o = setup.options;
    const bool server = o.space.scenario != sim::Scenario::kOffline;
    if (!f.json && isatty(STDERR_FILENO)) o.progress = ProgressBar(server);
    if (!f.runs_log.empty()) o.on_run = runs.For(setup.stack);
    if (!f.json && tunes.empty()) std::fprintf(stderr, "fathom: %s\n", setup.workload_note.c_str());
    if (f.capacity_qps > 0) {
      f.in.options = std::move(o);
      FATHOM_RETURN_IF_ERROR(Capacity(f, catalog));
      return runs.Write(f.runs_log);
    }
    FATHOM_ASSIGN_OR_RETURN(tuner::TuneResult res, tuner::Tune(o, catalog));
    tunes.push_back({std::move(setup), std::move(res)});
  }
  // The log holds the searches' runs; those that explain the answer below are not its.
  FATHOM_RETURN_IF_ERROR(runs.Write(f.runs_log));
  for (EngineTune& t : tunes) t.setup.options.on_run = nullptr;
  const bool server = tunes.front().setup.options.space.scenario != sim::Scenario::kOffline;
  size_t winner = 0;
  for (size_t i = 1; i < tunes.size(); ++i) {
    if (tunes[i].Figure(server) > tunes[winner].Figure(server)) winner = i;
  }
  std::string engines_line;
  if (f.in.time_model.engine.empty() && f.in.time_model.stack.empty() &&
      !tunes[winner].engine().empty()) {
    engines_line =
        EnginesLine(tunes, winner, server, catalog.Find(f.in.options.space.hardware)->vendor);
  }
  OrderedJson engines_json = OrderedJson::array();
  for (const EngineTune& t : tunes) {
    if (t.engine().empty()) continue;
    engines_json.push_back({{"engine", t.engine()},
                            {"stack", t.setup.stack},
                            {server ? "qps" : "throughput_tokens_per_s", t.Figure(server)}});
  }
  TuneSetup setup = std::move(tunes[winner].setup);
  tuner::TuneResult res = std::move(tunes[winner].res);
  f.in.options = std::move(setup.options);
  tuner::TuneOptions& o = f.in.options;
  const std::string stack = setup.stack;
  const std::string engine = setup.time_model.engine;
  const std::string workload_note = setup.workload_note;

  if (!f.frontier_csv.empty()) {
    reports::Table csv({{"tokens_per_s_per_gpu"},
                        {"tokens_per_s_per_user"},
                        {"throughput_tokens_per_s"},
                        {"qps"},
                        {"cost_per_million_tokens"},
                        {"config", false}});
    for (const auto& c : res.frontier) {
      csv.AddRow({std::to_string(c.tokens_per_s_per_gpu), std::to_string(c.tokens_per_s_per_user),
                  std::to_string(c.throughput_tokens_per_s), std::to_string(c.qps),
                  std::to_string(c.cost_per_million_tokens), sim::ToJson(c.config).dump()});
    }
    FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.frontier_csv, csv.Csv()));
  }
  if (res.ranked.empty()) return ExplainFailure(f, res, workload_note, stack);
  const tuner::CandidateResult& best = res.ranked.front();
  FATHOM_ASSIGN_OR_RETURN(const sim::DeploymentConfig chosen,
                          WithCudaGraphSizes(best.config, catalog, o.make_time));
  const tuner::LaunchCommands launch = tuner::MakeLaunchCommands(chosen, catalog);
  // The best deployment with the run behind its figures, which `simulate --deployment` repeats; a
  // data set drawn with --dataset-samples cannot be drawn again there, so that run is not carried.
  sim::RunRecord run;
  run.scenario = o.space.scenario;
  run.qps = server ? best.qps : 0;
  run.samples = best.run_samples;
  run.seed = o.seed;
  run.benchmark = o.benchmark;
  run.trace = f.in.trace;
  run.stack = stack;
  run.ttft_limit_ms = o.ttft_limit_ms;
  run.tpot_limit_ms = o.tpot_limit_ms;
  const OrderedJson best_json =
      f.in.dataset_samples > 0 ? sim::ToJson(chosen) : sim::ToJson(chosen, run);
  if (!f.best_out.empty())
    FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.best_out, best_json.dump(2) + "\n"));

  std::optional<tuner::AdaptiveResult> adaptive;
  if (f.adaptive) {
    tuner::AdaptiveOptions a;
    a.kv = *sim::ParseKvMove(f.kv_move);
    a.restart_s = f.restart_s;
    FATHOM_ASSIGN_OR_RETURN(adaptive, tuner::SearchPlans(o, catalog, res, a));
    if (f.error_bars) {
      if (setup.time_model.roofline)
        return Status::InvalidArgument("--error-bars needs the calibrated cost model");
      FATHOM_ASSIGN_OR_RETURN(
          adaptive->gain_sigma,
          tuner::GainSigma(*adaptive, o, catalog, sim::PerturbedFactories(setup.time_model)));
    }
    if (f.in.dataset_samples == 0) {
      adaptive->best.plan.run = run;
      adaptive->best.plan.run->samples = adaptive->best.run_samples;
      if (server) adaptive->best.plan.run->qps = adaptive->best.qps;
    }
    if (!f.plan_out.empty()) {
      FATHOM_RETURN_IF_ERROR(
          WriteFileAtomic(f.plan_out, sim::ToJson(adaptive->best.plan).dump(2) + "\n"));
    }
  }

  FATHOM_ASSIGN_OR_RETURN(PublishedNote published,
                          DescribePublished(best.config, o.space.scenario,
                                            server ? best.qps : best.throughput_tokens_per_s,
                                            setup.time_model.calibration.params.stream_interval));
  const Answer answer{o.space.scenario, server,           best.throughput_tokens_per_s, best.qps,
                      best.ttft_p99_ms, best.tpot_p99_ms, !f.in.trace.empty()};
  FATHOM_ASSIGN_OR_RETURN(IntervalNote error_bars, DescribeIntervals(stack, best.config, answer));
  // Far above the best published result on this system: where each configuration's GPU time
  // goes, so that the gain is credited to mechanisms one can check on hardware.
  std::optional<sim::SimulationResult> ours, theirs;
  std::string theirs_label, no_breakdown;
  if (published.check_against) {
    const tuner::PublishedReference& ref = *published.check_against;
    theirs_label = ref.row.submitter + "'s";
    FATHOM_ASSIGN_OR_RETURN(
        ours, tuner::BreakdownRun(best.config, o, catalog, best.qps, best.run_samples));
    // The answer stands without it: a published deployment fathom cannot run gets a line instead.
    auto published_run = tuner::BreakdownRun(*ref.deployment, o, catalog,
                                             server ? ref.row.target_qps : 0, best.run_samples);
    if (published_run.ok()) {
      theirs = std::move(*published_run);
    } else {
      ours.reset();
      no_breakdown = "No breakdown beside " + theirs_label +
                     " configuration: fathom cannot run it (" + published_run.status().message() +
                     ").\n";
    }
  }
  const reports::BreakdownRun ours_run{"fathom's", ours ? &*ours : nullptr,
                                       best.config.TotalGpus()};
  const reports::BreakdownRun theirs_run{
      theirs_label, theirs ? &*theirs : nullptr,
      published.check_against ? published.check_against->deployment->TotalGpus() : 0};
  if (f.json) {
    OrderedJson j;
    OrderedJson b;
    b["config"] = sim::ToJson(chosen);
    b["throughput_tokens_per_s"] = best.throughput_tokens_per_s;
    b["tokens_per_s_per_gpu"] = best.tokens_per_s_per_gpu;
    b["tokens_per_s_per_user"] = best.tokens_per_s_per_user;
    b["qps"] = best.qps;
    b["ttft_p99_ms"] = best.ttft_p99_ms;
    b["tpot_p99_ms"] = best.tpot_p99_ms;
    b["cost_per_million_tokens"] = best.cost_per_million_tokens;
    b["run_samples"] = best.run_samples;
    b["run_s"] = best.run_s;
    b["error_bars"] = error_bars.json;
    if (best_json.contains("run")) b["run"] = best_json["run"];
    b["engine"] = engine;
    b["launch"] = {{"vllm", launch.vllm},
                   {"sglang", launch.sglang},
                   {"trtllm", launch.trtllm},
                   {"trtllm_extra_options_yaml", launch.trtllm_yaml}};
    j["best"] = b;
    j["workload"] = workload_note;
    j["stack"] = stack;
    j["engines"] = engines_json;
    j["published"] = published.json;
    if (ours) {
      j["published"]["gpu_seconds_per_million_tokens"] = {
          {"fathom", reports::BreakdownJson(ours_run)},
          {"published", reports::BreakdownJson(theirs_run)}};
    }
    if (adaptive) j["adaptive"] = adaptive->ToJson();
    OrderedJson top = OrderedJson::array();
    for (int i = 0; i < f.top && i < static_cast<int>(res.ranked.size()); ++i)
      top.push_back(res.ranked[i].ToJson());
    j["top"] = top;
    OrderedJson frontier = OrderedJson::array();
    for (const auto& c : res.frontier) frontier.push_back(c.ToJson());
    j["frontier"] = frontier;
    j["candidates"] = res.candidates;
    j["evaluated"] = res.evaluated;
    j["reused"] = res.reused;
    j["pruned"] = res.pruned;
    j["screened"] = res.screened;
    j["infeasible"] = res.infeasible;
    j[server ? "shared_probes" : "shared_runs"] = res.shared_probes;
    j["sweep_id"] = res.sweep_id;
    j["wall_s"] = res.wall_s;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("Tune: %s on %d x %s, %s scenario%s", o.space.model.c_str(), o.space.gpus,
              o.space.hardware.c_str(), f.in.scenario.c_str(),
              stack.empty() ? "" : (", stack " + stack).c_str());
  if (server) {
    const auto limits = sim::MlperfLimits(o.benchmark, o.space.scenario);
    std::printf(", p99 limits TTFT %.0f ms / TPOT %.0f ms",
                o.ttft_limit_ms.value_or(limits ? limits->ttft_ms : 0),
                o.tpot_limit_ms.value_or(limits ? limits->tpot_ms : 0));
  }
  const std::string shared =
      res.shared_probes > 0
          ? StrFormat(", %lld %s taken from batch siblings",
                      static_cast<long long>(res.shared_probes), server ? "probes" : "runs")
          : "";
  std::printf(
      "\n%lld candidates: %lld simulated, %lld from the results store, %lld pruned (a bound or a "
      "shorter run below the best)%s; %lld infeasible; %.1f s\n\n",
      static_cast<long long>(res.candidates), static_cast<long long>(res.evaluated),
      static_cast<long long>(res.reused), static_cast<long long>(res.pruned), shared.c_str(),
      static_cast<long long>(res.infeasible), res.wall_s);
  std::printf("%s", reports::RankingTable(res.ranked, f.top).Text().c_str());
  std::printf(
      "\nBest: %.0f tokens/s (%.0f per GPU)%s, $%.3f per million tokens at $%.2f per GPU-hour\n",
      best.throughput_tokens_per_s, best.tokens_per_s_per_gpu,
      server ? StrFormat(" at %.2f QPS", best.qps).c_str() : "", best.cost_per_million_tokens,
      best.cost_per_million_tokens * best.throughput_tokens_per_s * 3600.0 / 1e6 /
          best.config.TotalGpus());
  std::printf("%s%s%s%s", engines_line.c_str(), error_bars.text.c_str(), published.text.c_str(),
              no_breakdown.c_str());
  if (ours) {
    std::printf(
        "Where the GPU time goes, fathom's best against %s published configuration (each run "
        "again, every iteration priced in full%s):\n%s%s",
        theirs_label.c_str(),
        server
            ? StrFormat(", at %.2f and %.2f QPS", best.qps, published.check_against->row.target_qps)
                  .c_str()
            : "",
        reports::BreakdownTable({ours_run, theirs_run}).Text().c_str(),
        reports::CreditLines(ours_run, theirs_run).c_str());
  }
  if (best.config.engine.mtp_depth > 0) {
    std::printf(
        "MTP: %d draft tokens a step, each accepted with probability %.2f (assumed: "
        "--acceptance)\n",
        best.config.engine.mtp_depth, best.config.engine.acceptance);
  }
  std::printf(
      "Run behind these figures: %lld samples, %.0f s measured%s\n",
      static_cast<long long>(best.run_samples), best.run_s,
      server ? " (the highest-QPS probe that held the limits)"
      : o.offline_samples > 0
          ? " (--samples)"
          : " (whole data sets lasting LoadGen's 1.1 x 600 s, or the benchmark's published run "
            "where longer)");
  std::printf(
      "Deployment and its run (--best-out FILE writes it; `fathom simulate --deployment FILE` "
      "repeats the run):\n%s\n",
      best_json.dump().c_str());
  if (f.in.dataset_samples > 0)
    std::printf("(a data set drawn with --dataset-samples: simulate cannot repeat the run)\n");
  std::printf("\nLaunch it%s:\n\n%s\n", engine.empty() ? "" : (" on " + engine).c_str(),
              reports::LaunchMarkdown(launch, engine).c_str());
  std::printf("Pareto frontier (tokens/s per GPU vs tokens/s per user): %zu points%s\n",
              res.frontier.size(),
              f.frontier_csv.empty() ? " (--frontier-csv FILE writes them)" : "");
  if (adaptive) PrintAdaptive(*adaptive, f.plan_out);
  return Status::Ok();
}

}  // namespace

void RegisterTune(CLI::App& app, Status* result) {
  auto f = std::make_shared<TuneFlags>();
  tuner::SearchSpace& s = f->in.options.space;
  CLI::App* cmd = app.add_subcommand(
      "tune", "Search for the best deployment under MLPerf's rules (the main job)");
  cmd->add_option("--model", s.model, "Built-in model or config.json path")->capture_default_str();
  cmd->add_option("--hardware", s.hardware, "GPU name")->capture_default_str();
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  cmd->add_option("--gpus", s.gpus, "GPUs to deploy on")->capture_default_str();
  cmd->add_option("--scenario", f->in.scenario, "offline, server or interactive")
      ->capture_default_str();
  cmd->add_option("--trace", f->in.trace,
                  "Workload file (default: the data set of the model's MLPerf benchmark)");
  cmd->add_option("--benchmark", f->in.benchmark,
                  "MLPerf benchmark whose data set and p99 limits to use (default: the model's)");
  AddTraceReadFlags(cmd, &f->in.read);
  cmd->add_option("--ttft-ms", f->in.options.ttft_limit_ms,
                  "p99 TTFT limit (default: the MLPerf benchmark's)");
  cmd->add_option("--tpot-ms", f->in.options.tpot_limit_ms,
                  "p99 TPOT limit (default: the MLPerf benchmark's)");
  cmd->add_option("--weights", s.weights,
                  "Weight formats to try (default: fp4 and fp8 where fp4 is supported, else fp8)")
      ->delimiter(',');
  cmd->add_option("--kv", s.kv, "KV-cache formats to try")->delimiter(',')->capture_default_str();
  cmd->add_option("--max-batch", s.max_batch, "Batch limits to try")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--max-num-tokens", s.max_num_tokens, "Token budgets to try")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--acceptance", s.mtp_acceptance,
                  "Interactive: probability that each MTP draft token is accepted (assumed; none "
                  "is published for MLPerf's data)")
      ->capture_default_str();
  cmd->add_flag("--no-disagg", f->in.no_disagg, "Skip disaggregated prefill/decode candidates");
  cmd->add_flag("--no-prune", f->in.no_prune,
                "Simulate every feasible candidate (no bound pruning)");
  cmd->add_option("--samples", f->in.options.offline_samples,
                  "Offline: requests per run (default: whole data sets per instance lasting "
                  "LoadGen's 1.1 x 600 s, or the benchmark's published run where longer)");
  cmd->add_option("--dataset-samples", f->in.dataset_samples,
                  "Draw this many samples from the trace (seeded)");
  cmd->add_option("--probe-duration", f->in.options.probe_duration_s,
                  "Server: seconds of arrivals per QPS probe (at least the benchmark's minimum "
                  "run, in whole data sets)")
      ->capture_default_str();
  cmd->add_option("--probe-max-samples", f->in.options.probe_max_samples,
                  "Server: requests per QPS probe at most")
      ->capture_default_str();
  cmd->add_option("--qps-steps", f->in.options.qps_steps,
                  "Server: probes of the QPS search (a grid of rates 2% apart)")
      ->capture_default_str();
  cmd->add_option("--jobs", f->in.options.jobs, "Worker threads (default: all cores)");
  cmd->add_option("--db", f->in.options.db_path,
                  "SQLite results store: resume an interrupted sweep, never re-simulate");
  cmd->add_option("--sweep-id", f->in.options.sweep_id,
                  "Name of the sweep in the store (default: derived from inputs)");
  cmd->add_option("--price", f->in.options.price_per_gpu_hour,
                  "USD per GPU-hour (default: the hardware file's)");
  cmd->add_option("--seed", f->in.options.seed, "Random seed")->capture_default_str();
  cmd->add_option("--top", f->top, "Rows in the table")->capture_default_str();
  cmd->add_option("--capacity-qps", f->capacity_qps,
                  "Capacity planning: the fewest GPUs that sustain this QPS within the limits "
                  "(server/interactive)");
  cmd->add_option("--capacity-gpus", f->capacity_gpus, "GPU counts to try, in increasing order")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--frontier-csv", f->frontier_csv, "Write the Pareto frontier as CSV");
  cmd->add_option("--best-out", f->best_out, "Write the best deployment as JSON");
  cmd->add_option("--runs-log", f->runs_log,
                  "Write every simulation the search ran as JSON lines (candidate, QPS, outcome, "
                  "requests, simulated and wall seconds): where a tune spends its time");
  cmd->add_flag("--adaptive", f->adaptive,
                "Also search plans that change the best deployment during a run: Offline, a "
                "switch for the thin tail and predicted queue orders, beside the free-switch "
                "oracle; Server and Interactive, batch limits switched on the queue's length");
  cmd->add_flag("--error-bars", f->error_bars,
                "With --adaptive: the best plan's gain over the static best +- 1 sigma, both run "
                "again with each fitted cost parameter one sigma up and down")
      ->needs("--adaptive");
  cmd->add_option("--plan-out", f->plan_out,
                  "With --adaptive: write the best plan (static when none beats it) as JSON")
      ->needs("--adaptive");
  cmd->add_option("--kv-move", f->kv_move,
                  "With --adaptive: what a switch does with running sequences' KV: migrate, "
                  "recompute, or drain (a rolling replacement on spare GPUs, as `online "
                  "--supervise --plan` makes it)")
      ->check(CLI::IsMember({"migrate", "recompute", "drain"}))
      ->capture_default_str()
      ->needs("--adaptive");
  cmd->add_option("--restart-s", f->restart_s,
                  "With --adaptive: seconds a switch's engines take to restart (default: modelled "
                  "from weight size and CUDA graphs, with an assumed 10 s runtime start)")
      ->check(CLI::NonNegativeNumber)
      ->needs("--adaptive");
  AddTimeModelFlags(cmd, &f->in.time_model);
  cmd->add_flag("--json", f->json, "Print JSON");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
