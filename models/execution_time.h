// The one interface through which the simulator learns how long an engine iteration takes.
// Implementations: the plain roofline (models/roofline.h) and, later, calibrated cost models.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/sim_time.h"
#include "models/batch_shape.h"

namespace fathom::models {

// Where an iteration's time goes, in seconds; the parts sum to its time. Operators by kind are
// those of the mean attention rank and the routed experts every rank runs.
struct StageCost {
  double gemm = 0, grouped_gemm = 0, attention = 0, elementwise = 0, communication = 0;
  double imbalance = 0;     // the slowest attention rank over the mean: the others wait for it
  double host = 0;          // the GPU waiting for the host: overheads, launches it cannot hide
  double unattributed = 0;  // a model that does not break its time down
  double Total() const {
    return gemm + grouped_gemm + attention + elementwise + communication + imbalance + host +
           unattributed;
  }
  // Adds `c` times `scale`.
  void Add(const StageCost& c, double scale) {
    gemm += c.gemm * scale;
    grouped_gemm += c.grouped_gemm * scale;
    attention += c.attention * scale;
    elementwise += c.elementwise * scale;
    communication += c.communication * scale;
    imbalance += c.imbalance * scale;
    host += c.host * scale;
    unattributed += c.unattributed * scale;
  }
};

class ExecutionTimeModel {
 public:
  virtual ~ExecutionTimeModel() = default;

  // Duration of one iteration on pipeline stage `stage` when attention rank r of the instance
  // runs ranks[r]. The ranks meet in every MoE layer, so the slowest sets the pace. An empty
  // batch on every rank takes zero time.
  virtual SimTime StageTime(std::span<const BatchShape> ranks, int stage) const = 0;

  virtual int num_stages() const = 0;

  // StageTime's seconds broken down (slower than StageTime: for a breakdown run, not every run).
  virtual StageCost StageCostOf(std::span<const BatchShape> ranks, int stage) const {
    StageCost c;
    c.unattributed = ToSeconds(StageTime(ranks, stage));
    return c;
  }

  // Host time of the serving front per streamed response, beside the GPU loop (0: none).
  virtual double ResponseSeconds() const { return 0.0; }

  // The batch sizes the engine captures CUDA graphs for when its deployment names none (empty:
  // none, every iteration runs eagerly). BatchShape::cuda_graph marks the iterations replayed.
  virtual std::vector<int64_t> CudaGraphBatchSizes() const { return {}; }
  // Tokens per streamed response when the deployment names none (0: responses not modelled).
  virtual int64_t StreamInterval() const { return 0; }
};

}  // namespace fathom::models
