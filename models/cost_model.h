// The calibrated cost model: the operator list priced with shape-dependent efficiencies, alpha-
// beta collectives, MoE load imbalance from the routing, kernel floors and per-iteration
// overheads; measured latencies from the performance database where they cover the shape.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "base/json_fields.h"
#include "models/deployment.h"
#include "models/execution_time.h"
#include "models/hardware.h"
#include "models/model_arch.h"
#include "models/operator_time_model.h"
#include "models/operators.h"
#include "models/perf_db.h"

namespace fathom::models {

// Measured all-reduce latencies within one scale-up domain, by GPU and rank count, interpolated
// in (log bytes, log latency) between the buffers measured (InterpolateLogLog). Where a table
// covers an all-reduce's GPU and ranks it answers in place of the collective formula: engines'
// own all-reduce kernels (one-shot and two-shot for small buffers, NCCL's for large ones, NVLink
// SHARP on 8 GPUs) follow no single alpha-beta curve.
class AllReduceTables {
 public:
  void Add(const std::string& hardware, int ranks, double bytes, double us);
  std::optional<double> Seconds(const std::string& hardware, int ranks, double bytes) const;
  bool empty() const { return tables_.empty(); }
  // (GPU, ranks) -> (bytes, microseconds) by bytes.
  const std::map<std::pair<std::string, int>, std::vector<std::pair<double, double>>>& tables()
      const {
    return tables_;
  }
  bool operator==(const AllReduceTables&) const = default;

 private:
  std::map<std::pair<std::string, int>, std::vector<std::pair<double, double>>> tables_;
};

// Few parameters, each a physical quantity. The fitted ones are listed in kFitted.
struct CostParams {
  double gemm_efficiency = 0.70;  // fraction of dense peak large GEMMs reach
  // The same for block-scaled FP4 GEMMs on FP4 tensor cores (NVFP4, MXFP4), which public kernels
  // run at a smaller fraction of their peak than FP8 and BF16 ones (scale-factor handling): on
  // B200, vLLM's CUTLASS NVFP4 GEMM 3,904 TFLOP/s at 16384x6144x4096 (0.43 of 9,000; its FP8
  // GEMM 0.57 of 4,500 on the same shape, vllm-project/vllm PRs 20646 and 19566) and FlashInfer's
  // 3,370 at M = 1,024 (0.37 with the small-M loss in it; flashinfer PR 1979).
  double fp4_gemm_efficiency = 0.43;
  // The same for FP8 GEMMs on FP8 tensor cores (Hopper and later; FP4 weights on a GPU without FP4
  // cores run there too), which reach a smaller fraction of their peak than BF16 ones: DeepGEMM,
  // the fastest public Hopper FP8 GEMM, states 1,350+ TFLOP/s (0.68 of H800's 1,979;
  // deepseek-ai/DeepGEMM), vLLM's CUTLASS FP8 GEMM 0.57 of B200's 4,500 (PR 19566).
  double fp8_gemm_efficiency = 0.66;
  // The small-M loss: the share of the time to stream a GEMM's weights from HBM that adds to its
  // math (pipeline fill and the weight reads the math does not hide). A loss in bandwidth, so it
  // carries to GPUs and formats by their bandwidth and weight bytes, not by their FLOPs: on an
  // H100 in BF16 a share of 0.71 costs what 166 more rows would.
  double gemm_stream_share = 0.5;
  double memory_efficiency = 0.80;  // fraction of HBM bandwidth streaming kernels reach
  // The fraction grouped GEMMs stream at: a MoE layer reads many experts' weights in slices, one
  // expert's tile at a time, below a dense GEMM's rate (fitted to measured MoE layers by
  // `profile compare --fit`; for an engine's MoE kernels no layer was measured on, by `calibrate
  // --fit` on its end-to-end rows).
  double grouped_memory_efficiency = 0.80;
  // The same for experts with FP8 weights, where an engine's FP8 grouped kernels stream slower
  // than its BF16 and FP4 ones; 0: grouped_memory_efficiency (measured with `profile compare
  // --fit` on FP8 layers).
  double fp8_grouped_memory_efficiency = 0;
  // Experts with MXFP4 weights on a GPU without FP4 tensor cores (TensorRT-LLM's w4a16 MoE on
  // Hopper): the kernel dequantises each weight tile to BF16 in registers, for every tile of
  // tokens, so it streams the weights and runs its BF16 math slower than a native grouped GEMM.
  // Its streaming rate and its share of the BF16 peak (0: as native kernels; measured with
  // `profile compare --fit` on such layers).
  double dequant_grouped_memory_efficiency = 0;
  double dequant_gemm_efficiency = 0;
  double attention_efficiency = 0.45;      // fraction of peak prefill attention reaches
  double kernel_floor_us = 2.0;            // shortest kernel (launch and tail, CUDA graphs on)
  double link_efficiency = 0.82;           // fraction of link bandwidth collectives reach (NCCL's
                                           // protocol costs about 20% of NVLink's line rate)
  double collective_latency_us = 8.0;      // alpha of one collective (launch and setup)
  double collective_hop_latency_us = 0.0;  // and of each step of its algorithm (ring: 2 (n - 1))
  double comm_overlap = 0.0;               // fraction of communication hidden behind compute
  // Host work per iteration (scheduler, sampling, launches), and per running sequence in it, for
  // Python runtimes and for C++ ones (see Runtime).
  double iteration_overhead_us = 250;
  double per_sequence_overhead_us = 0.5;
  double cpp_iteration_overhead_us = 250;
  double cpp_per_sequence_overhead_us = 0.5;
  // The C++ runtime's host time per kernel launched: TensorRT engines enqueued kernel by kernel
  // (MLPerf's Llama engines run without CUDA graphs) ahead of the GPU, which runs meanwhile.
  double cpp_launch_us = 5.0;
  double moe_skew = 0.0;  // routing skew: scales the spread of tokens per GPU beyond multinomial
  // The Python serving front's host time per streamed response (detokenise, hand the tokens to
  // the client), over all its workers: a queue beside the GPU loop that every streamed response
  // passes (sim/response_path.h). 0: responses reach the client as the iteration ends. Not in
  // kFitted: it shows in Server capacity, which the least-squares fit does not use; the stacks'
  // files say how it was set.
  double response_us = 0.0;
  // Python runtimes: host time per operator launched in an iteration that runs eagerly, not
  // replayed from a captured CUDA graph (PyTorch's dispatch, the Python module code around each
  // kernel, and the launch), paid in full: the eager step synchronises with the host (the MoE
  // path reads its routing counts back), so its launches do not run ahead of the GPU. Graph
  // replays pay none of it.
  double eager_launch_us = 10.0;
  // Whether those eager launches run ahead of the GPU instead: a step that synchronises with the
  // host only to read its sampled tokens back (vLLM's model runner on a dense model enqueues the
  // whole forward pass, then samples), so an eager iteration takes the longer of its kernels and
  // its launches, as the C++ runtime's does; its per-iteration host work still adds.
  bool eager_launches_ahead = false;
  // The batch sizes a Python runtime captures CUDA graphs for (TensorRT-LLM's
  // cuda_graph_config.batch_sizes), when a deployment names none: the stack's.
  std::vector<int64_t> cuda_graph_batch_sizes;
  // Tokens per streamed response of a Python front when a deployment names none (0: none).
  int64_t stream_interval = 0;
  // Measured all-reduces (`fathom profile tables`), which price those they cover; none: the
  // collective formula prices every one.
  AllReduceTables all_reduce;

