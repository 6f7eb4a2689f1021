// fathom loadgen: MLPerf LoadGen's scenarios against an OpenAI-compatible endpoint, scored as the
// simulator scores a run, optionally beside the simulator's prediction for the same load.
#include <cstdio>

#include "apps/fathom/commands.h"
#include "apps/fathom/time_model_flags.h"
#include "apps/fathom/trace_flags.h"
#include "base/format.h"
#include "models/hardware.h"
#include "sim/deployment_config.h"
#include "sim/mlperf.h"
#include "sim/serving/loadgen.h"

namespace fathom::cli {
namespace {

struct LoadgenFlags {
  sim::LoadgenOptions options;
  std::string scenario = "server";
  sim::ScenarioConfig sc;
  std::string model{models::kDefaultModel};  // whose benchmark data set and limits
  std::string benchmark, trace;
  TraceReadFlags read;
  std::string compare_sim;  // deployment file to simulate under the same load
  std::vector<std::string> hardware_files;
  sim::TimeModelOptions time_model;
  int gpus = 0;  // for tokens/s per GPU; default: the compared deployment's, else 1
  bool json = false;
};

void PrintRow(const char* name, double measured, const sim::SimulationResult* simulated,
              double sim_value, const char* fmt) {
  std::printf("  %-22s", name);
  std::printf(fmt, measured);
  if (simulated) {
    std::printf(fmt, sim_value);
    std::printf("   %+6.1f%%", sim_value > 0 ? 100.0 * (measured - sim_value) / sim_value : 0.0);
  }
  std::printf("\n");
}

Status Run(LoadgenFlags f) {
  FATHOM_ASSIGN_OR_RETURN(f.sc.scenario, sim::ParseScenario(f.scenario));
  const sim::Scenario s = f.sc.scenario;
  const bool server = s == sim::Scenario::kServer || s == sim::Scenario::kInteractive;
  if (s != sim::Scenario::kOffline && !server && s != sim::Scenario::kReplay) {
    return Status::InvalidArgument("--scenario = " + f.scenario +
                                   ": offline, server, interactive or replay");
  }
  if (server && !(f.sc.qps > 0))
    return Status::InvalidArgument("--qps: must be > 0 for the " + f.scenario + " scenario");
  FATHOM_RETURN_IF_ERROR(f.sc.Validate());
  FATHOM_RETURN_IF_ERROR(f.options.Validate());

  std::vector<traces::Request> dataset;
  const traces::Benchmark* benchmark = nullptr;
  if (s == sim::Scenario::kReplay) {
    if (f.trace.empty())
      return Status::InvalidArgument("the replay scenario needs arrival times: give --trace FILE");
    FATHOM_ASSIGN_OR_RETURN(benchmark, ChooseBenchmark(f.model, f.benchmark));
  } else {
    FATHOM_ASSIGN_OR_RETURN(Workload w, LoadWorkload(f.model, f.benchmark, f.trace, f.read));
    dataset = std::move(w.requests);
    benchmark = w.benchmark;
    if (!f.json) std::fprintf(stderr, "fathom: %s\n", w.note.c_str());
  }
  const int64_t n = static_cast<int64_t>(dataset.size());
  int64_t samples = f.sc.samples;
  if (samples <= 0 && s == sim::Scenario::kOffline) samples = n;
  if (samples <= 0 && server) {
    samples = sim::LoadGenServerSamples(n, f.sc.qps, f.sc.min_duration_s,
                                        benchmark ? benchmark->server_min_query_count : 0);
  }
  auto make_source = [&]() -> Result<std::unique_ptr<sim::RequestSource>> {
    if (s == sim::Scenario::kReplay) {
      FATHOM_ASSIGN_OR_RETURN(auto reader, OpenTraceWithFlags(f.trace, f.read));
      return sim::ReplaySource(std::move(reader));
    }
    if (s == sim::Scenario::kOffline) return sim::OfflineSource(dataset, samples, f.sc.seed);
    return sim::PoissonSource(dataset, samples, f.sc.qps, f.sc.seed);
  };
  const std::string limits_model = benchmark ? benchmark->name : f.model;
  std::optional<sim::LatencyLimits> limits = sim::MlperfLimits(limits_model, s);
  if (f.sc.ttft_limit_ms || f.sc.tpot_limit_ms) {
    sim::LatencyLimits l = limits.value_or(sim::LatencyLimits{1e300, 1e300});
    if (f.sc.ttft_limit_ms) l.ttft_ms = *f.sc.ttft_limit_ms;
    if (f.sc.tpot_limit_ms) l.tpot_ms = *f.sc.tpot_limit_ms;
    limits = l;
  }

  // The prediction first: it is quick, and a bad deployment file should fail before the load runs.
  std::optional<sim::SimulationResult> predicted;
  int gpus = f.gpus > 0 ? f.gpus : 1;
  if (!f.compare_sim.empty()) {
    FATHOM_ASSIGN_OR_RETURN(sim::DeploymentFile file, sim::LoadDeploymentFile(f.compare_sim));
    FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                            models::HardwareCatalog::Load(f.hardware_files));
    FATHOM_ASSIGN_OR_RETURN(sim::TimeModel time_model,
                            sim::MakeTimeModel(f.time_model, catalog, file.config.hardware));
    FATHOM_ASSIGN_OR_RETURN(auto resolved, sim::Resolve(file.config, catalog, time_model.factory));
    resolved->spec.scenario = f.sc;
    resolved->spec.benchmark = limits_model;
    if (f.gpus <= 0) gpus = file.config.gpus;
    FATHOM_ASSIGN_OR_RETURN(auto source, make_source());
    sim::Simulator simulator(std::move(resolved->spec), std::move(source));
    FATHOM_ASSIGN_OR_RETURN(predicted, simulator.Run());
  }
  FATHOM_ASSIGN_OR_RETURN(auto source, make_source());
  if (!f.json) {
    std::fprintf(stderr, "fathom loadgen: %s scenario, %lld samples against %s\n",
                 f.scenario.c_str(), static_cast<long long>(samples), f.options.url.c_str());
  }
  FATHOM_ASSIGN_OR_RETURN(sim::LoadgenReport report,
                          sim::RunLoad(*source, f.sc, limits, gpus, f.options));
  const sim::SimulationResult& m = report.result;

