#include "profiler/compare.h"

#include <cmath>

#include "base/stats.h"
#include "models/fit.h"

namespace fathom::profiler {
namespace {

constexpr const char* kMBuckets[] = {"1-16", "17-128", "129-1024", ">1024"};

int MBucket(int64_t m) { return m <= 16 ? 0 : m <= 128 ? 1 : m <= 1024 ? 2 : 3; }

// Rows by kind and data type, and by size of M too when `by_m`: in that order, small M first.
std::vector<ComparisonGroup> Groups(const std::vector<OpComparison>& rows, bool by_m) {
  std::map<std::pair<std::string, int>, std::vector<const OpComparison*>> members;
  for (const auto& c : rows) members[{c.row.op + " " + c.row.dtype, by_m ? MBucket(c.row.m) : -1}].push_back(&c);
  std::vector<ComparisonGroup> out;
  for (const auto& [key, group] : members) {
    ComparisonGroup g;
    g.key = key.second < 0 ? key.first : key.first + ", M " + kMBuckets[key.second];
    std::vector<double> abs, signed_errors;
    for (const OpComparison* c : group) {
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

Result<ModelComparison> CompareWithModel(const std::vector<models::OpMeasurement>& rows, const models::Hardware& hw,
                                         const models::CostParams& params) {
  ModelComparison out;
  for (const auto& row : rows) {
    auto op = models::MeasuredOperator(row);
    if (op.status().code() == StatusCode::kNotFound) {
      ++out.not_compared[row.op];
      continue;
    }
    if (!op.ok()) return op.status();
    if (!(row.median_us > 0)) {
      return Status::InvalidArgument(row.op + " " + row.dtype + " " + std::to_string(row.m) + "x" +
                                     std::to_string(row.n) + "x" + std::to_string(row.k) +
                                     ": median_us must be positive");
    }
    out.rows.push_back({row, models::OperatorSeconds(*op, hw, params, /*ep=*/1) * 1e6});
  }
  out.by_kind = Groups(out.rows, false);
  out.by_m = Groups(out.rows, true);
  return out;
}

OrderedJson ModelComparison::ToJson(bool with_rows) const {
  OrderedJson j;
  j["by_kind"] = GroupsJson(by_kind);
  j["by_m"] = GroupsJson(by_m);
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
                   {"groups", c.row.extra},
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
