#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "apps/fathom/commands.h"
#include "base/files.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "models/fit.h"
#include "models/hardware.h"
#include "models/perf_db.h"
#include "profiler/compare.h"
#include "profiler/import.h"
#include "profiler/summary.h"

namespace fathom::cli {
namespace {

struct ProfileFlags {
  std::string file, db = "fathom_perf.db", hardware, models, stack, calibration, fill = "random";
  std::vector<std::string> hardware_files;
  int top = 15, reps = 20;
  bool json = false, fit = false, rows = false, list = false, cross_validate = false;
  std::string out;
  std::vector<std::string> command;
};

// The folder holding the fathom binary, where the CUDA build puts its profiler parts.
std::filesystem::path BinaryDir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : exe.parent_path();
}

Status Unavailable(const std::string& what) {
  return Status::Unavailable(
      what +
      " is missing: fathom was built without CUDA/CUPTI. Install the CUDA toolkit "
      "with CUPTI and rebuild (cmake -DFATHOM_WITH_CUDA=ON), on a machine with an "
      "NVIDIA GPU and driver.");
}

// Measuring needs an NVIDIA driver and GPU; without one a traced program records nothing and
// would end as if it had worked.
Status CheckGpu() {
  if (std::filesystem::exists("/dev/nvidiactl")) return Status::Ok();
  return Status::Unavailable(
      "an NVIDIA GPU and driver are missing (no /dev/nvidiactl): profile run and profile ops "
      "measure kernels on this machine's GPU; import timings measured elsewhere with "
      "`fathom profile import`");
}

Status Import(const ProfileFlags& f) {
  const bool existed = std::filesystem::exists(f.db);
  auto import = [&]() -> Result<profiler::ImportResult> {
    FATHOM_ASSIGN_OR_RETURN(models::PerfDb db, models::PerfDb::Open(f.db));
    return profiler::ImportProfile(f.file, db, f.hardware);
  };
  const Result<profiler::ImportResult> imported = import();  // the database is closed after it
  if (!imported.ok()) {
    if (!existed) std::filesystem::remove(f.db);  // nothing half-written
    return imported.status();
  }
  std::printf("imported %lld records from %s into %s\n", static_cast<long long>(imported->records),
              f.file.c_str(), f.db.c_str());
  for (const auto& [dtype, n] : imported->skipped) {
    std::printf(
        "left out %lld rows of %s (a data type or operator the cost model does not price)\n",
        static_cast<long long>(n), dtype.c_str());
  }
  return Status::Ok();
}

Status Summarize(const ProfileFlags& f) {
  if (!std::filesystem::exists(f.file))
    return Status::NotFound(f.file + ": no such performance database");
  FATHOM_ASSIGN_OR_RETURN(models::PerfDb db, models::PerfDb::Open(f.file));
  FATHOM_ASSIGN_OR_RETURN(std::vector<models::KernelRecord> records, db.Kernels());
  const profiler::ProfileSummary s = profiler::Summarize(records);
  if (f.json) {
    std::printf("%s\n", s.ToJson(f.top).dump(2).c_str());
    return Status::Ok();
  }
  std::printf("%lld records, %.1f us of GPU time\n", static_cast<long long>(s.records), s.total_us);
  auto table = [&](const char* title, const std::vector<profiler::TimeShare>& rows, size_t n) {
    std::printf("\n%-60s %8s %12s %10s %6s\n", title, "count", "total us", "mean us", "share");
    for (size_t i = 0; i < rows.size() && i < n; ++i) {
      std::string key = rows[i].key.size() > 60 ? rows[i].key.substr(0, 57) + "..." : rows[i].key;
      std::printf("%-60s %8lld %12.1f %10.2f %5.1f%%\n", key.c_str(),
                  static_cast<long long>(rows[i].count), rows[i].total_us, rows[i].mean_us(),
                  s.total_us > 0 ? 100 * rows[i].total_us / s.total_us : 0.0);
    }
  };
  table("top kernels", s.kernels, f.top);
  table("NVTX range", s.ranges, s.ranges.size());
  table("operator kind", s.kinds, s.kinds.size());
  return Status::Ok();
}

void PrintGroups(const std::vector<profiler::ComparisonGroup>& groups) {
  std::printf("%-32s %5s %12s %11s %9s %10s\n", "group", "rows", "median|err|", "median err",
              "worst", "in p10-p90");
  for (const auto& g : groups) {
    const std::string spread =
        g.with_spread > 0 ? std::to_string(g.within_spread) + "/" + std::to_string(g.with_spread)
                          : "-";
    std::printf("%-32s %5d %11.1f%% %+10.1f%% %+8.1f%% %10s\n", g.key.c_str(), g.rows,
                g.median_abs_pct, g.median_pct, g.worst_pct, spread.c_str());
  }
}

// The measured operators of one GPU against the cost model's analytical prices, and optionally
// the GEMM curve refitted to them.
Status Compare(const ProfileFlags& f) {
  if (!std::filesystem::is_regular_file(f.file))
    return Status::NotFound(f.file + ": no such performance database");
  FATHOM_ASSIGN_OR_RETURN(models::PerfDb db, models::PerfDb::Open(f.file));
  FATHOM_ASSIGN_OR_RETURN(std::vector<std::string> gpus, db.HardwareNames());
  std::string hardware = f.hardware;
  if (hardware.empty()) {
    if (gpus.size() != 1) {
      std::string names;
      for (const auto& g : gpus) names += (names.empty() ? "" : ", ") + g;
      return Status::InvalidArgument(
          f.file + ": --hardware: required when the database holds other than one GPU (it holds " +
          (names.empty() ? std::string("none") : names) + ")");
    }
    hardware = gpus.front();
  }
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(models::Hardware hw, catalog.Find(hardware));
  const std::string calibration_path =
      f.calibration.empty() ? models::DefaultCalibrationPath() : f.calibration;
  FATHOM_ASSIGN_OR_RETURN(models::Calibration calibration,
                          models::LoadCalibration(calibration_path));
  FATHOM_ASSIGN_OR_RETURN(std::vector<models::OpMeasurement> rows,
                          db.Query(hardware, "", "", f.stack));
  if (rows.empty()) {
    return Status::InvalidArgument(f.file + ": no measured operators for " + hardware +
                                   (f.stack.empty() ? "" : " with stack " + f.stack));
  }
  FATHOM_ASSIGN_OR_RETURN(profiler::ModelComparison before,
                          profiler::CompareWithModel(rows, hw, calibration.params));
  if (before.rows.empty()) {
    return Status::InvalidArgument(f.file + ": none of " + hardware +
                                   "'s rows is an operator the model prices");
  }

  std::optional<models::OperatorFits> fit;
  std::optional<profiler::ModelComparison> after;
  if (f.fit) {
    FATHOM_ASSIGN_OR_RETURN(fit, models::FitOperators(rows, hw, calibration.params));
    FATHOM_ASSIGN_OR_RETURN(after,
                            profiler::CompareWithModel(rows, hw, fit->Applied(calibration.params)));
    if (!f.out.empty()) {
      models::Calibration fitted = calibration;
      fitted.params = fit->Applied(calibration.params);
      std::string what;
      for (auto [fitted_part, name] : {std::pair{fit->gemm.has_value(), "GEMM curve"},
                                       {fit->links.has_value(), "collective price"},
                                       {fit->experts.has_value(), "experts' streaming rate"}}) {
        if (fitted_part) what += (what.empty() ? "" : ", ") + std::string(name);
      }
      fitted.note = "Operator parameters (" + what +
                    ") fitted by `fathom profile compare --fit` to " +
                    std::to_string(after->rows.size()) + " " + hardware + " rows of " + f.file +
                    "; the other parameters as in " + calibration_path + ". " + calibration.note;
      FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.out, models::ToJson(fitted).dump(2) + "\n"));
    }
  }
  // Leave one model out: fit on the other models' rows (and every row of no model, such as
  // collectives), price the held-out model's rows.
  OrderedJson folds = OrderedJson::array();
  if (f.cross_validate) {
    std::set<std::string> names;
    for (const auto& r : rows) {
      if (auto m = models::DimText(r.dims, "model")) names.insert(std::string(*m));
    }
    if (names.size() < 2)
      return Status::InvalidArgument(f.file +
                                     ": --cross-validate needs rows of two models at least");
    for (const std::string& name : names) {
      std::vector<models::OpMeasurement> train, test;
      for (const auto& r : rows)
        (models::DimText(r.dims, "model") == std::optional<std::string_view>(name) ? test : train)
            .push_back(r);
      FATHOM_ASSIGN_OR_RETURN(models::OperatorFits fold,
                              models::FitOperators(train, hw, calibration.params));
      FATHOM_ASSIGN_OR_RETURN(
          profiler::ModelComparison held,
          profiler::CompareWithModel(test, hw, fold.Applied(calibration.params)));
      OrderedJson groups = OrderedJson::array();
      for (const auto& g : held.by_kind)
        groups.push_back(
            {{"group", g.key}, {"rows", g.rows}, {"median_abs_error_pct", g.median_abs_pct}});
      folds.push_back({{"held_out", name}, {"by_kind", groups}});
    }
  }
  const models::CostParams& p = calibration.params;
  auto fit_json = [&]() {
    OrderedJson j;
    auto value = [&](double v, double sd, double was) {
      return OrderedJson{{"value", v}, {"stddev", sd}, {"calibration", was}};
    };
    if (fit->gemm) {
      const models::GemmFit& g = *fit->gemm;
      for (size_t i = 0; i < g.kFields.size(); ++i) {
        if (g.Fitted(static_cast<int>(i)))
          j[models::CostParamName(g.kFields[i])] = value(g.value[i], g.stddev[i], p.*g.kFields[i]);
      }
      j["measurements"] = g.measurements;
    }
    if (fit->links) {
      const models::CollectiveFit& l = *fit->links;
      j["link_efficiency"] = value(l.link_efficiency, l.stddev[0], p.link_efficiency);
      j["collective_latency_us"] = value(l.latency_us, l.stddev[1], p.collective_latency_us);
      j["collective_hop_latency_us"] =
          value(l.hop_latency_us, l.stddev[2], p.collective_hop_latency_us);
      j["collective_measurements"] = l.measurements;
    }
    if (fit->experts) {
      const models::ExpertFit& e = *fit->experts;
      j["grouped_memory_efficiency"] =
          value(e.memory_efficiency, e.memory_stddev, p.grouped_memory_efficiency);
      j["expert_layer_measurements"] = e.measurements;
    }
    if (fit->dequantised_experts) {
      const models::ExpertFit& e = *fit->dequantised_experts;
      j["dequant_grouped_memory_efficiency"] =
          value(e.memory_efficiency, e.memory_stddev, p.dequant_grouped_memory_efficiency);
      j["dequant_gemm_efficiency"] =
          value(e.math_efficiency, e.math_stddev, p.dequant_gemm_efficiency);
      j["dequantised_expert_layer_measurements"] = e.measurements;
    }
    j["after"] = after->ToJson(f.rows);
    return j;
  };
  if (f.json) {
    OrderedJson j;
    j["database"] = f.file;
    j["hardware"] = hardware;
    j["calibration"] = calibration_path;
    j["comparison"] = before.ToJson(f.rows);
    if (fit) j["fit"] = fit_json();
    if (f.cross_validate) j["leave_one_model_out"] = folds;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("%s: %zu measured operators in %s against the cost model (%s), priced analytically\n",
              hardware.c_str(), before.rows.size(), f.file.c_str(), calibration_path.c_str());
  std::printf("error = (model - measured) / measured\n\n");
  PrintGroups(before.by_kind);
  std::printf("\n");
  PrintGroups(before.by_size);
  for (const auto& [op, n] : before.not_compared) {
    std::printf("not compared: %d %s rows (the model prices no such operator from its shape)\n", n,
                op.c_str());
  }
  if (f.rows) {
    std::printf("\n%-17s %-6s %9s %7s %7s %6s %11s %11s %11s %8s  %s\n", "op", "dtype", "M", "N",
                "K", "extra", "measured us", "p10-p90", "model us", "error", "dims");
    for (const auto& c : before.rows) {
      const std::string spread =
          c.has_spread() ? StrFormat("%.1f-%.1f", c.row.p10_us, c.row.p90_us) : "-";
      std::printf("%-17s %-6s %9lld %7lld %7lld %6lld %11.2f %11s %11.2f %+7.1f%%  %s\n",
                  c.row.op.c_str(), c.row.dtype.c_str(), static_cast<long long>(c.row.m),
                  static_cast<long long>(c.row.n), static_cast<long long>(c.row.k),
                  static_cast<long long>(c.row.extra), c.row.median_us, spread.c_str(), c.model_us,
                  c.error_pct(), c.row.dims.c_str());
    }
  }
  if (fit) {
    std::printf("\nFitted to these rows (calibration's value in brackets):\n");
    if (fit->gemm) {
      const models::GemmFit& g = *fit->gemm;
      std::printf("  GEMM curve, %d rows:\n", g.measurements);
      for (size_t i = 0; i < g.kFields.size(); ++i) {
        if (g.Fitted(static_cast<int>(i)))
          std::printf("  %-19s %7.3f +- %.3f  (%.3f)\n", models::CostParamName(g.kFields[i]),
                      g.value[i], g.stddev[i], p.*g.kFields[i]);
      }
    }
    if (fit->links) {
      const models::CollectiveFit& l = *fit->links;
      std::printf("  collectives, %d rows:\n", l.measurements);
      std::printf("  link_efficiency  %8.3f +- %.3f  (%.3f)\n", l.link_efficiency, l.stddev[0],
                  p.link_efficiency);
      std::printf("  collective_latency_us %5.1f +- %.1f  (%.1f)\n", l.latency_us, l.stddev[1],
                  p.collective_latency_us);
      std::printf("  collective_hop_latency_us %5.2f +- %.2f  (%.2f)\n", l.hop_latency_us,
                  l.stddev[2], p.collective_hop_latency_us);
    }
    if (fit->experts) {
      const models::ExpertFit& e = *fit->experts;
      std::printf("  MoE layers on one GPU holding every expert, %d rows:\n", e.measurements);
      std::printf("  grouped_memory_efficiency %5.3f +- %.3f  (%.3f)\n", e.memory_efficiency,
                  e.memory_stddev, p.grouped_memory_efficiency);
    }
    if (fit->dequantised_experts) {
      const models::ExpertFit& e = *fit->dequantised_experts;
      std::printf("  MoE layers whose MXFP4 weights the GPU dequantises (no FP4 cores), %d rows:\n",
                  e.measurements);
      std::printf("  dequant_grouped_memory_efficiency %5.3f +- %.3f  (%.3f)\n",
                  e.memory_efficiency, e.memory_stddev, p.dequant_grouped_memory_efficiency);
      std::printf("  dequant_gemm_efficiency %5.3f +- %.3f  (%.3f)\n", e.math_efficiency,
                  e.math_stddev, p.dequant_gemm_efficiency);
    }
    std::printf("\n");
    PrintGroups(after->by_kind);
    std::printf("\n");
    PrintGroups(after->by_size);
    if (!f.out.empty()) std::printf("\nwrote %s (use it with --calibration)\n", f.out.c_str());
  }
  for (const auto& fold : folds) {
    std::printf("\nfitted without %s, its rows:\n", fold["held_out"].get<std::string>().c_str());
    for (const auto& g : fold["by_kind"]) {
      std::printf("  %-30s %6d rows  median |error| %5.1f%%\n",
                  g["group"].get<std::string>().c_str(), g["rows"].get<int>(),
                  g["median_abs_error_pct"].get<double>());
    }
  }
  return Status::Ok();
}

