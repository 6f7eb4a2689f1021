// Engine: construction, what the simulator asks of it, and the draws of speculative decoding.
// Its other parts: engine_kv.cc, engine_cohort.cc, engine_batch.cc and engine_iteration.cc.
#include "sim/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <utility>

namespace fathom::sim {
namespace {

// The CDFs of the drafts accepted over k = 1..steps steps (the k-fold convolutions of `pmf`), so a
// run of k steps draws its total once.
std::vector<std::vector<double>> SumCdfs(const std::vector<double>& pmf, int64_t steps) {
  std::vector<std::vector<double>> cdfs;
  std::vector<double> sum = {1.0};  // zero steps: no drafts
  for (int64_t k = 1; k <= steps; ++k) {
    std::vector<double> next(sum.size() + pmf.size() - 1, 0.0);
    for (size_t i = 0; i < sum.size(); ++i) {
      for (size_t a = 0; a < pmf.size(); ++a) next[i + a] += sum[i] * pmf[a];
    }
    sum = std::move(next);
    std::vector<double> cdf(sum.size());
    double total = 0;
    for (size_t i = 0; i < sum.size(); ++i) cdf[i] = total += sum[i];
    cdf.back() = 1;
    cdfs.push_back(std::move(cdf));
  }
  return cdfs;
}

// A guide table (Chen and Asau 1974) for drawing from `cdf` by inversion: entry g is the draw for
// u = g / size, so a draw in bucket g starts there and steps only over the few values between.
std::vector<int32_t> GuideTable(const std::vector<double>& cdf) {
  std::vector<int32_t> guide(cdf.size());
  for (size_t g = 0; g < guide.size(); ++g) {
    const double u = static_cast<double>(g) / static_cast<double>(guide.size());
    guide[g] = static_cast<int32_t>(std::upper_bound(cdf.begin(), cdf.end() - 1, u) - cdf.begin());
  }
  return guide;
}

}  // namespace

Engine::Engine(int id, EngineRole role, const PoolSpec& pool, const EngineConfig& config,
               std::vector<Sequence>* slots, EngineListener* listener, Rng* rng)
    : id_(id),
      role_(role),
      pool_(pool),
      config_(config),
      slots_(slots),
      listener_(listener),
      rng_(rng),
      ranks_(pool.ranks),
      outstanding_(pool.ranks, 0),
      shapes_(pool.ranks) {
  for (Rank& r : ranks_) {
    r.kv = std::make_unique<KvCacheManager>(pool.kv_blocks_per_rank, config.block_tokens,
                                            config.prefix_caching);
  }
  stage_free_at_.assign(pool.time->num_stages(), SimTime(0));
  // MTP cohorts keep no sliding-window sums: such a model's MTP decoders step one by one.
  implicit_decode_ = config.implicit_decode && (config.mtp_depth == 0 || pool.sliding_window == 0);
  if (config.mtp_depth > 0) {
    // A rack's probes build dozens of engines of one acceptance: the tables once a thread.
    using Key = std::pair<std::vector<double>, int64_t>;
    static thread_local std::map<Key, std::shared_ptr<const AcceptTables>> made;
    Key key{config.AcceptancePmf(), std::max<int64_t>(1, config.fast_forward)};
    std::shared_ptr<const AcceptTables>& tables = made[key];
    if (!tables) {
      auto t = std::make_shared<AcceptTables>();
      t->cdfs = SumCdfs(key.first, key.second);
      for (const std::vector<double>& cdf : t->cdfs) t->guides.push_back(GuideTable(cdf));
      for (size_t a = 0; a + 1 < t->cdfs[0].size(); ++a)
        t->step_thresholds.push_back(
            static_cast<uint64_t>(std::ceil(std::ldexp(t->cdfs[0][a], 53))));
      tables = std::move(t);
    }
    accept_ = tables;
  }
  mean_step_tokens_ = MeanStepTokens();
  draw_window_ = std::clamp<int64_t>(2 * config.fast_forward, 16, 512);
  graph_sizes_ = CudaGraphSizes(config_, *pool.time);
}

double Engine::KvUtilization(int rank) const {
  const KvCacheManager& kv = *ranks_[rank].kv;
  return kv.capacity_blocks() > 0 ? static_cast<double>(kv.used_blocks()) / kv.capacity_blocks()
                                  : 1.0;
}

int64_t Engine::PrefixHits(int rank, const std::vector<uint64_t>& prefix) const {
  return ranks_[rank].kv->Peek(prefix);
}

SimTime Engine::EarliestFinish(SimTime now, SimTime next_work) const {
  if (!in_flight_.empty()) {
    SimTime first = SimTime::max();
    for (const Batch& b : in_flight_) first = std::min(first, b.done);
    return first;
  }
  return HasIdleWork() ? now : next_work;
}

LimitSlack Engine::Slack() const {
  LimitSlack s{peak_running_, INT64_MAX, 0};
  for (const Rank& r : ranks_) s.kv_free_slack = std::min(s.kv_free_slack, r.kv->free_slack());
  return s;
}

int64_t Engine::prefix_lookups() const {
  int64_t n = 0;
  for (const Rank& r : ranks_) n += r.kv->lookups();
  return n;
}

int64_t Engine::prefix_hits() const {
  int64_t n = 0;
  for (const Rank& r : ranks_) n += r.kv->hits();
  return n;
}

void Engine::Enqueue(int rank, int64_t slot) {
  Sequence& s = (*slots_)[slot];
  s.instance = id_;
  s.rank = rank;
  ++outstanding_[rank];
  std::deque<int64_t>& waiting = ranks_[rank].waiting;
  if (config_.queue_order == QueueOrder::kFifo) {
    waiting.push_back(slot);
    return;
  }
  // Behind every request the order puts first, ties in arrival order, and behind the preempted
  // ones at the front. From the back: an Offline query arrives sorted, so this takes one step.
  const bool longest = TakesLongestFirst(config_.queue_order);
  const bool by_output = OrdersByPredictedOutput(config_.queue_order);
  auto key = [&](const Sequence& x) {
    return by_output ? x.predicted_output : static_cast<double>(x.input);
  };
  auto it = waiting.end();
  while (it != waiting.begin()) {
    const Sequence& p = (*slots_)[*std::prev(it)];
    const bool before = longest ? key(s) > key(p) : key(s) < key(p);
    if (p.preemptions > 0 || !before) break;
    --it;
  }
  waiting.insert(it, slot);
}

int64_t Engine::DecodeStepTokens(const Sequence&) const { return 1 + config_.mtp_depth; }

double Engine::MeanStepTokens() const {
  double mean = 1;
  const std::vector<double> pmf = config_.AcceptancePmf();
  for (size_t a = 1; a < pmf.size(); ++a) mean += static_cast<double>(a) * pmf[a];
  return mean;
}

// One uniform draw against the CDF of `steps` steps' total: the first total whose CDF exceeds it
// (the last if none). A short CDF (one step's) counts the entries at or below the draw, without
// branches the draw would make unpredictable; a longer one looks from its guide-table bucket.
int64_t Engine::AcceptedDrafts(int64_t steps) {
  if (config_.mtp_depth == 0) return 0;
  if (steps == 1) return DrawStep();
  const std::vector<double>& cdf = accept_->cdfs[steps - 1];
  const double u = rng_->Uniform();
  const auto last = static_cast<int64_t>(cdf.size()) - 1;
  constexpr int64_t kCounted = 8;
  if (last <= kCounted) {
    int64_t a = 0;
    for (int64_t i = 0; i < last; ++i) a += cdf[i] <= u ? 1 : 0;
    return a;
  }
  const std::vector<int32_t>& guide = accept_->guides[steps - 1];
  const size_t bucket = std::min(guide.size() - 1, static_cast<size_t>(u * guide.size()));
  int64_t a = guide[bucket];
  while (a < last && cdf[a] <= u) ++a;
  while (a > 0 && cdf[a - 1] > u) --a;  // u * size rounded up into the next bucket
  return a;
}

}  // namespace fathom::sim
