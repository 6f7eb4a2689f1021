// `fathom online`: the online tuner's control loop against a live runtime (vLLM metrics in, a
// command to apply limits), replicas it supervises itself behind its gateway (--supervise), or one
// emulated by the simulator under a load that changes over time, and what holding the starting
// limits would give there.
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include "apps/fathom/commands.h"
#include "apps/fathom/time_model_flags.h"
#include "apps/fathom/trace_flags.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "base/process.h"
#include "models/hardware.h"
#include "sim/mlperf.h"
#include "sim/plan.h"
#include "sim/serving/http_text.h"
#include "traces/synth.h"
#include "traces/transforms.h"
#include "tuner/online/journal.h"
#include "tuner/online/live_runtime.h"
#include "tuner/online/online.h"
#include "tuner/online/plan_runner.h"
#include "tuner/online/supervisor.h"
#include "tuner/search/launch.h"

namespace fathom::cli {
namespace {

struct OnlineFlags {
  std::string deployment_file;
  std::string plan_file;  // --supervise --plan: switch the replicas as the plan says
  std::vector<std::string> hardware_files;
  sim::TimeModelOptions time_model;
  std::string trace;  // request lengths of the emulated load
  TraceReadFlags read;
  std::string load = "900:3,900:8,900:2";
  double window_s = 60;
  double command_timeout_s = 30;
  int64_t initial_batch = 0, initial_tokens = 0;  // 0: the deployment's
  std::optional<double> ttft_ms, tpot_ms;
  tuner::OnlineOptions options;
  bool compare_static = false;
  bool json = false;
  std::string metrics_cmd, apply_cmd;  // a live runtime
  // Replicas fathom starts itself behind its gateway.
  bool supervise = false, advise = false;
  tuner::SupervisorOptions supervisor;
  int replicas = 0;         // 0: the deployment's
  std::string engine_args;  // appended to the default engine command
  std::string metrics_source = "gateway";
  std::string journal;
  std::vector<int64_t> inject_limits;
  std::vector<CLI::Option*> supervise_options;  // only with --supervise
  int64_t windows = 0;                          // 0: until the runtime ends
  std::vector<CLI::Option*> emulation_options;
  uint64_t seed = 1;
};

std::atomic<bool> stop_requested{false};

std::string Ms(double v) { return StrFormat("%.0f ms", v); }

struct LoopRun {
  tuner::OnlineSummary summary;
  OrderedJson windows = OrderedJson::array();
};

// The emulated runtime: the deployment serving Poisson arrivals at the --load rates with the
// lengths of the trace.
Result<std::unique_ptr<tuner::ServingRuntime>> Emulated(const OnlineFlags& f,
                                                        const sim::DeploymentConfig& d,
                                                        tuner::BatchLimits initial,
                                                        const std::vector<traces::Request>& lengths,
                                                        const models::HardwareCatalog& catalog,
                                                        const sim::TimeModelFactory& make_time) {
  traces::SynthSpec spec;
  FATHOM_ASSIGN_OR_RETURN(spec.arrivals.schedule, ParseSchedule("--load", f.load));
  spec.lengths.kind = traces::LengthModel::kEmpirical;
  for (const auto& r : lengths) spec.lengths.samples.emplace_back(r.input_tokens, r.output_tokens);
  spec.requests = int64_t{1} << 40;  // the schedule ends the load
  spec.seed = f.seed;
  FATHOM_RETURN_IF_ERROR(spec.Validate());
  FATHOM_ASSIGN_OR_RETURN(auto load, traces::Synthesize(spec));
  FATHOM_ASSIGN_OR_RETURN(
      auto runtime, tuner::SimulatedRuntime::Create(d, initial, sim::ReplaySource(std::move(load)),
                                                    f.window_s, catalog, make_time));
  return std::unique_ptr<tuner::ServingRuntime>(std::move(runtime));
}

// Observe, decide, apply until the runtime ends or --windows are done; prints a line a window
// under `title` (quiet when it is empty).
Result<LoopRun> Loop(const OnlineFlags& f, tuner::ServingRuntime& runtime,
                     tuner::Controller& controller, const std::string& title,
                     const std::function<void(const tuner::Decision&)>& also = nullptr) {
  const bool print = !title.empty();
  LoopRun run;
  auto on_step = [&](const tuner::Window& w, const tuner::Decision& dec) {
    if (also) also(dec);
    OrderedJson j;
    j["start_s"] = w.start_s;
    j["end_s"] = w.end_s;
    j["arrival_rate_per_s"] = w.ArrivalRate();
    j["completed"] = w.completed;
    j["in_flight"] = w.in_flight;
    j["dropped"] = w.dropped;
    j["ttft_p99_ms"] = w.ttft_p99_ms;
    j["tpot_p99_ms"] = w.tpot_p99_ms;
    // Advice names the change it would make.
    const std::string action = f.advise && dec.action != tuner::Decision::Action::kHold
                                   ? "advise"
                                   : std::string(tuner::Name(dec.action));
    j["decision"] = dec.ToJson();
    j["decision"]["action"] = action;
    run.windows.push_back(j);
    if (!print) return;
    std::printf(
        "%7.0f %8.2f %6lld %7lld %9s %9s %7s  %-8s %-22s %s\n", w.end_s, w.ArrivalRate(),
        static_cast<long long>(w.completed), static_cast<long long>(w.in_flight),
        w.completed ? Ms(w.ttft_p99_ms).c_str() : "-",
        w.completed ? Ms(w.tpot_p99_ms).c_str() : "-",
        std::isnan(dec.observed_margin) ? "-" : StrFormat("%.2f", dec.observed_margin).c_str(),
        action.c_str(), dec.limits.Label().c_str(), dec.reason.c_str());
    std::fflush(stdout);
  };
  if (print) {
    std::printf("%s", title.c_str());
    std::printf("%7s %8s %6s %7s %9s %9s %7s  %-8s %-22s %s\n", "t (s)", "arr/s", "done", "in sys",
                "p99 TTFT", "p99 TPOT", "margin", "action", "limits", "why");
  }
  FATHOM_ASSIGN_OR_RETURN(run.summary,
                          tuner::RunOnline(runtime, controller, f.windows, on_step, f.advise));
  return run;
}

void PrintSummary(const char* label, const tuner::OnlineSummary& s) {
  std::printf(
      "%s: %lld windows, %lld of %lld judged within both p99 limits; %lld changes, %lld rollbacks; "
      "%lld requests arrived, %lld finished, %lld dropped\n",
      label, static_cast<long long>(s.windows), static_cast<long long>(s.windows_within_limits),
      static_cast<long long>(s.windows_judged), static_cast<long long>(s.changes),
      static_cast<long long>(s.rollbacks), static_cast<long long>(s.arrived),
      static_cast<long long>(s.completed), static_cast<long long>(s.dropped));
}

// `fathom serve`'s command for a replica of `d` (this binary, the replicas' time scale and cost
// model, --engine-args), its limits, host and port left as placeholders.
Result<std::string> ServeCommand(const OnlineFlags& f, const sim::DeploymentConfig& d,
                                 const models::HardwareCatalog& catalog) {
  std::error_code error;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", error).string();
  if (error) {
    return Status::Unavailable(
        "--supervise: cannot find the fathom binary (/proc/self/exe); give --engine-cmd");
  }
  return tuner::DefaultEngineCommand(
      d, catalog, self,
      StrFormat("--time-scale %g --cost-model %s", f.supervisor.time_scale,
                f.time_model.cost_model.c_str()) +
          (f.engine_args.empty() ? "" : " " + f.engine_args));
}

// The supervised runtime: replicas of `d` started with `initial`, behind the gateway, journaled.
Result<std::unique_ptr<tuner::Supervisor>> Supervised(OnlineFlags& f,
                                                      const sim::DeploymentConfig& d,
                                                      const models::HardwareCatalog& catalog,
                                                      tuner::BatchLimits initial,
                                                      tuner::Journal* journal) {
  tuner::SupervisorOptions& o = f.supervisor;
  o.window_s = f.window_s;
  o.replicas = f.replicas > 0 ? f.replicas : std::max(1, tuner::Instances(d));
  if (o.engine_cmd.empty()) {
    FATHOM_ASSIGN_OR_RETURN(o.engine_cmd, ServeCommand(f, d, catalog));
  } else if (!f.engine_args.empty()) {
    return Status::InvalidArgument(
        "--engine-args: for the default engine command; put them in --engine-cmd");
  }
  if (!f.inject_limits.empty()) {
    if (f.inject_limits.size() != 2 || f.inject_limits[0] < 1 || f.inject_limits[1] < 1) {
      return Status::InvalidArgument("--inject-limits: give SEQS,TOKENS, both >= 1");
    }
    o.inject_limits = tuner::BatchLimits{f.inject_limits[0], f.inject_limits[1]};
  }
  FATHOM_ASSIGN_OR_RETURN(o.metrics_source, tuner::ParseMetricsSource(f.metrics_source));
  if (!o.gpus.empty()) o.gpus_per_replica = d.TotalGpus() / std::max(1, tuner::Instances(d));
  if (o.nodes.empty() && o.launcher.find("{node}") != std::string::npos) {
    // The nodes of the Slurm allocation this runs in.
    if (std::getenv("SLURM_JOB_NODELIST") == nullptr) {
      return Status::InvalidArgument(
          "--launcher names {node}: give --nodes, or run inside a Slurm allocation");
    }
    FATHOM_ASSIGN_OR_RETURN(std::string hosts,
                            RunCommand("scontrol show hostnames \"$SLURM_JOB_NODELIST\"",
                                       "--launcher ({node} from SLURM_JOB_NODELIST)", 30));
    std::istringstream lines(hosts);
    for (std::string host; lines >> host;) o.nodes.push_back(host);
  }
  o.journal = journal;
  o.stop = &stop_requested;
  o.log = [](const std::string& line) {
    std::fprintf(stderr, "fathom online: %s\n", line.c_str());
  };
  std::signal(SIGINT, [](int) { stop_requested = true; });
  std::signal(SIGTERM, [](int) { stop_requested = true; });
  std::fprintf(stderr, "fathom online: starting %d replicas: %s\n", o.replicas,
               tuner::EngineCommand(o.engine_cmd, initial, 0).c_str());
  FATHOM_ASSIGN_OR_RETURN(auto supervisor, tuner::Supervisor::Start(o, initial));
  if (!o.gateway_url.empty()) {
    std::fprintf(stderr, "fathom online: replicas behind the gateway at %s\n",
                 o.gateway_url.c_str());
    return supervisor;
  }
  std::fprintf(stderr, "fathom online: gateway listening on http://%s:%d\n", o.gateway.host.c_str(),
               supervisor->gateway_port());
  if (!sim::http::IsLoopbackHost(o.gateway.host) && o.gateway.api_key.empty()) {
    std::fprintf(stderr,
                 "fathom online: warning: the gateway at %s is reachable from other hosts and no "
                 "--api-key is set: it passes anyone's requests to the replicas\n",
                 o.gateway.host.c_str());
  }
  if (!sim::http::IsLoopbackHost(o.gateway.host) && o.gateway.token.empty()) {
    std::fprintf(stderr,
                 "fathom online: warning: the gateway at %s is reachable from other hosts and no "
                 "--token is set: its control endpoints are off\n",
                 o.gateway.host.c_str());
  }
  return supervisor;
}

// The replicas a deployment runs on under the supervisor: fathom serve's command for it, its batch
// limits and its instances.
Result<tuner::ReplicaSet> ReplicasFor(const OnlineFlags& f, const sim::DeploymentConfig& d,
                                      const sim::ResolvedDeployment& resolved,
                                      const models::HardwareCatalog& catalog) {
  tuner::ReplicaSet set;
  FATHOM_ASSIGN_OR_RETURN(set.engine_cmd, ServeCommand(f, d, catalog));
  set.limits = {d.engine.max_batch, d.engine.max_num_tokens};
  set.replicas = std::max(1, tuner::Instances(d));
  set.label = resolved.layout.ToString();
  return set;
}

// `online --supervise --plan FILE`: the replicas start on the plan's start deployment and are
// switched, by rolling replacement, as its triggers hold; a line a window, one per switch.
Status RunPlanCommand(OnlineFlags f) {
  if (!f.supervise)
    return Status::InvalidArgument(
        "--plan: with --supervise (fathom runs the replicas it switches)");
  if (!f.deployment_file.empty())
    return Status::InvalidArgument("--deployment and --plan: a plan holds its deployments");
  if (!f.supervisor.engine_cmd.empty() || f.replicas > 0) {
    return Status::InvalidArgument(
        "--engine-cmd and --replicas: with --plan, each deployment's replicas run fathom serve's "
        "command for it, as many as it has instances");
  }
  if (f.advise || !f.inject_limits.empty())
    return Status::InvalidArgument("--advise and --inject-limits: not with --plan");
  FATHOM_ASSIGN_OR_RETURN(const sim::Plan plan, sim::LoadPlanFile(f.plan_file));
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(sim::TimeModel time_model,
                          sim::MakeTimeModel(f.time_model, catalog, plan.start.hardware));
  FATHOM_ASSIGN_OR_RETURN(const sim::ResolvedPlan resolved,
                          sim::ResolvePlan(plan, catalog, time_model.factory));
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    if (!resolved.switches[i].in_place && plan.steps[i].kv != sim::KvMove::kDrain) {
      return Status::InvalidArgument(
          f.plan_file + ": switches[" + std::to_string(i) + "].kv = \"" +
          std::string(sim::Name(plan.steps[i].kv)) +
          "\": the supervisor switches replicas by rolling replacement, so a layout switch runs "
          "live as \"drain\" (simulate the plan so too)");
    }
  }
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<sim::ResolvedDeployment> start,
                          sim::Resolve(plan.start, catalog, time_model.factory));
  FATHOM_ASSIGN_OR_RETURN(const tuner::ReplicaSet first,
                          ReplicasFor(f, plan.start, *start, catalog));
  std::vector<tuner::ReplicaSet> sets;
  std::vector<sim::SwitchTrigger> triggers;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    FATHOM_ASSIGN_OR_RETURN(tuner::ReplicaSet set,
                            ReplicasFor(f, plan.steps[i].to, *resolved.deployments[i], catalog));
    sets.push_back(std::move(set));
    triggers.push_back(plan.steps[i].when);
  }
  std::unique_ptr<tuner::Journal> journal;
  if (!f.journal.empty()) {
    FATHOM_ASSIGN_OR_RETURN(journal, tuner::Journal::Open(f.journal));
  }
  f.supervisor.engine_cmd = first.engine_cmd;
  f.supervisor.canary_share = 0;  // a plan's switches are decided: no canary
  FATHOM_ASSIGN_OR_RETURN(auto supervisor,
                          Supervised(f, plan.start, catalog, first.limits, journal.get()));
  const sim::DeploymentConfig& d = plan.start;
  if (!f.json) {
    std::printf(
        "Plan %s: %s on %d x %s, starting on %s (%d replicas, %s), %zu switch%s%s, a window "
        "every %g s\n\n",
        f.plan_file.c_str(), d.model.c_str(), d.TotalGpus(), d.hardware.c_str(),
        first.label.c_str(), first.replicas, first.limits.Label().c_str(), plan.steps.size(),
        plan.steps.size() == 1 ? "" : "es", plan.cycle ? ", cycling" : "", f.window_s);
    std::printf("%7s %8s %6s %7s %9s %9s  %s\n", "t (s)", "arr/s", "done", "in sys", "p99 TTFT",
                "p99 TPOT", "switch");
  }
  OrderedJson windows = OrderedJson::array();
  tuner::BatchLimits in_force = first.limits;
  Status journal_status;
  auto on_window = [&](const tuner::Window& w, std::optional<size_t> step,
                       const std::optional<tuner::ApplyOutcome>& outcome) {
    std::string what;
    if (step) {
      const tuner::ReplicaSet& to = sets[*step];
      what =
          StrFormat("%zu. %s -> %s, %d replicas, %s: ", *step + 1,
                    sim::Describe(triggers[*step]).c_str(), to.label.c_str(), to.replicas,
                    to.limits.Label().c_str()) +
          (outcome->applied ? StrFormat("done in %.2f s", supervisor->last_replace_s().value_or(0))
                            : "rolled back, " + outcome->why_not);
      if (journal && journal_status.ok()) {
        tuner::JournalEntry e;
        e.event = outcome->applied ? "plan_switch" : "plan_switch_rolled_back";
        e.reason = what;
        e.before = in_force;
        e.after = to.limits;
        e.replace_s = supervisor->last_replace_s();
        journal_status = journal->Record(e);
      }
      if (outcome->applied) in_force = to.limits;
    }
    OrderedJson j;
    j["start_s"] = w.start_s;
    j["end_s"] = w.end_s;
    j["arrived"] = w.arrived;
    j["completed"] = w.completed;
    j["in_flight"] = w.in_flight;
    j["dropped"] = w.dropped;
    j["ttft_p99_ms"] = w.ttft_p99_ms;
    j["tpot_p99_ms"] = w.tpot_p99_ms;
    if (step) {
      j["switch"] = *step + 1;
      j["switched"] = outcome->applied;
      j["switch_detail"] = what;
    }
    windows.push_back(j);
    if (f.json) return;
    std::printf("%7.0f %8.2f %6lld %7lld %9s %9s  %s\n", w.end_s, w.ArrivalRate(),
                static_cast<long long>(w.completed), static_cast<long long>(w.in_flight),
                w.completed ? Ms(w.ttft_p99_ms).c_str() : "-",
                w.completed ? Ms(w.tpot_p99_ms).c_str() : "-", what.c_str());
    std::fflush(stdout);
  };
  FATHOM_ASSIGN_OR_RETURN(const tuner::PlanRunSummary summary,
                          tuner::RunPlan(
                              *supervisor, triggers, plan.cycle, f.windows,
                              [&](size_t i) { return supervisor->Switch(sets[i]); }, on_window));
  FATHOM_RETURN_IF_ERROR(journal_status);
  if (f.json) {
    OrderedJson j;
    j["plan"] = sim::ToJson(plan);
    j["windows"] = windows;
    j["summary"] = summary.ToJson();
    j["summary"]["replica_restarts"] = supervisor->restarts();
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf(
      "\nPlan: %lld windows, %lld switches done, %lld rolled back; %lld requests arrived, %lld "
      "finished, %lld dropped; replicas restarted after dying: %lld\n",
      static_cast<long long>(summary.windows), static_cast<long long>(summary.switches),
      static_cast<long long>(summary.failed_switches), static_cast<long long>(summary.arrived),
      static_cast<long long>(summary.completed), static_cast<long long>(summary.dropped),
      static_cast<long long>(supervisor->restarts()));
  return Status::Ok();
}

