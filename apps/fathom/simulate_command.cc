#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "apps/fathom/commands.h"
#include "apps/fathom/deployment_flags.h"
#include "apps/fathom/interval_note.h"
#include "apps/fathom/published_note.h"
#include "apps/fathom/time_model_flags.h"
#include "apps/fathom/trace_flags.h"
#include "base/files.h"
#include "base/format.h"
#include "reports/breakdown.h"
#include "sim/deployment_config.h"
#include "sim/mlperf.h"
#include "sim/plan.h"
#include "sim/simulator.h"
#include "traces/transforms.h"

namespace fathom::cli {
namespace {

struct SimulateFlags {
  models::DeploymentRequest deployment;
  std::string deployment_file;
  std::string plan_file;
  std::optional<sim::Plan> plan;                 // read from plan_file
  std::vector<CLI::Option*> deployment_options;  // must not be mixed with --deployment
  const CLI::App* cmd = nullptr;
  sim::DeploymentConfig config;  // engine knobs bound to flags
  std::string scheduler = "chunked", preemption = "recompute", admission = "greedy",
              router = "least-outstanding";
  std::string runtime = "python";
  std::string queue_order = "fifo";
  std::vector<double> acceptance_dist;
  // Disaggregation.
  bool disagg = false;
  sim::PoolLayout prefill{1, 0, 1, 1, 1}, decode{1, 0, 1, 1, 1};
  // Scenario.
  std::string scenario = "offline";
  sim::ScenarioConfig sc;
  std::string trace;
  std::string benchmark;
  TraceReadFlags read;
  sim::TimeModelOptions time_model;
  // Outputs.
  bool json = false;
  bool error_bars = false;
  bool breakdown = false;
  std::string requests_out, timeline, event_log;
};

// An output file for a flag that may be empty (no output).
Result<std::unique_ptr<OutputFile>> CreateOutput(const std::string& path) {
  if (path.empty()) return std::unique_ptr<OutputFile>();
  return OutputFile::Create(path);
}

Result<sim::DeploymentFile> BuildConfig(SimulateFlags& f) {
  const std::string& file_flag = f.plan_file.empty() ? "--deployment" : "--plan";
  if (!f.deployment_file.empty() || !f.plan_file.empty()) {
    if (!f.deployment_file.empty() && !f.plan_file.empty())
      return Status::InvalidArgument("--deployment and --plan: a plan holds its deployments");
    for (const CLI::Option* o : f.deployment_options) {
      if (o->count() > 0) {
        return Status::InvalidArgument(o->get_name() + " and " + file_flag +
                                       ": give the deployment in one place");
      }
    }
    if (f.deployment_file.empty()) {
      FATHOM_ASSIGN_OR_RETURN(f.plan, sim::LoadPlanFile(f.plan_file));
      f.deployment_file = f.plan_file;  // where the run comes from
      return sim::DeploymentFile{f.plan->start, f.plan->run};
    }
    return sim::LoadDeploymentFile(f.deployment_file);
  }
  sim::DeploymentFile file;
  sim::DeploymentConfig& d = file.config;
  d = f.config;
  FATHOM_ASSIGN_OR_RETURN(d.engine.scheduler, sim::ParseScheduler(f.scheduler));
  FATHOM_ASSIGN_OR_RETURN(d.router, sim::ParseRouter(f.router));
  FATHOM_ASSIGN_OR_RETURN(d.engine.queue_order, sim::ParseQueueOrder(f.queue_order));
  FATHOM_ASSIGN_OR_RETURN(d.runtime, models::ParseRuntime(f.runtime));
  if (f.preemption != "recompute" && f.preemption != "swap") {
    return Status::InvalidArgument("--preemption = \"" + f.preemption +
                                   "\": must be recompute or swap");
  }
  d.engine.preemption =
      f.preemption == "swap" ? sim::PreemptionMode::kSwap : sim::PreemptionMode::kRecompute;
  if (f.admission != "greedy" && f.admission != "reserve") {
    return Status::InvalidArgument("--admission = \"" + f.admission +
                                   "\": must be greedy or reserve");
  }
  d.engine.admission =
      f.admission == "reserve" ? sim::AdmissionPolicy::kReserve : sim::AdmissionPolicy::kGreedy;
  d.engine.acceptance_dist = f.acceptance_dist;
  FATHOM_RETURN_IF_ERROR(d.engine.Validate());
  FATHOM_ASSIGN_OR_RETURN(models::Deployment resolved, models::ResolveDeployment(f.deployment));
  d.model = f.deployment.model.empty() ? std::string(models::kDefaultModel) : f.deployment.model;
  d.hardware = resolved.hardware.name;
  d.gpus = resolved.layout.gpus;
  d.tp = resolved.layout.tp;
  d.pp = resolved.layout.pp;
  d.ep = resolved.layout.ep;
  d.attn_dp = resolved.layout.attn_dp;
  d.weights = std::string(models::Name(resolved.precision.moe_weights));
  d.dense_weights = std::string(models::Name(resolved.precision.dense_weights));
  d.kv = std::string(models::Name(resolved.precision.kv));
  if (f.disagg) {
    d.disaggregated = true;
    d.prefill = f.prefill;
    d.decode = f.decode;
    if (d.prefill.tp == 0) d.prefill.tp = d.tp;
    if (d.decode.tp == 0) d.decode.tp = d.tp;
  }
  return file;
}

// The file's run replaces the defaults of the flags the user did not give; a flag that sets the
// run itself (--scenario, --qps, --samples) sets aside the whole of it. Returns where the run came
// from, for the summary ("" when not from the file).
std::string AdoptRun(const std::optional<sim::RunRecord>& run, SimulateFlags* f) {
  if (!run) return "";
  const CLI::App& cmd = *f->cmd;
  for (const char* flag : {"--scenario", "--qps", "--samples"}) {
    if (cmd.count(flag) > 0) return "";
  }
  f->scenario = std::string(sim::Name(run->scenario));
  f->sc.qps = run->qps;
  f->sc.samples = run->samples;
  std::string changed;
  auto adopt = [&](const char* flag, auto* field, const auto& value) {
    if (cmd.count(flag) == 0) {
      *field = value;
    } else {
      changed += (changed.empty() ? "" : ", ") + std::string(flag);
    }
  };
  adopt("--seed", &f->sc.seed, run->seed);
  adopt("--benchmark", &f->benchmark, run->benchmark);
  adopt("--trace", &f->trace, run->trace);
  adopt("--ttft-ms", &f->sc.ttft_limit_ms, run->ttft_limit_ms);
  adopt("--tpot-ms", &f->sc.tpot_limit_ms, run->tpot_limit_ms);
  // --engine asks for another engine's physics: the file's stack gives way to it.
  if (cmd.count("--calibration") == 0 && cmd.count("--cost-model") == 0 &&
      cmd.count("--engine") == 0) {
    adopt("--stack", &f->time_model.stack, run->stack);
  } else if (cmd.count("--engine") > 0 && cmd.count("--stack") == 0) {
    changed += (changed.empty() ? "" : ", ") + std::string("--engine");
  }
  return changed.empty() ? "the run `fathom tune` scored, from " + f->deployment_file
                         : "the run from " + f->deployment_file + " with " + changed +
                               " changed (not the tuner's figures)";
}

void PrintSummary(const sim::DeploymentConfig& d, const sim::ResolvedDeployment& r,
                  const sim::ScenarioConfig& sc, const sim::SimulationResult& res, double wall_s,
                  const sim::TimeModel& time_model, const std::string& run_note) {
  std::printf("Simulation: %s on %d x %s, %s, %s scheduler, batch %lld, max tokens %lld%s\n",
              d.model.c_str(), d.TotalGpus(), d.hardware.c_str(),
              d.disaggregated ? "disaggregated" : r.layout.ToString().c_str(),
              std::string(sim::Name(d.engine.scheduler)).c_str(),
              static_cast<long long>(d.engine.max_batch),
              static_cast<long long>(d.engine.max_num_tokens),
              time_model.stack.empty() ? "" : (", stack " + time_model.stack).c_str());
  std::printf(
      "Scenario: %s%s, %lld requests, %.1f s measured (last completion %.1f s), simulated in %.2f "
      "s\n",
      std::string(sim::Name(sc.scenario)).c_str(),
      sc.qps > 0 ? StrFormat(" at %.3f QPS", sc.qps).c_str() : "",
      static_cast<long long>(res.completed_requests), res.duration_s, res.drain_end_s, wall_s);
  std::printf("Run: %s\n\n", run_note.c_str());
  std::printf("  throughput        %12.1f tokens/s (%.1f per GPU), %.3f requests/s\n",
              res.throughput_tokens_per_s, res.tokens_per_s_per_gpu, res.requests_per_s);
  if (res.sustained_tokens_per_s != res.throughput_tokens_per_s) {
    std::printf(
        "  sustained         %12.1f tokens/s of arrivals (LoadGen's figure above ends at the "
        "last-issued "
        "sample)\n",
        res.sustained_tokens_per_s);
  }
  // Latencies whose p99 passes 100 s read in seconds.
  auto latency = [](const char* name, double mean, double p50, double p99, int decimals) {
    const bool seconds = p99 >= 1e5;
    const double unit = seconds ? 1e-3 : 1;
    std::printf("  %-16s %10.*f %10.*f %10.*f\n",
                (std::string(name) + (seconds ? " (s)" : " (ms)")).c_str(), decimals, mean * unit,
                decimals, p50 * unit, decimals, p99 * unit);
  };
  std::printf("  %-16s %10s %10s %10s\n", "latency", "mean", "p50", "p99");
  latency("TTFT", res.ttft_mean_ms, res.ttft_p50_ms, res.ttft_p99_ms, 1);
  latency("TPOT", res.tpot_mean_ms, res.tpot_p50_ms, res.tpot_p99_ms, 2);
  latency("end to end", res.e2e_mean_ms, res.e2e_p50_ms, res.e2e_p99_ms, 1);
  if (sc.scenario == sim::Scenario::kOffline) {
    std::printf("  (Offline issues every query at the start: TTFT counts its wait for a place)\n");
  }
  if (res.limits) {
    std::printf("\n  limits (p99)      TTFT %.0f ms, TPOT %.0f ms: %s\n", res.limits->ttft_ms,
                res.limits->tpot_ms, res.latency_limits_met ? "met" : "NOT met");
  }
  std::printf("  run length        %s s, %s the %s s minimum\n",
              FormatCount(res.run_length_s).c_str(), res.min_duration_met ? "meets" : "below",
              FormatCount(res.min_duration_s).c_str());
  std::string why;
  for (const std::string& reason : res.InvalidReasons())
    why += (why.empty() ? ": " : "; ") + reason;
  std::printf("  MLPerf valid      %s%s\n", res.mlperf_valid ? "yes" : "no", why.c_str());
  if (res.overloaded) {
    std::printf(
        "  OVERLOADED        arrivals ended at %s s, the last completion came at %s s; %s requests "
        "were still "
        "waiting for their first token at the last arrival, so latencies grow with the run's "
        "length\n",
        FormatCount(res.last_arrival_s).c_str(), FormatCount(res.drain_end_s).c_str(),
        FormatCount(static_cast<double>(res.waiting_at_last_arrival)).c_str());
  }
  std::printf("  preemptions %lld, peak KV use %.1f%%, iterations %lld",
              static_cast<long long>(res.preemptions), 100 * res.kv_peak_utilization,
              static_cast<long long>(res.iterations));
  if (d.engine.prefix_caching) std::printf(", prefix hit rate %.1f%%", 100 * res.prefix_hit_rate);
  std::printf("\n");
  // A request preempted more than once on average: the KV cache thrashes, recomputing its work.
  const double preempted =
      static_cast<double>(res.preemptions) / std::max<int64_t>(1, res.completed_requests);
  if (preempted > 1) {
    std::printf(
        "  KV THRASHING      %.1f preemptions a request: running sequences outgrow the KV cache "
        "and recompute; --admission reserve (admit only what fits), a lower --max-batch%s or more "
        "GPUs hold them\n",
        preempted, d.kv == "fp8" ? "" : ", --kv fp8");
  }
  if (time_model.roofline) {
    std::printf("  (execution times: plain roofline, an optimistic bound)\n");
  } else if (std::find(time_model.calibration.fitted_hardware.begin(),
                       time_model.calibration.fitted_hardware.end(),
                       d.hardware) == time_model.calibration.fitted_hardware.end()) {
    std::printf("  (note: %s is not among the calibration's hardware: these figures extrapolate)\n",
                d.hardware.c_str());
  }
  if (time_model.measured) {
    const models::MeasuredGemms::Coverage c = time_model.measured->coverage();
    const double all = std::max<int64_t>(1, c.within + c.outside + c.unmeasured);
    std::printf(
        "  measured GEMMs    %.1f%% of GEMMs priced from the database, %.1f%% beyond its measured "
        "M range "
        "(extrapolated), %.1f%% analytical (shape not measured)\n",
        100 * c.within / all, 100 * c.outside / all, 100 * c.unmeasured / all);
  }
}

// The serving front's load, where one is modelled, and for a run it bounds, the same run with a
// front that costs nothing.
void PrintFront(const sim::SimulationResult& res, const sim::TimeModel& time_model,
                const sim::SimulationResult* front_free) {
  if (!(res.front_max_tokens_per_s > 0)) return;
  std::printf(
      "  serving front     busy %.0f%% of the arrivals' time on its busiest instance (streams at "
      "most %s tokens/s an instance at %g us a response)\n",
      100 * res.front_busy_share, FormatCount(res.front_max_tokens_per_s).c_str(),
      time_model.calibration.params.response_us);
  if (front_free == nullptr) return;
  std::printf(
      "  FRONT-BOUND       the client's latencies wait on the front's response queue, not the "
      "GPUs; its cost a response is the stack's constant, fitted on the hosts of its rows, and "
      "other hosts or releases serve responses at other rates. With a front that costs nothing: "
      "p99 TTFT %.0f ms, TPOT %.1f ms, MLPerf valid %s: the figures lie between the two\n",
      front_free->ttft_p99_ms, front_free->tpot_p99_ms, front_free->mlperf_valid ? "yes" : "no");
}

// Each switch of the plan: its trigger, the configuration it goes to, its cost and when it ran.
void PrintPlan(const sim::Plan& plan, const sim::ResolvedPlan& resolved,
               const sim::SimulationResult& res) {
  std::printf("\n  plan: %zu switch%s%s (%zu done%s)\n", plan.steps.size(),
              plan.steps.size() == 1 ? "" : "es", plan.cycle ? ", cycling" : "",
              res.switches.size(), plan.cycle ? "; the first round below" : "");
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const sim::PlanStep& step = plan.steps[i];
    const sim::ConfigSwitch& sw = resolved.switches[i];
    const sim::ResolvedDeployment& to = *resolved.deployments[i];
    std::printf("  %zu. %s -> %s, batch %lld, max tokens %lld", i + 1,
                sim::Describe(step.when).c_str(), to.layout.ToString().c_str(),
                static_cast<long long>(step.to.engine.max_batch),
                static_cast<long long>(step.to.engine.max_num_tokens));
    if (sw.in_place) {
      std::printf(", in place (batch limits only)\n");
    } else {
      const sim::RestartEstimate& r = resolved.restarts[i];
      std::printf(", KV %s, restart %.1f s", std::string(sim::Name(step.kv)).c_str(), sw.restart_s);
      if (!step.restart_s) {
        std::printf(" (runtime start %.0f s, weights %.1f s, %.1f s of CUDA graphs: assumed)",
                    r.start_s, r.weights_s, r.graphs_s);
      }
      std::printf("\n");
    }
    if (i < res.switches.size() && sw.in_place) {
      std::printf("     at %.1f s\n", res.switches[i].triggered_s);
    } else if (i < res.switches.size() && step.kv == sim::KvMove::kDrain) {
      const sim::SwitchRecord& d = res.switches[i];
      std::printf(
          "     at %.1f s; new engines up at %.1f s, %lld waiting requests handed to them, %lld "
          "left to finish on the old ones\n",
          d.triggered_s, d.resumed_s, static_cast<long long>(d.moved),
          static_cast<long long>(d.running));
    } else if (i < res.switches.size()) {
      const sim::SwitchRecord& d = res.switches[i];
      std::printf(
          "     at %.1f s, %lld requests moved (%lld running, %s), serving again at %.1f s\n",
          d.triggered_s, static_cast<long long>(d.moved), static_cast<long long>(d.running),
          step.kv == sim::KvMove::kRecompute
              ? "their KV to compute again"
              : StrFormat("%s of KV migrated in %.2f s", HumanBytes(d.kv_bytes).c_str(),
                          d.migrate_s)
                    .c_str(),
          d.resumed_s);
    }
  }
}

Status Run(SimulateFlags f) {
  FATHOM_ASSIGN_OR_RETURN(sim::DeploymentFile file, BuildConfig(f));
  const sim::DeploymentConfig& d = file.config;
  const std::string run_from_file = AdoptRun(file.run, &f);
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.deployment.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(sim::TimeModel time_model,
                          sim::MakeTimeModel(f.time_model, catalog, d.hardware));
  // A deployment given by flags schedules as its stack's engine does (what `tune` tries on it:
  // SGLang's prefill-only batches, its overlap scheduler, vLLM V1's async scheduling) unless the
  // flags say otherwise; a deployment file says it itself.
  if (f.deployment_file.empty() && f.cmd != nullptr) {
    if (time_model.search.prefill_first && f.cmd->get_option("--scheduler")->count() == 0)
      file.config.engine.scheduler = sim::SchedulerKind::kPrefillFirst;
    if (time_model.search.async_scheduling && f.cmd->get_option("--async-scheduling")->count() == 0)
      file.config.engine.async_scheduling = true;
  }
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<sim::ResolvedDeployment> resolved,
                          sim::Resolve(d, catalog, time_model.factory));

