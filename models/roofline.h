// The plain roofline: every operator takes max(FLOPs / peak, bytes / HBM bandwidth); collectives
// move their bytes over the links with ring algorithms. No efficiencies, no overheads: a lower
// bound on what any engine achieves.
#pragma once

#include "models/operator_time_model.h"

namespace fathom::models {

class RooflineModel : public OperatorTimeModel {
 public:
  RooflineModel(const ModelArch& m, const Hardware& hw, const ParallelLayout& layout,
                const Precision& precision);
  double OpSeconds(const Operator& op) const override;

 private:
  Hardware hw_;
};

}  // namespace fathom::models