Status Exec(const std::string& program, std::vector<std::string> args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execvp(program.c_str(), argv.data());
  return Status::IoError(program + ": cannot execute");
}

Status Ops(const ProfileFlags& f) {
  const auto bench = BinaryDir() / "fathom-ops-bench";
  if (!std::filesystem::exists(bench))
    return Unavailable("the operator microbenchmark runner (fathom-ops-bench)");
  if (!f.list) FATHOM_RETURN_IF_ERROR(CheckGpu());  // listing the shapes needs none
  std::vector<std::string> args = {"--db", f.db, "--reps", std::to_string(f.reps)};
  if (!f.hardware.empty()) args.insert(args.end(), {"--hardware", f.hardware});
  if (!f.models.empty()) args.insert(args.end(), {"--models", f.models});
  args.insert(args.end(), {"--fill", f.fill});
  if (f.list) args.push_back("--list");
  return Exec(bench.string(), args);
}

Status Run(const ProfileFlags& f) {
  const auto lib = BinaryDir() / "libfathom_cupti.so";
  if (!std::filesystem::exists(lib)) return Unavailable("the CUPTI tracer (libfathom_cupti.so)");
  if (f.command.empty()) return Status::InvalidArgument("give the command to trace after --");
  FATHOM_RETURN_IF_ERROR(CheckGpu());
  setenv("CUDA_INJECTION64_PATH", lib.c_str(), 1);
  setenv("FATHOM_PROFILE_DB", std::filesystem::absolute(f.db).c_str(), 1);
  // NVTX ranges through the same library: it hands them to the CUPTI the tracer runs on.
  setenv("NVTX_INJECTION64_PATH", lib.c_str(), 0);
  return Exec(f.command[0], std::vector<std::string>(f.command.begin() + 1, f.command.end()));
}