  if (f.json) {
    OrderedJson j = m.ToJson();
    j["failed_requests"] = report.failed;
    j["errors"] = report.errors;
    j["schedule_error_p99_ms"] = report.schedule_error_p99_ms;
    if (predicted) j["simulated"] = predicted->ToJson();
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    const sim::SimulationResult* p = predicted ? &*predicted : nullptr;
    std::printf("Loadgen: %s scenario against %s (model %s), %lld of %lld requests answered\n",
                f.scenario.c_str(), f.options.url.c_str(), report.model.c_str(),
                static_cast<long long>(m.completed_requests),
                static_cast<long long>(m.completed_requests + report.failed));
    std::printf("  %-22s%12s%s\n", "", "measured", p ? "   simulated  measured vs sim" : "");
    PrintRow("tokens/s", m.throughput_tokens_per_s, p, p ? p->throughput_tokens_per_s : 0,
             "%12.1f");
    PrintRow("TTFT mean (ms)", m.ttft_mean_ms, p, p ? p->ttft_mean_ms : 0, "%12.1f");
    PrintRow("TTFT p99 (ms)", m.ttft_p99_ms, p, p ? p->ttft_p99_ms : 0, "%12.1f");
    PrintRow("TPOT mean (ms)", m.tpot_mean_ms, p, p ? p->tpot_mean_ms : 0, "%12.2f");
    PrintRow("TPOT p99 (ms)", m.tpot_p99_ms, p, p ? p->tpot_p99_ms : 0, "%12.2f");
    PrintRow("end to end p99 (ms)", m.e2e_p99_ms, p, p ? p->e2e_p99_ms : 0, "%12.1f");
    std::string why;
    for (const std::string& reason : m.InvalidReasons())
      why += (why.empty() ? ": " : "; ") + reason;
    std::printf("  MLPerf valid          %s%s\n", m.mlperf_valid ? "yes" : "no", why.c_str());
    std::printf(
        "  schedule error p99    %.3f ms (how late requests left against their Poisson times)\n",
        report.schedule_error_p99_ms);
    for (const std::string& e : report.errors) std::printf("  error: %s\n", e.c_str());
  }
  if (report.failed > 0) {
    return Status::InvalidArgument(std::to_string(report.failed) + " of " +
                                   std::to_string(report.failed + m.completed_requests) +
                                   " requests failed (first: " + report.errors.front() + ")");
  }
  return Status::Ok();
}

}  // namespace

void RegisterLoadgen(CLI::App& app, Status* result) {
  auto f = std::make_shared<LoadgenFlags>();
  CLI::App* cmd = app.add_subcommand("loadgen",
                                     "Run MLPerf LoadGen's scenarios against an OpenAI-compatible "
                                     "endpoint (fathom serve, vLLM, SGLang, ...)");
  cmd->add_option("--url", f->options.url, "Endpoint base URL")->capture_default_str();
  cmd->add_option("--served-model", f->options.model,
                  "Model id to request (default: the endpoint's first)");
  cmd->add_option("--api-key", f->options.api_key, "Bearer token");
  cmd->add_flag("--chat", f->options.chat, "Use /v1/chat/completions");
  cmd->add_option("--scenario", f->scenario, "offline, server, interactive or replay")
      ->capture_default_str();
  cmd->add_option("--qps", f->sc.qps, "Server and Interactive: Poisson arrivals per second");
  cmd->add_option("--samples", f->sc.samples, "Requests to issue (default: LoadGen's rule)");
  cmd->add_option("--seed", f->sc.seed, "Seed of the sample order and arrival times")
      ->capture_default_str();
  cmd->add_option("--min-duration", f->sc.min_duration_s, "LoadGen's minimum run, seconds")
      ->capture_default_str();
  cmd->add_option("--ttft-ms", f->sc.ttft_limit_ms, "p99 TTFT limit (default: the benchmark's)");
  cmd->add_option("--tpot-ms", f->sc.tpot_limit_ms, "p99 TPOT limit (default: the benchmark's)");
  cmd->add_option("--model", f->model, "Model whose MLPerf benchmark gives the data set and limits")
      ->capture_default_str();
  cmd->add_option("--benchmark", f->benchmark, "MLPerf benchmark whose data set to send");
  cmd->add_option("--trace", f->trace, "Trace file instead of a benchmark data set");
  AddTraceReadFlags(cmd, &f->read);
  cmd->add_option("--time-scale", f->options.time_scale,
                  "The endpoint runs this much faster than real time (fathom serve --time-scale)")
      ->capture_default_str();
  cmd->add_option("--max-in-flight", f->options.max_in_flight, "Concurrent requests")
      ->capture_default_str();
  cmd->add_option("--compare-sim", f->compare_sim,
                  "Deployment JSON to simulate under the same load, printed beside");
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  AddTimeModelFlags(cmd, &f->time_model);
  cmd->add_option("--gpus", f->gpus, "GPUs behind the endpoint, for tokens/s per GPU");
  cmd->add_flag(
      "--json", f->json,
      "JSON: simulate's keys, plus failed_requests, errors, schedule_error_p99_ms, simulated");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