Status RunOnlineCommand(OnlineFlags f) {
  if (!f.plan_file.empty()) return RunPlanCommand(std::move(f));
  const bool live = !f.metrics_cmd.empty() || !f.apply_cmd.empty();
  if (f.supervise && live)
    return Status::InvalidArgument("--supervise: fathom runs the replicas; not with --metrics-cmd");
  if (f.advise && !f.supervise && !live)
    return Status::InvalidArgument("--advise: with --supervise or --metrics-cmd");
  for (const CLI::Option* opt : f.supervise_options) {
    if (opt->count() > 0 && !f.supervise)
      return Status::InvalidArgument(opt->get_name() + ": only with --supervise");
  }
  if (live || f.supervise) {
    const std::string flag = f.supervise ? "--supervise" : "--metrics-cmd";
    if (f.deployment_file.empty()) {
      return Status::InvalidArgument(
          flag +
          ": give --deployment, the deployment the runtime serves (for the "
          "predictions)");
    }
    for (const CLI::Option* opt : f.emulation_options) {
      if (opt->count() > 0)
        return Status::InvalidArgument(opt->get_name() + ": for the emulated runtime, not with " +
                                       flag);
    }
  }
  sim::DeploymentConfig d;
  if (!f.deployment_file.empty()) {
    FATHOM_ASSIGN_OR_RETURN(sim::DeploymentFile file, sim::LoadDeploymentFile(f.deployment_file));
    d = file.config;
  }
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(sim::TimeModel time_model,
                          sim::MakeTimeModel(f.time_model, catalog, d.hardware));

  // Service levels: the flags, else the model's MLPerf Server limits.
  const auto mlperf = sim::MlperfLimits(d.model, sim::Scenario::kServer);
  if (!mlperf && (!f.ttft_ms || !f.tpot_ms)) {
    return Status::InvalidArgument("no MLPerf latency limits known for " + d.model +
                                   ": give --ttft-ms and --tpot-ms");
  }
  tuner::OnlineOptions& o = f.options;
  o.ttft_limit_ms = f.ttft_ms.value_or(mlperf ? mlperf->ttft_ms : 0);
  o.tpot_limit_ms = f.tpot_ms.value_or(mlperf ? mlperf->tpot_ms : 0);
  o.seed = f.seed;
  // The choices default to fractions of what the runtime started with.
  const tuner::BatchLimits started{d.engine.max_batch, d.engine.max_num_tokens};
  auto fractions = [](int64_t top, std::initializer_list<int> divisors) {
    std::vector<int64_t> v;
    for (int div : divisors) {
      if (top / div >= 1 && (v.empty() || v.back() != top / div)) v.push_back(top / div);
    }
    return v;
  };
  if (o.max_batch.empty()) o.max_batch = fractions(started.max_batch, {8, 4, 2, 1});
  if (o.max_num_tokens.empty()) o.max_num_tokens = fractions(started.max_num_tokens, {4, 2, 1});
  const tuner::BatchLimits initial{
      f.initial_batch > 0 ? f.initial_batch : started.max_batch,
      f.initial_tokens > 0 ? f.initial_tokens : started.max_num_tokens};

  const std::string title =
      StrFormat("Online tuning: %s on %d x %s, p99 limits TTFT %s / TPOT %s, a window every %g s, ",
                d.model.c_str(), d.TotalGpus(), d.hardware.c_str(), Ms(o.ttft_limit_ms).c_str(),
                Ms(o.tpot_limit_ms).c_str(), f.window_s) +
      (f.supervise ? "supervised replicas"
       : live      ? "live runtime (" + f.metrics_cmd + ")"
                   : "emulated load " + f.load + " QPS") +
      (f.advise ? ", advice only" : "") + "\nStarting at " + initial.Label() +
      " (memory planned for " + started.Label() + ")\n\n";
  FATHOM_ASSIGN_OR_RETURN(auto controller,
                          tuner::Controller::Create(d, initial, o, catalog, time_model.factory));
  std::unique_ptr<tuner::ServingRuntime> runtime;
  std::vector<traces::Request> lengths;
  std::unique_ptr<tuner::Journal> journal;
  if (!f.journal.empty()) {
    FATHOM_ASSIGN_OR_RETURN(journal, tuner::Journal::Open(f.journal));
  }
  tuner::Supervisor* supervisor = nullptr;
  if (f.supervise) {
    f.supervisor.ttft_limit_ms = o.ttft_limit_ms;
    f.supervisor.tpot_limit_ms = o.tpot_limit_ms;
    FATHOM_ASSIGN_OR_RETURN(auto s, Supervised(f, d, catalog, initial, journal.get()));
    supervisor = s.get();
    runtime = std::move(s);
  } else if (live) {
    tuner::LiveRuntimeOptions lo;
    lo.metrics_cmd = f.metrics_cmd;
    lo.apply_cmd = f.apply_cmd;
    lo.window_s = f.window_s;
    lo.command_timeout_s = f.command_timeout_s;
    FATHOM_ASSIGN_OR_RETURN(runtime, tuner::LiveRuntime::Create(lo));
  } else {
    FATHOM_ASSIGN_OR_RETURN(Workload workload, LoadWorkload(d.model, "", f.trace, f.read));
    lengths = std::move(workload.requests);
    FATHOM_ASSIGN_OR_RETURN(runtime, Emulated(f, d, initial, lengths, catalog, time_model.factory));
  }
  // The journal's row for each decision: the limits before it, and a replacement's duration.
  tuner::BatchLimits in_force = initial;
  Status journal_status;
  auto record = [&](const tuner::Decision& dec) {
    const bool changed = !f.advise && dec.action != tuner::Decision::Action::kHold;
    if (supervisor) {
      supervisor->CountDecision(f.advise && dec.action != tuner::Decision::Action::kHold
                                    ? "advise"
                                    : tuner::Name(dec.action));
    }
    if (!journal || !journal_status.ok()) return;
    journal_status = journal->RecordDecision(
        dec, in_force, changed && supervisor ? supervisor->last_replace_s() : std::nullopt,
        f.advise);
    if (changed) in_force = dec.limits;
  };
  FATHOM_ASSIGN_OR_RETURN(LoopRun tuned,
                          Loop(f, *runtime, *controller, f.json ? "" : title, record));
  FATHOM_RETURN_IF_ERROR(journal_status);
  std::optional<LoopRun> held;
  if (f.compare_static) {
    tuner::OnlineOptions fixed = o;
    fixed.max_batch = {initial.max_batch};
    fixed.max_num_tokens = {initial.max_num_tokens};
    FATHOM_ASSIGN_OR_RETURN(
        auto holder, tuner::Controller::Create(d, initial, fixed, catalog, time_model.factory));
    FATHOM_ASSIGN_OR_RETURN(auto again,
                            Emulated(f, d, initial, lengths, catalog, time_model.factory));
    FATHOM_ASSIGN_OR_RETURN(held, Loop(f, *again, *holder, ""));
  }
  if (f.json) {
    OrderedJson j;
    j["deployment"] = sim::ToJson(d);
    j["ttft_limit_ms"] = o.ttft_limit_ms;
    j["tpot_limit_ms"] = o.tpot_limit_ms;
    j["windows"] = tuned.windows;
    j["summary"] = tuned.summary.ToJson();
    if (held) j["static"] = held->summary.ToJson();
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("\n");
  PrintSummary(f.advise ? "Advised" : "Tuned", tuned.summary);
  if (supervisor)
    std::printf("Replicas restarted after dying: %lld\n",
                static_cast<long long>(supervisor->restarts()));
  if (held) PrintSummary(("Held at " + initial.Label()).c_str(), held->summary);
  return Status::Ok();
}

}  // namespace