// The calibration with the database's measured all-reduces as its tables: per GPU and rank
// count, within one node, the fastest kernel source of each buffer size (an engine picks its
// fastest), replacing the tables of those GPUs (others kept).
Status Tables(const ProfileFlags& f) {
  if (!std::filesystem::is_regular_file(f.file))
    return Status::NotFound(f.file + ": no such performance database");
  FATHOM_ASSIGN_OR_RETURN(models::PerfDb db, models::PerfDb::Open(f.file));
  FATHOM_ASSIGN_OR_RETURN(std::vector<std::string> gpus, db.HardwareNames());
  if (!f.hardware.empty()) gpus = {f.hardware};
  const std::string calibration_path =
      f.calibration.empty() ? models::DefaultCalibrationPath() : f.calibration;
  FATHOM_ASSIGN_OR_RETURN(models::Calibration calibration,
                          models::LoadCalibration(calibration_path));
  std::map<std::pair<std::string, int>, std::map<int64_t, double>> fastest;
  for (const std::string& gpu : gpus) {
    FATHOM_ASSIGN_OR_RETURN(std::vector<models::OpMeasurement> rows,
                            db.Query(gpu, "all_reduce", "", f.stack));
    for (const auto& r : rows) {
      if (models::DimValue(r.dims, "nodes").value_or(1) > 1) continue;  // scale-out
      auto [it, added] = fastest[{gpu, static_cast<int>(r.extra)}].emplace(r.m, r.median_us);
      if (!added) it->second = std::min(it->second, r.median_us);
    }
  }
  if (fastest.empty()) {
    return Status::InvalidArgument(f.file + ": no all-reduce measured within one node" +
                                   (f.hardware.empty() ? "" : " on " + f.hardware) +
                                   (f.stack.empty() ? "" : " with stack " + f.stack));
  }
  models::AllReduceTables tables;
  std::set<std::string> measured;
  for (const auto& [key, points] : fastest) {
    measured.insert(key.first);
    for (const auto& [bytes, us] : points)
      tables.Add(key.first, key.second, static_cast<double>(bytes), us);
  }
  for (const auto& [key, points] : calibration.params.all_reduce.tables()) {
    if (measured.count(key.first)) continue;
    for (const auto& [bytes, us] : points) tables.Add(key.first, key.second, bytes, us);
  }
  calibration.params.all_reduce = tables;
  FATHOM_RETURN_IF_ERROR(WriteFileAtomic(f.out, models::ToJson(calibration).dump(2) + "\n"));
  for (const auto& [key, points] : fastest) {
    std::printf("%s, %d GPUs: %zu all-reduce sizes, %s to %s bytes\n", key.first.c_str(),
                key.second, points.size(), std::to_string(points.begin()->first).c_str(),
                std::to_string(points.rbegin()->first).c_str());
  }
  std::printf("wrote %s (%s with these tables)\n", f.out.c_str(), calibration_path.c_str());
  return Status::Ok();
}

}  // namespace

