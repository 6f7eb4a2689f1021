#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "apps/fathom/commands.h"
#include "base/json_fields.h"
#include "models/perf_db.h"
#include "profiler/import.h"
#include "profiler/summary.h"

namespace fathom::cli {
namespace {

struct ProfileFlags {
  std::string file, db = "fathom_perf.db", hardware, models;
  int top = 15;
  bool json = false;
  std::vector<std::string> command;
};

// The folder holding the fathom binary, where the CUDA build puts its profiler parts.
std::filesystem::path BinaryDir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : exe.parent_path();
}

Status Unavailable(const std::string& what) {
  return Status::Unavailable(what + " is missing: fathom was built without CUDA/CUPTI. Install the CUDA toolkit "
                                    "with CUPTI and rebuild (cmake -DFATHOM_WITH_CUDA=ON), on a machine with an "
                                    "NVIDIA GPU and driver.");
}

Status Import(const ProfileFlags& f) {
  FATHOM_ASSIGN_OR_RETURN(models::PerfDb db, models::PerfDb::Open(f.db));
  FATHOM_ASSIGN_OR_RETURN(int64_t n, profiler::ImportProfile(f.file, db));
  std::printf("imported %lld records from %s into %s\n", static_cast<long long>(n), f.file.c_str(), f.db.c_str());
  return Status::Ok();
}

Status Summarize(const ProfileFlags& f) {
  if (!std::filesystem::exists(f.file)) return Status::NotFound(f.file + ": no such performance database");
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
      std::printf("%-60s %8lld %12.1f %10.2f %5.1f%%\n", key.c_str(), static_cast<long long>(rows[i].count),
                  rows[i].total_us, rows[i].mean_us(), s.total_us > 0 ? 100 * rows[i].total_us / s.total_us : 0.0);
    }
  };
  table("top kernels", s.kernels, f.top);
  table("NVTX range", s.ranges, s.ranges.size());
  table("operator kind", s.kinds, s.kinds.size());
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
  if (!std::filesystem::exists(bench)) return Unavailable("the operator microbenchmark runner (fathom-ops-bench)");
  std::vector<std::string> args = {"--db", f.db};
  if (!f.hardware.empty()) args.insert(args.end(), {"--hardware", f.hardware});
  if (!f.models.empty()) args.insert(args.end(), {"--models", f.models});
  return Exec(bench.string(), args);
}

Status Run(const ProfileFlags& f) {
  const auto lib = BinaryDir() / "libfathom_cupti.so";
  if (!std::filesystem::exists(lib)) return Unavailable("the CUPTI tracer (libfathom_cupti.so)");
  if (f.command.empty()) return Status::InvalidArgument("give the command to trace after --");
  setenv("CUDA_INJECTION64_PATH", lib.c_str(), 1);
  setenv("FATHOM_PROFILE_DB", std::filesystem::absolute(f.db).c_str(), 1);
#ifdef FATHOM_CUPTI_LIBRARY
  setenv("NVTX_INJECTION64_PATH", FATHOM_CUPTI_LIBRARY, 0);
#endif
  return Exec(f.command[0], std::vector<std::string>(f.command.begin() + 1, f.command.end()));
}

}  // namespace

void RegisterProfile(CLI::App& app, Status* result) {
  auto f = std::make_shared<ProfileFlags>();
  CLI::App* cmd = app.add_subcommand("profile", "Measure kernels (CUPTI), import profiles, summarize");
  cmd->require_subcommand(1);
  CLI::App* imp = cmd->add_subcommand("import", "Import an Nsight Systems SQLite export or a PyTorch profiler trace");
  imp->add_option("file", f->file, "Profile file (format detected)")->required();
  imp->add_option("--db", f->db, "Performance database")->capture_default_str();
  imp->callback([f, result] { *result = Import(*f); });
  CLI::App* sum = cmd->add_subcommand("summarize", "Top kernels, time per NVTX range and per operator kind");
  sum->add_option("db", f->file, "Performance database")->required();
  sum->add_option("--top", f->top, "Kernels to list")->capture_default_str();
  sum->add_flag("--json", f->json, "Print JSON");
  sum->callback([f, result] { *result = Summarize(*f); });
  CLI::App* ops = cmd->add_subcommand("ops", "Microbenchmark the models' GEMM shapes on this GPU (needs CUDA)");
  ops->add_option("--db", f->db, "Performance database")->capture_default_str();
  ops->add_option("--hardware", f->hardware, "Catalogue name to file the rows under (default: from the GPU)");
  ops->add_option("--models", f->models, "Models whose operator lists give the shapes");
  ops->callback([f, result] { *result = Ops(*f); });
  CLI::App* run = cmd->add_subcommand("run", "Trace any CUDA program through CUDA_INJECTION64_PATH (needs CUDA)");
  run->add_option("--db", f->db, "Performance database")->capture_default_str();
  run->add_option("command", f->command, "Program and arguments, after --")->required();
  run->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
