// fathom stack: the software stacks fathom is calibrated for, and what a stack is worth on a
// deployment (the same deployment simulated under two stacks).
#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "apps/fathom/commands.h"
#include "apps/fathom/time_model_flags.h"
#include "apps/fathom/trace_flags.h"
#include "base/json_fields.h"
#include "models/hardware.h"
#include "models/stack.h"
#include "sim/mlperf.h"
#include "tuner/search/tuner.h"

namespace fathom::cli {
namespace {

struct StackFlags {
  std::string name;
  std::vector<std::string> diff;  // two stack names
  std::string deployment_file;
  std::string scenario = "offline";
  bool json = false;
  std::vector<std::string> hardware_files;
};

// The GPU vendors on which `s` is the stack a run gets without --engine or --stack.
std::vector<std::string> DefaultOn(const std::vector<models::Stack>& stacks,
                                   const models::Stack& s) {
  std::vector<std::string> out;
  for (const auto& v : s.vendors) {
    auto d = models::DefaultStack(stacks, "", v);
    if (d.ok() && d->name == s.name) out.push_back(v);
  }
  return out;
}

std::string Join(const std::vector<std::string>& parts, const std::string& separator = ", ") {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}
std::string Rounds(const models::Stack& s) { return Join(s.calibrated_on); }

Status List(const StackFlags& f) {
  FATHOM_ASSIGN_OR_RETURN(std::vector<models::Stack> stacks,
                          models::LoadStacks(models::DefaultStacksPath()));
  if (f.json) {
    OrderedJson j = OrderedJson::array();
    for (const auto& s : stacks) {
      OrderedJson e = s.ToJson();
      e["default_on"] = DefaultOn(stacks, s);
      j.push_back(e);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  // What each stack was calibrated on (its MLPerf rounds, else the measured points' file) and the
  // GPUs its fit saw (its calibration's fitted hardware); others extrapolate.
  std::vector<std::array<std::string, 5>> rows = {
      {"name", "engine", "calibrated on", "fitted on", "version"}};
  for (const auto& s : stacks) {
    FATHOM_ASSIGN_OR_RETURN(models::Calibration c, models::LoadCalibration(s.CalibrationPath()));
    const std::string on = s.calibrated_on.empty()
                               ? std::filesystem::path(s.fitted_results).stem().string()
                               : "MLPerf " + Rounds(s);
    const std::string version =
        s.version +
        (DefaultOn(stacks, s).empty() ? "" : "  (default on " + Join(DefaultOn(stacks, s)) + ")");
    rows.push_back({s.name, s.engine, on, Join(c.fitted_hardware, ","), version});
  }
  std::array<size_t, 4> width{};
  for (const auto& r : rows) {
    for (size_t k = 0; k < width.size(); ++k) width[k] = std::max(width[k], r[k].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t k = 0; k < width.size(); ++k)
      line += r[k] + std::string(width[k] - r[k].size() + 2, ' ');
    std::printf("%s%s\n", line.c_str(), r[4].c_str());
  }
  return Status::Ok();
}

Status Show(const StackFlags& f) {
  FATHOM_ASSIGN_OR_RETURN(std::vector<models::Stack> stacks,
                          models::LoadStacks(models::DefaultStacksPath()));
  FATHOM_ASSIGN_OR_RETURN(models::Stack s, models::FindStack(stacks, f.name));
  FATHOM_ASSIGN_OR_RETURN(models::Calibration c, models::LoadCalibration(s.CalibrationPath()));
  OrderedJson j = s.ToJson();
  j["params"] = models::ToJson(c)["params"];
  std::printf("%s\n", j.dump(2).c_str());
  return Status::Ok();
}

// The deployment (a file, else the default one) evaluated as the tuner evaluates a candidate, under
// each of two stacks: its benchmark's data set and run rules, Offline tokens/s or the highest QPS
// within the p99 limits.
Status Diff(const StackFlags& f) {
  if (f.diff.size() != 2)
    return Status::InvalidArgument("stack diff needs two stack names, e.g. trtllm-1.0 trtllm-1.2");
  sim::DeploymentConfig d;
  if (!f.deployment_file.empty()) {
    FATHOM_ASSIGN_OR_RETURN(sim::DeploymentFile file, sim::LoadDeploymentFile(f.deployment_file));
    d = file.config;
  } else {
    d.engine.max_batch = 512;
    d.engine.max_num_tokens = 4608;
  }
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  tuner::TuneOptions o;
  FATHOM_ASSIGN_OR_RETURN(o.space.scenario, sim::ParseScenario(f.scenario));
  if (o.space.scenario != sim::Scenario::kOffline && !tuner::ServerLike(o.space.scenario)) {
    return Status::InvalidArgument("--scenario = \"" + f.scenario +
                                   "\": stack diff supports offline, server and interactive");
  }
  o.space.model = d.model;
  o.space.hardware = d.hardware;
  o.space.gpus = d.TotalGpus();
  FATHOM_ASSIGN_OR_RETURN(Workload workload, LoadWorkload(d.model, "", "", TraceReadFlags{}));
  o.benchmark = workload.benchmark->name;
  o.dataset = std::move(workload.requests);
  o.qps_steps = 10;
  const bool server = tuner::ServerLike(o.space.scenario);
  OrderedJson j;
  j["deployment"] = sim::ToJson(d);
  j["scenario"] = f.scenario;
  j["workload"] = workload.note;
  OrderedJson results = OrderedJson::array();
  double figure[2] = {0, 0};
  if (!f.json) {
    std::printf("%s on %d x %s, %s scenario; %s\n\n", d.model.c_str(), d.TotalGpus(),
                d.hardware.c_str(), f.scenario.c_str(), workload.note.c_str());
    std::printf("%-12s %12s %12s %8s %10s %10s\n", "stack", server ? "QPS" : "tok/s", "tok/s/GPU",
                "run s", "TTFT p99", "TPOT p99");
  }
  for (int i = 0; i < 2; ++i) {
    sim::TimeModelOptions tm;
    tm.stack = f.diff[i];
    FATHOM_ASSIGN_OR_RETURN(sim::TimeModel time_model, sim::MakeTimeModel(tm, catalog, d.hardware));
    o.make_time = time_model.factory;
    FATHOM_ASSIGN_OR_RETURN(tuner::CandidateResult c, tuner::Evaluate(d, o, catalog));
    figure[i] = server ? c.qps : c.throughput_tokens_per_s;
    OrderedJson r = c.ToJson();
    r.erase("config");
    r["stack"] = f.diff[i];
    results.push_back(r);
    if (!f.json) {
      std::printf("%-12s %12.*f %12.0f %8.0f %10.0f %10.1f%s\n", f.diff[i].c_str(), server ? 2 : 0,
                  figure[i], c.tokens_per_s_per_gpu, c.run_s, c.ttft_p99_ms, c.tpot_p99_ms,
                  c.valid ? "" : "  (not valid)");
    }
  }
  const double ratio = figure[0] > 0 ? figure[1] / figure[0] : 0;
  j["stacks"] = results;
  j["ratio"] = ratio;
  if (f.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("\n%s / %s: %.2fx %s\n", f.diff[1].c_str(), f.diff[0].c_str(), ratio,
                server ? "QPS within the p99 limits" : "tokens/s");
  }
  return Status::Ok();
}

}  // namespace

void RegisterStack(CLI::App& app, Status* result) {
  auto f = std::make_shared<StackFlags>();
  CLI::App* cmd =
      app.add_subcommand("stack", "Software stacks (engine releases) and their calibrations");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand("list", "The stacks, the newest (the default) last");
  list->add_flag("--json", f->json, "Print JSON");
  list->callback([f, result] { *result = List(*f); });
  CLI::App* show =
      cmd->add_subcommand("show", "One stack: features, sources and calibrated parameters (JSON)");
  show->add_option("name", f->name, "Stack name")->required();
  show->callback([f, result] { *result = Show(*f); });
  CLI::App* diff =
      cmd->add_subcommand("diff", "What a stack is worth: one deployment under two stacks");
  diff->add_option("stacks", f->diff, "Two stack names")->required()->expected(2);
  diff->add_option("--deployment", f->deployment_file,
                   "Deployment file (default: DeepSeek-R1 on 8xB200, TP8/EP8/attnDP8)");
  diff->add_option("--scenario", f->scenario, "offline, server or interactive")
      ->capture_default_str();
  diff->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  diff->add_flag("--json", f->json, "Print JSON");
  diff->callback([f, result] { *result = Diff(*f); });
}

}  // namespace fathom::cli
