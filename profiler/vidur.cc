// Vidur's operator and collective profiles as measurement rows (profiler/import.h).
#include <filesystem>
#include <map>
#include <tuple>

#include "base/csv.h"
#include "profiler/import.h"
#include "profiler/internal/csv_table.h"

namespace fathom::profiler {
namespace {

// The catalogue GPU a path names by a component (Vidur keeps profiles under compute/h100/...).
Result<std::string> HardwareFromPath(const std::string& path) {
  for (const auto& part : std::filesystem::path(path)) {
    const std::string p = part.string();
    if (p == "h100" || p.rfind("h100_", 0) == 0) return std::string("h100-sxm");
  }
  return Status::InvalidArgument(
      path + ": the file names no GPU and no path component names one: give --hardware");
}

}  // namespace

Result<OperatorTable> ReadVidurCsv(const std::string& path, const std::string& hardware_flag,
                                   Env* env) {
  std::string hardware = hardware_flag;
  if (hardware.empty()) {
    FATHOM_ASSIGN_OR_RETURN(hardware, HardwareFromPath(path));
  }
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<CsvTable> table, CsvTable::Open(path, env));
  const bool network = table->Has("num_workers");
  const std::vector<std::string> needed =
      network ? std::vector<std::string>{"size", "num_workers", "devices_per_node", "collective"}
              : std::vector<std::string>{"n_head",
                                         "n_kv_head",
                                         "n_embd",
                                         "n_expanded_embd",
                                         "use_gated_mlp",
                                         "num_tokens",
                                         "num_tensor_parallel_workers"};
  for (const std::string& name : needed) {
    if (!table->Has(name))
      return Status::InvalidArgument(path + ":1: column '" + name + "' missing (a Vidur profile)");
  }
  auto field = [&](const std::string& name) { return table->field(name); };
  auto bad = [&](std::string_view name, std::string_view value, const std::string& rule) {
    return Status::InvalidArgument(path + ":" + std::to_string(table->line_number()) + ": " +
                                   std::string(name) + " = \"" + std::string(value.substr(0, 64)) +
                                   "\": " + rule);
  };
  auto positive = [&](const std::string& name, int64_t* out) -> Status {
    if (!ParseNonNegativeInt(field(name), out) || *out == 0)
      return bad(name, field(name), "must be a positive integer");
    return Status::Ok();
  };
  // The median time of operator `op`, if the file has it.
  auto median_us = [&](const std::string& op, double* us) -> Result<bool> {
    const std::string name = "time_stats." + op + ".median";
    if (!table->Has(name)) return false;
    double ms = 0;
    if (!ParseFiniteDouble(field(name), &ms) || ms <= 0)
      return bad(name, field(name), "must be a positive number of ms");
    *us = ms * 1e3;
    return true;
  };
  const std::string model = std::filesystem::path(path).parent_path().filename().string();

  OperatorTable out;
  std::map<std::tuple<std::string, int64_t, int64_t, int64_t, int64_t, std::string>,
           models::OpMeasurement>
      rows;
  auto add = [&](models::OpMeasurement row) {
    row.hardware = hardware;
    row.stack = "vidur";
    row.count = 1;
    row.source = "imported";
    rows.emplace(std::make_tuple(row.op, row.m, row.n, row.k, row.extra, row.dims), std::move(row));
  };
  while (true) {
    FATHOM_ASSIGN_OR_RETURN(bool more, table->Next());
    if (!more) break;
    if (network) {
      models::OpMeasurement row;
      int64_t workers = 0, per_node = 0;
      FATHOM_RETURN_IF_ERROR(positive("size", &row.m));
      FATHOM_RETURN_IF_ERROR(positive("num_workers", &workers));
      FATHOM_RETURN_IF_ERROR(positive("devices_per_node", &per_node));
      if (workers < 2 || workers % std::min(per_node, workers) != 0) {
        return bad("num_workers", field("num_workers"),
                   "must be at least 2 and whole nodes of devices_per_node");
      }
      row.op = std::string(field("collective"));
      if (row.op != "all_reduce" && row.op != "send_recv") {
        ++out.skipped[row.op];
        continue;
      }
      FATHOM_ASSIGN_OR_RETURN(bool has, median_us(row.op, &row.median_us));
      if (!has)
        return Status::InvalidArgument(path + ":1: column 'time_stats." + row.op +
                                       ".median' missing");
      row.dtype = "bf16";
      row.extra = workers;
      row.dims = "nodes=" + std::to_string(workers / std::min(per_node, workers));
      add(std::move(row));
      continue;
    }
    int64_t heads = 0, kv_heads = 0, hidden = 0, expanded = 0, tokens = 0, tp = 0;
    FATHOM_RETURN_IF_ERROR(positive("n_head", &heads));
    FATHOM_RETURN_IF_ERROR(positive("n_kv_head", &kv_heads));
    FATHOM_RETURN_IF_ERROR(positive("n_embd", &hidden));
    FATHOM_RETURN_IF_ERROR(positive("n_expanded_embd", &expanded));
    FATHOM_RETURN_IF_ERROR(positive("num_tokens", &tokens));
    FATHOM_RETURN_IF_ERROR(positive("num_tensor_parallel_workers", &tp));
    const std::string_view gated = field("use_gated_mlp");
    if (gated != "True" && gated != "False")
      return bad("use_gated_mlp", gated, "must be True or False");
    if (hidden % heads != 0 || heads % tp != 0 || expanded % tp != 0) {
      return bad("n_embd", field("n_embd"),
                 "heads must divide it, and tensor parallelism the heads and n_expanded_embd");
    }
    const int64_t head_dim = hidden / heads;
    const int64_t kv_per_gpu = std::max<int64_t>(1, kv_heads / tp);
    struct Projection {
      const char* op;
      int64_t n, k;
    };
    const Projection projections[] = {
        {"attn_pre_proj", (heads / tp + 2 * kv_per_gpu) * head_dim, hidden},
        {"attn_post_proj", hidden, heads / tp * head_dim},
        {"mlp_up_proj", (gated == "True" ? 2 : 1) * expanded / tp, hidden},
        {"mlp_down_proj", hidden, expanded / tp},
    };
    for (const Projection& p : projections) {
      models::OpMeasurement row;
      FATHOM_ASSIGN_OR_RETURN(bool has, median_us(p.op, &row.median_us));
      if (!has) continue;
      row.op = "gemm";
      row.dtype = "bf16";
      row.m = tokens;
      row.n = p.n;
      row.k = p.k;
      row.dims = "model=" + model + " tp=" + std::to_string(tp) + " op=" + p.op;
      add(std::move(row));
    }
    for (const auto& [name, index] : table->columns()) {
      if (name.rfind("time_stats.", 0) != 0 || name.size() < 7 ||
          name.compare(name.size() - 7, 7, ".median") != 0)
        continue;
      const std::string op = name.substr(11, name.size() - 18);
      if (op != "attn_pre_proj" && op != "attn_post_proj" && op != "mlp_up_proj" &&
          op != "mlp_down_proj") {
        ++out.skipped[op];
      }
    }
  }
  for (auto& [key, row] : rows) out.rows.push_back(std::move(row));
  if (out.rows.empty()) return Status::InvalidArgument(path + ": no GEMM or collective rows");
  return out;
}

}  // namespace fathom::profiler
