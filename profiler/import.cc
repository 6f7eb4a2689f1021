#include "profiler/import.h"

#include <sqlite3.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "base/json_fields.h"
#include "profiler/activity.h"

namespace fathom::profiler {
namespace {

bool HasTable(sqlite3* db, const std::string& name) {
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", -1, &st, nullptr);
  sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  const bool found = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  return found;
}

std::string Text(sqlite3_stmt* st, int col) {
  const unsigned char* t = sqlite3_column_text(st, col);
  return t ? reinterpret_cast<const char*>(t) : "";
}

}  // namespace

Result<ProfileFormat> DetectProfileFormat(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open profile");
  char head[16] = {};
  in.read(head, sizeof(head));
  if (std::string(head, 15) == "SQLite format 3") return ProfileFormat::kNsysSqlite;
  const std::string start(head, static_cast<size_t>(in.gcount()));
  const size_t brace = start.find_first_not_of(" \t\r\n");
  if (brace != std::string::npos && (start[brace] == '{' || start[brace] == '[')) return ProfileFormat::kPytorchJson;
  return Status::InvalidArgument(path + ": not an Nsight Systems SQLite export nor a PyTorch profiler trace (JSON)");
}

Result<std::vector<models::KernelRecord>> ReadNsysSqlite(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return Status::IoError(path + ": cannot open as SQLite");
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> guard(db, &sqlite3_close);
  if (!HasTable(db, "CUPTI_ACTIVITY_KIND_KERNEL") || !HasTable(db, "StringIds")) {
    return Status::InvalidArgument(path + ": table CUPTI_ACTIVITY_KIND_KERNEL or StringIds missing (export with "
                                          "`nsys export --type sqlite`)");
  }
  // The NVTX ranges per thread and the API calls that launched work, then the records, each
  // matched to its launch call by correlation id.
  ActivityLog log;
  if (HasTable(db, "NVTX_EVENTS")) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db,
                       "SELECT e.start, e.end, e.globalTid, COALESCE(e.text, s.value) FROM NVTX_EVENTS e "
                       "LEFT JOIN StringIds s ON e.textId = s.id WHERE e.end IS NOT NULL",
                       -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW) {
      log.AddRange(sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), Text(st, 3));
    }
    sqlite3_finalize(st);
  }
  if (HasTable(db, "CUPTI_ACTIVITY_KIND_RUNTIME")) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME", -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW) {
      log.AddLaunch(sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2));
    }
    sqlite3_finalize(st);
  }

  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, s.value, k.gridX, k.gridY, "
                     "k.gridZ, k.blockX, k.blockY, k.blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                     "JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start",
                     -1, &st, nullptr);
  if (st == nullptr) return Status::InvalidArgument(path + ": unexpected kernel table layout: " + sqlite3_errmsg(db));
  while (sqlite3_step(st) == SQLITE_ROW) {
    models::KernelRecord k;
    k.start_ns = sqlite3_column_int64(st, 0);
    k.end_ns = sqlite3_column_int64(st, 1);
    k.device = sqlite3_column_int(st, 2);
    k.stream = sqlite3_column_int(st, 3);
    k.correlation = sqlite3_column_int64(st, 4);
    k.name = Text(st, 5);
    for (int i = 0; i < 3; ++i) {
      k.grid[i] = sqlite3_column_int(st, 6 + i);
      k.block[i] = sqlite3_column_int(st, 9 + i);
    }
    k.source = path;
    log.AddRecord(std::move(k));
  }
  sqlite3_finalize(st);
  for (const char* table : {"CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"}) {
    if (!HasTable(db, table)) continue;
    sqlite3_prepare_v2(db, ("SELECT start, end, deviceId, streamId, correlationId FROM " + std::string(table)).c_str(), -1,
                       &st, nullptr);
    while (st != nullptr && sqlite3_step(st) == SQLITE_ROW) {
      models::KernelRecord k;
      k.kind = std::string(table).find("MEMCPY") != std::string::npos ? "memcpy" : "memset";
      k.name = k.kind;
      k.start_ns = sqlite3_column_int64(st, 0);
      k.end_ns = sqlite3_column_int64(st, 1);
      k.device = sqlite3_column_int(st, 2);
      k.stream = sqlite3_column_int(st, 3);
      k.correlation = sqlite3_column_int64(st, 4);
      k.source = path;
      log.AddRecord(std::move(k));
    }
    sqlite3_finalize(st);
  }
  return log.Take(/*final=*/true);
}

