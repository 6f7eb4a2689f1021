// Operator-level fitting: the GEMM efficiency curve of one GPU from measured kernels.
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "base/status.h"
#include "models/cost_model.h"
#include "models/hardware.h"
#include "models/operators.h"
#include "models/perf_db.h"

namespace fathom::models {

// The operator a measurement row timed (OpMeasurement's shape conventions): gemm,
// grouped_gemm, attention_prefill / attention_decode (heads from dims) and the collectives
// all_reduce, all_gather, reduce_scatter and all_to_all (over NVLink: the ranks share a
// scale-up domain). Other kinds are NotFound; a bad shape is InvalidArgument naming it.
Result<Operator> MeasuredOperator(const OpMeasurement& row);
// The operators a row timed: MeasuredOperator's one, or for a whole MoE layer ("moe": m tokens
// reaching it, n the experts' intermediate, k hidden, extra experts; dims topk, tp and ep, the
// routing balanced) the routed experts of one of its GPUs.
Result<std::vector<Operator>> MeasuredOperators(const OpMeasurement& row);
// Seconds the cost model gives those operators on one GPU of `hw`, the routing balanced (no rank
// waits for a busier one: ep 1).
double MeasuredSeconds(const std::vector<Operator>& ops, const Hardware& hw, const CostParams& p);

struct GemmFit {
  // The curve's parameters: the efficiency of each kind of tensor core (BF16, FP8, FP4; see
  // GemmEfficiencyField), then the stream share, kernel floor and memory efficiency all share.
  static constexpr std::array<double CostParams::*, 6> kFields = {
      &CostParams::gemm_efficiency,     &CostParams::fp8_gemm_efficiency,
      &CostParams::fp4_gemm_efficiency, &CostParams::gemm_stream_share,
      &CostParams::kernel_floor_us,     &CostParams::memory_efficiency};
  std::array<double, 6> value = {}, stddev = {};
  std::array<int, 3> rows_per_core = {};  // GEMMs on each kind of tensor core (none: not fitted)
  int measurements = 0;
  double rms_log_error = 0;
  bool Fitted(int i) const { return i >= 3 || rows_per_core[i] > 0; }
  CostParams Applied(const CostParams& base) const;  // `base` with the fitted values
};

// Fits the cost model's own GEMM price, max(flops / (peak x efficiency) + stream share x weight
// bytes / bandwidth, bytes / bandwidth) + floor (bandwidth x memory efficiency), to GEMM and
// grouped GEMM measurements: the parameters from `start`, with a robust loss on log time.
// Small-M rows (streaming weights) set the memory efficiency and the stream share, large-M rows
// each kind of tensor core's efficiency.
Result<GemmFit> FitGemmCurve(const std::vector<OpMeasurement>& rows, const Hardware& hw,
                             const CostParams& start);

struct CollectiveFit {
  double link_efficiency = 0, latency_us = 0, hop_latency_us = 0;
  std::array<double, 3> stddev = {0, 0, 0};
  int measurements = 0;
  double rms_log_error = 0;
  CostParams Applied(const CostParams& base) const;  // `base` with the three fitted values
};

// Fits the cost model's collective price, latency + steps x hop latency + bytes x factor / (link
// bandwidth x link efficiency), to the collective rows (all-reduce, all-gather, reduce-scatter,
// all-to-all, send/recv), robust loss on log time: small messages set the latency, large ones the
// efficiency.
Result<CollectiveFit> FitCollectives(const std::vector<OpMeasurement>& rows, const Hardware& hw,
                                     const CostParams& start);

struct ExpertFit {
  // Native kernels fit grouped_memory_efficiency; kernels that dequantise MXFP4 weights on a GPU
  // without FP4 tensor cores (`dequantised`) fit dequant_grouped_memory_efficiency and
  // dequant_gemm_efficiency (math_efficiency).
  bool dequantised = false;
  double memory_efficiency = 0, memory_stddev = 0;
  double math_efficiency = 0, math_stddev = 0;
  int measurements = 0;
  double rms_log_error = 0;
  CostParams Applied(const CostParams& base) const;  // `base` with the fitted values
};

// Fits the rate grouped GEMMs stream experts' weights at to whole MoE layers measured on a GPU
// that holds every expert ("moe" rows at ep 1, where the layer is the builder's grouped GEMMs and
// activation, with no tokens dispatched to other GPUs), robust loss on log time; the other
// parameters stay at `start`. With `dequantised`, the layers whose MXFP4 weights the GPU
// dequantises, and their BF16 math's share of peak too; without, the others.
Result<ExpertFit> FitExpertStreaming(const std::vector<OpMeasurement>& rows, const Hardware& hw,
                                     const CostParams& start, bool dequantised = false);

// The operator-level fits a set of measurements supports: the GEMM curve where it has at least 5
// GEMM rows, the collective price where it has at least 3 collective rows, the experts' streaming
// rate where it has at least 3 MoE layers at ep 1 (native and dequantising kernels each).
struct OperatorFits {
  std::optional<GemmFit> gemm;
  std::optional<CollectiveFit> links;
  std::optional<ExpertFit> experts, dequantised_experts;
  CostParams Applied(const CostParams& base) const;
};
Result<OperatorFits> FitOperators(const std::vector<OpMeasurement>& rows, const Hardware& hw,
                                  const CostParams& start);

}  // namespace fathom::models
