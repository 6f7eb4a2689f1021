// What the calibration fits share: a least-squares problem over the free parameters of
// CostParams::kFitted, within their bounds, differenced centrally (simulated figures are piecewise
// constant at tiny steps); a progress line per solver iteration; each free parameter's spread.
#pragma once

#include <ceres/ceres.h>

#include <array>
#include <memory>
#include <vector>

#include "base/status.h"
#include "models/cost_model.h"
#include "tuner/calibration/calibrate.h"

namespace fathom::tuner {

// The problem over `z` (the free parameters' values, in `free_indices` order; borrowed, it must
// outlive the problem): `residual` (owned) maps them to `residuals` robust errors, which carry
// their loss already.
template <typename Residual>
std::unique_ptr<ceres::Problem> BoundedProblem(Residual* residual, int residuals,
                                               const std::vector<int>& free_indices,
                                               std::vector<double>* z) {
  ceres::NumericDiffOptions diff;
  diff.relative_step_size = 0.03;
  auto* cost = new ceres::DynamicNumericDiffCostFunction<Residual, ceres::CENTRAL>(
      residual, ceres::TAKE_OWNERSHIP, diff);
  cost->AddParameterBlock(static_cast<int>(free_indices.size()));
  cost->SetNumResiduals(residuals);
  auto problem = std::make_unique<ceres::Problem>();
  problem->AddResidualBlock(cost, nullptr, z->data());
  for (size_t i = 0; i < free_indices.size(); ++i) {
    const int k = free_indices[i], at = static_cast<int>(i);
    problem->SetParameterLowerBound(z->data(), at, models::CostParams::kFittedLower[k]);
    problem->SetParameterUpperBound(z->data(), at, models::CostParams::kFittedUpper[k]);
  }
  return problem;
}

// `base` with its fitted parameters set to `x` (CostParams::kFitted order), the host times (from
// iteration_overhead_us on) clamped at zero, as central differences probe just outside the bounds;
// an error where the result is not valid.
Result<models::Calibration> CalibrationAt(const models::Calibration& base,
                                          std::array<double, models::CostParams::kNumFitted> x);

// Calls `progress` after each solver iteration with its number and cost.
class ProgressCallback : public ceres::IterationCallback {
 public:
  explicit ProgressCallback(const FitProgress& progress) : progress_(progress) {}
  ceres::CallbackReturnType operator()(const ceres::IterationSummary& s) override {
    progress_(s.iteration, s.cost);
    return ceres::SOLVER_CONTINUE;
  }

 private:
  const FitProgress& progress_;
};

// Each free parameter's standard deviation at the solution `z` of `problem`: Ceres's covariance
// scaled by the residual variance (2 x final_cost over `dof` degrees of freedom, at least 1);
// empty where the covariance cannot be computed.
std::vector<double> FreeSpreads(ceres::Problem* problem, std::vector<double>* z, double final_cost,
                                int dof);

}  // namespace fathom::tuner
