// Measured serving benchmarks: an engine served at fixed input and output lengths by a closed loop
// of clients, each sending its next request when its last one ends, with mean TTFT and TPOT
// measured (models/calibration/serving_benchmarks_aic.csv, AIConfigurator's silicon points for
// TensorRT-LLM, vLLM and SGLang). Unlike MLPerf rows, one engine's points span models, GPUs,
// layouts and batch sizes, so they test how a stack's physics and host costs carry across them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "models/cost_model.h"
#include "models/hardware.h"
#include "models/stack.h"
#include "sim/deployment_config.h"
#include "tuner/calibration/calibrate.h"

namespace fathom::tuner {

struct ServingBenchmark {
  int line = 0;
  std::string source;   // the point's id in its source
  std::string engine;   // "TensorRT-LLM", "vLLM" or "SGLang"
  std::string version;  // the engine release; may be empty
  std::string hardware, model;
  std::string weights, dense_weights;  // formats (--weights); dense_weights empty: the same
  int64_t isl = 0, osl = 0, concurrency = 0;
  int tp = 1, pp = 1, attn_dp = 1, ep = 1;  // fathom's counting (models/deployment.h)
  double ttft_ms = 0, tpot_ms = 0;          // means over the run's requests

  int Gpus() const { return tp * pp; }
};

// Output tokens a second of one GPU in a closed loop whose requests take ttft + (osl - 1) x tpot.
double ClosedLoopTokensPerSPerGpu(const ServingBenchmark& b, double ttft_ms, double tpot_ms);

// The share of its GPUs' dense peak (in its weights' format) that a point's measured loop needs
// for the matrix products of its linear layers alone: every prompt and generated token through
// the parameters a token multiplies (models::ParamCounts::active; the LM head for the generated
// ones only). Attention, the other kernels and the host come on top, so a share near or past the
// fraction of peak large GEMMs reach is more than the GPUs can have done as labelled (prompts
// served from a prefix cache the point does not state, say). Errors name the point's line and
// column (an unknown model, GPU or format).
Result<double> MeasuredPeakShare(const ServingBenchmark& b, const models::HardwareCatalog& catalog);

// Reads a serving-benchmark CSV (columns as in serving_benchmarks_aic.csv); errors name the file,
// line, column and rule.
Result<std::vector<ServingBenchmark>> LoadServingBenchmarks(const std::string& path,
                                                            Env* env = Env::Default());

// The deployment a point ran: its layout and formats; KV in the engine's default format (FP8 for
// TensorRT-LLM, whose quantised checkpoints carry FP8 KV scales; the model's BF16 for vLLM and
// SGLang, whose kv_cache_dtype defaults to "auto"); chunked prefill of 8,192 tokens an iteration
// (the engines' defaults on these GPUs: TensorRT-LLM's max_num_tokens, vLLM's
// max_num_batched_tokens, SGLang's chunked_prefill_size); as many sequences a rank as clients reach
// it; the stack's CUDA graphs and streaming, and the scheduling its engine does (`engine`, the
// stack's search: SGLang's prefill-only batches and overlap scheduler). Nothing here is fitted to
// the points.
sim::DeploymentConfig BenchmarkDeployment(const ServingBenchmark& b,
                                          const models::StackSearch& engine);

struct ServingPrediction {
  std::string layout;
  double ttft_ms = 0, tpot_ms = 0, tokens_per_s_per_gpu = 0;
  int64_t requests = 0;
};

// The measured runs' shape (AIConfigurator's benchmark: aiperf with --concurrency C, C warmup
// requests, then 20 x C measured, fixed lengths, ignore_eos): each client sends one warmup request,
// then kClosedLoopRounds measured ones, back to back. The first round starts together; chunked
// prefill staggers the first tokens, and with them every later request.
inline constexpr int kClosedLoopRounds = 20;

// Simulates the point's closed loop under `make_time`: `concurrency` clients, a warmup request
// each, then kClosedLoopRounds requests each of (isl, osl); the means of the measured requests'
// TTFT and of their (end - first token) / (osl - 1), as aiperf reports them. An error names the
// point's line (a layout the model does not allow, a deployment that does not fit).
Result<ServingPrediction> PredictServingBenchmark(const ServingBenchmark& b,
                                                  const sim::TimeModelFactory& make_time,
                                                  const models::HardwareCatalog& catalog,
                                                  const models::StackSearch& engine);

// Every point's prediction under `make_time`, in order, simulated on `jobs` threads (0: all cores).
std::vector<Result<ServingPrediction>> PredictServingBenchmarks(
    const std::vector<ServingBenchmark>& points, const sim::TimeModelFactory& make_time,
    const models::HardwareCatalog& catalog, const models::StackSearch& engine, int jobs);

// Fits the parameters `free_params` names (FreeParams; all when empty) of `start` to the points'
// mean TPOT and their tokens/s a GPU (ClosedLoopTokensPerSPerGpu of the mean TTFT and TPOT): two
// robust log errors a point (RobustLogError), solved by Ceres with central differences within
// CostParams' bounds from `start`, each evaluation simulating every point on `jobs` threads. Mean
// TTFT is not a residual of its own: in these loops it hangs on how the clients fall out of step
// and on admission limits the points do not state, and it reaches the fit through the throughput,
// weighted by its share of a request's time. Every point must simulate under `start`: an error
// names the first that does not. Each free parameter's spread is Ceres's covariance scaled by the
// residual variance.
Result<FitOutcome> FitServingBenchmarks(const std::vector<ServingBenchmark>& points,
                                        const models::Calibration& start,
                                        const std::vector<std::string>& free_params,
                                        const models::HardwareCatalog& catalog,
                                        const models::StackSearch& engine, int jobs,
                                        const FitProgress& progress = {});

// One fold of a cross-validation over serving points: its group held out of the fit, then
// predicted under it.
struct ServingFold {
  std::string held_out;
  Result<FitOutcome> fit = Status::Unavailable("not fitted");
  std::vector<ServingBenchmark> points;
  std::vector<ServingPrediction> predictions;  // of `points`, where the fit succeeded
};
struct ServingCrossValidation {
  std::string kind;  // "model" or "hardware": leave one out
  std::vector<ServingFold> folds;
};
// Leave one model out, then one GPU out: each fold fits `free_params` on the points outside its
// group, from `start` with the free parameters at their physical defaults (CostParams{}), and
// predicts the group's. A kind with a single group has no fold.
std::vector<ServingCrossValidation> CrossValidateServing(
    const std::vector<ServingBenchmark>& points, const models::Calibration& start,
    const std::vector<std::string>& free_params, const models::HardwareCatalog& catalog,
    const models::StackSearch& engine, int jobs,
    const std::function<void(const std::string& kind, const std::string& held_out)>& fold_done =
        {});

struct ServingError {
  int points = 0;
  double ttft_median_abs_pct = 0, tpot_median_abs_pct = 0, tokens_median_abs_pct = 0;
  double tpot_median_pct = 0;  // signed: > 0, predicted steps slower than measured
};
// Median errors of predicted against measured means over `points` (same order as `predictions`).
ServingError SummarizeServing(const std::vector<ServingBenchmark>& points,
                              const std::vector<ServingPrediction>& predictions);

}  // namespace fathom::tuner
