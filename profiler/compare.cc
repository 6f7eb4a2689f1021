#include "profiler/compare.h"

#include <cmath>

#include "base/stats.h"
#include "models/fit.h"

namespace fathom::profiler {
namespace {

// The size class of a row, smallest first, with its label: the rows M of a GEMM (small ones
// stream weights, large ones compute), the K/V length of attention, the tokens of a MoE layer (a
// few reach a few experts, a decode batch all of them, a prefill's fill them), a collective's
// bytes (small ones are latency, large ones bandwidth).
std::pair<int, std::string> SizeBucket(const models::OpMeasurement& row) {
  auto bucket = [](int64_t x, const std::vector<int64_t>& bounds,
                   const std::vector<const char*>& labels) {
    int i = 0;
    while (i < static_cast<int>(bounds.size()) && x > bounds[i]) ++i;
    return std::pair<int, std::string>{i, labels[i]};
  };
  if (row.op.rfind("attention", 0) == 0) {
    return bucket(row.n, {1024, 8192}, {"K/V 1-1024", "K/V 1025-8192", "K/V >8192"});
  }
  if (row.op == "gemm" || row.op == "grouped_gemm") {
    return bucket(row.m, {16, 128, 1024}, {"M 1-16", "M 17-128", "M 129-1024", "M >1024"});
  }
  if (row.op == "moe") {
    return bucket(row.m, {16, 1024, 4096},
                  {"tokens 1-16", "tokens 17-1024", "tokens 1025-4096", "tokens >4096"});
  }
  return bucket(row.m, {64 << 10, 4 << 20}, {"<=64 KiB", "64 KiB-4 MiB", ">4 MiB"});
}

// Rows by kind and data type, and by size class too when `by_size`: in that order, small first.
std::vector<ComparisonGroup> Groups(const std::vector<OpComparison>& rows, bool by_size) {
  struct Members {
    std::string label;
    std::vector<const OpComparison*> rows;
  };
  std::map<std::pair<std::string, int>, Members> members;  // by kind, then size class
  for (const auto& c : rows) {
    const std::string kind = c.row.op + " " + c.row.dtype;
    const auto [index, size] = by_size ? SizeBucket(c.row) : std::pair<int, std::string>{-1, ""};
    Members& m = members[{kind, index}];
    m.label = index < 0 ? kind : kind + ", " + size;
    m.rows.push_back(&c);
  }
  std::vector<ComparisonGroup> out;
  for (const auto& [key, group] : members) {
    ComparisonGroup g;
    g.key = group.label;
    std::vector<double> abs, signed_errors;
    for (const OpComparison* c : group.rows) {
      const double e = c->error_pct();
      abs.push_back(std::abs(e));
      signed_errors.push_back(e);
      if (std::abs(e) > std::abs(g.worst_pct)) g.worst_pct = e;
      g.with_spread += c->has_spread();
      g.within_spread += c->within_spread();
      ++g.rows;
    }
    g.median_abs_pct = Percentile(abs, 0.5);
    g.median_pct = Percentile(signed_errors, 0.5);
    out.push_back(g);
  }
  return out;
}

OrderedJson GroupsJson(const std::vector<ComparisonGroup>& groups) {
  OrderedJson a = OrderedJson::array();
  for (const auto& g : groups) {
    a.push_back({{"group", g.key},
                 {"rows", g.rows},
                 {"median_abs_error_pct", g.median_abs_pct},
                 {"median_error_pct", g.median_pct},
                 {"worst_error_pct", g.worst_pct},
                 {"with_measured_spread", g.with_spread},
                 {"within_measured_spread", g.within_spread}});
  }
  return a;
}

}  // namespace

Result<ModelComparison> CompareWithModel(const std::vector<models::OpMeasurement>& rows,
                                         const models::Hardware& hw,
                                         const models::CostParams& params) {
  ModelComparison out;
  // A measured collective is its kernel's whole time, not the share that overlap leaves; and the
  // formula is what is compared, not measured tables the calibration may carry.
  models::CostParams kernel_params = params;
  kernel_params.comm_overlap = 0;
  kernel_params.all_reduce = {};
  for (const auto& row : rows) {
    auto ops = models::MeasuredOperators(row);
    if (ops.status().code() == StatusCode::kNotFound) {
      ++out.not_compared[row.op];
      continue;
    }
    if (!ops.ok()) return ops.status();
    if (!(row.median_us > 0)) {
      return Status::InvalidArgument(row.op + " " + row.dtype + " " + std::to_string(row.m) + "x" +
                                     std::to_string(row.n) + "x" + std::to_string(row.k) +
                                     ": median_us must be positive");
    }
    out.rows.push_back({row, models::MeasuredSeconds(*ops, hw, kernel_params) * 1e6});
  }
  out.by_kind = Groups(out.rows, false);
  out.by_size = Groups(out.rows, true);
  return out;
}

OrderedJson ModelComparison::ToJson(bool with_rows) const {
  OrderedJson j;
  j["by_kind"] = GroupsJson(by_kind);
  j["by_size"] = GroupsJson(by_size);
  OrderedJson skipped = OrderedJson::object();
  for (const auto& [op, n] : not_compared) skipped[op] = n;
  j["not_compared"] = skipped;
  if (with_rows) {
    OrderedJson a = OrderedJson::array();
    for (const auto& c : rows) {
      a.push_back({{"op", c.row.op},
                   {"dtype", c.row.dtype},
                   {"m", c.row.m},
                   {"n", c.row.n},
                   {"k", c.row.k},
                   {"extra", c.row.extra},
                   {"dims", c.row.dims},
                   {"measured_us", c.row.median_us},
                   {"p10_us", c.row.p10_us},
                   {"p90_us", c.row.p90_us},
                   {"model_us", c.model_us},
                   {"error_pct", c.error_pct()}});
    }
    j["rows"] = a;
  }
  return j;
}

}  // namespace fathom::profiler
