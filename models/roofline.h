// The plain roofline: every operator takes max(FLOPs / peak, bytes / HBM bandwidth); collectives
// move their bytes over the scale-up (or scale-out) link with ring algorithms. No efficiencies,
// no overheads: a lower bound on what any engine achieves.
#pragma once

#include <vector>

#include "models/deployment.h"
#include "models/execution_time.h"
#include "models/hardware.h"
#include "models/model_arch.h"
#include "models/operators.h"

namespace fathom::models {

class RooflineModel : public ExecutionTimeModel {
 public:
  // Copies what it needs; `m` must outlive the model (the operator builder borrows it).
  RooflineModel(const ModelArch& m, const Hardware& hw, const ParallelLayout& layout,
                const Precision& precision);

  SimTime StageTime(std::span<const BatchShape> ranks, int stage) const override;
  int num_stages() const override { return builder_.num_stages(); }

  // Seconds for one instance of `op` (multiply by op.count for the iteration).
  double OpSeconds(const Operator& op) const;
  const OperatorBuilder& builder() const { return builder_; }

 private:
  Hardware hw_;
  OperatorBuilder builder_;
  mutable std::vector<Operator> scratch_;  // reused per call; not thread safe
};

}  // namespace fathom::models
