// Operator-level fitting: the GEMM efficiency curve of one GPU from measured kernels.
#pragma once

#include <array>
#include <vector>

#include "base/status.h"
#include "models/cost_model.h"
#include "models/hardware.h"
#include "models/perf_db.h"

namespace fathom::models {

struct GemmFit {
  double efficiency = 0, m_half = 0, floor_us = 0;
  std::array<double, 3> stddev = {0, 0, 0};
  int measurements = 0;
  double rms_log_error = 0;
};

// Fits t(M, N, K) = 2MNK / (peak x efficiency x M / (M + m_half)) + floor to GEMM measurements
// (compute-bound region: rows whose roofline is compute-bound) with a robust loss on log time.
Result<GemmFit> FitGemmCurve(const std::vector<OpMeasurement>& gemms, const Hardware& hw, const CostParams& start);

}  // namespace fathom::models
