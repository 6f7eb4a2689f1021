#include "profiler/import.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <map>
#include <optional>
#include <tuple>

#include "base/csv.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "base/sqlite.h"
#include "models/hardware.h"
#include "profiler/activity.h"
#include "profiler/internal/csv_table.h"

namespace fathom::profiler {

Result<ProfileFormat> DetectProfileFormat(const std::string& path, Env* env) {
  auto file = env->NewSequentialFile(path);
  if (!file.ok()) return Status::NotFound(path + ": cannot open profile");
  std::string start(4096, '\0');
  size_t got = 0;
  while (got < start.size()) {
    FATHOM_ASSIGN_OR_RETURN(size_t n, (*file)->Read(start.data() + got, start.size() - got));
    if (n == 0) {
      FATHOM_RETURN_IF_ERROR(CheckWholeRead(path, **file, got));
      break;
    }
    got += n;
  }
  start.resize(got);
  if (start.rfind("SQLite format 3", 0) == 0) return ProfileFormat::kNsysSqlite;
  const size_t brace = start.find_first_not_of(" \t\r\n");
  if (brace != std::string::npos && (start[brace] == '{' || start[brace] == '['))
    return ProfileFormat::kPytorchJson;
  const std::string first_line = start.substr(0, start.find('\n'));
  if (first_line.find("op_name") != std::string::npos &&
      first_line.find("latency") != std::string::npos) {
    return ProfileFormat::kOperatorTableCsv;
  }
  if (first_line.find("time_stats.") != std::string::npos) return ProfileFormat::kVidurCsv;
  return Status::InvalidArgument(
      path +
      ": not an Nsight Systems SQLite export, a PyTorch profiler trace (JSON), a "
      "GEMM or all-reduce table (CSV with op_name and latency columns) nor a Vidur profile "
      "(CSV with time_stats columns)");
}

Result<std::vector<models::KernelRecord>> ReadNsysSqlite(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(sqlite::Database db,
                          sqlite::Database::Open(path, sqlite::Database::Mode::kReadOnly,
                                                 "Nsight Systems SQLite export"));
  if (!db.HasTable("CUPTI_ACTIVITY_KIND_KERNEL") || !db.HasTable("StringIds")) {
    return Status::InvalidArgument(
        path +
        ": table CUPTI_ACTIVITY_KIND_KERNEL or StringIds missing (export with "
        "`nsys export --type sqlite`)");
  }
  // Runs `sql` and hands each row to `row`; a table whose layout is not the one expected is an
  // error naming the file.
  auto each_row = [&](const std::string& sql,
                      const std::function<Status(const sqlite::Statement&)>& row) -> Status {
    auto st = db.Prepare(sql);
    if (!st.ok())
      return Status::InvalidArgument(path + ": unexpected table layout: " + st.status().message());
    for (;;) {
      FATHOM_ASSIGN_OR_RETURN(bool more, st->Step());
      if (!more) return Status::Ok();
      FATHOM_RETURN_IF_ERROR(row(*st));
    }
  };
  // A record's start and end (columns 0 and 1) with 0 <= start <= end, so its duration is defined.
  auto interval = [&](const std::string& table, const sqlite::Statement& st,
                      models::KernelRecord* k) -> Status {
    k->start_ns = st.Int(0);
    k->end_ns = st.Int(1);
    if (k->start_ns >= 0 && k->end_ns >= k->start_ns) return Status::Ok();
    return Status::InvalidArgument(path + ": " + table + ": a record with start " +
                                   std::to_string(k->start_ns) + " and end " +
                                   std::to_string(k->end_ns) + ": must have 0 <= start <= end");
  };
  // The NVTX ranges per thread and the API calls that launched work, then the records, each
  // matched to its launch call by correlation id.
  ActivityLog log;
  if (db.HasTable("NVTX_EVENTS")) {
    FATHOM_RETURN_IF_ERROR(
        each_row("SELECT e.start, e.end, e.globalTid, COALESCE(e.text, s.value) FROM NVTX_EVENTS e "
                 "LEFT JOIN StringIds s ON e.textId = s.id WHERE e.end IS NOT NULL",
                 [&](const sqlite::Statement& st) {
                   log.AddRange(st.Int(2), st.Int(0), st.Int(1), st.Text(3));
                   return Status::Ok();
                 }));
  }
  if (db.HasTable("CUPTI_ACTIVITY_KIND_RUNTIME")) {
    FATHOM_RETURN_IF_ERROR(
        each_row("SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME",
                 [&](const sqlite::Statement& st) {
                   log.AddLaunch(st.Int(0), st.Int(1), st.Int(2));
                   return Status::Ok();
                 }));
  }
  FATHOM_RETURN_IF_ERROR(each_row(
      "SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, s.value, k.gridX, k.gridY, "
      "k.gridZ, k.blockX, k.blockY, k.blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL k "
      "JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start",
      [&](const sqlite::Statement& st) {
        models::KernelRecord k;
        FATHOM_RETURN_IF_ERROR(interval("CUPTI_ACTIVITY_KIND_KERNEL", st, &k));
        k.device = static_cast<int32_t>(st.Int(2));
        k.stream = static_cast<int32_t>(st.Int(3));
        k.correlation = st.Int(4);
        k.name = st.Text(5);
        for (int i = 0; i < 3; ++i) {
          k.grid[i] = static_cast<int32_t>(st.Int(6 + i));
          k.block[i] = static_cast<int32_t>(st.Int(9 + i));
        }
        k.source = path;
        log.AddRecord(std::move(k));
        return Status::Ok();
      }));
  for (const std::string table : {"CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"}) {
    if (!db.HasTable(table)) continue;
    const std::string kind = table.find("MEMCPY") != std::string::npos ? "memcpy" : "memset";
    FATHOM_RETURN_IF_ERROR(
        each_row("SELECT start, end, deviceId, streamId, correlationId FROM " + table,
                 [&](const sqlite::Statement& st) {
                   models::KernelRecord k;
                   k.kind = kind;
                   k.name = kind;
                   FATHOM_RETURN_IF_ERROR(interval(table, st, &k));
                   k.device = static_cast<int32_t>(st.Int(2));
                   k.stream = static_cast<int32_t>(st.Int(3));
                   k.correlation = st.Int(4);
                   k.source = path;
                   log.AddRecord(std::move(k));
                   return Status::Ok();
                 }));
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
    return Status::InvalidArgument(
        path + ": field 'traceEvents': missing (a PyTorch profiler Chrome trace has it)");
  }
  // GPU-side annotation ranges (PyTorch's gpu_user_annotation) per device and stream.
  std::map<std::pair<int64_t, int64_t>, std::vector<NamedRange>> annotations;
  std::vector<models::KernelRecord> out;
  // A time in microseconds, as nanoseconds. Each of a start and a duration may take half of what
  // int64 nanoseconds hold (Kineto's epoch microseconds, about 1.8e15, fit), so their sum does too.
  auto us_to_ns = [](JsonFields& f, const char* key) -> int64_t {
    constexpr double kMaxUs = 4.6e15;
    const double us = f.Double(key);
    if (!(us >= 0 && us <= kMaxUs))
      f.Fail(key, StrFormat("%g", us), "must be in [0, 4.6e15] microseconds");
    return f.status().ok() ? static_cast<int64_t>(std::llround(us * 1000.0)) : 0;
  };
  // Kineto writes a GPU stream's tid as "stream 7": its number; other ids as integers.
  auto id = [](const Json& v) -> int64_t {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (!v.is_string()) return 0;
    const std::string text = v.get<std::string>();
    const size_t digits = text.find_last_not_of("0123456789");
    const std::string tail = digits == std::string::npos ? text : text.substr(digits + 1);
    return tail.empty() || tail.size() > 9 ? 0 : std::stoll(tail);
  };
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& e = (*events)[i];
    if (!e.is_object() || !e.contains("ph") || e["ph"] != "X" || !e.contains("ts") ||
        !e.contains("dur") || !e["ts"].is_number() || !e["dur"].is_number()) {
      continue;
    }
    JsonFields f(e, path + ": traceEvents[" + std::to_string(i) + "]");
    const std::string cat = f.String("cat", "");
    const std::string name = f.String("name", "");
    FATHOM_RETURN_IF_ERROR(f.status());
    if (cat != "gpu_user_annotation" && cat != "kernel" && cat != "gpu_memcpy" &&
        cat != "gpu_memset")
      continue;
    const int64_t start = us_to_ns(f, "ts");
    const int64_t end = start + us_to_ns(f, "dur");
    FATHOM_RETURN_IF_ERROR(f.status());
    static const Json kNone = Json::object();
    const Json& args = e.contains("args") && e["args"].is_object() ? e["args"] : kNone;
    JsonFields a(args, f.source() + ": args");
    const int64_t device = args.contains("device") ? id(args["device"])
                           : e.contains("pid")     ? id(e["pid"])
                                                   : 0;
    const int64_t stream = args.contains("stream") ? id(args["stream"])
                           : e.contains("tid")     ? id(e["tid"])
                                                   : 0;
    if (cat == "gpu_user_annotation") {
      annotations[{device, stream}].push_back({start, end, name});
      continue;
    }
    models::KernelRecord k;
    k.kind = cat == "kernel" ? "kernel" : (cat == "gpu_memcpy" ? "memcpy" : "memset");
    k.name = name;
    k.start_ns = start;
    k.end_ns = end;
    k.device = static_cast<int32_t>(device);
    k.stream = static_cast<int32_t>(stream);
    k.correlation = a.Int("correlation", 0);
    FATHOM_RETURN_IF_ERROR(a.status());
    for (const char* key : {"grid", "block"}) {
      if (!args.contains(key) || !args[key].is_array() || args[key].size() != 3) continue;
      for (int d = 0; d < 3; ++d) {
        const Json& v = args[key][d];
        if (!v.is_number_integer())
          return Status::InvalidArgument(a.source() + ": field '" + key + "': not three integers");
        (std::string(key) == "grid" ? k.grid : k.block)[d] = v.get<int>();
      }
    }
    k.source = path;
    out.push_back(std::move(k));
  }
  for (auto& [key, list] : annotations) {
    std::sort(list.begin(), list.end(),
              [](const NamedRange& a, const NamedRange& b) { return a.start < b.start; });
  }
  for (auto& k : out) {
    auto it = annotations.find({k.device, k.stream});
    if (it != annotations.end()) k.nvtx_range = InnermostRange(it->second, k.start_ns);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return out;
}

Result<OperatorTable> ReadOperatorTableCsv(const std::string& path, const std::string& hardware,
                                           Env* env) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<CsvTable> table, CsvTable::Open(path, env));
  auto bad = [&](std::string_view field, std::string_view value, const std::string& rule) {
    return Status::InvalidArgument(path + ":" + std::to_string(table->line_number()) + ": " +
                                   std::string(field) + " = \"" + std::string(value) +
                                   "\": " + rule);
  };
  // A GEMM table (gemm_perf), an all-reduce one (custom_allreduce_perf, nccl_perf) or a MoE one
  // (moe_perf).
  enum class Kind { kGemm, kAllReduce, kMoe };
  const Kind kind = table->Has("num_gpus") || table->Has("message_size")   ? Kind::kAllReduce
                    : table->Has("moe_dtype") || table->Has("num_experts") ? Kind::kMoe
                                                                           : Kind::kGemm;
  // The first of the names the table has, else the last (the one a missing column names).
  auto column = [&](std::initializer_list<const char*> names) {
    for (const char* name : names) {
      if (table->Has(name)) return name;
    }
    return *std::prev(names.end());
  };
  const char* dtype_column = kind == Kind::kAllReduce ? column({"nccl_dtype", "allreduce_dtype"})
                             : kind == Kind::kMoe     ? "moe_dtype"
                                                      : column({"gemm_dtype", "dtype"});
  const std::vector<const char*> shape_columns =
      kind == Kind::kAllReduce ? std::vector<const char*>{"num_gpus", "message_size"}
      : kind == Kind::kMoe
          ? std::vector<const char*>{"num_tokens", "inter_size",  "hidden_size", "num_experts",
                                     "topk",       "moe_tp_size", "moe_ep_size"}
          : std::vector<const char*>{"m", "n", "k"};
  std::vector<const char*> required = {"op_name", "latency", dtype_column};
  required.insert(required.end(), shape_columns.begin(), shape_columns.end());
  if (kind == Kind::kMoe) required.push_back("distribution");
  for (const char* name : required) {
    if (!table->Has(name)) {
      const char* layout =
          kind == Kind::kAllReduce
              ? "an all-reduce table has framework, version, device, op_name, kernel_source, "
                "allreduce_dtype or nccl_dtype, num_gpus, message_size, latency"
          : kind == Kind::kMoe
              ? "a MoE table has framework, version, device, op_name, kernel_source, moe_dtype, "
                "num_tokens, hidden_size, inter_size, topk, num_experts, moe_tp_size, "
                "moe_ep_size, distribution, latency"
              : "a GEMM table has framework, version, device, op_name, kernel_source, "
                "gemm_dtype, m, n, k, latency";
      return Status::InvalidArgument(path + ":1: column '" + name + "' missing (" + layout + ")");
    }
  }
  if (hardware.empty() && !table->Has("device")) {
    return Status::InvalidArgument(path +
                                   ":1: column 'device' missing: give the GPU with --hardware");
  }
  auto field = [&](const char* name) { return table->field(name); };
  // Whether a GPU of the catalogue has FP4 cores (the catalogue read when first asked); nullopt for
  // a GPU it does not hold.
  std::optional<models::HardwareCatalog> catalog;
  auto fp4_cores = [&](const std::string& gpu) -> std::optional<bool> {
    if (!catalog) {
      auto builtin = models::HardwareCatalog::LoadBuiltin();
      catalog = builtin.ok() ? std::move(*builtin) : models::HardwareCatalog();
    }
    auto hw = catalog->Find(gpu);
    if (!hw.ok()) return std::nullopt;
    return hw->HasFp4Cores();
  };

  OperatorTable out;
  // Per GPU, stack, operator, data type and shape: the fastest kernel source.
  std::map<std::tuple<std::string, std::string, std::string, std::string, int64_t, int64_t, int64_t,
                      int64_t, std::string>,
           models::OpMeasurement>
      best;
  while (true) {
    FATHOM_ASSIGN_OR_RETURN(bool more, table->Next());
    if (!more) break;
    const std::string op(field("op_name"));
    if (kind == Kind::kGemm && op != "gemm") return bad("op_name", op, "only gemm rows are read");
    if (kind == Kind::kMoe && op != "moe") return bad("op_name", op, "only moe rows are read");
    if (kind == Kind::kAllReduce && op != "all_reduce") {
      ++out.skipped[op];  // all_gather, alltoall, ...: not read
      continue;
    }
    int64_t shape[7] = {0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < shape_columns.size(); ++i) {
      if (!ParseNonNegativeInt(field(shape_columns[i]), &shape[i]) || shape[i] == 0) {
        return bad(shape_columns[i], field(shape_columns[i]), "must be a positive integer");
      }
    }
    double latency_ms = 0;
    if (!ParseFiniteDouble(field("latency"), &latency_ms) || latency_ms <= 0) {
      return bad("latency", field("latency"), "must be a positive number of milliseconds");
    }
    std::string device = hardware;
    if (device.empty()) {
      auto name = models::CatalogNameForDevice(field("device"));
      if (!name.ok())
        return bad("device", field("device"),
                   "not a GPU of the built-in catalogue; give --hardware");
      device = *name;
    }
    // Only balanced routing is what the cost model prices (its skew is a fitted parameter).
    if (kind == Kind::kMoe && field("distribution") != "balanced") {
      ++out.skipped["moe routed " + std::string(field("distribution"))];
      continue;
    }
    // DeepSeek-style block-scaled FP8 is the FP8 the cost model prices; NCCL's half is fp16.
    // MXFP4 experts run with MXFP8 activations where FP4 cores exist and BF16 ones elsewhere,
    // as the cost model prices MXFP4 (Hardware::PeakFlops): other pairings are left out.
    const std::string raw_dtype(field(dtype_column));
    std::string dtype_name = raw_dtype == "fp8_block" ? "fp8"
                             : raw_dtype == "half"    ? "fp16"
                                                      : raw_dtype;
    if ((raw_dtype == "w4a8_mxfp4_mxfp8" && fp4_cores(device) == true) ||
        (raw_dtype == "w4a16_mxfp4" && fp4_cores(device) == false)) {
      dtype_name = "mxfp4";
    }
    auto dtype = models::ParseDType(dtype_name, dtype_column);
    if (!dtype.ok()) {
      ++out.skipped[raw_dtype];
      continue;
    }
    models::OpMeasurement row;
    if (kind == Kind::kAllReduce) {
      if (shape[0] < 2) return bad("num_gpus", field("num_gpus"), "must be at least 2");
      // message_size counts elements; the buffer's bytes are what the cost model prices.
      if (shape[1] > int64_t{1} << 50)
        return bad("message_size", field("message_size"), "must be at most 2^50 elements");
      row.m = std::max<int64_t>(
          1, std::llround(static_cast<double>(shape[1]) * models::BytesPerElement(*dtype)));
      row.extra = shape[0];
    } else {
      row.m = shape[0];
      row.n = shape[1];
      row.k = shape[2];
    }
    if (kind == Kind::kMoe) {
      // Tokens, the experts' intermediate, hidden, experts; top-k and the layout in dims.
      row.extra = shape[3];
      row.dims = "topk=" + std::to_string(shape[4]) + " tp=" + std::to_string(shape[5]) +
                 " ep=" + std::to_string(shape[6]);
    }
    row.hardware = device;
    std::string stack(field("framework"));
    if (!field("version").empty()) stack += "-" + std::string(field("version"));
    std::transform(stack.begin(), stack.end(), stack.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    row.stack = stack.empty() ? "imported" : stack;
    row.op = op;
    row.dtype = std::string(models::Name(*dtype));
    row.median_us = latency_ms * 1e3;
    row.count = 1;
    row.source = "imported";
    row.device_info = std::string(field("device"));
    auto key = std::make_tuple(row.hardware, row.stack, row.op, row.dtype, row.m, row.n, row.k,
                               row.extra, row.dims);
    auto it = best.find(key);
    if (it == best.end()) {
      best.emplace(key, std::move(row));
    } else if (row.median_us < it->second.median_us) {
      it->second = std::move(row);
    }
  }
  for (auto& [key, row] : best) out.rows.push_back(std::move(row));
  return out;
}