void RegisterProfile(CLI::App& app, Status* result) {
  auto f = std::make_shared<ProfileFlags>();
  CLI::App* cmd =
      app.add_subcommand("profile", "Measure kernels (CUPTI), import profiles, summarize");
  cmd->require_subcommand(1);
  CLI::App* imp = cmd->add_subcommand("import",
                                      "Import an Nsight Systems export, a PyTorch profiler trace, "
                                      "a GEMM table or a Vidur profile (CSV)");
  imp->add_option("file", f->file, "Profile file (format detected)")->required();
  imp->add_option("--db", f->db, "Performance database")->capture_default_str();
  imp->add_option(
      "--hardware", f->hardware,
      "GPU to file a table under (default: a GEMM table's device column, a Vidur profile's path)");
  imp->callback([f, result] { *result = Import(*f); });
  CLI::App* sum =
      cmd->add_subcommand("summarize", "Top kernels, time per NVTX range and per operator kind");
  sum->add_option("db", f->file, "Performance database")->required();
  sum->add_option("--top", f->top, "Kernels to list")->capture_default_str();
  sum->add_flag("--json", f->json, "Print JSON");
  sum->callback([f, result] { *result = Summarize(*f); });
  CLI::App* ops = cmd->add_subcommand(
      "ops", "Microbenchmark the models' GEMM and grouped GEMM shapes on this GPU (needs CUDA)");
  ops->add_option("--db", f->db, "Performance database")->capture_default_str();
  ops->add_option("--hardware", f->hardware,
                  "Catalogue name to file the rows under (default: from the GPU)");
  ops->add_option("--models", f->models,
                  "Models whose operator lists give the shapes (comma-separated)");
  ops->add_option("--reps", f->reps, "Timed repetitions per shape")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  ops->add_option("--fill", f->fill,
                  "Operands: random (as real data) or zeros (tensor cores run faster on zeros)")
      ->capture_default_str()
      ->check(CLI::IsMember({"random", "zeros"}));
  ops->add_flag("--list", f->list, "Only list the shapes it would time (no GPU needed)");
  ops->callback([f, result] { *result = Ops(*f); });
  CLI::App* cmp = cmd->add_subcommand(
      "compare", "Measured operators against the cost model, per kind and size");
  cmp->add_option("db", f->file, "Performance database")->required();
  cmp->add_option("--hardware", f->hardware,
                  "GPU whose rows to compare (default: the database's only one)");
  cmp->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  cmp->add_option("--stack", f->stack, "Only rows of this software stack");
  cmp->add_option("--calibration", f->calibration,
                  "Calibration file (default: the newest stack's)");
  cmp->add_flag("--fit", f->fit,
                "Also fit the GEMM curve, the collective price and the experts' streaming rate to "
                "the rows and compare again");
  cmp->add_option("--out", f->out,
                  "With --fit: write the calibration with the fitted operator parameters here");
  cmp->add_flag("--cross-validate", f->cross_validate,
                "Fit without each model's rows (dims model=...) and compare that model's rows");
  cmp->add_flag("--rows", f->rows, "List every row");
  cmp->add_flag("--json", f->json, "Print JSON");
  cmp->callback([f, result] { *result = Compare(*f); });
  CLI::App* tab = cmd->add_subcommand(
      "tables", "Write a calibration whose measured all-reduce tables price all-reduces");
  tab->add_option("db", f->file, "Performance database")->required();
  tab->add_option("--hardware", f->hardware, "Only this GPU's rows (default: every GPU's)");
  tab->add_option("--stack", f->stack, "Only rows of this software stack");
  tab->add_option("--calibration", f->calibration,
                  "Calibration to add the tables to (default: the newest stack's)");
  tab->add_option("--out", f->out, "Calibration file to write")->required();
  tab->callback([f, result] { *result = Tables(*f); });
  CLI::App* run = cmd->add_subcommand(
      "run", "Trace any CUDA program through CUDA_INJECTION64_PATH (needs CUDA)");
  run->add_option("--db", f->db, "Performance database")->capture_default_str();
  run->add_option("command", f->command, "Program and arguments, after --")->required();
  run->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
