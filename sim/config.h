// Everything a simulation run needs besides the models: engine knobs, cluster shape, scenario.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/execution_time.h"

namespace fathom::sim {

enum class SchedulerKind {
  kStatic,        // a batch runs to completion before the next is formed
  kPrefillFirst,  // continuous batching, prefill-only iterations first (vLLM v0, Orca)
  kChunked,       // decodes plus prefill chunks under a token budget (Sarathi, vLLM v1, TRT-LLM)
  kMixed,  // decodes plus whole prompts under a token budget (TRT-LLM without chunked context)
  kDecodeFirst,  // decode iterations first; prefills wait until half the batch slots are free
};
enum class PreemptionMode { kRecompute, kSwap };
enum class AdmissionPolicy {
  kGreedy,   // allocate KV as tokens arrive; preempt when blocks run out (vLLM)
  kReserve,  // reserve input + output at admission, never preempt (TRT-LLM GUARANTEED_NO_EVICT)
};
// The order a rank takes waiting requests in (preempted ones always first): as they came, or by
// the output length a predictor gives each prompt, longest first (long reasoning traces start
// early and the run's thin tail shortens: LPT scheduling) or shortest first (short answers leave
// first: mean latency falls); or by the prompt's length, which is known.
enum class QueueOrder {
  kFifo,
  kLongestFirst,
  kShortestFirst,
  kLongestInputFirst,
  kShortestInputFirst
};
enum class RouterKind { kRoundRobin, kLeastOutstanding, kLeastKv, kPrefixAware };
enum class Scenario { kOffline, kServer, kInteractive, kReplay, kClosedLoop };

Result<SchedulerKind> ParseScheduler(std::string_view s);
Result<RouterKind> ParseRouter(std::string_view s);
Result<Scenario> ParseScenario(std::string_view s);
Result<QueueOrder> ParseQueueOrder(std::string_view s);
std::string_view Name(QueueOrder o);
bool TakesLongestFirst(QueueOrder o);
bool OrdersByPredictedOutput(QueueOrder o);  // else by the prompt's length (or not at all)
std::string_view Name(SchedulerKind k);
std::string_view Name(RouterKind k);
std::string_view Name(Scenario s);

struct EngineConfig {
  SchedulerKind scheduler = SchedulerKind::kChunked;
  int64_t max_batch = 256;         // running sequences per attention rank
  int64_t max_num_tokens = 8192;   // tokens per iteration per attention rank
  int64_t chunk_size = 0;          // max prefill tokens of one sequence per iteration; 0 = budget
  int64_t block_tokens = 32;       // KV block size
  double reserve_fraction = 0.10;  // HBM kept free
  // When > 0, the KV cache takes this fraction of the memory that weights, activations and the
  // runtime leave free, and reserve_fraction is unused (TensorRT-LLM's
  // kv_cache_free_gpu_memory_fraction, MLPerf harnesses' kvcache_free_gpu_mem_frac).
  double kv_free_fraction = 0;
  PreemptionMode preemption = PreemptionMode::kRecompute;
  AdmissionPolicy admission = AdmissionPolicy::kGreedy;
  bool prefix_caching = false;
  double swap_bytes_per_s = 50e9;  // host link for swapped KV (PCIe 5 x16, one direction)
  // Speculative decoding / MTP: k draft tokens per step; each accepted with probability
  // `acceptance` (geometric), or accepted-length probabilities 0..k from `acceptance_dist`.
  int mtp_depth = 0;
  double acceptance = 0.0;
  std::vector<double> acceptance_dist;
  double draft_cost = 0.02;  // time of one draft token, as a fraction of the step it rides on
  // Up to this many consecutive pure-decode steps (no arrival, admission or completion between
  // them) are simulated as one batch: their times are evaluated at the first and last step and
  // summed linearly (decode cost grows linearly with context). 1 disables it.
  int64_t fast_forward = 64;
  // vLLM V0's multi-step scheduling (num_scheduler_steps): once a batch only decodes, the
  // scheduler runs it this many steps before it looks at the queue again, so a run of N decode
  // steps pays the host's per-iteration work once (each step 1 / N of it) and new prompts wait
  // for the run to end. 1: every iteration is scheduled on its own.
  int scheduler_steps = 1;
  // vLLM V1's async scheduling: the host schedules and prepares the next iteration while the GPU
  // runs this one, so an iteration takes the longer of its GPU time and its host work, not both.
  bool async_scheduling = false;
  // AMD's admission gate (vLLM V1 as its MLPerf v6.0 harness patches the scheduler:
  // VLLM_SUBSEQUENT_DECODE_STEPS, VLLM_MIN_REQUEST_DECODE_STEP): a step counter cycles
  // 0..gate_steps, and while at least gate_min_running sequences run, waiting requests are admitted
  // only on the steps where it is 0, so prompts join in bursts every gate_steps + 1 iterations.
  // 0: no gate.
  int gate_steps = 0;
  int64_t gate_min_running = 0;
  // Decoding sequences that step together advance implicitly (one counter per rank; completions
  // and KV-block crossings from a heap and per-phase counts), so an iteration costs O(changes),
  // not O(running sequences). Same results as the explicit per-sequence path, which serves MTP
  // and token budgets below the batch limit (and tests, when false).
  bool implicit_decode = true;
  // TensorRT-LLM's attention-DP balancing (attention_dp_config.enable_balance): new prefills wait
  // until every attention rank has one (at most `adp_timeout_iters` iterations, and never while
  // a rank has nothing to decode), then `adp_batching_wait_iters` more, so that they batch
  // together instead of stalling the other ranks one at a time.
  bool adp_balance = false;
  int64_t adp_batching_wait_iters = 10;
  int64_t adp_timeout_iters = 50;
  // Tokens per streamed response (TensorRT-LLM's stream_interval; vLLM streams every token: 1).
  // Each response costs the serving front host time (ExecutionTimeModel::ResponseSeconds) in a
  // queue beside the GPU loop, which delays what the client sees. 0: the runtime's
  // (ExecutionTimeModel::StreamInterval, the stack's); 0 there too: responses are not modelled.
  // Offline runs are not streamed.
  int64_t stream_interval = 0;
  // Batch sizes the engine captured CUDA graphs for, ascending (TensorRT-LLM's
  // cuda_graph_config.batch_sizes with enable_padding): decode-only iterations within them are
  // padded and replayed, others run eagerly (models::PadToCudaGraph). Empty: the runtime's
  // (CudaGraphSizes).
  std::vector<int64_t> cuda_graph_batch_sizes;
  // Requests the serving front keeps in flight on one instance (MLPerf's TensorRT-LLM harness's
  // max_concurrency, per endpoint); the client holds the rest back until one of those completes,
  // their latencies counting from issue. 0: no limit beyond the engine's batch.
  int64_t max_concurrency = 0;
  // With a predicted order: the predictor's error, log-normal around the true output length (a
  // prediction is output x exp(sigma z), z a standard normal fixed per request id and seed; 0: an
  // exact oracle). The default (a factor of e either way for one request in three) is an
  // assumption, not a measured predictor.
  QueueOrder queue_order = QueueOrder::kFifo;
  double prediction_sigma = 1.0;
  // Break every iteration's time down by where it goes (EngineCounters::cost). Such a run steps
  // each decode iteration on its own (no fast_forward) and prices each in full: slower, for a
  // breakdown, not a search.
  bool cost_breakdown = false;