  static constexpr int kNumFitted = 12;
  static constexpr std::array<const char*, kNumFitted> kFitted = {"gemm_efficiency",
                                                                  "memory_efficiency",
                                                                  "iteration_overhead_us",
                                                                  "per_sequence_overhead_us",
                                                                  "cpp_iteration_overhead_us",
                                                                  "cpp_per_sequence_overhead_us",
                                                                  "cpp_launch_us",
                                                                  "eager_launch_us",
                                                                  "fp4_gemm_efficiency",
                                                                  "fp8_gemm_efficiency",
                                                                  "kernel_floor_us",
                                                                  "grouped_memory_efficiency"};
  // Where fits search each of them: efficiencies a share of peak, times in microseconds.
  static constexpr std::array<double, kNumFitted> kFittedLower = {0.05, 0.05, 0,    0,    0, 0,
                                                                  0,    0,    0.05, 0.05, 0, 0.05};
  static constexpr std::array<double, kNumFitted> kFittedUpper = {
      1.0, 1.0, 50000.0, 500.0, 50000.0, 500.0, 100.0, 500.0, 1.0, 1.0, 50.0, 1.0};
  // Whether fitted parameter k is an efficiency (a share of a peak, at most 1).
  static constexpr bool FittedIsShare(int k) { return kFittedUpper[k] == 1.0; }
  // A fitted parameter's index in kFitted (a name not among them does not compile where the
  // index is a constant).
  static consteval int FittedIndex(std::string_view name) {
    for (int k = 0; k < kNumFitted; ++k) {
      if (kFitted[k] == name) return k;
    }
    throw "not a fitted parameter";
  }
  std::array<double, kNumFitted> Fitted() const;
  void SetFitted(const std::array<double, kNumFitted>& v);
  Status Validate() const;
  bool operator==(const CostParams&) const = default;
};

// The efficiency that GEMMs in `t` on `hw` run at, that of the tensor cores they use:
// fp4_gemm_efficiency on FP4 cores, fp8_gemm_efficiency on FP8 ones (FP4 weights too where the GPU
// has no FP4 cores), gemm_efficiency otherwise.
double CostParams::*GemmEfficiencyField(const Hardware& hw, DType t);
// A parameter's name in calibration files ("gemm_efficiency").
const char* CostParamName(double CostParams::*field);

// A calibration file: parameters, their standard deviations (from the fit's covariance), and
// the hardware it was fitted on (predictions elsewhere are extrapolations).
struct Calibration {
  CostParams params;
  std::array<double, CostParams::kNumFitted> stddev = {};
  std::vector<std::string> fitted_hardware;
  std::string note;
  bool operator==(const Calibration&) const = default;
};

Result<Calibration> LoadCalibration(const std::string& path);
// What ToJson wrote; errors name `path`.
Result<Calibration> CalibrationFromJson(const Json& j, const std::string& path);
OrderedJson ToJson(const Calibration& c);
std::string DefaultCalibrationPath();  // the newest stack's (models/stacks.json)

// Measured GEMM latencies for one GPU, by (dtype, N, K), interpolated over M.
class MeasuredGemms {
 public:
  static Result<MeasuredGemms> Load(const PerfDb& db, const std::string& hardware);
  // Seconds, or nullopt when no measurement has this (dtype, N, K).
  std::optional<double> Seconds(DType dtype, int64_t m, int64_t n, int64_t k) const;
  size_t size() const { return tables_.size(); }
  void Add(DType dtype, int64_t m, int64_t n, int64_t k, double seconds);