  sim::ScenarioConfig sc = f.sc;
  FATHOM_ASSIGN_OR_RETURN(sc.scenario, sim::ParseScenario(f.scenario));
  const bool server =
      sc.scenario == sim::Scenario::kServer || sc.scenario == sim::Scenario::kInteractive;
  if (server && !(sc.qps > 0))
    return Status::InvalidArgument("--qps = " + StrFormat("%g", sc.qps) + ": must be > 0 for the " +
                                   f.scenario + " scenario");
  if (!server && sc.qps != 0) {
    return Status::InvalidArgument(
        "--qps applies to the server and interactive scenarios only" +
        std::string(file.run && f.cmd != nullptr && f.cmd->count("--scenario") == 0
                        ? " (--qps replaces the run " + f.deployment_file +
                              " records, its scenario too: name --scenario as well)"
                        : ""));
  }
  if (sc.scenario == sim::Scenario::kClosedLoop && sc.clients < 1) {
    return Status::InvalidArgument("--clients = " + std::to_string(sc.clients) +
                                   ": must be >= 1 for closed-loop");
  }
  FATHOM_RETURN_IF_ERROR(sc.Validate());

  // Requests for one run; error bars need the same requests again.
  std::vector<traces::Request> dataset;
  const traces::Benchmark* benchmark = nullptr;
  if (sc.scenario != sim::Scenario::kReplay) {
    FATHOM_ASSIGN_OR_RETURN(Workload workload, LoadWorkload(d.model, f.benchmark, f.trace, f.read));
    dataset = std::move(workload.requests);
    benchmark = workload.benchmark;
    if (!f.json) std::fprintf(stderr, "fathom: %s\n", workload.note.c_str());
  } else if (f.trace.empty()) {
    return Status::InvalidArgument(
        "the replay scenario needs arrival times: give --trace FILE (a benchmark data set has "
        "none)");
  } else {
    FATHOM_ASSIGN_OR_RETURN(benchmark, ChooseBenchmark(d.model, f.benchmark));
  }
  // The limits' benchmark, for this run and those below (after resolved->spec has gone to it).
  const std::string benchmark_name =
      benchmark != nullptr ? benchmark->name : resolved->spec.benchmark;
  resolved->spec.benchmark = benchmark_name;
  resolved->spec.scenario = sc;

