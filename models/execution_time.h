// The one interface through which the simulator learns how long an engine iteration takes.
// Implementations: the plain roofline (models/roofline.h) and, later, calibrated cost models.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/sim_time.h"
#include "models/batch_shape.h"

namespace fathom::models {

class ExecutionTimeModel {
 public:
  virtual ~ExecutionTimeModel() = default;

  // Duration of one iteration on pipeline stage `stage` when attention rank r of the instance
  // runs ranks[r]. The ranks meet in every MoE layer, so the slowest sets the pace. An empty
  // batch on every rank takes zero time.
  virtual SimTime StageTime(std::span<const BatchShape> ranks, int stage) const = 0;

  virtual int num_stages() const = 0;

  // Host time of the serving front per streamed response, beside the GPU loop (0: none).
  virtual double ResponseSeconds() const { return 0.0; }

  // The batch sizes the engine captures CUDA graphs for when its deployment names none (empty:
  // none, every iteration runs eagerly). BatchShape::cuda_graph marks the iterations replayed.
  virtual std::vector<int64_t> CudaGraphBatchSizes() const { return {}; }
  // Tokens per streamed response when the deployment names none (0: responses not modelled).
  virtual int64_t StreamInterval() const { return 0; }
};

}  // namespace fathom::models
