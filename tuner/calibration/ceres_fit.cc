#include "tuner/calibration/ceres_fit.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace fathom::tuner {

Result<models::Calibration> CalibrationAt(const models::Calibration& base,
                                          std::array<double, models::CostParams::kNumFitted> x) {
  constexpr size_t kFirstHost = models::CostParams::FittedIndex("iteration_overhead_us");
  for (size_t k = kFirstHost; k < x.size(); ++k) x[k] = std::max(0.0, x[k]);
  models::Calibration c = base;
  c.params.SetFitted(x);
  FATHOM_RETURN_IF_ERROR(c.params.Validate());
  return c;
}

std::vector<double> FreeSpreads(ceres::Problem* problem, std::vector<double>* z, double final_cost,
                                int dof) {
  ceres::Covariance::Options options;
  options.algorithm_type = ceres::DENSE_SVD;
  options.null_space_rank = -1;
  ceres::Covariance covariance(options);
  const std::vector<std::pair<const double*, const double*>> blocks = {{z->data(), z->data()}};
  if (!covariance.Compute(blocks, problem)) return {};
  const size_t n = z->size();
  std::vector<double> cov(n * n);
  covariance.GetCovarianceBlock(z->data(), z->data(), cov.data());
  const double s2 = 2.0 * final_cost / std::max(1, dof);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::sqrt(std::max(0.0, cov[i * n + i] * s2));
  return out;
}

}  // namespace fathom::tuner
