#include "models/operator_time_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "base/check.h"

namespace fathom::models {

OperatorTimeModel::OperatorTimeModel(const ModelArch& m, const ParallelLayout& layout,
                                     const Precision& precision, Fusions fusions)
    : builder_(m, layout, precision, fusions) {}

bool NoMoreWork(const BatchShape& a, const BatchShape& b) {
  return a.tokens <= b.tokens && a.sequences <= b.sequences &&
         a.sampled_tokens <= b.sampled_tokens && a.prefill_tokens <= b.prefill_tokens &&
         a.prefill_pairs <= b.prefill_pairs && a.prefill_pairs_window <= b.prefill_pairs_window &&
         a.prefill_cached <= b.prefill_cached &&
         a.prefill_cached_window <= b.prefill_cached_window && a.decode_tokens <= b.decode_tokens &&
         a.decode_sequences <= b.decode_sequences && a.decode_pairs <= b.decode_pairs &&
         a.decode_pairs_window <= b.decode_pairs_window && a.decode_kv <= b.decode_kv &&
         a.decode_kv_window <= b.decode_kv_window;
}

namespace {

// What an iteration's attention ranks share: the tokens their MoE layers route, the most
// sequences on one rank (the host's work per sequence), whether it replays a CUDA graph and its
// share of the host's per-iteration work, and whether that work overlaps the GPU.
struct Group {
  int64_t tokens = 0, sequences = 0;
  bool cuda_graph = false, host_ahead = false;
  double host_share = 1;
};
Group GroupOf(std::span<const BatchShape> ranks) {
  Group g;
  g.cuda_graph = !ranks.empty() && ranks.front().cuda_graph;
  g.host_ahead = !ranks.empty() && ranks.front().host_ahead;
  g.host_share = !ranks.empty() ? ranks.front().host_share : 1.0;
  for (const auto& r : ranks) {
    g.tokens += r.tokens;
    g.sequences = std::max(g.sequences, r.sequences);
  }
  return g;
}

}  // namespace

// An iteration whose GPU part (kernels and the launches it waits for) takes `gpu`, with its share
// of the host's per-iteration work before it, or beside it when the host prepared it ahead.
double OperatorTimeModel::WithHost(double gpu, int stage, int64_t sequences, double host_share,
                                   bool host_ahead) const {
  const double host = HostSeconds(stage, sequences) * host_share;
  return host_ahead ? std::max(gpu, host) : gpu + host;
}

SimTime OperatorTimeModel::StageTime(std::span<const BatchShape> ranks, int stage) const {
  const Group group = GroupOf(ranks);
  if (group.tokens == 0) return SimTime(0);
  double slowest = 0.0;
  // Each rank is compared first with the one with the most tokens (then KV read), which most
  // often has at least its work in every respect: most ranks take one comparison, not one a rank.
  size_t heaviest = 0;
  for (size_t j = 1; monotone_ && j < ranks.size(); ++j) {
    const BatchShape& h = ranks[heaviest];
    if (std::tie(ranks[j].tokens, ranks[j].decode_kv) > std::tie(h.tokens, h.decode_kv))
      heaviest = j;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const BatchShape& r = ranks[i];
    // A rank with no more work than another in any respect cannot be the slowest: operator
    // times are monotone in every shape field (equal shapes: the first one counts).
    if (monotone_) {
      auto dominates = [&](size_t j) {
        return j != i && NoMoreWork(r, ranks[j]) && (j < i || !NoMoreWork(ranks[j], r));
      };
      bool dominated = dominates(heaviest);
      for (size_t j = 0; j < ranks.size() && !dominated; ++j) dominated = dominates(j);
      if (dominated) continue;
    }
    slowest = std::max(slowest, RankSeconds(r, stage));
  }
  // Every rank's GPU runs its share of the routed experts for the whole group's tokens.
  const double experts = Cached(expert_seconds_, group.tokens, stage, true);
  const double gpu = std::max(slowest + experts, AheadLaunchSeconds(stage, group.cuda_graph)) +
                     EagerLaunchSeconds(stage, group.cuda_graph);
  return FromSeconds(WithHost(gpu, stage, group.sequences, group.host_share, group.host_ahead));
}

StageCost OperatorTimeModel::StageCostOf(std::span<const BatchShape> ranks, int stage) const {
  StageCost c;
  const Group group = GroupOf(ranks);
  if (group.tokens == 0) return c;
  // Every rank priced in full (no cache, no dominance), its operators added at 1 / ranks.
  double slowest = 0.0, sum = 0.0;
  const double share = 1.0 / static_cast<double>(ranks.size());
  for (const BatchShape& r : ranks) {
    builder_.Build(r, MoeInput{0}, stage, &scratch_, OpScope::kWithoutExperts);
    const double t = AddPriced(&c, share);
    slowest = std::max(slowest, t);
    sum += t;
  }
  c.imbalance = slowest - sum * share;
  builder_.BuildExperts(group.tokens, stage, &scratch_);
  const double gpu = slowest + AddPriced(&c, 1.0);
  const double launched = std::max(gpu, AheadLaunchSeconds(stage, group.cuda_graph)) +
                          EagerLaunchSeconds(stage, group.cuda_graph);
  c.host = WithHost(launched, stage, group.sequences, group.host_share, group.host_ahead) - gpu;
  return c;
}

double OperatorTimeModel::AddPriced(StageCost* c, double scale) const {
  double total = 0.0;
  for (const auto& op : scratch_) {
    const double seconds = OpSeconds(op) * static_cast<double>(op.count);
    total += seconds;
    const double t = seconds * scale;
    switch (op.kind) {
      case OpKind::kGemm:
        c->gemm += t;
        break;
      case OpKind::kGroupedGemm:
        c->grouped_gemm += t;
        break;
      case OpKind::kAttention:
        c->attention += t;
        break;
      case OpKind::kElementwise:
        c->elementwise += t;
        break;
      case OpKind::kCommunication:
        c->communication += t;
        break;
    }
  }
  return total;
}

int64_t OperatorTimeModel::Launches(int stage) const {
  BatchShape one;
  one.AddDecodeSteps(1, 0.0, 1.0);
  builder_.Build(one, MoeInput{1}, stage, &scratch_);
  int64_t n = 0;
  for (const auto& op : scratch_) n += op.count;
  return n;
}

double OperatorTimeModel::Priced() const {
  double t = 0.0;
  for (const auto& op : scratch_) t += OpSeconds(op) * static_cast<double>(op.count);
  return t;
}

double OperatorTimeModel::RankSeconds(const BatchShape& r, int stage) const {
  if (r.prefill_tokens > 0 || r.sampled_tokens != r.tokens) {
    // Priced() over Build's list, its runs that depend on the token count alone taken from the
    // cache: the same additions in the same order.
    const double* cached = HeadAndBody(r.tokens, stage);
    double t = cached[0];
    builder_.BuildRun(OperatorBuilder::Run::kAttention, r, MoeInput{0}, stage, &scratch_);
    for (const auto& op : scratch_) t += OpSeconds(op) * static_cast<double>(op.count);
    for (size_t i = 1; i <= body_ops_[stage]; ++i) t += cached[i];
    builder_.BuildRun(OperatorBuilder::Run::kTail, r, MoeInput{0}, stage, &scratch_);
    for (const auto& op : scratch_) t += OpSeconds(op) * static_cast<double>(op.count);
    return t;
  }
  // Decode only: every operator but attention depends on the token count alone.
  const double others = Cached(decode_rank_seconds_, r.tokens, stage, false);
  builder_.BuildAttention(r, stage, &scratch_);
  return others + Priced();
}

const double* OperatorTimeModel::HeadAndBody(int64_t tokens, int stage) const {
  if (head_and_body_.empty()) {
    head_and_body_.resize(num_stages());
    body_ops_.resize(num_stages());
    for (int st = 0; st < num_stages(); ++st) {
      BatchShape one;
      one.tokens = 1;
      builder_.BuildRun(OperatorBuilder::Run::kBody, one, MoeInput{0}, st, &scratch_,
                        OpScope::kWithoutExperts);
      body_ops_[st] = scratch_.size();
    }
  }
  const size_t stride = body_ops_[stage] + 1;
  std::vector<double>& by_tokens = head_and_body_[stage];
  const size_t at = static_cast<size_t>(tokens) * stride;
  if (at >= by_tokens.size())
    by_tokens.resize(at + stride, std::numeric_limits<double>::quiet_NaN());
  double* cached = &by_tokens[at];
  if (!std::isnan(cached[0])) return cached;
  BatchShape shape;
  shape.tokens = tokens;
  builder_.BuildRun(OperatorBuilder::Run::kHead, shape, MoeInput{0}, stage, &scratch_);
  double head = 0.0;
  for (const auto& op : scratch_) head += OpSeconds(op) * static_cast<double>(op.count);
  builder_.BuildRun(OperatorBuilder::Run::kBody, shape, MoeInput{0}, stage, &scratch_,
                    OpScope::kWithoutExperts);
  FATHOM_CHECK(scratch_.size() == body_ops_[stage]);
  for (size_t i = 0; i < scratch_.size(); ++i)
    cached[i + 1] = OpSeconds(scratch_[i]) * static_cast<double>(scratch_[i].count);
  cached[0] = head;
  return cached;
}

double OperatorTimeModel::Cached(std::vector<std::vector<double>>& cache, int64_t count, int stage,
                                 bool experts) const {
  if (cache.empty()) cache.resize(num_stages());
  std::vector<double>& by_count = cache[stage];
  if (static_cast<size_t>(count) >= by_count.size()) by_count.resize(count + 1, -1.0);
  double& t = by_count[count];
  if (t >= 0) return t;
  if (experts) {
    builder_.BuildExperts(count, stage, &scratch_);
    t = Priced();
  } else {
    BatchShape shape;
    shape.AddDecodeSteps(count, 0.0, static_cast<double>(count));
    builder_.Build(shape, MoeInput{0}, stage, &scratch_, OpScope::kWithoutExperts);
    t = 0.0;
    for (const auto& op : scratch_) {
      if (op.kind != OpKind::kAttention) t += OpSeconds(op) * static_cast<double>(op.count);
    }
  }
  return t;
}

double CollectiveSeconds(const Operator& op, const Hardware& hw, double link_efficiency,
                         double alpha_s, double hop_s) {
  const double link = (op.span <= hw.scale_up_domain_gpus ? hw.scale_up_bytes_per_s / 2.0
                                                          : hw.scale_out_bytes_per_s) *
                      link_efficiency;
  const double n = op.ranks;
  double factor = 1.0;
  if (op.comm == CommKind::kAllReduce) factor = 2.0 * (n - 1) / n;
  if (op.comm == CommKind::kAllGather || op.comm == CommKind::kReduceScatter)
    factor = n - 1;  // bytes: one shard
  // A ring all-reduce takes 2 (n - 1) steps, all-gather, reduce-scatter and all-to-all n - 1, a
  // send one: each adds a hop's latency (the alpha-beta model of Thakur, Rabenseifner and Gropp,
  // "Optimization of collective communication operations in MPICH", 2005).
  double steps = 1;
  if (op.comm == CommKind::kAllReduce) steps = 2 * (n - 1);
  if (op.comm == CommKind::kAllGather || op.comm == CommKind::kReduceScatter ||
      op.comm == CommKind::kAllToAll)
    steps = n - 1;
  return alpha_s + steps * hop_s + op.comm_bytes * factor / link;
}

}  // namespace fathom::models
