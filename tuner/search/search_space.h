// The candidate deployments a tune explores, and which of them can run at all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/deployment.h"
#include "models/hardware.h"
#include "models/model_arch.h"
#include "sim/config.h"
#include "sim/deployment_config.h"
#include "sim/time_model.h"

namespace fathom::tuner {

// TensorRT-LLM's attention-DP balancing counts (attention_dp_config: batching_wait_iters,
// timeout_iters) as MLPerf's DeepSeek-R1 harnesses set them (models/stacks.json): Offline 10 and
// 500 in both rounds; Server 2 and 6 (v6.0 8xB200, Dell's and Google's) and 3 and 9 (v5.1, and
// v6.0's Nebius 8xB200 and every 8xB300, GB300 and rack system).
struct AdpCounts {
  int64_t batching_wait_iters, timeout_iters;
};
inline constexpr AdpCounts kOfflineAdpCounts[] = {{10, 500}};
inline constexpr AdpCounts kServerAdpCounts[] = {{2, 6}, {3, 9}};

struct SearchSpace {
  std::string model{models::kDefaultModel};
  std::string hardware{models::kDefaultHardware};
  int gpus = models::kDefaultLayout.gpus;
  sim::Scenario scenario = sim::Scenario::kOffline;
  // Empty: what the GPU runs natively (fp4 and fp8, else fp8), and an MXFP4 checkpoint as it ships.
  std::vector<std::string> weights;
  std::vector<std::string> kv = {"fp8", "bf16"};
  std::vector<int64_t> max_batch = {64, 128, 256, 512, 1024, 2048};
  // KV tokens a running sequence holds, for the batch limits worth trying: a limit is left out
  // where the KV cache cannot hold that many sequences of this size (the cache, not the limit,
  // would bind). Tune sets it from the workload: its prompt plus half its output, at most 512.
  double sequence_kv_tokens = 512;
  std::vector<int64_t> max_num_tokens = {2048, 4096, 8192};
  bool disaggregated = true;  // also try prefill/decode pools splitting the GPUs
  // Also try TensorRT-LLM's attention-DP balancing on layouts with attention DP, with each pair of
  // counts the MLPerf harnesses use for the scenario (kOfflineAdpCounts, kServerAdpCounts).
  // Batched prefills mean fewer iterations that cannot replay a CUDA graph.
  bool adp_balance = true;
  std::vector<int> mtp = {0};  // MTP depths; the interactive scenario adds 3 for models with MTP
  // Probability that each MTP draft token is accepted (geometric). No acceptance of DeepSeek-R1's
  // MTP on MLPerf's data set is published; 0.7 is an assumption the tune states (--acceptance).
  double mtp_acceptance = 0.7;
  // The engine's host side: the Python runtime, and TensorRT engines under the C++ executor where
  // the stack serves the model so (sim::TimeModel::Runtimes) and the GPU is NVIDIA's.
  std::vector<models::Runtime> runtimes = {models::Runtime::kPython};
  // vLLM V0's multi-step counts to try on aggregated layouts ({1}: none; the stack's).
  std::vector<int> scheduler_steps = {1};
  bool async_scheduling = false;  // every candidate schedules asynchronously (vLLM V1; the stack's)
  bool prefill_first = false;     // every candidate runs prompts in prefill-only batches (SGLang)
};

// What the predicting stack offers, in `space`: the runtimes it serves `model_type` on, its
// multi-step counts, async scheduling, and whether it has TensorRT-LLM's attention-DP balancing.
void FollowStack(const sim::TimeModel& time_model, const std::string& model_type,
                 SearchSpace* space);

struct Candidates {
  std::vector<sim::DeploymentConfig> feasible;
  int64_t infeasible = 0;     // invalid layouts or not fitting in memory
  int64_t out_of_memory = 0;  // of those, the ones that break no layout rule but do not fit
  // The out-of-memory candidate that comes closest: the memory per GPU it lacks, and which it is.
  double least_shortfall_bytes = 0;
  std::string least_shortfall;  // "TP8 PP1 EP8 fp8 weights, batch 64"
};

// Every combination of layout, precision and engine knobs; layouts that break a rule or do not
// fit in memory are counted and dropped.
Result<Candidates> Enumerate(const SearchSpace& space, const models::HardwareCatalog& catalog);

// A stable text key of a deployment: identical candidates share it (and are simulated once).
std::string CandidateKey(const sim::DeploymentConfig& d);

}  // namespace fathom::tuner
