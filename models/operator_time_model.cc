#include "models/operator_time_model.h"

#include <algorithm>

namespace fathom::models {

OperatorTimeModel::OperatorTimeModel(const ModelArch& m, const ParallelLayout& layout, const Precision& precision)
    : builder_(m, layout, precision) {}

SimTime OperatorTimeModel::StageTime(std::span<const BatchShape> ranks, int stage) const {
  int64_t group_tokens = 0, sequences = 0;
  for (const auto& r : ranks) {
    group_tokens += r.tokens;
    sequences = std::max(sequences, r.sequences);
  }
  if (group_tokens == 0) return SimTime(0);
  double slowest = 0.0;
  for (const auto& r : ranks) {
    builder_.Build(r, MoeInput{group_tokens}, stage, &scratch_);
    double t = 0.0;
    for (const auto& op : scratch_) t += OpSeconds(op) * static_cast<double>(op.count);
    slowest = std::max(slowest, t);
  }
  return FromSeconds(slowest + OverheadSeconds(stage, sequences));
}

double CollectiveSeconds(const Operator& op, const Hardware& hw, double link_efficiency, double alpha_s) {
  const double link =
      (op.span <= hw.scale_up_domain_gpus ? hw.scale_up_bytes_per_s / 2.0 : hw.scale_out_bytes_per_s) * link_efficiency;
  const double n = op.ranks;
  double factor = 1.0;
  if (op.comm == CommKind::kAllReduce) factor = 2.0 * (n - 1) / n;
  if (op.comm == CommKind::kAllGather || op.comm == CommKind::kReduceScatter) factor = n - 1;  // bytes: one shard
  return alpha_s + op.comm_bytes * factor / link;
}

}  // namespace fathom::models