  // The run's length, as `fathom tune` sizes it: given, the file's, or as long as a submitter's
  // run.
  const int64_t n = static_cast<int64_t>(dataset.size());
  int64_t samples = 0;
  std::string run_note = run_from_file;
  auto make_source = [&](int64_t count) -> Result<std::unique_ptr<sim::RequestSource>> {
    switch (sc.scenario) {
      case sim::Scenario::kReplay: {
        FATHOM_ASSIGN_OR_RETURN(auto reader, OpenTraceWithFlags(f.trace, f.read));
        return sim::ReplaySource(std::move(reader));
      }
      case sim::Scenario::kOffline:
        return sim::OfflineSource(dataset, count, sc.seed);
      case sim::Scenario::kServer:
      case sim::Scenario::kInteractive:
        return sim::PoissonSource(dataset, count, sc.qps, sc.seed);
      default:
        return sim::CyclingSource(dataset, count, sc.seed);
    }
  };
  // A run of the deployment (with `switches`, the plan's) under `factory`'s physics.
  auto simulate = [&](const sim::TimeModelFactory& factory, int64_t count, bool switches = false,
                      bool breakdown = false) -> Result<sim::SimulationResult> {
    FATHOM_ASSIGN_OR_RETURN(auto r, sim::Resolve(d, catalog, factory));
    r->spec.scenario = sc;
    r->spec.engine.cost_breakdown = r->spec.decode_engine.cost_breakdown = breakdown;
    r->spec.benchmark = benchmark_name;
    FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<sim::RequestSource> src, make_source(count));
    sim::Simulator s(std::move(r->spec), std::move(src));
    sim::ResolvedPlan switched;
    if (switches && f.plan) {
      FATHOM_ASSIGN_OR_RETURN(switched, sim::ResolvePlan(*f.plan, catalog, factory));
      FATHOM_RETURN_IF_ERROR(switched.ScheduleOn(&s));
    }
    return s.Run();
  };
  switch (sc.scenario) {
    case sim::Scenario::kOffline:
      if (sc.samples > 0) {
        samples = traces::EqualIssueCount(n, sc.samples);
        if (run_note.empty()) run_note = "--samples, rounded up to whole data sets";
      } else {
        const double target_s = sim::OfflineRunTargetS(benchmark, sc.min_duration_s);
        auto lasted = [&](int64_t count) -> Result<std::optional<double>> {
          auto r = simulate(time_model.factory, count);
          if (!r.ok()) return std::optional<double>();  // the run below says why
          return std::optional<double>(r->duration_s);
        };
        FATHOM_ASSIGN_OR_RETURN(samples, sim::OfflineRunSamples(n, target_s, lasted));
        run_note =
            StrFormat("whole data sets lasting %s s, %s", FormatCount(target_s).c_str(),
                      target_s > 1.1 * sc.min_duration_s ? "the benchmark's published Offline run"
                                                         : "LoadGen's 1.1 x the minimum run");
      }
      break;
    case sim::Scenario::kServer:
    case sim::Scenario::kInteractive:
      if (sc.samples > 0) {
        samples = sc.samples;
        if (run_note.empty()) run_note = "--samples";
      } else {
        const int64_t least = benchmark != nullptr ? benchmark->server_min_query_count : 0;
        samples = sim::LoadGenServerSamples(n, sc.qps, sc.min_duration_s, least);
        run_note = StrFormat("%s s of arrivals%s in whole data sets, as LoadGen issues them",
                             FormatCount(sc.min_duration_s).c_str(),
                             least > 0 ? StrFormat(", at least the benchmark's %s samples,",
                                                   FormatCount(static_cast<double>(least)).c_str())
                                             .c_str()
                                       : "");
      }
      break;
    case sim::Scenario::kReplay:
      run_note = "the trace's arrivals";
      break;
    default:
      samples = sc.samples > 0 ? sc.samples : n;
      run_note = sc.samples > 0 ? "--samples" : "one data set";
  }
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<sim::RequestSource> source, make_source(samples));

  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> requests, CreateOutput(f.requests_out));
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> timeline, CreateOutput(f.timeline));
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> log, CreateOutput(f.event_log));
  if (requests)
    requests->Append(
        "request_id,scheduled_s,first_token_s,completion_s,input_tokens,output_tokens,"
        "preemptions\n");
  if (timeline) timeline->Append("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");

  sim::Simulator simulator(std::move(resolved->spec), std::move(source));
  sim::ResolvedPlan plan;
  if (f.plan) {
    FATHOM_ASSIGN_OR_RETURN(plan, sim::ResolvePlan(*f.plan, catalog, time_model.factory));
    FATHOM_RETURN_IF_ERROR(plan.ScheduleOn(&simulator));
  }
  simulator.set_requests_csv(requests.get());
  simulator.set_timeline(timeline.get());
  simulator.set_event_log(log.get());
  const auto start = std::chrono::steady_clock::now();
  FATHOM_ASSIGN_OR_RETURN(sim::SimulationResult res, simulator.Run());
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (timeline) timeline->Append("\n]}\n");
  for (OutputFile* out : {requests.get(), timeline.get(), log.get()}) {
    if (out) FATHOM_RETURN_IF_ERROR(out->Commit());
  }

  // Error bars: rerun with each fitted parameter one standard deviation up and down and add the
  // halves of the differences in quadrature (linear propagation, correlations ignored). A plan's
  // gain over holding its start gets its own, each side's gain from runs under the same physics.
  std::optional<std::array<double, 3>> sigma;
  std::optional<std::pair<double, double>> plan_gain;  // tokens/s over holding the start, its sigma
  if (f.plan) {
    FATHOM_ASSIGN_OR_RETURN(sim::SimulationResult held, simulate(time_model.factory, samples));
    plan_gain = {res.throughput_tokens_per_s / held.throughput_tokens_per_s - 1, 0.0};
  }
  if (f.error_bars) {
    if (time_model.roofline)
      return Status::InvalidArgument("--error-bars needs the calibrated cost model");
    std::array<double, 3> var = {0, 0, 0};
    double gain_var = 0;
    for (const auto& pair : sim::PerturbedFactories(time_model)) {
      std::array<double, 3> metric[2];
      double gain[2] = {0, 0};
      for (int side = 0; side < 2; ++side) {
        const sim::TimeModelFactory& factory = pair[side];
        FATHOM_ASSIGN_OR_RETURN(sim::SimulationResult r2, simulate(factory, samples, true));
        metric[side] = {r2.throughput_tokens_per_s, r2.ttft_p99_ms, r2.tpot_p99_ms};
        if (plan_gain) {
          FATHOM_ASSIGN_OR_RETURN(sim::SimulationResult held, simulate(factory, samples));
          gain[side] = r2.throughput_tokens_per_s / held.throughput_tokens_per_s - 1;
        }
      }
      for (int m = 0; m < 3; ++m) var[m] += std::pow((metric[0][m] - metric[1][m]) / 2, 2);
      gain_var += std::pow((gain[0] - gain[1]) / 2, 2);
    }
    sigma = std::array<double, 3>{std::sqrt(var[0]), std::sqrt(var[1]), std::sqrt(var[2])};
    if (plan_gain) plan_gain->second = std::sqrt(gain_var);
  }

  // A run whose serving front is busy nearly all the time is bounded by it: what the client sees
  // waits on the front's response queue, whose cost per response is a stack constant (fitted on
  // the hosts of the rows its stack was calibrated on). The same run with a front that costs
  // nothing bounds the figures from the other side.
  std::optional<sim::SimulationResult> front_free;
  if (res.front_busy_share >= sim::kFrontBoundShare && !time_model.roofline) {
    models::CostParams free = time_model.calibration.params;
    free.response_us = 0;
    FATHOM_ASSIGN_OR_RETURN(
        front_free, simulate(sim::CalibratedFactory(free, time_model.measured), samples, true));
  }

  // Where the GPU time went: the same run again, each iteration priced in full.
  std::optional<sim::SimulationResult> broken_down;
  if (f.breakdown) {
    FATHOM_ASSIGN_OR_RETURN(broken_down, simulate(time_model.factory, samples, true, true));
  }
  const reports::BreakdownRun breakdown_run{"this run", broken_down ? &*broken_down : nullptr,
                                            d.TotalGpus()};

  // Offline is compared with the published tokens/s; a Server run is at the rate asked for.
  FATHOM_ASSIGN_OR_RETURN(
      PublishedNote published,
      DescribePublished(d, sc.scenario,
                        sc.scenario == sim::Scenario::kOffline ? res.throughput_tokens_per_s : 0,
                        time_model.calibration.params.stream_interval));
  const Answer answer{sc.scenario,      false,           res.throughput_tokens_per_s,
                      sc.qps,           res.ttft_p99_ms, res.tpot_p99_ms,
                      !f.trace.empty(), res.overloaded};
  FATHOM_ASSIGN_OR_RETURN(IntervalNote intervals, DescribeIntervals(time_model.stack, d, answer));
  if (f.json) {
    OrderedJson j;
    j["deployment"] = sim::ToJson(d);
    j["scenario"] = sim::Name(sc.scenario);
    if (sc.qps > 0) j["qps"] = sc.qps;
    j["seed"] = sc.seed;
    j["run"] = {{"samples", res.completed_requests}, {"source", run_note}};
    const OrderedJson metrics = res.ToJson();
    for (const auto& [k, v] : metrics.items()) j[k] = v;
    if (time_model.measured) {
      const models::MeasuredGemms::Coverage c = time_model.measured->coverage();
      j["measured_gemms"] = {
          {"within_range", c.within}, {"outside_range", c.outside}, {"unmeasured", c.unmeasured}};
    }
    if (sigma) {
      j["error_bars_1sigma"] = {{"throughput_tokens_per_s", (*sigma)[0]},
                                {"ttft_p99_ms", (*sigma)[1]},
                                {"tpot_p99_ms", (*sigma)[2]}};
    }
    if (f.plan) j["plan"] = sim::ToJson(*f.plan);
    if (plan_gain) {
      j["plan_gain"] = plan_gain->first;
      if (sigma) j["plan_gain_1sigma"] = plan_gain->second;
    }
    if (front_free) {
      j["serving_front"]["front_free"] = {{"ttft_p99_ms", front_free->ttft_p99_ms},
                                          {"tpot_p99_ms", front_free->tpot_p99_ms},
                                          {"mlperf_valid", front_free->mlperf_valid}};
    }
    j["error_bars"] = intervals.json;
    if (broken_down) j["gpu_seconds_per_million_tokens"] = reports::BreakdownJson(breakdown_run);
    j["published"] = published.json;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    PrintSummary(d, *resolved, sc, res, wall, time_model, run_note);
    PrintFront(res, time_model, front_free ? &*front_free : nullptr);
    if (f.plan) PrintPlan(*f.plan, plan, res);
    if (plan_gain) {
      std::printf("  tokens/s against holding the start: %+.1f%%%s\n", 100 * plan_gain->first,
                  sigma ? StrFormat(" +- %.1f%% (1 sigma, the same physics on both sides)",
                                    100 * plan_gain->second)
                              .c_str()
                        : "");
    }
    if (sigma) {
      std::printf(
          "  error bars (1 sigma, from the calibration's parameter uncertainty): throughput +- "
          "%.0f tokens/s, "
          "p99 TTFT +- %.1f ms, p99 TPOT +- %.2f ms\n",
          (*sigma)[0], (*sigma)[1], (*sigma)[2]);
    }
    if (!intervals.text.empty()) std::printf("%s", intervals.text.c_str());
    if (broken_down) {
      std::printf(
          "\nWhere the GPU time went (the run again, every iteration priced in full, no decode "
          "steps fast-forwarded):\n%s",
          reports::BreakdownTable({breakdown_run}).Text().c_str());
    }
    if (!published.text.empty()) std::printf("\n%s", published.text.c_str());
  }
  return Status::Ok();
}

}  // namespace