  Status Validate() const;
  // Sequences an instance's rank may run at once with `stages` pipeline stages: a microbatch of up
  // to max_batch on each (TensorRT-LLM's max_batch_size * pp_size: the C++ executor's capacity
  // scheduler and the PyTorch flow's sequence slots).
  int64_t MaxRunning(int stages) const { return max_batch * stages; }
  // The share of the host's per-iteration work a step pays: 1 / scheduler_steps on a step of a
  // multi-step run (one that only decodes), else all of it.
  double HostShare(bool decodes_only) const {
    return scheduler_steps > 1 && decodes_only ? 1.0 / scheduler_steps : 1.0;
  }
  // P(one decode step accepts a drafts), a = 0..mtp_depth: `acceptance_dist`, or each draft
  // accepted with probability `acceptance` until the first rejection.
  std::vector<double> AcceptancePmf() const;
  // The tokens a sequence's decode step gives on average: 1 + the drafts it accepts.
  double MeanStepTokens() const;
  bool operator==(const EngineConfig&) const = default;
};

// The batch sizes an engine of `config` on `time` replays CUDA graphs for: the deployment's own,
// else the runtime's below its batch limit, every kCudaGraphStep past the runtime's largest, and
// the limit itself (as MLPerf's TensorRT-LLM harnesses capture them: v5.1's 128 to 512 in steps
// of 128, v6.0's 8xB300 and GB300 ones 640, 768, 896 and 1,024 past 512).
inline constexpr int64_t kCudaGraphStep = 128;
std::vector<int64_t> CudaGraphSizes(const EngineConfig& config,
                                    const models::ExecutionTimeModel& time);

// The KV link of disaggregated serving (pools and their layouts live in SimulationSpec).
struct DisaggConfig {
  double kv_link_bytes_per_s = 0;  // per GPU (each sends its share); transfers into one decode
                                   // instance queue one after another
  double kv_link_latency_s = 20e-6;
};

struct ScenarioConfig {
  Scenario scenario = Scenario::kOffline;
  double qps = 0;               // Server / Interactive
  int64_t samples = 0;          // 0 = dataset size (Offline) or what min_duration needs
  double min_duration_s = 600;  // MLPerf minimum run length
  int clients = 0;              // closed loop
  double think_time_s = 0;      // closed loop pause between a reply and the next request
  std::optional<double> ttft_limit_ms, tpot_limit_ms;  // override the benchmark's limits
  uint64_t seed = 1;
  // > 0: end the run as soon as this many requests have broken the TTFT or the TPOT limit, when
  // the p99 can no longer be met (a QPS search needs no more than that).
  int64_t stop_after_violations = 0;
  // With stop_after_violations: end it sooner, once the requests over a limit are more than a p99
  // within it leaves to chance among the requests issued so far (P99ClearlyBroken in sim/mlperf.h).
  bool stop_when_clearly_broken = false;

  // Every number finite and in range (NaN breaks every rule); the message names the flag.
  Status Validate() const;
};

}  // namespace fathom::sim
