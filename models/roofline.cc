#include "models/roofline.h"

#include <algorithm>

namespace fathom::models {

RooflineModel::RooflineModel(const ModelArch& m, const Hardware& hw, const ParallelLayout& layout,
                             const Precision& precision)
    : OperatorTimeModel(m, layout, precision), hw_(hw) {}

double RooflineModel::OpSeconds(const Operator& op) const {
  if (op.kind == OpKind::kCommunication) return CollectiveSeconds(op, hw_, 1.0, 0.0, 0.0);
  const double peak = op.kind == OpKind::kAttention || op.kind == OpKind::kElementwise
                          ? hw_.peak_bf16_flops
                          : hw_.PeakFlops(op.dtype);
  return std::max(op.flops / peak, op.bytes / hw_.hbm_bytes_per_s);
}

}  // namespace fathom::models