void RegisterSimulate(CLI::App& app, Status* result) {
  auto f = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Replay a workload on a deployment, with MLPerf LoadGen semantics");
  AddDeploymentFlags(cmd, &f->deployment);
  cmd->add_option("--deployment", f->deployment_file,
                  "Deployment JSON (as `fathom tune` writes it) instead of the flags");
  cmd->add_option("--plan", f->plan_file,
                  "Adaptive plan JSON (as `fathom tune --adaptive --plan-out` writes it): its "
                  "start deployment, switched to other configurations as its triggers fire");
  sim::EngineConfig& e = f->config.engine;
  e.max_batch = 512;
  e.max_num_tokens = 4608;
  auto dep = [&](CLI::Option* o) { f->deployment_options.push_back(o); };
  dep(cmd->add_option("--scheduler", f->scheduler,
                      "static, prefill-first, chunked, mixed or decode-first")
          ->capture_default_str());
  dep(cmd->add_option(
             "--runtime", f->runtime,
             "Engine host side: python (vLLM, SGLang, TRT-LLM PyTorch) or cpp (TRT-LLM engines)")
          ->capture_default_str());
  dep(cmd->add_flag("--gemm-allreduce", f->config.fusions.gemm_allreduce,
                    "Row-parallel GEMMs fused with their all-reduce (TensorRT-LLM's "
                    "gemm_allreduce_plugin; needs --runtime cpp)"));
  dep(cmd->add_option("--max-batch", e.max_batch, "Running sequences per attention rank")
          ->capture_default_str());
  dep(cmd->add_option("--max-num-tokens", e.max_num_tokens,
                      "Token budget per iteration per attention rank")
          ->capture_default_str());
  dep(cmd->add_option("--chunk-size", e.chunk_size,
                      "Max prefill tokens of one sequence per iteration (0: the budget)"));
  dep(cmd->add_option("--block-size", e.block_tokens, "KV-cache block size in tokens")
          ->capture_default_str());
  dep(cmd->add_option("--reserve", e.reserve_fraction, "Fraction of HBM kept free")
          ->capture_default_str());
  dep(cmd->add_option(
      "--kv-free-fraction", e.kv_free_fraction,
      "KV cache as this fraction of the memory weights, activations and runtime "
      "leave (TensorRT-LLM's kv_cache_free_gpu_memory_fraction; replaces --reserve)"));
  dep(cmd->add_option("--preemption", f->preemption, "recompute or swap")->capture_default_str());
  dep(cmd->add_option("--admission", f->admission,
                      "greedy (vLLM) or reserve (TRT-LLM guaranteed no evict)")
          ->capture_default_str());
  dep(cmd->add_flag(
      "--adp-balance", e.adp_balance,
      "TensorRT-LLM attention-DP balancing: hold new prefills until every rank has one"));
  dep(cmd->add_option("--adp-wait-iters", e.adp_batching_wait_iters,
                      "With --adp-balance: further iterations to batch prefills")
          ->capture_default_str());
  dep(cmd->add_option("--adp-timeout-iters", e.adp_timeout_iters,
                      "With --adp-balance: iterations a prefill waits for the other ranks at most")
          ->capture_default_str());
  dep(cmd->add_flag("--prefix-caching", e.prefix_caching,
                    "Reuse cached prefix blocks (traces with hash ids)"));
  dep(cmd->add_option("--mtp", e.mtp_depth, "Speculative (MTP) draft tokens per step"));
  dep(cmd->add_option("--acceptance", e.acceptance, "Per-draft-token acceptance probability"));
  dep(cmd->add_option("--acceptance-dist", f->acceptance_dist,
                      "Probabilities of accepting 0..k drafts")
          ->delimiter(','));
  dep(cmd->add_option("--draft-cost", e.draft_cost,
                      "One draft token's cost as a fraction of a step")
          ->capture_default_str());
  dep(cmd->add_option("--scheduler-steps", e.scheduler_steps,
                      "vLLM V0 multi-step scheduling: decode steps run at once, each paying 1 / N "
                      "of the host's per-iteration work, new prompts waiting for the run's end")
          ->capture_default_str());
  dep(cmd->add_option("--gate-steps", e.gate_steps,
                      "AMD's vLLM admission gate: new requests join only every N + 1 iterations "
                      "while --gate-min-running sequences run (VLLM_SUBSEQUENT_DECODE_STEPS)")
          ->capture_default_str());
  dep(cmd->add_option("--gate-min-running", e.gate_min_running,
                      "With --gate-steps: below this many running sequences new requests always "
                      "join (VLLM_MIN_REQUEST_DECODE_STEP)")
          ->capture_default_str());
  dep(cmd->add_flag("--async-scheduling", e.async_scheduling,
                    "vLLM V1 async scheduling: the host prepares the next iteration while the "
                    "GPU runs this one"));
  dep(cmd->add_option("--stream-interval", e.stream_interval,
                      "Tokens per streamed response; each costs the stack's response_us in the "
                      "serving front (0: the stack's)")
          ->capture_default_str());
  dep(cmd->add_option("--cuda-graph-batch-sizes", e.cuda_graph_batch_sizes,
                      "Batch sizes with captured CUDA graphs, ascending (decode-only iterations "
                      "are padded to the next one and replayed, others run eagerly; default: the "
                      "stack's up to --max-batch)")
          ->delimiter(','));
  dep(cmd->add_option("--max-concurrency", e.max_concurrency,
                      "Requests the client keeps in flight on an instance, the rest held back "
                      "until one completes (MLPerf's TensorRT-LLM harness's max_concurrency; 0: "
                      "no limit)")
          ->capture_default_str());
  dep(cmd->add_option("--queue-order", f->queue_order,
                      "Order a rank takes waiting requests in: fifo; by predicted output "
                      "length, longest-first or shortest-first; or by prompt length, "
                      "longest-input-first or shortest-input-first")
          ->capture_default_str());
  dep(cmd->add_option("--prediction-sigma", e.prediction_sigma,
                      "With a predicted --queue-order: the length predictor's log-normal error "
                      "(0: exact; the default is assumed)")
          ->capture_default_str());
  dep(cmd->add_option("--router", f->router,
                      "round-robin, least-outstanding, least-kv or prefix-aware")
          ->capture_default_str());
  dep(cmd->add_flag("--disagg", f->disagg, "Disaggregated prefill and decode pools"));
  dep(cmd->add_option("--prefill-instances", f->prefill.instances, "Prefill instances")
          ->capture_default_str());
  dep(cmd->add_option("--prefill-tp", f->prefill.tp, "Prefill instance TP (default: --tp)"));
  dep(cmd->add_option("--prefill-ep", f->prefill.ep, "Prefill instance EP"));
  dep(cmd->add_option("--prefill-attn-dp", f->prefill.attn_dp, "Prefill instance attention DP"));
  dep(cmd->add_option("--decode-instances", f->decode.instances, "Decode instances")
          ->capture_default_str());
  dep(cmd->add_option("--decode-tp", f->decode.tp, "Decode instance TP (default: --tp)"));
  dep(cmd->add_option("--decode-ep", f->decode.ep, "Decode instance EP"));
  dep(cmd->add_option("--decode-attn-dp", f->decode.attn_dp, "Decode instance attention DP"));
  dep(cmd->add_option("--decode-max-batch", f->config.decode_max_batch,
                      "Decode instances' max batch"));
  dep(cmd->add_option("--kv-link-gbps", f->config.kv_link_gb_per_s,
                      "KV transfer bandwidth per GPU in GB/s"));
  for (const char* name : {"--model", "--hardware", "--gpus", "--tp", "--pp", "--ep", "--attn-dp",
                           "--weights", "--dense-weights", "--kv"}) {
    dep(cmd->get_option(name));
  }

  cmd->add_option("--scenario", f->scenario, "offline, server, interactive, replay or closed-loop")
      ->capture_default_str();
  cmd->add_option("--qps", f->sc.qps, "Server/interactive: Poisson arrival rate");
  cmd->add_option("--samples", f->sc.samples,
                  "Requests to issue (equal issue: rounded up to whole data sets)");
  cmd->add_option("--min-duration", f->sc.min_duration_s, "MLPerf minimum run length in s")
      ->capture_default_str();
  cmd->add_option("--clients", f->sc.clients, "Closed loop: concurrent clients");
  cmd->add_option("--think-time", f->sc.think_time_s,
                  "Closed loop: pause between a reply and the next request (s)");
  cmd->add_option("--ttft-ms", f->sc.ttft_limit_ms,
                  "p99 TTFT limit (default: the MLPerf benchmark's)");
  cmd->add_option("--tpot-ms", f->sc.tpot_limit_ms,
                  "p99 TPOT limit (default: the MLPerf benchmark's)");
  cmd->add_option("--seed", f->sc.seed, "Random seed")->capture_default_str();
  cmd->add_option("--trace", f->trace,
                  "Workload file (default: the data set of the model's MLPerf benchmark)");
  cmd->add_option("--benchmark", f->benchmark,
                  "MLPerf benchmark whose data set and p99 limits to use (default: the model's)");
  AddTraceReadFlags(cmd, &f->read);
  AddTimeModelFlags(cmd, &f->time_model);
  cmd->add_flag("--json", f->json, "Print JSON");
  cmd->add_flag("--error-bars", f->error_bars,
                "Also run with each fitted cost parameter +- 1 sigma and report the spread");
  cmd->add_flag("--breakdown", f->breakdown,
                "Also run again pricing every iteration in full and print where the GPU time "
                "went (operator classes, host, attention-DP imbalance, idle) per million tokens");
  cmd->add_option("--requests-out", f->requests_out, "Per-request CSV");
  cmd->add_option("--timeline", f->timeline,
                  "Chrome trace JSON of the iterations, identical decode steps back to back as one "
                  "event with args.steps (opens in Perfetto)");
  cmd->add_option("--event-log", f->event_log, "One line per simulation event");
  f->cmd = cmd;
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
