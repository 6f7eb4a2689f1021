// `fathom autoscale`: replica counts for a time-varying trace, phase by phase, against a fleet held
// at its peak; writes the plan that `simulate --plan` replays and `online --supervise --plan` runs.
#include <cstdio>
#include <memory>

#include "apps/fathom/commands.h"
#include "apps/fathom/time_model_flags.h"
#include "apps/fathom/trace_flags.h"
#include "base/files.h"
#include "base/format.h"
#include "sim/mlperf.h"
#include "sim/plan.h"
#include "traces/transforms.h"
#include "tuner/search/autoscale.h"

namespace fathom::cli {
namespace {

struct AutoscaleFlags {
  std::string deployment_file;
  std::vector<std::string> hardware_files;
  sim::TimeModelOptions time_model;
  std::string trace;
  TraceReadFlags read;
  tuner::AutoscaleOptions options;
  std::optional<double> ttft_ms, tpot_ms;
  std::string plan_out;
  bool json = false;
};

Status Run(AutoscaleFlags f) {
  FATHOM_ASSIGN_OR_RETURN(sim::DeploymentFile file, sim::LoadDeploymentFile(f.deployment_file));
  const sim::DeploymentConfig& d = file.config;
  const auto mlperf = sim::MlperfLimits(d.model, sim::Scenario::kServer);
  if (!mlperf && (!f.ttft_ms || !f.tpot_ms)) {
    return Status::InvalidArgument("no MLPerf latency limits known for " + d.model +
                                   ": give --ttft-ms and --tpot-ms");
  }
  f.options.ttft_limit_ms = f.ttft_ms.value_or(mlperf ? mlperf->ttft_ms : 0);
  f.options.tpot_limit_ms = f.tpot_ms.value_or(mlperf ? mlperf->tpot_ms : 0);
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(sim::TimeModel time_model,
                          sim::MakeTimeModel(f.time_model, catalog, d.hardware));
  FATHOM_ASSIGN_OR_RETURN(auto reader, OpenTraceWithFlags(f.trace, f.read));
  FATHOM_ASSIGN_OR_RETURN(std::vector<traces::Request> trace, traces::ReadAll(*reader));
  Result<tuner::AutoscaleResult> planned =
      tuner::PlanReplicas(d, trace, f.options, catalog, time_model.factory);
  if (!planned.ok()) return planned.status().WithContext(f.trace);
  const tuner::AutoscaleResult& r = *planned;
  if (!f.plan_out.empty()) {
    FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.plan_out, sim::ToJson(r.plan).dump(2) + "\n"));
  }
  if (f.json) {
    OrderedJson j;
    j["deployment"] = sim::ToJson(d);
    j["trace"] = f.trace;
    j["phase_s"] = f.options.phase_s;
    j["ttft_limit_ms"] = f.options.ttft_limit_ms;
    j["tpot_limit_ms"] = f.options.tpot_limit_ms;
    j["autoscale"] = r.ToJson();
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf(
      "Autoscaling %s on %s, a replica TP%d PP%d (%d GPU%s), over %s: p99 limits TTFT %.0f ms / "
      "TPOT %.0f ms, phases of %g s, a new replica up in %.1f s (%s)\n\n",
      d.model.c_str(), d.hardware.c_str(), d.tp, d.pp, r.gpus_per_replica,
      r.gpus_per_replica == 1 ? "" : "s", f.trace.c_str(), f.options.ttft_limit_ms,
      f.options.tpot_limit_ms, f.options.phase_s, r.restart_s,
      r.restart_modelled ? "modelled" : "--restart-s");
  std::printf("  %-17s %8s %7s %7s %7s %7s %5s %9s %9s\n", "phase (s)", "requests", "req/s",
              "input", "output", "oracle", "plan", "p99 TTFT", "p99 TPOT");
  for (const tuner::PhaseReplicas& p : r.phases) {
    const double length = p.end_s - p.start_s;
    std::printf("  %-17s %8lld %7.2f %7.0f %7.0f %7d %5d %6.0f ms %6.0f ms\n",
                StrFormat("%.0f-%.0f", p.start_s, p.end_s).c_str(),
                static_cast<long long>(p.requests), length > 0 ? p.requests / length : 0.0,
                p.mean_input, p.mean_output, p.oracle, p.planned, p.ttft_p99_ms, p.tpot_p99_ms);
  }
  auto saved = [&](double hours) {
    return StrFormat("%.2f GPU-hours (%+.1f%%)", hours, 100 * (hours / r.gpu_hours_static - 1));
  };
  std::printf(
      "\n  static     %d replicas all along: %.2f GPU-hours, p99 TTFT %.0f ms, TPOT %.0f ms\n",
      r.static_replicas, r.gpu_hours_static, r.static_ttft_p99_ms, r.static_tpot_p99_ms);
  std::printf("  plan       %zu switches by rolling replacement: %s, %s\n", r.plan.steps.size(),
              saved(r.gpu_hours_plan).c_str(),
              r.plan_within_limits ? "every phase within the limits"
                                   : "a phase still over a limit (see above)");
  std::printf("  oracle     each phase's fewest, switches free: %s\n",
              saved(r.gpu_hours_oracle).c_str());
  std::printf("  (%lld simulations)\n", static_cast<long long>(r.simulations));
  if (!f.plan_out.empty()) {
    std::printf(
        "\n  plan written to %s: `fathom simulate --plan %s --scenario replay --trace %s` replays "
        "it, `fathom online --supervise --plan %s` runs it\n",
        f.plan_out.c_str(), f.plan_out.c_str(), f.trace.c_str(), f.plan_out.c_str());
  }
  return Status::Ok();
}

}  // namespace

void RegisterAutoscale(CLI::App& app, Status* result) {
  auto f = std::make_shared<AutoscaleFlags>();
  CLI::App* cmd = app.add_subcommand(
      "autoscale",
      "Replica counts phase by phase for a trace whose load shifts, against a fleet held at its "
      "peak, and the plan that scales it");
  cmd->add_option("--deployment", f->deployment_file,
                  "One replica's deployment JSON (its GPU count is ignored: replicas are scaled)")
      ->required();
  cmd->add_option("--trace", f->trace, "Trace with arrival times (e.g. a day from `trace synth`)")
      ->required();
  AddTraceReadFlags(cmd, &f->read);
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  AddTimeModelFlags(cmd, &f->time_model);
  cmd->add_option("--phase-s", f->options.phase_s, "Phase length: the plan may scale at each end")
      ->capture_default_str();
  cmd->add_option("--max-replicas", f->options.max_replicas, "Most replicas a phase may have")
      ->capture_default_str();
  cmd->add_option("--ttft-ms", f->ttft_ms, "p99 TTFT limit (default: the model's MLPerf Server)");
  cmd->add_option("--tpot-ms", f->tpot_ms, "p99 TPOT limit (default: the model's MLPerf Server)");
  cmd->add_option("--restart-s", f->options.restart_s,
                  "Seconds a new replica takes to serve (default: modelled)");
  cmd->add_option("--plan-out", f->plan_out, "Write the plan (JSON)");
  cmd->add_flag("--json", f->json, "Phases, fleets and the plan as JSON");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