Result<ImportResult> ImportProfile(const std::string& path, models::PerfDb& db,
                                   const std::string& hardware) {
  FATHOM_ASSIGN_OR_RETURN(ProfileFormat format, DetectProfileFormat(path));
  ImportResult result;
  if (format == ProfileFormat::kOperatorTableCsv || format == ProfileFormat::kVidurCsv) {
    FATHOM_ASSIGN_OR_RETURN(OperatorTable table, format == ProfileFormat::kVidurCsv
                                                     ? ReadVidurCsv(path, hardware)
                                                     : ReadOperatorTableCsv(path, hardware));
    FATHOM_RETURN_IF_ERROR(db.Insert(table.rows));
    result.records = static_cast<int64_t>(table.rows.size());
    result.skipped = std::move(table.skipped);
    return result;
  }
  std::vector<models::KernelRecord> kernels;
  if (format == ProfileFormat::kNsysSqlite) {
    FATHOM_ASSIGN_OR_RETURN(kernels, ReadNsysSqlite(path));
  } else {
    FATHOM_ASSIGN_OR_RETURN(kernels, ReadPytorchTrace(path));
  }
  FATHOM_RETURN_IF_ERROR(db.InsertKernels(kernels));
  result.records = static_cast<int64_t>(kernels.size());
  return result;
}

}  // namespace fathom::profiler
