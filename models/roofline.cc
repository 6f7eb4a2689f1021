#include "models/roofline.h"

#include <algorithm>

namespace fathom::models {

RooflineModel::RooflineModel(const ModelArch& m, const Hardware& hw, const ParallelLayout& layout,
                             const Precision& precision)
    : hw_(hw), builder_(m, layout, precision) {}

double RooflineModel::OpSeconds(const Operator& op) const {
  if (op.kind == OpKind::kCommunication) {
    // Datasheets quote scale-up bandwidth for both directions together.
    const double bw = op.span <= hw_.scale_up_domain_gpus ? hw_.scale_up_bytes_per_s / 2.0
                                                          : hw_.scale_out_bytes_per_s;
    const double n = op.ranks;
    double factor = 1.0;
    switch (op.comm) {
      case CommKind::kAllReduce: factor = 2.0 * (n - 1) / n; break;
      case CommKind::kAllGather:
      case CommKind::kReduceScatter: factor = (n - 1); break;  // bytes are this GPU's shard
      default: factor = 1.0; break;
    }
    return op.comm_bytes * factor / bw;
  }
  const double peak = op.kind == OpKind::kAttention || op.kind == OpKind::kElementwise
                          ? hw_.peak_bf16_flops
                          : hw_.PeakFlops(op.dtype);
  return std::max(op.flops / peak, op.bytes / hw_.hbm_bytes_per_s);
}

SimTime RooflineModel::StageTime(std::span<const BatchShape> ranks, int stage) const {
  int64_t group_tokens = 0;
  for (const auto& r : ranks) group_tokens += r.tokens;
  double slowest = 0.0;
  for (const auto& r : ranks) {
    builder_.Build(r, MoeInput{group_tokens}, stage, &scratch_);
    double t = 0.0;
    for (const auto& op : scratch_) t += OpSeconds(op) * static_cast<double>(op.count);
    slowest = std::max(slowest, t);
  }
  return FromSeconds(slowest);
}

}  // namespace fathom::models
