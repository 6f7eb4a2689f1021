// Execution-time models that price the operator list one operator at a time. The attention
// ranks of an instance meet in every MoE layer, so the slowest rank sets the iteration's pace.
// Prices are cached where the operators depend on one count alone: the routed experts on the
// tokens reaching the MoE layers (the same on every rank), a decode-only rank's operators other
// than attention on its token count, and a prefilling rank's head and body runs
// (OperatorBuilder::Run) on its token count. OpSeconds must therefore be a pure function.
#pragma once

#include <span>
#include <vector>

#include "models/deployment.h"
#include "models/execution_time.h"
#include "models/hardware.h"
#include "models/model_arch.h"
#include "models/operators.h"

namespace fathom::models {

class OperatorTimeModel : public ExecutionTimeModel {
 public:
  // Borrows `m`; it must outlive the model. Not thread safe (reuses one operator buffer).
  OperatorTimeModel(const ModelArch& m, const ParallelLayout& layout, const Precision& precision,
                    Fusions fusions = {});

  SimTime StageTime(std::span<const BatchShape> ranks, int stage) const final;
  StageCost StageCostOf(std::span<const BatchShape> ranks, int stage) const final;
  int num_stages() const final { return builder_.num_stages(); }

  // Seconds for one instance of `op` (the iteration runs it op.count times).
  virtual double OpSeconds(const Operator& op) const = 0;
  const OperatorBuilder& builder() const { return builder_; }
  // Kernels one GPU of `stage` launches in an iteration: its operators' instances.
  int64_t Launches(int stage) const;
  // False when some operator's time may fall as its shape grows (interpolated measurements):
  // then every rank is timed, not only those no other rank dominates.
  void set_monotone(bool monotone) { monotone_ = monotone; }

 protected:
  // Host time launching a stage's kernels ahead of the GPU: launches with no host
  // synchronisation between them are asynchronous, the GPU running each kernel while the host
  // launches the next, so a stage takes the longer of its operators and its launches.
  virtual double AheadLaunchSeconds(int stage, bool cuda_graph) const { return 0.0; }
  // Launches the GPU waits for on `stage`: those of an eager iteration that synchronises with
  // the host (none for a CUDA-graph replay).
  virtual double EagerLaunchSeconds(int stage, bool cuda_graph) const { return 0.0; }
  // The runtime's host work of an iteration of `sequences` (scheduling, input preparation,
  // sampling, handing out tokens), before stage 0; BatchShape::host_share says how much of it one
  // iteration pays, and host_ahead whether it overlaps the GPU.
  virtual double HostSeconds(int stage, int64_t sequences) const { return 0.0; }

 private:
  double Priced() const;  // seconds of scratch_'s operators
  double WithHost(double gpu, int stage, int64_t sequences, double host_share,
                  bool host_ahead) const;
  // Adds scratch_'s operators to `c` by kind, times `scale`; returns their seconds (unscaled).
  double AddPriced(StageCost* c, double scale) const;
  double RankSeconds(const BatchShape& rank, int stage) const;
  double Cached(std::vector<std::vector<double>>& cache, int64_t count, int stage,
                bool experts) const;
  // A prefilling rank of `tokens` tokens on `stage`: its head run's seconds summed in Build's
  // order, then each body operator's seconds (so that the rank's sum is Priced()'s, to the bit).
  const double* HeadAndBody(int64_t tokens, int stage) const;

  OperatorBuilder builder_;
  mutable std::vector<Operator> scratch_;
  // By stage, then count: seconds of the routed experts, and of a decode-only rank's operators
  // other than attention (negative: not yet priced).
  mutable std::vector<std::vector<double>> expert_seconds_, decode_rank_seconds_;
  // By stage: HeadAndBody's values, body_ops_[stage] + 1 a token count (NaN: not yet priced).
  mutable std::vector<std::vector<double>> head_and_body_;
  mutable std::vector<size_t> body_ops_;
  bool monotone_ = true;
};

// Whether shape `a` has no more of anything than `b` (so its operators take no longer).
bool NoMoreWork(const BatchShape& a, const BatchShape& b);

// A collective: alpha + a hop's latency per step of the ring algorithm + bytes x its factor / link
// bandwidth, over the scale-up link when the group fits in one scale-up domain (datasheets give
// that for both directions together, so one direction gets half), else over the scale-out network.
double CollectiveSeconds(const Operator& op, const Hardware& hw, double link_efficiency,
                         double alpha_s, double hop_s);

}  // namespace fathom::models