Result<std::vector<models::KernelRecord>> ReadPytorchTrace(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Json doc, ReadJsonFile(path));
  const Json* events = nullptr;
  if (doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array()) {
    events = &doc["traceEvents"];
  } else if (doc.is_array()) {
    events = &doc;
  } else {
    return Status::InvalidArgument(path + ": field 'traceEvents': missing (a PyTorch profiler Chrome trace has it)");
  }
  // GPU-side annotation ranges (PyTorch's gpu_user_annotation) per device and stream.
  std::map<std::pair<int64_t, int64_t>, std::vector<NamedRange>> annotations;
  std::vector<models::KernelRecord> out;
  auto us_to_ns = [](const Json& v) { return static_cast<int64_t>(std::llround(v.get<double>() * 1000.0)); };
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& e = (*events)[i];
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("ts") || !e.contains("dur") ||
        !e["ts"].is_number() || !e["dur"].is_number()) {
      continue;
    }
    const std::string cat = e.value("cat", "");
    const int64_t start = us_to_ns(e["ts"]);
    const int64_t end = start + us_to_ns(e["dur"]);
    const Json args = e.contains("args") && e["args"].is_object() ? e["args"] : Json::object();
    const int64_t device = args.value("device", e.value("pid", 0));
    const int64_t stream = args.value("stream", e.value("tid", 0));
    if (cat == "gpu_user_annotation") {
      annotations[{device, stream}].push_back({start, end, e.value("name", "")});
      continue;
    }
    if (cat != "kernel" && cat != "gpu_memcpy" && cat != "gpu_memset") continue;
    models::KernelRecord k;
    k.kind = cat == "kernel" ? "kernel" : (cat == "gpu_memcpy" ? "memcpy" : "memset");
    k.name = e.value("name", "");
    k.start_ns = start;
    k.end_ns = end;
    k.device = static_cast<int32_t>(device);
    k.stream = static_cast<int32_t>(stream);
    k.correlation = args.value("correlation", 0);
    for (int d = 0; d < 3; ++d) {
      if (args.contains("grid") && args["grid"].is_array() && args["grid"].size() == 3) k.grid[d] = args["grid"][d].get<int>();
      if (args.contains("block") && args["block"].is_array() && args["block"].size() == 3)
        k.block[d] = args["block"][d].get<int>();
    }
    k.source = path;
    out.push_back(std::move(k));
  }
  for (auto& [key, list] : annotations) {
    std::sort(list.begin(), list.end(), [](const NamedRange& a, const NamedRange& b) { return a.start < b.start; });
  }
  for (auto& k : out) {
    auto it = annotations.find({k.device, k.stream});
    if (it != annotations.end()) k.nvtx_range = InnermostRange(it->second, k.start_ns);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return out;
}

Result<int64_t> ImportProfile(const std::string& path, models::PerfDb& db) {
  FATHOM_ASSIGN_OR_RETURN(ProfileFormat format, DetectProfileFormat(path));
  std::vector<models::KernelRecord> kernels;
  if (format == ProfileFormat::kNsysSqlite) {
    FATHOM_ASSIGN_OR_RETURN(kernels, ReadNsysSqlite(path));
  } else {
    FATHOM_ASSIGN_OR_RETURN(kernels, ReadPytorchTrace(path));
  }
  FATHOM_RETURN_IF_ERROR(db.InsertKernels(kernels));
  return static_cast<int64_t>(kernels.size());
}

}  // namespace fathom::profiler
