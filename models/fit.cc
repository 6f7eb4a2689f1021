#include "models/fit.h"

#include <ceres/ceres.h>

#include <cmath>

namespace fathom::models {
namespace {

struct GemmResidual {
  double m, flops, peak, log_measured;
  template <typename T>
  bool operator()(const T* p, T* residual) const {
    // p = {efficiency, m_half, floor_us}
    const T eff = p[0] * T(m) / (T(m) + p[1]);
    const T t = T(flops) / (T(peak) * eff) + p[2] * T(1e-6);
    residual[0] = log(t) - T(log_measured);
    return true;
  }
};

}  // namespace

Result<GemmFit> FitGemmCurve(const std::vector<OpMeasurement>& gemms, const Hardware& hw, const CostParams& start) {
  double p[3] = {start.gemm_efficiency, start.gemm_m_half, start.kernel_floor_us};
  ceres::Problem problem;
  GemmFit fit;
  for (const OpMeasurement& g : gemms) {
    if (g.m <= 0 || g.n <= 0 || g.k <= 0 || !(g.median_us > 0)) continue;
    auto dtype = ParseDType(g.dtype, "dtype");
    if (!dtype.ok()) return dtype.status();
    const double flops = 2.0 * g.m * g.n * g.k;
    problem.AddResidualBlock(new ceres::AutoDiffCostFunction<GemmResidual, 1, 3>(
                                 new GemmResidual{static_cast<double>(g.m), flops, hw.PeakFlops(*dtype),
                                                  std::log(g.median_us * 1e-6)}),
                             new ceres::SoftLOneLoss(0.1), p);
    ++fit.measurements;
  }
  if (fit.measurements < 4) return Status::InvalidArgument("GEMM fit needs at least 4 measurements");
  problem.SetParameterLowerBound(p, 0, 0.01);
  problem.SetParameterUpperBound(p, 0, 1.0);
  problem.SetParameterLowerBound(p, 1, 0.0);
  problem.SetParameterLowerBound(p, 2, 0.0);
  ceres::Solver::Options options;
  options.max_num_iterations = 200;
  ceres::Solver::Summary summary;
  ceres::Solve(options, &problem, &summary);
  if (!summary.IsSolutionUsable()) return Status::InvalidArgument("GEMM fit failed: " + summary.message);
  fit.efficiency = p[0];
  fit.m_half = p[1];
  fit.floor_us = p[2];
  fit.rms_log_error = std::sqrt(2.0 * summary.final_cost / fit.measurements);
  ceres::Covariance::Options co;
  co.algorithm_type = ceres::DENSE_SVD;
  co.null_space_rank = -1;
  ceres::Covariance cov(co);
  std::vector<std::pair<const double*, const double*>> blocks = {{p, p}};
  if (cov.Compute(blocks, &problem)) {
    double c[9];
    cov.GetCovarianceBlock(p, p, c);
    const double s2 = 2.0 * summary.final_cost / std::max(1, fit.measurements - 3);
    for (int i = 0; i < 3; ++i) fit.stddev[i] = std::sqrt(std::max(0.0, c[i * 3 + i] * s2));
  }
  return fit;
}

}  // namespace fathom::models
