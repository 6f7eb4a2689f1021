// How the cost model's analytical price of each measured operator (GEMMs, grouped GEMMs, MoE
// layers' routed experts, attention kernels, collectives) compares with the measurement: per row,
// per operator kind and data type, and per size class (a GEMM's M, per group for grouped GEMMs:
// small ones stream weights, large ones compute; a MoE layer's tokens; attention's K/V length; a
// collective's bytes).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/cost_model.h"
#include "models/hardware.h"
#include "models/perf_db.h"

namespace fathom::profiler {

struct OpComparison {
  models::OpMeasurement row;
  double model_us = 0;
  double error_pct() const { return 100.0 * (model_us - row.median_us) / row.median_us; }
  bool has_spread() const { return row.p90_us > 0; }  // imported tables may give only the median
  bool within_spread() const {
    return has_spread() && model_us >= row.p10_us && model_us <= row.p90_us;
  }
};

struct ComparisonGroup {
  std::string key;  // "gemm bf16", or "gemm bf16, M 17-128", "all_reduce bf16, >4 MiB"
  int rows = 0;
  double median_abs_pct = 0;  // median |error|
  double median_pct = 0;      // median signed error: the model's bias
  double worst_pct = 0;       // the largest |error|, with its sign
  int with_spread = 0;        // rows with a measured p10..p90
  int within_spread = 0;      // of those, rows whose model time lies within it
};

struct ModelComparison {
  std::vector<OpComparison> rows;
  std::vector<ComparisonGroup> by_kind;     // operator kind and data type
  std::vector<ComparisonGroup> by_size;     // and size class
  std::map<std::string, int> not_compared;  // kinds the model does not price from a shape
  OrderedJson ToJson(bool with_rows) const;
};

// Prices every row's operator with `params` (analytically: no measured tables) on `hw`.
Result<ModelComparison> CompareWithModel(const std::vector<models::OpMeasurement>& rows,
                                         const models::Hardware& hw,
                                         const models::CostParams& params);

}  // namespace fathom::profiler