  // GEMMs priced so far (thread-safe): within a table's measured M range, outside it (an
  // extrapolation: the first latency below, the last segment extended above), and of a shape
  // no table has (the analytical model answers).
  struct Coverage {
    int64_t within = 0, outside = 0, unmeasured = 0;
  };
  Coverage coverage() const;

 private:
  struct Counters {
    std::atomic<int64_t> within{0}, outside{0}, unmeasured{0};
  };
  std::map<std::tuple<int, int64_t, int64_t>, std::vector<std::pair<double, double>>> tables_;
  std::unique_ptr<Counters> counters_ = std::make_unique<Counters>();
};

// Whether `op` is a grouped GEMM whose MXFP4 weights `hw` dequantises (no FP4 tensor cores): the
// path CostParams::dequant_* price.
bool DequantisesExperts(const Operator& op, const Hardware& hw);

// Seconds for one instance of `op` on one GPU of `hw` (an expert-parallel group of `ep` GPUs for
// grouped GEMMs: the busiest sets the pace); measured GEMM latencies answer where they cover it.
double OperatorSeconds(const Operator& op, const Hardware& hw, const CostParams& p, int ep,
                       const MeasuredGemms* measured = nullptr);

class CalibratedModel : public OperatorTimeModel {
 public:
  // `m` must outlive the model. `measured` may be null.
  CalibratedModel(const ModelArch& m, const Hardware& hw, const ParallelLayout& layout,
                  const Precision& precision, const CostParams& params,
                  Runtime runtime = Runtime::kPython,
                  std::shared_ptr<const MeasuredGemms> measured = nullptr, Fusions fusions = {});

  double OpSeconds(const Operator& op) const override;
  double ResponseSeconds() const override { return response_s_; }
  std::vector<int64_t> CudaGraphBatchSizes() const override { return graph_sizes_; }
  int64_t StreamInterval() const override { return stream_interval_; }

 protected:
  double AheadLaunchSeconds(int stage, bool cuda_graph) const override;
  double EagerLaunchSeconds(int stage, bool cuda_graph) const override;
  double HostSeconds(int stage, int64_t sequences) const override;

 private:
  Hardware hw_;
  ParallelLayout layout_;
  CostParams p_;
  double host_iteration_us_, host_per_sequence_us_;  // the runtime's host costs
  double response_s_;                 // the Python front's (C++ fronts' are not modelled: 0)
  std::vector<int64_t> graph_sizes_;  // the Python runtime's
  int64_t stream_interval_ = 0;       // the Python front's
  bool launches_ahead_;               // the C++ runtime's: launches run ahead of the GPU
  bool eager_ahead_;                  // a Python runtime's eager launches, where they run ahead
  std::vector<double> launch_s_;      // by stage: host time of an iteration's launches, when paid
  std::shared_ptr<const MeasuredGemms> measured_;
};

}  // namespace fathom::models
