#include "sim/config.h"

#include <cmath>

#include "base/format.h"

namespace fathom::sim {
namespace {

template <typename E>
Result<E> ParseEnum(std::string_view s, const char* flag,
                    std::initializer_list<std::pair<const char*, E>> table) {
  std::string names;
  for (const auto& [name, value] : table) {
    if (s == name) return value;
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return Status::InvalidArgument(std::string(flag) + " = \"" + std::string(s) +
                                 "\": unknown (one of " + names + ")");
}

}  // namespace

Result<SchedulerKind> ParseScheduler(std::string_view s) {
  return ParseEnum<SchedulerKind>(s, "scheduler",
                                  {{"static", SchedulerKind::kStatic},
                                   {"prefill-first", SchedulerKind::kPrefillFirst},
                                   {"chunked", SchedulerKind::kChunked},
                                   {"mixed", SchedulerKind::kMixed},
                                   {"decode-first", SchedulerKind::kDecodeFirst}});
}

Result<RouterKind> ParseRouter(std::string_view s) {
  return ParseEnum<RouterKind>(s, "router",
                               {{"round-robin", RouterKind::kRoundRobin},
                                {"least-outstanding", RouterKind::kLeastOutstanding},
                                {"least-kv", RouterKind::kLeastKv},
                                {"prefix-aware", RouterKind::kPrefixAware}});
}

Result<QueueOrder> ParseQueueOrder(std::string_view s) {
  return ParseEnum<QueueOrder>(s, "queue_order",
                               {{"fifo", QueueOrder::kFifo},
                                {"longest-first", QueueOrder::kLongestFirst},
                                {"shortest-first", QueueOrder::kShortestFirst},
                                {"longest-input-first", QueueOrder::kLongestInputFirst},
                                {"shortest-input-first", QueueOrder::kShortestInputFirst}});
}

bool TakesLongestFirst(QueueOrder o) {
  return o == QueueOrder::kLongestFirst || o == QueueOrder::kLongestInputFirst;
}

bool OrdersByPredictedOutput(QueueOrder o) {
  return o == QueueOrder::kLongestFirst || o == QueueOrder::kShortestFirst;
}

std::string_view Name(QueueOrder o) {
  switch (o) {
    case QueueOrder::kFifo:
      return "fifo";
    case QueueOrder::kLongestFirst:
      return "longest-first";
    case QueueOrder::kShortestFirst:
      return "shortest-first";
    case QueueOrder::kLongestInputFirst:
      return "longest-input-first";
    case QueueOrder::kShortestInputFirst:
      return "shortest-input-first";
  }
  return "";
}

Result<Scenario> ParseScenario(std::string_view s) {
  return ParseEnum<Scenario>(s, "scenario",
                             {{"offline", Scenario::kOffline},
                              {"server", Scenario::kServer},
                              {"interactive", Scenario::kInteractive},
                              {"replay", Scenario::kReplay},
                              {"closed-loop", Scenario::kClosedLoop}});
}

std::string_view Name(SchedulerKind k) {
  switch (k) {
    case SchedulerKind::kStatic:
      return "static";
    case SchedulerKind::kPrefillFirst:
      return "prefill-first";
    case SchedulerKind::kChunked:
      return "chunked";
    case SchedulerKind::kMixed:
      return "mixed";
    case SchedulerKind::kDecodeFirst:
      return "decode-first";
  }
  return "";
}

std::string_view Name(RouterKind k) {
  switch (k) {
    case RouterKind::kRoundRobin:
      return "round-robin";
    case RouterKind::kLeastOutstanding:
      return "least-outstanding";
    case RouterKind::kLeastKv:
      return "least-kv";
    case RouterKind::kPrefixAware:
      return "prefix-aware";
  }
  return "";
}

std::string_view Name(Scenario s) {
  switch (s) {
    case Scenario::kOffline:
      return "offline";
    case Scenario::kServer:
      return "server";
    case Scenario::kInteractive:
      return "interactive";
    case Scenario::kReplay:
      return "replay";
    case Scenario::kClosedLoop:
      return "closed-loop";
  }
  return "";
}

Status ScenarioConfig::Validate() const {
  auto bad = [](const char* flag, double v, const char* rule) {
    return Status::InvalidArgument(std::string(flag) + " = " + StrFormat("%g", v) + ": " + rule);
  };
  if (!(qps >= 0 && std::isfinite(qps))) return bad("--qps", qps, "must be >= 0 and finite");
  if (samples < 0) return bad("--samples", static_cast<double>(samples), "must be >= 0");
  if (!(min_duration_s >= 0 && std::isfinite(min_duration_s))) {
    return bad("--min-duration", min_duration_s, "must be >= 0 and finite");
  }
  if (clients < 0) return bad("--clients", clients, "must be >= 0");
  if (!(think_time_s >= 0 && think_time_s <= 1e9))
    return bad("--think-time", think_time_s, "must be in [0, 1e9] s");
  for (const auto& [flag, limit] :
       {std::pair{"--ttft-ms", ttft_limit_ms}, {"--tpot-ms", tpot_limit_ms}}) {
    if (limit && !(*limit > 0 && std::isfinite(*limit)))
      return bad(flag, *limit, "must be > 0 and finite");
  }
  return Status::Ok();
}

std::vector<double> EngineConfig::AcceptancePmf() const {
  std::vector<double> pmf(mtp_depth + 1);
  for (int a = 0; a <= mtp_depth; ++a) {
    pmf[a] = !acceptance_dist.empty() ? acceptance_dist[a]
             : a < mtp_depth          ? std::pow(acceptance, a) * (1 - acceptance)
                                      : std::pow(acceptance, a);
  }
  return pmf;
}

double EngineConfig::MeanStepTokens() const {
  const std::vector<double> pmf = AcceptancePmf();
  double mean = 0;
  for (size_t a = 0; a < pmf.size(); ++a) mean += pmf[a] * static_cast<double>(1 + a);
  return mean;
}

Status EngineConfig::Validate() const {
  auto bad = [](const char* field, double v, const std::string& rule) {
    return Status::InvalidArgument(std::string(field) + " = " + StrFormat("%g", v) + ": " + rule);
  };
  if (max_batch < 1) return bad("max_batch", max_batch, "must be >= 1");
  if (max_num_tokens < 1) return bad("max_num_tokens", max_num_tokens, "must be >= 1");
  if (!(prediction_sigma >= 0 && prediction_sigma <= 10))
    return bad("prediction_sigma", prediction_sigma, "must be in [0, 10]");
  if (chunk_size < 0)
    return bad("chunk_size", chunk_size, "must be >= 0 (0: the whole token budget)");
  if (block_tokens < 1) return bad("block_tokens", block_tokens, "must be >= 1");
  if (prefix_caching && 512 % block_tokens != 0) {
    return bad("block_tokens", block_tokens,
               "must divide 512 (the prefix-block size) with prefix caching");
  }
  if (reserve_fraction < 0 || reserve_fraction >= 1)
    return bad("reserve", reserve_fraction, "must be in [0, 1)");
  if (kv_free_fraction < 0 || kv_free_fraction > 1)
    return bad("kv_free_fraction", kv_free_fraction, "must be in [0, 1] (0: use reserve)");
  if (swap_bytes_per_s <= 0) return bad("swap_bytes_per_s", swap_bytes_per_s, "must be > 0");
  if (mtp_depth < 0 || mtp_depth > 16) return bad("mtp_depth", mtp_depth, "must be in [0, 16]");
  if (acceptance < 0 || acceptance > 1) return bad("acceptance", acceptance, "must be in [0, 1]");
  if (!acceptance_dist.empty()) {
    if (static_cast<int>(acceptance_dist.size()) != mtp_depth + 1) {
      return bad("acceptance_dist entries", static_cast<double>(acceptance_dist.size()),
                 "must be mtp_depth + 1 (probabilities of accepting 0..k drafts)");
    }
    double sum = 0;
    for (double p : acceptance_dist) {
      if (p < 0) return bad("acceptance_dist", p, "probabilities must be >= 0");
      sum += p;
    }
    if (std::abs(sum - 1) > 1e-6) return bad("acceptance_dist sum", sum, "must be 1");
  }
  if (draft_cost < 0) return bad("draft_cost", draft_cost, "must be >= 0");
  if (scheduler_steps < 1 || scheduler_steps > 64)
    return bad("scheduler_steps", static_cast<double>(scheduler_steps), "must be in [1, 64]");
  if (gate_steps < 0 || gate_steps > 1000)
    return bad("gate_steps", static_cast<double>(gate_steps), "must be in [0, 1000]");
  if (gate_min_running < 0)
    return bad("gate_min_running", static_cast<double>(gate_min_running), "must be >= 0");
  if (fast_forward < 1)
    return bad("fast_forward", static_cast<double>(fast_forward), "must be >= 1");
  if (adp_batching_wait_iters < 0)
    return bad("adp_batching_wait_iters", adp_batching_wait_iters, "must be >= 0");
  if (adp_timeout_iters < 1) return bad("adp_timeout_iters", adp_timeout_iters, "must be >= 1");
  if (stream_interval < 0) return bad("stream_interval", stream_interval, "must be >= 0");
  if (max_concurrency < 0) return bad("max_concurrency", max_concurrency, "must be >= 0");
  for (size_t i = 0; i < cuda_graph_batch_sizes.size(); ++i) {
    const int64_t b = cuda_graph_batch_sizes[i];
    if (b < 1 || b > (int64_t{1} << 20))
      return bad("cuda_graph_batch_sizes", static_cast<double>(b), "must be in [1, 1048576]");
    if (i > 0 && b <= cuda_graph_batch_sizes[i - 1])
      return bad("cuda_graph_batch_sizes", static_cast<double>(b), "must be ascending");
  }
  return Status::Ok();
}

std::vector<int64_t> CudaGraphSizes(const EngineConfig& config,
                                    const models::ExecutionTimeModel& time) {
  if (!config.cuda_graph_batch_sizes.empty()) return config.cuda_graph_batch_sizes;
  std::vector<int64_t> sizes = time.CudaGraphBatchSizes();
  if (sizes.empty()) return sizes;
  const int64_t largest = sizes.back();
  while (!sizes.empty() && sizes.back() >= config.max_batch) sizes.pop_back();
  for (int64_t b = largest + kCudaGraphStep; b < config.max_batch; b += kCudaGraphStep)
    sizes.push_back(b);
  sizes.push_back(config.max_batch);
  return sizes;
}

}  // namespace fathom::sim