void RegisterOnline(CLI::App& app, Status* result) {
  auto f = std::make_shared<OnlineFlags>();
  tuner::OnlineOptions& o = f->options;
  o.max_batch.clear();
  o.max_num_tokens.clear();
  CLI::App* cmd = app.add_subcommand("online",
                                     "Online tuner: watch a runtime (live vLLM, or emulated) "
                                     "window by window and change its batch limits safely");
  cmd->add_option("--deployment", f->deployment_file,
                  "Deployment JSON (as `fathom tune` writes it); its engine limits are what the "
                  "runtime started "
                  "with (default: DeepSeek-R1 on 8xB200)");
  cmd->add_option("--plan", f->plan_file,
                  "With --supervise: run an adaptive plan (as `fathom tune --adaptive --plan-out` "
                  "writes it) instead of the tuner: replicas start on its start deployment and "
                  "are switched by rolling replacement as its triggers hold");
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  AddTimeModelFlags(cmd, &f->time_model);
  auto emulation = [&](CLI::Option* opt) { f->emulation_options.push_back(opt); };
  emulation(
      cmd->add_option("--trace", f->trace,
                      "Request lengths of the load (default: the data set of the model's MLPerf "
                      "benchmark)"));
  AddTraceReadFlags(cmd, &f->read);
  emulation(
      cmd->add_option("--load", f->load, "The emulated load: Poisson rates DURATION_S:QPS,...")
          ->capture_default_str());
  cmd->add_option(
      "--metrics-cmd", f->metrics_cmd,
      "A live runtime: the command that prints its Prometheus metrics (vLLM's names), e.g. curl -s "
      "http://localhost:8000/metrics");
  cmd->add_option("--apply-cmd", f->apply_cmd,
                  "A live runtime: the command that applies new limits ({max_batch} and "
                  "{max_num_tokens} replaced)");
  tuner::SupervisorOptions& so = f->supervisor;
  auto supervised = [&](CLI::Option* opt) { f->supervise_options.push_back(opt); };
  cmd->add_flag("--supervise", f->supervise,
                "Start the engine replicas here, front them with fathom's gateway and apply "
                "changes by rolling "
                "replacement (a replica that dies: its requests are retried once on another, and "
                "it is restarted)");
  cmd->add_flag("--advise", f->advise, "Print and journal the recommendations; apply nothing");
  supervised(cmd->add_option("--replicas", f->replicas,
                             "Supervised replicas (default: the deployment's instances)"));
  supervised(cmd->add_option(
      "--engine-cmd", so.engine_cmd,
      "Command that starts one replica ({host}, {port}, {max_num_seqs}, "
      "{max_num_batched_tokens} replaced; default: fathom's vLLM launch command run by `fathom "
      "serve`)"));
  supervised(cmd->add_option("--launcher", so.launcher,
                             "Start each replica through this command, {node} and {gpus} filled "
                             "in, e.g. 'srun --nodes=1 --ntasks=1 --nodelist={node}' (a Slurm "
                             "job step); default: a child process here"));
  supervised(cmd->add_option("--nodes", so.nodes,
                             "Hosts the replicas run on, spread evenly (default: the Slurm "
                             "allocation's with a --launcher naming {node}, else this one)")
                 ->delimiter(','));
  supervised(cmd->add_option("--gpus", so.gpus,
                             "Device ids on each node to place replicas on, the deployment's GPUs "
                             "each (CUDA_VISIBLE_DEVICES), with room for one more")
                 ->delimiter(','));
  supervised(cmd->add_option("--engine-args", f->engine_args,
                             "Extra flags for the default engine command"));
  supervised(cmd->add_option("--engine-log", so.engine_log,
                             "Append the replicas' output to this file (default: discarded)"));
  supervised(cmd->add_option("--time-scale", so.time_scale,
                             "The replicas' time scale (fathom serve --time-scale)")
                 ->capture_default_str());
  supervised(
      cmd->add_option("--metrics-source", f->metrics_source,
                      "Where windows are measured: gateway (its record of every request), engines "
                      "(each replica's /metrics, summed) or prometheus (--prometheus-url)")
          ->capture_default_str());
  supervised(cmd->add_option("--prometheus-url", so.prometheus_url,
                             "With --metrics-source prometheus: the server's HTTP API, e.g. "
                             "http://127.0.0.1:9090"));
  supervised(cmd->add_option("--prometheus-targets", so.prometheus_targets,
                             "Keep the replicas' addresses in this file, for Prometheus's "
                             "file_sd_configs"));
  supervised(cmd->add_option("--health-timeout", so.health_timeout_s,
                             "Seconds a new replica has to answer /health")
                 ->capture_default_str());
  auto* gateway_url = cmd->add_option(
      "--gateway-url", so.gateway_url,
      "Put the replicas behind `fathom gateway` at this address (http://HOST:PORT, its --token) "
      "instead of a gateway in this process: it and the replicas outlive this process if it "
      "dies, and the next supervisor started on it replaces them");
  supervised(gateway_url);
  auto own_gateway = [&](CLI::Option* opt) {
    supervised(opt);
    opt->excludes(gateway_url);
  };
  own_gateway(cmd->add_option("--gateway-host", so.gateway.host, "Address the gateway listens on")
                  ->capture_default_str());
  own_gateway(cmd->add_option("--gateway-port", so.gateway.port,
                              "Gateway port (0: any free one, printed on stderr)")
                  ->capture_default_str());
  own_gateway(cmd->add_option("--max-body-bytes", so.gateway.max_body_bytes,
                              "Larger request bodies get 413")
                  ->capture_default_str());
  own_gateway(cmd->add_option("--max-connections", so.gateway.max_connections,
                              "Client connections the gateway holds; at the limit the longest "
                              "idle one makes room")
                  ->capture_default_str());
  own_gateway(cmd->add_option("--api-key", so.gateway.api_key,
                              "Clients' key: /v1/* needs Authorization: Bearer KEY, checked from "
                              "the headers before the body is read (replicas get the same header)")
                  ->envname("FATHOM_API_KEY"));
  cmd->add_option("--token", so.gateway.token,
                  "Bearer token for the gateway's control endpoints (/fathom/*)")
      ->envname("FATHOM_TOKEN");
  supervised(cmd->add_option("--canary-share", so.canary_share,
                             "A change runs first on one new replica given this share of new "
                             "requests, and rolls out only if its p99s keep the limits the others "
                             "keep (0: every replica at once)")
                 ->capture_default_str());
  supervised(cmd->add_option("--canary-requests", so.canary_requests,
                             "Requests the canary finishes before it is judged (or three windows)")
                 ->capture_default_str());
  cmd->add_option("--journal", f->journal, "Journal every decision and change to this SQLite file");
  supervised(
      cmd->add_option(
             "--inject-limits", f->inject_limits,
             "Testing the canary: the first change starts replicas with SEQS,TOKENS instead of its "
             "choice")
          ->delimiter(','));
  cmd->add_option("--windows", f->windows,
                  "Stop after this many windows (0: when the runtime ends)")
      ->capture_default_str();
  cmd->add_option("--window-s", f->window_s, "Observation window")->capture_default_str();
  cmd->add_option("--command-timeout", f->command_timeout_s,
                  "A live runtime: seconds --metrics-cmd or --apply-cmd may run before it is "
                  "killed and the loop stops")
      ->capture_default_str();
  cmd->add_option("--initial-batch", f->initial_batch,
                  "Running sequences per rank at start (default: the deployment's)");
  cmd->add_option("--initial-tokens", f->initial_tokens,
                  "Tokens per iteration per rank at start (default: the deployment's)");
  cmd->add_option("--max-batch", o.max_batch,
                  "Batch limits the tuner may choose (default: 1/8 .. 1 of the deployment's)")
      ->delimiter(',');
  cmd->add_option("--max-num-tokens", o.max_num_tokens,
                  "Token budgets it may choose (default: 1/4 .. 1 of the deployment's)")
      ->delimiter(',');
  cmd->add_option("--ttft-ms", f->ttft_ms,
                  "p99 TTFT limit (default: the model's MLPerf Server limit)");
  cmd->add_option("--tpot-ms", f->tpot_ms,
                  "p99 TPOT limit (default: the model's MLPerf Server limit)");
  cmd->add_option("--headroom", o.headroom, "Plan for the forecast rate x (1 + this)")
      ->capture_default_str();
  cmd->add_option("--min-gain", o.min_gain,
                  "Change only for a predicted p99 margin this much better")
      ->capture_default_str();
  cmd->add_option("--confirm-windows", o.confirm_windows,
                  "Windows a choice must stay best before it is applied")
      ->capture_default_str();
  cmd->add_option("--cooldown-windows", o.cooldown_windows, "Windows after a change before another")
      ->capture_default_str();
  cmd->add_option("--ban-windows", o.ban_windows, "Windows a rolled-back choice is not tried again")
      ->capture_default_str();
  cmd->add_option("--distrust-windows", o.distrust_windows,
                  "Windows running that break the p99s the model predicts the limits in force "
                  "keep, before going back to the last other limits that held")
      ->capture_default_str();
  cmd->add_option("--min-requests", o.min_requests, "Finished requests needed to predict or judge")
      ->capture_default_str();
  cmd->add_option("--history-requests", o.history_requests,
                  "Latest finished requests the predictions draw lengths from")
      ->capture_default_str();
  cmd->add_option("--warmup-s", o.warmup_s, "Traffic each prediction simulates before it measures")
      ->capture_default_str();
  cmd->add_option("--probe-s", o.probe_s, "Traffic each prediction then measures")
      ->capture_default_str();
  cmd->add_option("--jobs", o.jobs, "Prediction threads (0: all cores)")->capture_default_str();
  cmd->add_option("--seed", f->seed, "Seed of the load and the predictions")->capture_default_str();
  emulation(cmd->add_flag("--compare-static", f->compare_static,
                          "Also run the same load holding the starting limits"));
  cmd->add_flag("--json", f->json, "Every window and decision, and the summary, as JSON");
  cmd->callback([f, result] { *result = RunOnlineCommand(*f); });
}

}  // namespace fathom::cli
