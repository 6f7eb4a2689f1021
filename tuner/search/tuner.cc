#include "tuner/search/tuner.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <span>

#include "base/cancel.h"
#include "base/format.h"
#include "base/parallel.h"
#include "sim/mlperf.h"
#include "sim/response_path.h"
#include "sim/simulator.h"
#include "traces/benchmark.h"
#include "tuner/search/results.h"

namespace fathom::tuner {

double PredictedTokensPerS(int64_t passes1, double s1, int64_t passes2, double s2,
                           double tokens_per_pass, double target_s) {
  const double per_pass = (s2 - s1) / static_cast<double>(passes2 - passes1);
  if (!(per_pass > 0)) return 0;
  const double fixed = s2 - per_pass * static_cast<double>(passes2);
  const double passes =
      std::max(static_cast<double>(passes2 + 1), std::ceil((target_s - fixed) / per_pass));
  return passes * tokens_per_pass / (fixed + per_pass * passes);
}

// With n = passes2 + k whole passes (k = 1, 2, ...), the line's prediction holds for durations
// from b_k = (target_s d + k s1) / (d + k), d = passes2 - passes1, up to b_(k-1) (b_0 = target_s),
// falling over them from its value at b_k, where the line's n passes last exactly target_s, so
// n tokens_per_pass / target_s; it equals `floor` at y_k. That value rises with k: the first k
// where it reaches the floor ends the screen at min(y_k, b_(k-1)); the pieces before it (nearer
// the target) are below the floor throughout.
double ScreenedPastS(int64_t passes1, double s1, int64_t passes2, double tokens_per_pass,
                     double target_s, double floor) {
  if (!(tokens_per_pass > 0) || !(floor > 0)) return target_s;  // nothing predicted
  const double d = static_cast<double>(passes2 - passes1);
  auto reaches = [&](double k) {
    return (static_cast<double>(passes2) + k) * tokens_per_pass / target_s >= floor;
  };
  double k = std::max(1.0, std::ceil(floor * target_s / tokens_per_pass) - passes2);
  while (k > 1 && reaches(k - 1)) --k;  // the closed form's rounding, either way
  while (!reaches(k)) ++k;
  const double right = (target_s * d + (k - 1) * s1) / (d + k - 1);  // b_(k-1)
  const double n = static_cast<double>(passes2) + k;
  const double y = (n * tokens_per_pass / floor + k * s1 / d) / (1 + k / d);
  return std::min(y, right);
}

namespace {

// The p99 limits a server-type tune holds to: the options', else the MLPerf benchmark's.
struct HeldLimits {
  std::optional<double> ttft_ms, tpot_ms;
};
HeldLimits LimitsMs(const TuneOptions& o) {
  HeldLimits l{o.ttft_limit_ms, o.tpot_limit_ms};
  if (auto mlperf = sim::MlperfLimits(o.benchmark, o.space.scenario)) {
    if (!l.ttft_ms) l.ttft_ms = mlperf->ttft_ms;
    if (!l.tpot_ms) l.tpot_ms = mlperf->tpot_ms;
  }
  return l;
}

// What a tune's bounds need of its workload: request-averaged lengths, and the decode context an
// average generated token sees (sum over requests of output x (input + output / 2), divided by the
// output tokens).
struct WorkloadMeans {
  double input = 0, output = 1, decode_context = 1;
  int64_t longest_input = 0;
};
WorkloadMeans Means(const std::vector<traces::Request>& data) {
  double in = 0, out = 0, weighted = 0;
  int64_t longest = 0;
  for (const auto& r : data) {
    const double o = static_cast<double>(r.output_tokens);
    in += static_cast<double>(r.input_tokens);
    longest = std::max(longest, r.input_tokens);
    out += o;
    weighted += o * (static_cast<double>(r.input_tokens) + o / 2);
  }
  if (data.empty() || !(out > 0)) return {};
  const auto n = static_cast<double>(data.size());
  return {in / n, out / n, weighted / out, longest};
}

// What the TPOT bound (TpotQpsBound) needs of a tune whose probes hold both p99 limits. Each p99
// lets 1% of a probe's requests break its limit, so at least the requests left once the 2% with
// the most tokens after their first are set aside are sure to hold both: `kept_tokens` of those
// tokens per request issued, at a decode context of `kept_context`. A kept request decodes
// between its issue and its issue + the TTFT limit + the TPOT limit x its tokens, so in a probe
// whose arrivals span T seconds (at least the probe's duration, up to `most_qps`, where the
// sample cap starts to shorten it) all but a share late(X) of the kept tokens belong to requests
// done within T + X (Poisson arrivals: issue times spread evenly over T, whatever their length):
// the kept tokens are at most (T + X) / (T (1 - late(X))) times what T seconds of decoding at
// the bound's rate give. `window` is the least such factor over X.
struct TpotTerms {
  double limit_s = 0;
  double kept_tokens = 0, kept_context = 1;
  double window = 1;
  double most_qps = 0;
};
std::optional<TpotTerms> TpotTermsOf(const TuneOptions& o) {
  const HeldLimits l = LimitsMs(o);
  if (!l.tpot_ms || !l.ttft_ms || o.dataset.empty() || !(o.probe_duration_s > 0))
    return std::nullopt;
  std::vector<const traces::Request*> by_tokens;  // most output first
  for (const auto& r : o.dataset) by_tokens.push_back(&r);
  std::sort(by_tokens.begin(), by_tokens.end(),
            [](const auto* a, const auto* b) { return a->output_tokens > b->output_tokens; });
  const auto n = static_cast<double>(o.dataset.size());
  const auto aside = std::min(by_tokens.size(), 2 * static_cast<size_t>(n - std::floor(0.99 * n)));
  const std::span<const traces::Request* const> kept_requests(by_tokens.begin() + aside,
                                                              by_tokens.end());
  auto after_first = [](const traces::Request* r) {
    return static_cast<double>(std::max<int64_t>(0, r->output_tokens - 1));
  };
  std::vector<traces::Request> kept_copy;
  double kept = 0;
  for (const traces::Request* r : kept_requests) {
    kept += after_first(r);
    kept_copy.push_back(*r);
  }
  if (!(kept > 0)) return std::nullopt;
  TpotTerms t;
  t.limit_s = *l.tpot_ms * 1e-3;
  t.kept_tokens = kept / n;
  t.kept_context = Means(kept_copy).decode_context;
  // late(X) for X from the TTFT limit to that + the longest kept request's decode at the limit.
  const double span = o.probe_duration_s, ttft_s = *l.ttft_ms * 1e-3;
  const double longest = after_first(kept_requests.front());
  constexpr int kSteps = 32;
  t.window = std::numeric_limits<double>::infinity();
  for (int step = 0; step <= kSteps; ++step) {
    const double x = ttft_s + t.limit_s * longest * step / kSteps;
    double late = 0;
    for (const traces::Request* r : kept_requests) {  // only the longest can end past T + X
      const double m = after_first(r);
      if (ttft_s + t.limit_s * m <= x) break;
      late += m * std::min(1.0, (ttft_s + t.limit_s * m - x) / span);
    }
    if (late < kept) t.window = std::min(t.window, (span + x) / (span * (1 - late / kept)));
  }
  t.most_qps = static_cast<double>(o.probe_max_samples) / span;
  return t;
}

// The pool that generates the tokens (the decode pool when disaggregated) and its engine.
struct DecodeSide {
  const sim::PoolSpec& pool;
  const sim::EngineConfig& engine;
};
DecodeSide Decoding(const sim::SimulationSpec& spec) {
  if (spec.decode_pool) return {*spec.decode_pool, spec.decode_engine};
  return {spec.pool, spec.engine};
}

// `batch` decoding sequences per rank at the workload's mean decode context: tokens/s of the pool,
// and the seconds between a sequence's tokens. Every sequence advances once per round. With the
// batch split evenly into m microbatches, a round takes at least m times the slowest stage's time
// for one microbatch (each stage serves every microbatch) and at least the sum of the stages'
// times (a microbatch crosses every stage). The simulator forms as many microbatches as keep the
// stages busy, each of at most max_batch, so the round is the least of these over the m in
// 1..stages that fit the batch: with a large per-iteration cost on one stage, fewer and larger
// microbatches can be faster than one per stage.
//
// An aggregated engine also prefills every prompt: each token generated brings input / output
// prompt tokens, spread over the steps (step time is convex, so an even spread costs least). The
// share is priced as the decode-only step prices it (a captured graph where the batch has one)
// and as whole prompts of the mean input plus a piece of one, whose attention is no more than the
// prompts' own. A decode pool prefills nothing; with prefix caching, no prompt token is sure to be
// computed.
//
// kLeast prices the least a round of the batch can take: decode steps alone (a prompt's share
// only adds to a step), replayed from a graph (no launches) where the engine captured one that
// holds the batch, with no padding to its size.
struct DecodeRate {
  double tokens_per_s = 0;
  double round_s = 0;
};
enum class Pricing { kPromptsSpread, kPromptsOnOneRank, kLeast };

DecodeRate FullBatchRate(const sim::SimulationSpec& spec, const WorkloadMeans& w, int64_t batch,
                         Pricing pricing = Pricing::kPromptsSpread) {
  const auto [pool, engine] = Decoding(spec);
  const bool prefills = !spec.decode_pool && !engine.prefix_caching && pricing != Pricing::kLeast;
  const bool prefill_on_one_rank = pricing == Pricing::kPromptsOnOneRank;
  const auto prompt = static_cast<int64_t>(w.input);
  const int stages = pool.time->num_stages();
  double round = std::numeric_limits<double>::infinity();
  std::vector<models::BatchShape> ranks(pool.ranks);
  // The host's work as the engine pays it (Engine::ShapeBatch): beside the GPU's under async
  // scheduling, and a multi-step run's share of it (on its decode-only steps; on every step here,
  // the least it can be).
  const double host_share = engine.HostShare(/*decodes_only=*/true);
  const std::vector<int64_t> graphs = sim::CudaGraphSizes(engine, *pool.time);
  for (int m = 1; m <= stages; ++m) {
    if ((batch + m - 1) / m > engine.max_batch) continue;
    const int64_t micro = std::max<int64_t>(1, batch / m);
    for (auto& shape : ranks) {
      shape = models::BatchShape{};
      for (int64_t i = 0; i < micro; ++i) {
        shape.Add({1 + engine.mtp_depth, static_cast<int64_t>(w.decode_context), true, true},
                  pool.sliding_window);
      }
    }
    if (pricing != Pricing::kLeast) {
      models::PadToCudaGraph(ranks, graphs, 1 + engine.mtp_depth);
    } else {
      for (auto& shape : ranks) shape.cuda_graph = !graphs.empty() && micro <= graphs.back();
    }
    if (prefills && prompt > 0) {
      double prompts = static_cast<double>(micro * (1 + engine.mtp_depth)) / w.output;
      if (prefill_on_one_rank) prompts *= static_cast<double>(ranks.size());
      const auto piece = static_cast<int64_t>((prompts - std::floor(prompts)) * w.input);
      for (auto& shape : ranks) {
        for (int64_t i = 0; i < static_cast<int64_t>(prompts); ++i)
          shape.Add({prompt, 0, false, false}, pool.sliding_window);
        if (piece > 0) shape.Add({piece, 0, false, false}, pool.sliding_window);
        if (prefill_on_one_rank) break;
      }
    }
    for (auto& shape : ranks) {
      shape.host_share = host_share;
      shape.host_ahead = engine.async_scheduling;
    }
    double slowest = 0, crossing = 0;
    for (int s = 0; s < stages; ++s) {
      const double t = ToSeconds(pool.time->StageTime(ranks, s));
      slowest = std::max(slowest, t);
      crossing += t;
    }
    round = std::min(round, std::max(slowest * m, crossing));
  }
  round = std::max(round, 1e-9);
  const double tokens_per_round = static_cast<double>(batch * pool.ranks) * (1 + engine.mtp_depth);
  return {pool.instances * tokens_per_round / round, round};
}

// The largest batch per rank: max_batch on every pipeline stage, and what the KV cache holds at
// `mean_context`.
int64_t BatchCap(const sim::SimulationSpec& spec, double mean_context) {
  const auto [pool, engine] = Decoding(spec);
  const double kv_tokens = static_cast<double>(pool.kv_blocks_per_rank * engine.block_tokens);
  return std::max<int64_t>(1, std::min<int64_t>(engine.MaxRunning(pool.time->num_stages()),
                                                static_cast<int64_t>(kv_tokens / mean_context)));
}

// The largest batch in [lo, hi) whose round is within a limit, where hi's is `past` it and a
// round only grows with its batch (lo's is taken as within), by bisection.
template <typename Past>
int64_t LargestWithin(int64_t lo, int64_t hi, Past past) {
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (past(mid) ? hi : lo) = mid;
  }
  return lo;
}

// Upper bound on tokens/s. The workload fixes the work: its tokens, the contexts they attend to,
// and its prompts. A step's time is convex in its batch's sequences, contexts and prompt tokens, so
// the total is at least (tokens / full batch) steps of a full batch at the mean decode context with
// an even share of the prefill (Jensen), with the batch limited by max_batch and by the KV cache
// at that context, and split evenly over the pipeline's microbatches.
double ThroughputBound(const sim::SimulationSpec& spec, const WorkloadMeans& w) {
  return FullBatchRate(spec, w, BatchCap(spec, w.decode_context)).tokens_per_s;
}

// The rate the serving fronts can stream (sim::ResponsePath): each decode instance's front spends
// ResponseSeconds on a response every stream_interval tokens of a sequence's step, a step gives a
// sequence at most 1 + its MTP drafts tokens, and a request's tokens after its first pass through
// them. Above it the fronts' backlog, and every first token with it, grows without end. Infinite
// where nothing is streamed or a response costs nothing.
double FrontQpsBound(const sim::ResolvedDeployment& r, const WorkloadMeans& w) {
  const DecodeSide d = Decoding(r.spec);
  const sim::ResponsePath front(d.pool.time->ResponseSeconds(), d.pool.StreamInterval(d.engine));
  if (!front.enabled() || !(w.output > 1)) return std::numeric_limits<double>::infinity();
  return static_cast<double>(d.pool.instances) * (1.0 + d.engine.mtp_depth) *
         front.max_tokens_per_s() / (w.output - 1);
}

// The rate a disaggregated deployment's prefill pool can take requests at. Each rank's iteration
// holds at most max_num_tokens prompt tokens (or one whole prompt past them, where prompts are not
// chunked), and an iteration's time per token is least when it is full: its fixed costs spread
// widest. So no rank computes prompts faster than its full iteration does, priced as whole prompts
// of the mean input plus a piece of one (whose attention is no more than the prompts' own), or as
// the longest prompt alone. Infinite where the engine decodes too (ThroughputBound prices its
// prompts) or caches prefixes (no prompt token is sure to be computed).
double PrefillQpsBound(const sim::SimulationSpec& spec, const WorkloadMeans& w) {
  const sim::PoolSpec& pool = spec.pool;
  const sim::EngineConfig& engine = spec.engine;
  const auto prompt = static_cast<int64_t>(w.input);
  if (!spec.decode_pool || engine.prefix_caching || prompt < 1)
    return std::numeric_limits<double>::infinity();
  const int stages = pool.time->num_stages();
  // Prompt tokens per second of one rank whose every iteration holds `whole` prompts of `length`
  // tokens and a piece of `piece`.
  auto rate = [&](int64_t whole, int64_t length, int64_t piece) {
    std::vector<models::BatchShape> ranks(pool.ranks);
    for (auto& shape : ranks) {
      for (int64_t i = 0; i < whole; ++i) shape.Add({length, 0, false, false}, pool.sliding_window);
      if (piece > 0) shape.Add({piece, 0, false, false}, pool.sliding_window);
      shape.host_share = engine.HostShare(/*decodes_only=*/false);
      shape.host_ahead = engine.async_scheduling;
    }
    double slowest = 0;
    for (int s = 0; s < stages; ++s)
      slowest = std::max(slowest, ToSeconds(pool.time->StageTime(ranks, s)));
    return static_cast<double>(whole * length + piece) / std::max(slowest, 1e-12);
  };
  const int64_t budget = engine.max_num_tokens;
  const int64_t whole = std::min(engine.max_batch, budget / prompt);
  double per_rank = rate(whole, prompt, whole < engine.max_batch ? budget - whole * prompt : 0);
  if (engine.scheduler != sim::SchedulerKind::kChunked && w.longest_input > budget)
    per_rank = std::max(per_rank, rate(1, w.longest_input, 0));
  return static_cast<double>(pool.instances * pool.ranks) * per_rank / w.input;
}

// Upper bound on the rate at which a probe keeps both p99s within their limits (TpotTerms).
// The kept requests must each get their tokens after the first within the TPOT limit of one
// another on average, so they spend at most the limit x their tokens in the decode batch and the
// sequences they hold there are on average at most the limit x the tokens a second they get
// (Little's law). A step gives a sequence MeanStepTokens on average, and a round of b of them a
// rank takes at least FullBatchRate's least round of b at the kept requests' context (every rank
// at b: an uneven spread only slows the round, and so do the other requests in the batch). Where
// the round's time is convex in b (ThroughputBound's premise), tokens a second, b x
// MeanStepTokens / round(b), are concave in b, so the kept requests' tokens a second are at most
// those of their mean batch, which gives a token every limit to no more than b~ sequences a rank:
// round(b~) = limit x MeanStepTokens, b~ below the first whole batch past it; where every batch
// the ranks can hold is within the limit, at most the full batch's tokens a second (at
// MeanStepTokens a step, where ThroughputBound counts every draft). Infinite where the limits are
// not both held, or where the bound is past the rates whose probes span their full duration.
double TpotQpsBound(const sim::ResolvedDeployment& r, const WorkloadMeans& w,
                    const std::optional<TpotTerms>& t) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  if (!t) return kNone;
  const auto [pool, engine] = Decoding(r.spec);
  WorkloadMeans kept = w;
  kept.decode_context = t->kept_context;
  const double limit = t->limit_s * engine.MeanStepTokens();
  const int64_t cap = BatchCap(r.spec, t->kept_context);
  double tokens_per_s = 0;
  if (const DecodeRate full = FullBatchRate(r.spec, kept, cap, Pricing::kLeast);
      full.round_s <= limit) {
    tokens_per_s = full.tokens_per_s / (1 + engine.mtp_depth) * engine.MeanStepTokens();
  } else {
    const int64_t past = 1 + LargestWithin(0, cap, [&](int64_t b) {
                           return FullBatchRate(r.spec, kept, b, Pricing::kLeast).round_s > limit;
                         });
    tokens_per_s = static_cast<double>(past * pool.ranks * pool.instances) / t->limit_s;
  }
  const double qps = tokens_per_s * t->window / t->kept_tokens;
  return qps <= t->most_qps ? qps : kNone;
}

// Upper bound on the rate the generating side sustains: what its GPUs generate, what the fronts
// stream, and what keeps TPOT within its limit.
double GenerationQpsBound(const sim::ResolvedDeployment& r, const WorkloadMeans& w,
                          const std::optional<TpotTerms>& tpot) {
  return std::min(
      {ThroughputBound(r.spec, w) / w.output, FrontQpsBound(r, w), TpotQpsBound(r, w, tpot)});
}

// Upper bound on the objective before the grid: Offline tokens/s; server-type, a rate, the lesser
// of the generating side's and what a prefill pool can take.
double ObjectiveBound(const sim::ResolvedDeployment& r, const WorkloadMeans& w, bool server,
                      const std::optional<TpotTerms>& tpot) {
  if (!server) return std::min(ThroughputBound(r.spec, w), PrefillQpsBound(r.spec, w) * w.output);
  return std::min(GenerationQpsBound(r, w, tpot), PrefillQpsBound(r.spec, w));
}

// Where the QPS search starts below the bound: the tokens/s of the largest full batch whose step
// (per token generated) stays within the TPOT limit. An estimate, not a bound: queueing and the
// spread of contexts and prompts move the real figure either way.
double LatencyLimitedTokensPerS(const sim::ResolvedDeployment& r, const WorkloadMeans& w,
                                double tpot_limit_s) {
  const auto [pool, engine] = Decoding(r.spec);
  const double limit = tpot_limit_s * (1 + engine.mtp_depth);
  // Attention-DP ranks that do not balance prefill each take their prompts in steps of their own
  // and every rank waits for the one prefilling: a step carries all the ranks' prompts on one.
  const bool one = pool.ranks > 1 && !engine.adp_balance;
  auto rate = [&](int64_t batch) {
    return FullBatchRate(r.spec, w, batch,
                         one ? Pricing::kPromptsOnOneRank : Pricing::kPromptsSpread);
  };
  const int64_t cap = BatchCap(r.spec, w.decode_context);
  if (const DecodeRate full = rate(cap); full.round_s <= limit) return full.tokens_per_s;
  return rate(LargestWithin(1, cap, [&](int64_t b) { return rate(b).round_s > limit; }))
      .tokens_per_s;
}

// A server-type candidate's QPS estimate under the TPOT limit (the bound where none is held).
double QpsEstimate(const sim::ResolvedDeployment& r, const WorkloadMeans& w, const TuneOptions& o,
                   double qps_bound) {
  const std::optional<double> tpot_ms = LimitsMs(o).tpot_ms;
  return tpot_ms ? LatencyLimitedTokensPerS(r, w, *tpot_ms * 1e-3) / w.output : qps_bound;
}

// Server-type searches probe a fixed grid of rates kQpsStep apart (Evaluate): searches from
// different starts probe the same rates, so they agree wherever validity is monotone in the rate.
constexpr double kQpsStep = 1.02;
double GridRate(int64_t k) { return std::exp(static_cast<double>(k) * std::log(kQpsStep)); }
int64_t GridAtOrBelow(double qps) {  // the highest grid index whose rate is at most `qps`
  constexpr double kEnds = 1e6;      // beyond any rate a double holds (1.02^1e6 overflows)
  const double k = std::floor(std::log(qps) / std::log(kQpsStep) + 1e-9);
  return static_cast<int64_t>(k > -kEnds ? std::min(k, kEnds) : -kEnds);  // 0 or NaN: the bottom
}
// The highest rate a QPS search may find, given the bound on the long-run rate: the grid rate
// above it (a run of finite length can pass a little above the long-run rate, as B200 Llama 2 70B
// Server passes 365 QPS on a bound of 364.6).
double QpsCeiling(double qps_bound) {
  return qps_bound > 0 ? GridRate(GridAtOrBelow(qps_bound) + 1) : 0.0;
}

// Where a server-type candidate stands in the search order: its generating side's QPS estimate
// (within that side's ceiling), the prefill pool left out. Prefill bounds are tight, the
// estimates of aggregated engines (which take no account of a prompt's stall of the steps it
// joins) are not: on DeepSeek-R1 Interactive on 288 GB300s, ordering by the lesser put 700-QPS
// estimates of aggregated candidates that reach 110 ahead of the disaggregated ones that reach
// 288, and the tune took 250 thread-seconds where it takes 150. Ties go to the higher bound.
double OrderingEstimate(const sim::ResolvedDeployment& r, const WorkloadMeans& w,
                        const TuneOptions& o, const std::optional<TpotTerms>& tpot) {
  const double ceiling = QpsCeiling(GenerationQpsBound(r, w, tpot));
  return std::min(QpsEstimate(r, w, o, ceiling), ceiling);
}

// With `beat` > 0, the grid rate a server-type search on a candidate with this bound probes
// first (Evaluate): the one above `beat`, when below the candidate's ceiling; else none.
std::optional<int64_t> FirstProbe(double beat, double bound) {
  if (!(beat > 0)) return std::nullopt;
  const int64_t k = GridAtOrBelow(beat) + 1;
  if (k >= GridAtOrBelow(bound) + 1) return std::nullopt;
  return k;
}

// A server-type candidate's QPS search as a state (Evaluate): the highest grid rate whose p99s
// meet the limits. The first probe is the rate above `beat` (only a rate above the best found
// matters; failing it ends the search, below_qps), else the grid rate just below the bound
// (batch-limited candidates get there); then the TPOT-limited estimate, then bisection between
// the highest rate that passed and the lowest that failed (at first the one above the ceiling,
// taken to). Replayed on outcomes supposed rather than known, it says which probes the search
// may ask for next (SearchRun's probes ahead).
class QpsSearch {
 public:
  QpsSearch(double bound, double estimate, double beat, int steps)
      : estimate_(estimate), steps_(steps), hi_(GridAtOrBelow(bound) + 1) {
    const std::optional<int64_t> first = FirstProbe(beat, bound);
    first_pending_ = first.has_value();
    first_ = first.value_or(0);
    done_ = !(bound > 0);
  }
  // The grid index to probe next; empty once the search is decided.
  std::optional<int64_t> Next() const {
    if (done_) return std::nullopt;
    if (first_pending_) return first_;
    if (n_ >= steps_ || (passed_ && hi_ - lo_ <= 1)) return std::nullopt;
    constexpr int64_t kHalve = 35;  // grid steps in a factor of 2 (1.02^35 = 2.0)
    int64_t k = passed_ ? lo_ + (hi_ - lo_) / 2 : hi_ - kHalve;
    if (n_ == 0 && !passed_) k = hi_ - 2;
    if (n_ == 1 && !passed_ && estimate_ > 0 && GridAtOrBelow(estimate_) < hi_ - 1)
      k = GridAtOrBelow(estimate_);
    return k;
  }
  // The outcome of the probe Next() named.
  void Record(int64_t k, bool valid) {
    if (valid) {
      lo_ = k;
      passed_ = true;
    } else {
      hi_ = k;
    }
    if (first_pending_) {
      first_pending_ = false;
      done_ = below_ = !valid;
      return;
    }
    ++n_;
  }
  bool passed() const { return passed_; }  // some rate passed; lo() the highest
  int64_t lo() const { return lo_; }
  int64_t hi() const { return hi_; }  // the lowest rate that failed (or the ceiling's)
  // The rate above the beat failed (first()): the candidate cannot beat it.
  bool below() const { return below_; }
  int64_t first() const { return first_; }

 private:
  double estimate_;
  int steps_;
  int64_t first_ = 0, lo_ = 0, hi_;
  bool first_pending_ = false, passed_ = false, below_ = false, done_ = false;
  int n_ = 0;
};

// Takes `search` past the probes `memo` holds; returns the first it lacks (empty: decided).
std::optional<int64_t> FollowKnown(const ProbeMemo& memo, QpsSearch* search) {
  std::optional<int64_t> k = search->Next();
  for (std::optional<ProbeOutcome> p; k && (p = memo.Find(*k)); k = search->Next())
    search->Record(*k, p->valid);
  return k;
}

struct Probe {
  sim::SimulationResult result;
  bool valid = false;
  std::string error;  // why no run could serve the requests
  // Certain to be still going at its give-up time: no result but how far it got (its clock and
  // the requests completed by then, in `result`).
  bool gave_up = false;
};

// What broke in an invalid probe (a probe stopped early counts the requests over each limit).
std::string Failure(const Probe& p) {
  if (!p.error.empty()) return p.error;
  const sim::SimulationResult& r = p.result;
  if (!r.limits) return "latency limits";
  const bool ttft = r.stopped_early ? r.ttft_violations > 0 : r.ttft_p99_ms > r.limits->ttft_ms;
  const bool tpot = r.stopped_early ? r.tpot_violations > 0 : r.tpot_p99_ms > r.limits->tpot_ms;
  return ttft && tpot ? "TTFT and TPOT" : ttft ? "TTFT" : tpot ? "TPOT" : "latency limits";
}

// What the search keeps of a probe or an Offline run.
ProbeOutcome Outcome(const Probe& p) {
  ProbeOutcome out;
  out.valid = p.valid;
  if (!p.valid) out.failure = Failure(p);
  const sim::SimulationResult& r = p.result;
  out.ttft_p99_ms = r.ttft_p99_ms;
  out.tpot_p99_ms = r.tpot_p99_ms;
  if (!p.valid) return out;  // figures of a valid run only
  out.sustained_tokens_per_s = r.sustained_tokens_per_s;
  out.throughput_tokens_per_s = r.throughput_tokens_per_s;
  out.tpot_mean_ms = r.tpot_mean_ms;
  out.completed_requests = r.completed_requests;
  out.duration_s = r.duration_s;
  return out;
}

// A probe into its candidate's memo: shared with the batch siblings where it ran (a run that
// could not serve every request says nothing of how near it came to its limits).
void Keep(ProbeMemo* memo, int64_t k, const Probe& p, const ProbeOutcome& out) {
  if (p.error.empty()) {
    memo->Share(k, out, p.result.slack, p.result.decode_slack);
  } else {
    memo->Put(k, out);
  }
}

const traces::Benchmark* BenchmarkOf(const TuneOptions& o) {
  return traces::FindBenchmark(traces::MlperfBenchmarks(), o.benchmark);
}

// Requests a Server/Interactive probe at `qps` issues, as LoadGen counts a run's: whole data sets
// covering `probe_duration_s` of arrivals, the benchmark's minimum Server run and
// `probe_min_samples`; at most `probe_max_samples`.
int64_t ProbeSamples(const TuneOptions& o, double qps) {
  const traces::Benchmark* b = BenchmarkOf(o);
  const int64_t least = std::max(o.probe_min_samples, b != nullptr ? b->server_min_query_count : 0);
  const auto n = sim::LoadGenServerSamples(static_cast<int64_t>(o.dataset.size()), qps,
                                           o.probe_duration_s, least);
  return std::min(n, o.probe_max_samples);
}

}  // namespace

double LeastSecondsLeft(const sim::Simulator& simulator) {
  const sim::RemainingWork left = simulator.Remaining();
  const int64_t output = left.output_tokens - left.in_flight_output;
  if (output <= 0 || left.requests == 0) return 0;
  const auto n = static_cast<double>(left.requests);
  const WorkloadMeans w{
      static_cast<double>(std::max<int64_t>(0, left.prompt_tokens - left.in_flight_prompt)) / n,
      static_cast<double>(left.output_tokens) / n,
      left.context_tokens / static_cast<double>(left.output_tokens)};
  const double rate = ThroughputBound(simulator.spec(), w);
  return rate > 0 ? static_cast<double>(output) / rate : 0;
}

namespace {

// Whether a run lasts past `give_up_s`. It stops as soon as that is certain: its clock past it,
// or, where the deployment it started with runs to the end (`bounded`), at each of a few
// checkpoints on the way its clock plus the least time its work left can take (LeastSecondsLeft).
// Advancing in steps changes nothing of the run.
Result<bool> LastsPast(sim::Simulator& simulator, double give_up_s, bool bounded) {
  constexpr int kCheckpoints = 16;
  for (int k = 1; bounded && k < kCheckpoints; ++k) {
    const double t = give_up_s * k / kCheckpoints;
    FATHOM_RETURN_IF_ERROR(simulator.Advance(FromSeconds(t)));
    if (!simulator.NextEventTime()) return false;
    // No event before t is left, so nothing the work left needs starts before t.
    if (t + LeastSecondsLeft(simulator) > give_up_s * (1 + 1e-9)) return true;
  }
  FATHOM_RETURN_IF_ERROR(simulator.Advance(FromSeconds(give_up_s)));
  return simulator.NextEventTime().has_value();
}

// A Server/Interactive probe at `qps` (stopped once its p99s cannot be met, unless `to_the_end`),
// or an Offline run of `samples`, of a plan's start and switches. With `give_up_s` > 0, a run still
// going at that simulated time stops there, or sooner once it is sure to (Probe::gave_up).
Result<Probe> SimulateRun(const sim::Plan& plan, const TuneOptions& o,
                          const models::HardwareCatalog& catalog, double qps, int64_t samples,
                          bool to_the_end, bool breakdown, double give_up_s) {
  FATHOM_ASSIGN_OR_RETURN(auto resolved, sim::Resolve(plan.start, catalog, o.make_time));
  resolved->spec.engine.cost_breakdown = resolved->spec.decode_engine.cost_breakdown = breakdown;
  FATHOM_ASSIGN_OR_RETURN(sim::ResolvedPlan switches, sim::ResolvePlan(plan, catalog, o.make_time));
  sim::ScenarioConfig sc;
  sc.scenario = o.space.scenario;
  sc.min_duration_s = 0;  // short probes: MLPerf's 600 s minimum is for the final run
  const HeldLimits limits = LimitsMs(o);
  sc.ttft_limit_ms = limits.ttft_ms;
  sc.tpot_limit_ms = limits.tpot_ms;
  sc.seed = o.seed;
  std::unique_ptr<sim::RequestSource> source;
  if (ServerLike(sc.scenario)) {
    sc.qps = qps;
    const int64_t n = ProbeSamples(o, qps);
    source = sim::PoissonSource(o.dataset, n, qps, o.seed);
    // Stop a probe once its p99s cannot be met (more than 1% of its requests broke a limit), or
    // once the requests over a limit so far leave no reasonable doubt that they will be.
    if (!to_the_end) {
      sc.stop_after_violations =
          n - static_cast<int64_t>(std::floor(0.99 * static_cast<double>(n)));
      sc.stop_when_clearly_broken = true;
    }
  } else {
    sc.scenario = sim::Scenario::kOffline;
    source = sim::OfflineSource(o.dataset, samples, o.seed);
  }
  resolved->spec.scenario = sc;
  sim::Simulator simulator(std::move(resolved->spec), std::move(source));
  FATHOM_RETURN_IF_ERROR(switches.ScheduleOn(&simulator));
  Probe p;
  if (give_up_s > 0) {
    FATHOM_ASSIGN_OR_RETURN(p.gave_up, LastsPast(simulator, give_up_s, plan.steps.empty()));
    if (p.gave_up) {
      p.result.duration_s = ToSeconds(simulator.now());
      p.result.completed_requests = simulator.issued() - simulator.in_system();
      return p;
    }
  }
  auto res = simulator.Run();
  if (!res.ok() && CancelRequested()) return res.status();  // stopped by its pool: no verdict
  if (!res.ok()) {  // could not serve every request: not valid
    p.error = res.status().message();
    return p;
  }
  p.result = *res;
  p.valid = ServerLike(sc.scenario) ? res->latency_limits_met : true;
  return p;
}

// SimulateRun, told to TuneOptions::on_run.
Result<Probe> Simulate(const sim::Plan& plan, const TuneOptions& o,
                       const models::HardwareCatalog& catalog, double qps, int64_t samples = 0,
                       bool to_the_end = false, bool breakdown = false, double give_up_s = 0) {
  const auto start = std::chrono::steady_clock::now();
  Result<Probe> p = SimulateRun(plan, o, catalog, qps, samples, to_the_end, breakdown, give_up_s);
  if (!o.on_run || !p.ok()) return p;  // not ok: stopped by its pool, no verdict
  const bool server = ServerLike(o.space.scenario);
  TuneRun r;
  r.config = plan.start;
  r.qps = server ? qps : 0;
  r.samples = server ? ProbeSamples(o, qps) : samples;
  r.outcome = p->gave_up          ? "gave up"
              : !p->error.empty() ? p->error
              : !server           ? "done"
              : p->valid          ? "valid"
                                  : Failure(*p);
  r.stopped_early = p->result.stopped_early;
  r.completed = p->result.completed_requests;
  r.simulated_s = p->result.duration_s;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  o.on_run(r);
  return p;
}

// Offline issues one query of every sample at t = 0, which the router spreads evenly over the
// instances of an aggregated deployment; identical instances then share nothing, so one instance
// with its share of the samples stands for all of them (k times its throughput; the k-instance
// run differs only in which samples each gets, which tests check). Disaggregated pools share
// their prefill and decode instances and are simulated whole.
struct OfflineShare {
  sim::DeploymentConfig one;
  int instances = 1;
};
OfflineShare OneInstance(const sim::DeploymentConfig& d) {
  OfflineShare s{d, 1};
  if (d.disaggregated) return s;
  const int per_instance = d.tp * d.pp;
  s.instances = std::max(1, d.gpus / per_instance);
  s.one.gpus = per_instance;
  return s;
}

// The screen's rule, one place for the run that stops and the search that judges it in order:
// a prediction that, raised by kScreenMargin, stays below `best` cannot beat it.
bool ScreenedOut(double predicted_tokens_per_s, double best) {
  return predicted_tokens_per_s > 0 && predicted_tokens_per_s * kScreenMargin < best;
}

struct OfflineOutcome {
  ProbeOutcome run;                   // the last run's
  double predicted_tokens_per_s = 0;  // from its first two runs, when both were short (else 0)
  // Stopped short: predicted, or its full-length run's clock proves, x kScreenMargin below the
  // beat.
  bool screened = false;
};

// An Offline run as long as a submitter's (sim::OfflineRunSamples): shorter runs end mostly in the
// drain of the longest outputs and understate tokens/s (DeepSeek-R1 on 8xB200 under trtllm-1.0:
// 13.7k tokens/s on one pass, 32.6k over 4,714 s). With `beat` > 0 (tokens/s of one instance),
// the length search stops once its first two runs, both short, predict too little to beat it
// (the second stops as soon as its clock, ScreenedPastS, says it will), and a run stops once its
// clock is past the target (so it is the full-length one) and past the time its tokens would
// take at the beat / kScreenMargin: it ends later still, so its tokens/s x kScreenMargin is below
// the beat, exactly, with nothing predicted. Each run that ends goes into `memo` by its sample
// count, and a run found there (the candidate's own from an earlier search, or a batch sibling's
// that stands for it) is not simulated again: it gave up if it lasted past the give-up time.
Result<OfflineOutcome> OfflineRun(const sim::DeploymentConfig& one, const TuneOptions& o,
                                  const models::HardwareCatalog& catalog, int instances,
                                  double beat, ProbeMemo* memo) {
  const sim::Plan plan{one, {}, std::nullopt};
  OfflineOutcome out;
  // The run of `samples`, stopped at `give_up_s` (if > 0): nullopt if it gave up.
  auto run = [&](int64_t samples, double give_up_s) -> Result<std::optional<ProbeOutcome>> {
    if (std::optional<ProbeOutcome> known = memo != nullptr ? memo->Find(samples) : std::nullopt;
        known && known->valid) {
      if (give_up_s > 0 && known->duration_s > give_up_s) return std::optional<ProbeOutcome>();
      return known;
    }
    FATHOM_ASSIGN_OR_RETURN(Probe p,
                            Simulate(plan, o, catalog, 0, samples, false, false, give_up_s));
    if (p.gave_up) return std::optional<ProbeOutcome>();
    ProbeOutcome outcome = Outcome(p);
    if (memo != nullptr) Keep(memo, samples, p, outcome);
    return std::optional<ProbeOutcome>(std::move(outcome));
  };
  if (o.offline_samples > 0) {
    FATHOM_ASSIGN_OR_RETURN(std::optional<ProbeOutcome> r,
                            run((o.offline_samples + instances - 1) / instances, 0));
    out.run = *r;
    return out;
  }
  const auto dataset = static_cast<int64_t>(o.dataset.size());
  const double target_s = sim::OfflineRunTargetS(BenchmarkOf(o));
  double tokens_per_pass = 0;  // every sample once a pass
  for (const traces::Request& r : o.dataset)
    tokens_per_pass += static_cast<double>(r.output_tokens);
  int64_t last_passes = 0;
  double last_s = 0;
  auto lasted = [&](int64_t samples) -> Result<std::optional<double>> {
    const int64_t passes = samples / dataset;
    const bool second = last_passes == 1;  // the run after the first, one-pass one
    double give_up_s = 0;
    if (beat > 0) {
      const double full_s = static_cast<double>(passes) * tokens_per_pass * kScreenMargin / beat;
      give_up_s = std::max(target_s, full_s);
      // The second run: past ScreenedPastS it is screened by its prediction if it ends short of
      // the target, and by its clock if it ends past it (the target is then past full_s).
      if (second && full_s <= target_s) {
        const double screened_s = ScreenedPastS(last_passes, last_s, passes, tokens_per_pass,
                                                target_s, beat / kScreenMargin);
        if (screened_s < target_s) give_up_s = screened_s * (1 + 1e-9);
      }
    }
    FATHOM_ASSIGN_OR_RETURN(std::optional<ProbeOutcome> r, run(samples, give_up_s));
    if (!r) {
      out.screened = true;
      return std::optional<double>();
    }
    out.run = std::move(*r);
    if (!out.run.valid) return std::optional<double>();
    const double s = out.run.duration_s;
    if (s < target_s && second) {  // the second run, short of the target: the screen
      out.predicted_tokens_per_s =
          PredictedTokensPerS(last_passes, last_s, passes, s, tokens_per_pass, target_s);
      if (ScreenedOut(out.predicted_tokens_per_s, beat)) {
        out.screened = true;
        return std::optional<double>();
      }
    }
    last_passes = passes;
    last_s = s;
    return std::optional<double>(s);
  };
  FATHOM_RETURN_IF_ERROR(sim::OfflineRunSamples(dataset, target_s, lasted).status());
  return out;
}

}  // namespace

bool ServerLike(sim::Scenario s) {
  return s == sim::Scenario::kServer || s == sim::Scenario::kInteractive;
}

OrderedJson SearchFailure::ToJson() const {
  OrderedJson j;
  j["out_of_memory"] = out_of_memory;
  if (out_of_memory > 0) {
    j["least_shortfall_bytes_per_gpu"] = least_shortfall_bytes;
    j["least_shortfall"] = least_shortfall;
  }
  j["ttft_broken"] = ttft_broken;
  j["tpot_broken"] = tpot_broken;
  j["unservable"] = unservable;
  if (ttft_limit_ms) j["ttft_limit_ms"] = *ttft_limit_ms;
  if (tpot_limit_ms) j["tpot_limit_ms"] = *tpot_limit_ms;
  if (closest) j["closest"] = closest->ToJson();
  j["advice"] = advice;
  return j;
}

OrderedJson TuneRun::ToJson() const {
  OrderedJson j;
  j["config"] = sim::ToJson(config);
  if (qps > 0) j["qps"] = qps;
  j["samples"] = samples;
  j["outcome"] = outcome;
  j["stopped_early"] = stopped_early;
  j["completed_requests"] = completed;
  j["simulated_s"] = simulated_s;
  j["wall_s"] = wall_s;
  return j;
}

OrderedJson ProbeOutcome::ToJson() const {
  OrderedJson j;
  j["valid"] = valid;
  if (!valid) j["failure"] = failure;
  j["ttft_p99_ms"] = ttft_p99_ms;
  j["tpot_p99_ms"] = tpot_p99_ms;
  if (valid) {
    j["sustained_tokens_per_s"] = sustained_tokens_per_s;
    j["throughput_tokens_per_s"] = throughput_tokens_per_s;
    j["tpot_mean_ms"] = tpot_mean_ms;
    j["completed_requests"] = completed_requests;
    j["duration_s"] = duration_s;
  }
  return j;
}

Result<ProbeOutcome> ProbeOutcome::FromJson(const Json& j, const std::string& where) {
  JsonFields f(j, where);
  ProbeOutcome p;
  p.valid = f.Bool("valid", false);
  p.failure = f.String("failure", "");
  p.ttft_p99_ms = f.Double("ttft_p99_ms", 0.0);
  p.tpot_p99_ms = f.Double("tpot_p99_ms", 0.0);
  p.sustained_tokens_per_s = f.Double("sustained_tokens_per_s", 0.0);
  p.throughput_tokens_per_s = f.Double("throughput_tokens_per_s", 0.0);
  p.tpot_mean_ms = f.Double("tpot_mean_ms", 0.0);
  p.completed_requests = f.Int("completed_requests", 0);
  p.duration_s = f.Double("duration_s", 0.0);
  FATHOM_RETURN_IF_ERROR(f.status());
  return p;
}

namespace {

// Whether CUDA graphs `a` and `b` pad every batch of up to `peak` sequences to the same size (or
// leave it eager in both): their sizes agree up to the first that holds `peak`.
bool GraphsAgree(const std::vector<int64_t>& a, const std::vector<int64_t>& b, int64_t peak) {
  auto upto = [peak](const std::vector<int64_t>& sizes) {
    const auto holds = std::lower_bound(sizes.begin(), sizes.end(), peak);
    return holds == sizes.end() ? sizes.end() : holds + 1;
  };
  return std::equal(a.begin(), upto(a), b.begin(), upto(b));
}

// One pool of RunLimits::SameRun. Every rule that reads max_batch: admission while fewer than
// max_batch x stages run, a pipeline's microbatch holding max_batch (its batch and idle decoders
// are among the rank's running sequences, so fewer than max_batch running leaves every answer
// alike), the decode-first scheduler's "crowded" past half of max_batch x stages, the graphs
// captured up to it, and the KV blocks its logits buffer leaves.
bool PoolRunsSame(const RunLimits::Pool& a, const sim::LimitSlack& s, const RunLimits::Pool& b) {
  if (a == b) return true;
  if (a.stages != b.stages || a.decode_first != b.decode_first) return false;
  const int64_t least = std::min(a.max_batch, b.max_batch);
  if (a.decode_first ? 2 * s.peak_running > least : s.peak_running >= least) return false;
  if (s.kv_free_slack < std::max<int64_t>(0, a.kv_blocks_per_rank - b.kv_blocks_per_rank))
    return false;
  // A client limit never reached held nothing back (a dispatch waits only at the limit).
  if (a.max_concurrency != b.max_concurrency) {
    auto limit = [](int64_t c) { return c > 0 ? c : std::numeric_limits<int64_t>::max(); };
    if (s.peak_instance_in_flight >= std::min(limit(a.max_concurrency), limit(b.max_concurrency)))
      return false;
  }
  return GraphsAgree(a.graph_sizes, b.graph_sizes, s.peak_running);
}

RunLimits::Pool PoolLimits(const sim::PoolSpec& pool, const sim::EngineConfig& engine) {
  return {engine.max_batch,
          pool.time->num_stages(),
          engine.scheduler == sim::SchedulerKind::kDecodeFirst,
          pool.kv_blocks_per_rank,
          sim::CudaGraphSizes(engine, *pool.time),
          engine.max_concurrency};
}

// A candidate with its batch limits taken out: what its batch siblings share (the client limit
// the tuner sizes from max_batch among them).
std::string SiblingKey(sim::DeploymentConfig d) {
  d.engine.max_batch = 0;
  d.engine.max_concurrency = 0;
  d.decode_max_batch = 0;
  return CandidateKey(d);
}

}  // namespace

RunLimits RunLimits::Of(const sim::ResolvedDeployment& r) {
  RunLimits l;
  l.pool = PoolLimits(r.spec.pool, r.spec.engine);
  if (r.spec.decode_pool) l.decode = PoolLimits(*r.spec.decode_pool, r.spec.decode_engine);
  return l;
}

bool RunLimits::SameRun(const sim::LimitSlack& slack, const sim::LimitSlack& decode_slack,
                        const RunLimits& other) const {
  if (decode.has_value() != other.decode.has_value()) return false;
  return PoolRunsSame(pool, slack, other.pool) &&
         (!decode || PoolRunsSame(*decode, decode_slack, *other.decode));
}

std::optional<ProbeOutcome> BatchSiblings::Find(int64_t k, const RunLimits& limits) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = runs_.find(k);
  if (it == runs_.end()) return std::nullopt;
  for (const Run& run : it->second) {
    if (run.limits.SameRun(run.slack, run.decode_slack, limits)) {
      ++found_;
      return run.outcome;
    }
  }
  return std::nullopt;
}

int64_t BatchSiblings::found() const {
  std::lock_guard<std::mutex> lock(mu_);
  return found_;
}

void BatchSiblings::Add(int64_t k, const ProbeOutcome& p, const RunLimits& limits,
                        const sim::LimitSlack& slack, const sim::LimitSlack& decode_slack) {
  std::lock_guard<std::mutex> lock(mu_);
  runs_[k].push_back({p, limits, slack, decode_slack});
}

std::optional<ProbeOutcome> ProbeMemo::Find(int64_t k) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = probes_.find(k);
    if (it != probes_.end()) return it->second;
  }
  if (!siblings_) return std::nullopt;
  std::optional<ProbeOutcome> p = siblings_->Find(k, limits_);
  if (p) {
    std::lock_guard<std::mutex> lock(mu_);
    probes_.emplace(k, *p);
  }
  return p;
}

void ProbeMemo::Put(int64_t k, const ProbeOutcome& p) {
  std::lock_guard<std::mutex> lock(mu_);
  probes_.emplace(k, p);
}

void ProbeMemo::Share(int64_t k, const ProbeOutcome& p, const sim::LimitSlack& slack,
                      const sim::LimitSlack& decode_slack) {
  Put(k, p);
  bool fresh = false;  // a sweep's workers send back the probes they were given, too
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh = slack_.emplace(k, std::make_pair(slack, decode_slack)).second;
  }
  if (fresh && siblings_) siblings_->Add(k, p, limits_, slack, decode_slack);
}

void ProbeMemo::JoinSiblings(std::shared_ptr<BatchSiblings> siblings, RunLimits limits) {
  siblings_ = std::move(siblings);
  limits_ = std::move(limits);
}

std::map<int64_t, ProbeOutcome> ProbeMemo::Probes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return probes_;
}

OrderedJson ProbeMemo::ToJson() const {
  std::map<int64_t, std::pair<sim::LimitSlack, sim::LimitSlack>> slack;
  {
    std::lock_guard<std::mutex> lock(mu_);
    slack = slack_;
  }
  auto limit_slack = [](const sim::LimitSlack& s) {
    return OrderedJson{{"peak_running", s.peak_running},
                       {"kv_free_slack", s.kv_free_slack},
                       {"peak_instance_in_flight", s.peak_instance_in_flight}};
  };
  OrderedJson j = OrderedJson::object();
  for (const auto& [k, p] : Probes()) {
    OrderedJson& probe = j[std::to_string(k)] = p.ToJson();
    if (auto it = slack.find(k); it != slack.end()) {
      probe["slack"] = limit_slack(it->second.first);
      probe["decode_slack"] = limit_slack(it->second.second);
    }
  }
  return j;
}

Status ProbeMemo::AddJson(const Json& j, const std::string& where) {
  if (!j.is_object()) return Status::InvalidArgument(where + ": probes: must be an object");
  for (const auto& [key, value] : j.items()) {
    int64_t k = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), k);
    if (ec != std::errc() || end != key.data() + key.size()) {
      return Status::InvalidArgument(where + ": probes: key '" + key +
                                     "': must be a grid rate index (an integer)");
    }
    FATHOM_ASSIGN_OR_RETURN(ProbeOutcome p,
                            ProbeOutcome::FromJson(value, where + ": probe " + key));
    if (!value.contains("slack")) {
      Put(k, p);
      continue;
    }
    sim::LimitSlack slack[2];
    for (int i = 0; i < 2; ++i) {
      const char* name = i == 0 ? "slack" : "decode_slack";
      const Json fields = value.value(name, Json::object());
      JsonFields f(fields, where + ": probe " + key + ": " + name);
      // A store written before the client limit was recorded: unknown, so as if at any limit.
      slack[i] = {f.Int("peak_running", 0), f.Int("kv_free_slack", -1),
                  f.Int("peak_instance_in_flight", std::numeric_limits<int64_t>::max())};
      FATHOM_RETURN_IF_ERROR(f.status());
    }
    Share(k, p, slack[0], slack[1]);
  }
  return Status::Ok();
}

Result<CandidateResult> Evaluate(const sim::DeploymentConfig& d, const TuneOptions& o,
                                 const models::HardwareCatalog& catalog, double beat,
                                 ProbeMemo* memo) {
  return EvaluatePlan(sim::Plan{d, {}, std::nullopt}, o, catalog, beat, memo);
}

Result<ProbeOutcome> RunProbe(const sim::DeploymentConfig& d, const TuneOptions& o,
                              const models::HardwareCatalog& catalog, int64_t k, ProbeMemo* memo) {
  FATHOM_ASSIGN_OR_RETURN(Probe p,
                          Simulate(sim::Plan{d, {}, std::nullopt}, o, catalog, GridRate(k)));
  const ProbeOutcome out = Outcome(p);
  if (memo != nullptr) Keep(memo, k, p, out);
  return out;
}

Result<CandidateResult> EvaluatePlan(const sim::Plan& plan, const TuneOptions& o,
                                     const models::HardwareCatalog& catalog, double beat,
                                     ProbeMemo* memo) {
  const sim::DeploymentConfig& d = plan.start;
  FATHOM_ASSIGN_OR_RETURN(auto resolved, sim::Resolve(d, catalog, o.make_time));
  CandidateResult c;
  c.config = d;
  const bool server = ServerLike(o.space.scenario);
  const WorkloadMeans means = Means(o.dataset);
  // A plan can reach what any of its configurations can.
  const std::optional<TpotTerms> tpot = server ? TpotTermsOf(o) : std::nullopt;
  double bound = ObjectiveBound(*resolved, means, server, tpot);
  for (const sim::PlanStep& step : plan.steps) {
    FATHOM_ASSIGN_OR_RETURN(auto to, sim::Resolve(step.to, catalog, o.make_time));
    bound = std::max(bound, ObjectiveBound(*to, means, server, tpot));
  }
  c.bound = server ? QpsCeiling(bound) : bound;
  const double price =
      o.price_per_gpu_hour > 0 ? o.price_per_gpu_hour : resolved->hardware.price_per_gpu_hour_usd;
  ProbeOutcome best;
  double scale = 1;  // Offline: the instances one simulated instance stands for
  if (!server) {
    // A plan that switches runs the whole deployment; otherwise one instance stands for all.
    const OfflineShare share = plan.steps.empty() ? OneInstance(d) : OfflineShare{d, 1};
    FATHOM_ASSIGN_OR_RETURN(OfflineOutcome run, OfflineRun(share.one, o, catalog, share.instances,
                                                           beat / share.instances,
                                                           plan.steps.empty() ? memo : nullptr));
    scale = share.instances;
    if (run.screened) {
      c.screened = true;
      return c;
    }
    c.predicted_tokens_per_s = scale * run.predicted_tokens_per_s;
    best = run.run;
  } else {
    // Valid probes run to the end and cost the most.
    QpsSearch search(c.bound, QpsEstimate(*resolved, means, o, c.bound), beat, o.qps_steps);
    std::optional<ProbeOutcome> lowest_failed;
    while (const std::optional<int64_t> k = search.Next()) {
      std::optional<ProbeOutcome> p = memo != nullptr ? memo->Find(*k) : std::nullopt;
      if (!p) {
        FATHOM_ASSIGN_OR_RETURN(Probe run, Simulate(plan, o, catalog, GridRate(*k)));
        p = Outcome(run);
        if (memo != nullptr) Keep(memo, *k, run, *p);
      }
      search.Record(*k, p->valid);
      if (p->valid) {
        best = *p;
      } else {
        lowest_failed = *p;
      }
    }
    if (search.below()) {
      c.below_qps = GridRate(search.first());
      return c;
    }
    if (search.passed()) c.qps = GridRate(search.lo());
    if (!search.passed() && lowest_failed) {
      c.failure = lowest_failed->failure;
      c.failed_qps = GridRate(search.hi());
      c.failed_ttft_p99_ms = lowest_failed->ttft_p99_ms;
      c.failed_tpot_p99_ms = lowest_failed->tpot_p99_ms;
    }
  }
  c.valid = best.valid;
  if (!c.valid && !server) c.failure = best.failure;
  if (c.valid) {
    const ProbeOutcome& r = best;
    c.throughput_tokens_per_s = scale * r.sustained_tokens_per_s;
    c.tokens_per_s_per_gpu = c.throughput_tokens_per_s / d.TotalGpus();
    c.loadgen_tokens_per_s = scale * r.throughput_tokens_per_s;
    c.tokens_per_s_per_user = r.tpot_mean_ms > 0 ? 1000.0 / r.tpot_mean_ms : 0.0;
    c.ttft_p99_ms = r.ttft_p99_ms;
    c.tpot_p99_ms = r.tpot_p99_ms;
    c.run_samples = static_cast<int64_t>(scale) * r.completed_requests;
    c.run_s = r.duration_s;
    c.cost_per_million_tokens = models::CostPerMillionTokens(price, c.tokens_per_s_per_gpu);
  }
  return c;
}

std::vector<CandidateResult> RankValid(const std::vector<CandidateResult>& results, bool server) {
  std::vector<CandidateResult> ranked;
  for (const auto& r : results) {
    if (r.valid) ranked.push_back(r);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](const CandidateResult& a, const CandidateResult& b) {
                     if (a.Objective(server) != b.Objective(server))
                       return a.Objective(server) > b.Objective(server);
                     return CandidateKey(a.config) < CandidateKey(b.config);
                   });
  return ranked;
}

std::vector<CandidateResult> ParetoFrontier(const std::vector<CandidateResult>& results) {
  std::vector<CandidateResult> frontier;
  for (size_t i = 0; i < results.size(); ++i) {
    const CandidateResult& c = results[i];
    if (!c.valid) continue;
    bool dominated = false;
    for (size_t j = 0; j < results.size(); ++j) {
      const CandidateResult& o = results[j];
      // Of candidates at the same point, the first stands for them all.
      if (o.valid && o.tokens_per_s_per_gpu >= c.tokens_per_s_per_gpu &&
          o.tokens_per_s_per_user >= c.tokens_per_s_per_user &&
          (o.tokens_per_s_per_gpu > c.tokens_per_s_per_gpu ||
           o.tokens_per_s_per_user > c.tokens_per_s_per_user || j < i)) {
        dominated = true;
        break;
      }
    }
    if (!dominated) frontier.push_back(c);
  }
  std::stable_sort(frontier.begin(), frontier.end(),
                   [](const CandidateResult& a, const CandidateResult& b) {
                     return a.tokens_per_s_per_user < b.tokens_per_s_per_user;
                   });
  return frontier;
}

namespace {

// Why no candidate is valid, and what to relax: memory where nothing fits, else the limit that
// broke, by how much on the candidate that came closest (re-run at its lowest QPS to the end).
Result<SearchFailure> Diagnose(const TuneOptions& o, const models::HardwareCatalog& catalog,
                               const Candidates& cands,
                               const std::vector<CandidateResult>& simulated) {
  SearchFailure f;
  f.out_of_memory = cands.out_of_memory;
  f.least_shortfall_bytes = cands.least_shortfall_bytes;
  f.least_shortfall = cands.least_shortfall;
  const HeldLimits limits = LimitsMs(o);
  f.ttft_limit_ms = limits.ttft_ms;
  f.tpot_limit_ms = limits.tpot_ms;
  const CandidateResult* closest = nullptr;
  double nearest = std::numeric_limits<double>::infinity();
  for (const CandidateResult& c : simulated) {
    if (c.valid) continue;
    if (c.failed_qps <= 0) {
      ++f.unservable;
      continue;
    }
    if (c.failure.find("TTFT") != std::string::npos) ++f.ttft_broken;
    if (c.failure.find("TPOT") != std::string::npos) ++f.tpot_broken;
    const double over = std::max(c.failed_ttft_p99_ms / limits.ttft_ms.value_or(1e300),
                                 c.failed_tpot_p99_ms / limits.tpot_ms.value_or(1e300));
    if (over < nearest) {
      nearest = over;
      closest = &c;
    }
  }
  const std::string more_gpus = StrFormat("more GPUs (--gpus %d)", 2 * o.space.gpus);
  if (closest != nullptr) {
    CandidateResult c = *closest;
    FATHOM_ASSIGN_OR_RETURN(Probe p, Simulate(sim::Plan{c.config, {}, std::nullopt}, o, catalog,
                                              c.failed_qps, 0, /*to_the_end=*/true));
    if (p.error.empty()) {
      c.failure = Failure(p);
      c.failed_ttft_p99_ms = p.result.ttft_p99_ms;
      c.failed_tpot_p99_ms = p.result.tpot_p99_ms;
    }
    f.closest = c;
    if (limits.tpot_ms && c.failed_tpot_p99_ms > *limits.tpot_ms) {
      f.advice.push_back(StrFormat(
          "a p99 TPOT limit of at least %.0f ms (--tpot-ms; the closest candidate's p99 at "
          "%.3g QPS)",
          std::ceil(c.failed_tpot_p99_ms), c.failed_qps));
      f.advice.push_back(more_gpus + " or a faster GPU: shorter steps per token");
      FATHOM_ASSIGN_OR_RETURN(models::ModelArch model, models::LoadModel(o.space.model));
      if (model.mtp_layers > 0 && o.space.scenario == sim::Scenario::kServer) {
        f.advice.push_back(
            "the interactive scenario, where MLPerf allows speculative decoding (MTP)");
      }
    }
    if (limits.ttft_ms && c.failed_ttft_p99_ms > *limits.ttft_ms) {
      f.advice.push_back(StrFormat("a p99 TTFT limit of at least %.0f ms (--ttft-ms)",
                                   std::ceil(c.failed_ttft_p99_ms)));
      f.advice.push_back(more_gpus + ": more prefill capacity");
    }
  } else if (f.unservable > 0) {
    f.advice.push_back(
        more_gpus +
        " or fp8 KV (--kv fp8): a request needs more KV cache than one attention rank holds");
    f.advice.push_back("a lower output cap (--max-output) on the workload");
  }
  if (cands.feasible.empty()) {
    f.advice.push_back(more_gpus + StrFormat(": the closest candidate (%s) lacks %s per GPU",
                                             f.least_shortfall.c_str(),
                                             HumanBytes(f.least_shortfall_bytes).c_str()));
    f.advice.push_back(
        "lower-precision weights or KV cache (--weights fp8 or fp4, --kv fp8), or smaller "
        "--max-batch");
  }
  return f;
}

}  // namespace

Result<PreparedTune> Prepare(const TuneOptions& o, const models::HardwareCatalog& catalog) {
  if (o.dataset.empty()) return Status::InvalidArgument("the workload has no requests");
  const bool server = ServerLike(o.space.scenario);
  const HeldLimits limits = LimitsMs(o);
  if (server && (!limits.ttft_ms || !limits.tpot_ms)) {
    return Status::InvalidArgument("no MLPerf latency limits known for " + o.space.model +
                                   " in this scenario: give --ttft-ms and --tpot-ms");
  }
  PreparedTune p;
  SearchSpace space = o.space;
  const WorkloadMeans means = Means(o.dataset);
  space.sequence_kv_tokens =
      std::min(space.sequence_kv_tokens, std::max(1.0, means.input + means.output / 2));
  FATHOM_ASSIGN_OR_RETURN(p.candidates, Enumerate(space, catalog));
  FATHOM_ASSIGN_OR_RETURN(models::Hardware hw, catalog.Find(o.space.hardware));
  SweepInfo& info = p.info;
  // The sweep id covers everything a result depends on.
  if (o.sweep_id.empty()) {
    // v2: server-type tokens/s is the sustained rate (stored results of v1 meant LoadGen's).
    std::string sig =
        "v3|" + o.benchmark + "|" + o.space.model + "|" + o.space.hardware + "|" +
        std::to_string(o.space.gpus) + "|" + std::string(sim::Name(o.space.scenario)) + "|" +
        std::to_string(o.dataset.size()) + "|" + std::to_string(o.offline_samples) + "|" +
        std::to_string(o.probe_duration_s) + "|" + std::to_string(o.probe_min_samples) + "|" +
        std::to_string(o.probe_max_samples) + "|" + std::to_string(o.qps_steps) + "|" +
        std::to_string(o.ttft_limit_ms.value_or(0)) + "|" +
        std::to_string(o.tpot_limit_ms.value_or(0)) + "|" + o.time_model_tag + "|" +
        std::to_string(o.seed);
    for (const auto& r : o.dataset)
      sig += "," + std::to_string(r.input_tokens) + ":" + std::to_string(r.output_tokens);
    info.id = std::to_string(std::hash<std::string>{}(sig));
  } else {
    info.id = o.sweep_id;
  }
  info.model = o.space.model;
  info.hardware = o.space.hardware;
  info.gpus = o.space.gpus;
  info.scenario = o.space.scenario;
  if (server) {
    info.ttft_limit_ms = limits.ttft_ms;
    info.tpot_limit_ms = limits.tpot_ms;
  }
  info.price_per_gpu_hour =
      o.price_per_gpu_hour > 0 ? o.price_per_gpu_hour : hw.price_per_gpu_hour_usd;
  info.stack = o.stack;
  info.candidates = static_cast<int64_t>(p.candidates.feasible.size());
  info.infeasible = p.candidates.infeasible;
  return p;
}

Result<TuneResult> Tune(const TuneOptions& o, const models::HardwareCatalog& catalog) {
  const auto start = std::chrono::steady_clock::now();
  FATHOM_ASSIGN_OR_RETURN(PreparedTune prepared, Prepare(o, catalog));
  std::unique_ptr<ResultStore> store;
  SearchLog log;
  if (!o.db_path.empty()) {
    FATHOM_ASSIGN_OR_RETURN(store, ResultStore::Open(o.db_path));
    FATHOM_RETURN_IF_ERROR(store->Record(prepared.info));
    FATHOM_ASSIGN_OR_RETURN(log.stored, store->Load(prepared.info.id));
    log.source = o.db_path;
    log.save = [&](const std::string& key, const CandidateResult& r) {
      return store->Save(prepared.info.id, key, r);
    };
  }
  FATHOM_ASSIGN_OR_RETURN(TuneResult out, Search(o, catalog, prepared, log));
  if (out.ranked.empty()) {
    FATHOM_ASSIGN_OR_RETURN(SearchFailure failure,
                            Diagnose(o, catalog, prepared.candidates, out.simulated));
    out.failure = std::move(failure);
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

Result<SearchRun> SearchRun::Start(const TuneOptions& o, const models::HardwareCatalog& catalog,
                                   const PreparedTune& prepared, const SearchLog& log) {
  SearchRun run(o, prepared, log);
  const bool server = ServerLike(o.space.scenario);
  run.server_ = server;
  const std::vector<sim::DeploymentConfig>& feasible = prepared.candidates.feasible;

  // Bounds first (cheap), then the likeliest best first so that pruning bites early: Offline in
  // decreasing order of bound, server-type in decreasing order of the TPOT-limited estimate
  // within the ceiling (a candidate that loses to the best found costs one short probe, where the
  // search to its own capacity costs several full-length ones).
  const WorkloadMeans means = Means(o.dataset);
  const std::optional<TpotTerms> tpot = server ? TpotTermsOf(o) : std::nullopt;
  const double offline_s = sim::OfflineRunTargetS(BenchmarkOf(o));
  std::map<std::string, size_t> sibling_groups;  // each key's place in run.sibling_groups_
  for (size_t i = 0; i < feasible.size(); ++i) {
    const sim::DeploymentConfig& d = feasible[i];
    FATHOM_ASSIGN_OR_RETURN(auto resolved, sim::Resolve(d, catalog, o.make_time));
    const double b = ObjectiveBound(*resolved, means, server, tpot);
    const double bound = server ? QpsCeiling(b) : b;
    const double estimate = server ? OrderingEstimate(*resolved, means, o, tpot) : bound;
    // Requests its run issues: a probe at the estimate, or an Offline run of one instance's share
    // (--samples, or as long as LoadGen's run at the bound's rate).
    const int instances = OneInstance(d).instances;
    const double requests = server ? static_cast<double>(ProbeSamples(o, std::max(estimate, 1e-3)))
                            : o.offline_samples > 0
                                ? static_cast<double>(o.offline_samples) / instances
                                : std::max(static_cast<double>(o.dataset.size()),
                                           offline_s * b / means.output / instances);
    Item item;
    item.candidate = i;
    item.key = CandidateKey(d);
    const auto [group, added] =
        sibling_groups.try_emplace(SiblingKey(d), run.sibling_groups_.size());
    if (added) run.sibling_groups_.push_back(std::make_shared<BatchSiblings>());
    item.group = group->second;
    item.memo->JoinSiblings(run.sibling_groups_[item.group], RunLimits::Of(*resolved));
    item.bound = bound;
    item.estimate = estimate;
    item.cost = requests;
    run.items_.push_back(std::move(item));
  }
  std::stable_sort(run.items_.begin(), run.items_.end(), [](const Item& a, const Item& b) {
    return a.estimate != b.estimate ? a.estimate > b.estimate : a.bound > b.bound;
  });
  run.item_of_.resize(feasible.size());
  for (size_t i = 0; i < run.items_.size(); ++i) run.item_of_[run.items_[i].candidate] = i;

  // A resumed sweep starts from the best it has stored, so whatever an earlier run pruned is pruned
  // again.
  for (Item& item : run.items_) {
    auto it = log.stored.find(item.key);
    if (it == log.stored.end()) continue;
    FATHOM_ASSIGN_OR_RETURN(
        CandidateResult r,
        CandidateFromJson(feasible[item.candidate], it->second,
                          log.source + ": sweep " + prepared.info.id + ": candidate metrics"));
    if (r.valid) run.best_ = std::max(run.best_, r.Objective(server));
    item.result = std::move(r);
    item.stored = true;
  }
  FATHOM_RETURN_IF_ERROR(run.Advance());
  return run;
}

namespace {

// The Offline screen (kScreenMargin): a candidate whose predicted or full-length tokens/s cannot
// beat `best` (its run, had it known that best, would have stopped) keeps its bound and loses its
// figures, its prediction too (a run stopped against that best may not have got one).
void Screen(double best, CandidateResult* r) {
  if (r->screened || !(ScreenedOut(r->predicted_tokens_per_s, best) ||
                       (r->valid && ScreenedOut(r->throughput_tokens_per_s, best))))
    return;
  CandidateResult screened;
  screened.config = r->config;
  screened.bound = r->bound;
  screened.screened = true;
  *r = std::move(screened);
}

}  // namespace

// Whether the best taken so far prunes `item` before it is simulated. A server-type bound is a grid
// rate and only a rate above the best found counts (Evaluate's first probe), so a candidate whose
// ceiling is the best's rate cannot beat it either.
bool SearchRun::Pruned(const Item& item) const {
  if (!options_->prune) return false;
  return server_ ? best_ > 0 && item.bound <= best_ : item.bound < best_;
}

// The next probe `item`'s QPS search against `beat` asks for, given the probes run on it so far;
// empty once it has every one it needs (Evaluate then simulates nothing).
std::optional<int64_t> SearchRun::OwnProbe(const Item& item, double beat) const {
  QpsSearch search(item.bound, item.estimate, beat, options_->qps_steps);
  return FollowKnown(*item.memo, &search);
}

std::optional<SearchRun::Task> SearchRun::Peek() {
  const double beat = options_->prune ? best_ : 0.0;
  // Server-type, a candidate is searched a probe at a time: its next probe, or once it has every
  // probe it needs, its evaluation (from them). Empty while its next probe is out.
  // A probe a batch sibling is running at the same rate waits while other work is at hand: the
  // sibling's run may stand for it (BatchSiblings), as it would had they not gone out together.
  std::optional<Task> deferred;
  auto searching = [&](size_t i, double against) -> std::optional<Task> {
    const Item& item = items_[i];
    const std::optional<int64_t> k = OwnProbe(item, against);
    if (k && probing_.contains({item.candidate, *k})) return std::nullopt;
    const Task task{item.candidate, against, i - taken_, k, false};
    if (k && group_probing_.contains({item.group, *k})) {
      if (!deferred) deferred = task;
      return std::nullopt;
    }
    return task;
  };
  // A search under way goes on against the best found since it went out: it depends on the best
  // only through its first probe, and is searched again at its turn if that differs.
  std::optional<Task> own;  // the next probe (or evaluation) a search asks for, earliest first
  for (const size_t i : searching_) {
    if (Pruned(items_[i])) continue;
    if ((own = searching(i, beat))) break;
  }
  auto ready = [&](const Item& item) {
    return item.state == Item::State::kWaiting && !item.stored && !Pruned(item);
  };
  // The next in order may be waiting again (its result, computed against an older best, was
  // dropped); the others past scan_ were never handed out.
  if (taken_ < items_.size() && ready(items_[taken_])) scan_ = std::min(scan_, taken_);
  scan_ = std::max(scan_, taken_);
  while (scan_ < items_.size() && !ready(items_[scan_])) ++scan_;
  for (size_t i = scan_; i < items_.size() && (!own || i - taken_ < own->ahead); ++i) {
    if (!ready(items_[i])) continue;
    if (!server_) return Task{items_[i].candidate, beat, i - taken_, {}, false};
    if (std::optional<Task> task = searching(i, beat)) {
      own = task;
      break;
    }
  }
  // A probe that a search under way may ask for later, where fewer results stand before it than
  // before the next probe a search asks for now: the earliest search in order first. One that
  // supposes a candidate beats the best at its first probe goes out only where nothing else
  // would (most candidates lose there, so it is seldom needed).
  for (const size_t i : searching_) {
    const Item& item = items_[i];
    if (own && i - taken_ >= own->ahead) break;
    if (Pruned(item)) continue;
    if (std::optional<Ahead> ahead = ProbeAhead(item, beat)) {
      if (!own || (!ahead->long_shot && i - taken_ + ahead->depth < own->ahead))
        return Task{item.candidate, beat, i - taken_ + ahead->depth, ahead->probe, true};
    }
  }
  return own ? own : deferred;
}

// A probe `item`'s QPS search against `beat` may ask for and that is neither run nor out, and
// how many outcomes not yet known stand before it: past the probes run, each outcome of each
// probe not yet known is supposed in turn, breadth first, so that the probes nearest the search's
// own path come first.
std::optional<SearchRun::Ahead> SearchRun::ProbeAhead(const Item& item, double beat) const {
  constexpr int kMaxLooked = 15;  // unknown probes looked at: four levels, three outcomes supposed
  struct Supposed {
    QpsSearch search;
    size_t depth = 0;  // outcomes supposed
    bool long_shot = false;
  };
  const std::optional<int64_t> first = FirstProbe(beat, item.bound);
  std::deque<Supposed> open{{QpsSearch(item.bound, item.estimate, beat, options_->qps_steps)}};
  for (int looked = 0; !open.empty() && looked < kMaxLooked; ++looked) {
    Supposed node = open.front();
    open.pop_front();
    const std::optional<int64_t> k = FollowKnown(*item.memo, &node.search);
    if (!k) continue;
    // Out on this candidate or a sibling (a candidate's probes out are its group's too).
    if (!group_probing_.contains({item.group, *k})) return Ahead{*k, node.depth, node.long_shot};
    for (const bool valid : {false, true}) {
      Supposed next = node;
      next.search.Record(*k, valid);
      ++next.depth;
      next.long_shot = node.long_shot || (valid && k == first);
      open.push_back(next);
    }
  }
  return std::nullopt;
}

void SearchRun::Take(const Task& task) {
  const size_t i = item_of_[task.candidate];
  Item& item = items_[i];
  if (task.probe) {
    probing_.insert({task.candidate, *task.probe});
    group_probing_.insert({item.group, *task.probe});
    if (task.early) ++probes_ahead_;
    if (item.state == Item::State::kWaiting) {
      item.state = Item::State::kSearching;
      searching_.insert(i);
    }
    item.beat = task.beat;
    return;
  }
  item.state = Item::State::kOut;
  item.beat = task.beat;
  searching_.erase(i);
}

void SearchRun::ProbeBack(const Task& task) {
  probing_.erase({task.candidate, *task.probe});
  group_probing_.erase(group_probing_.find({items_[item_of_[task.candidate]].group, *task.probe}));
}

void SearchRun::FinishProbe(const Task& task, const ProbeOutcome& outcome) {
  ProbeBack(task);
  items_[item_of_[task.candidate]].memo->Put(*task.probe, outcome);
}

bool SearchRun::Drop(const Task& task) {
  // A probe below the rate a search against the best now starts from is never asked for again,
  // by its candidate's search or by a sibling's taking its outcome (each starts there too). A
  // candidate's other work is kept even once it is pruned: its probes may serve its siblings.
  if (!task.probe || !server_ || !options_->prune) return false;
  const std::optional<int64_t> first = FirstProbe(best_, items_[item_of_[task.candidate]].bound);
  if (!first || *task.probe >= *first) return false;
  ProbeBack(task);
  ++wasted_;
  return true;
}

Status SearchRun::Finish(const Task& task, CandidateResult result) {
  Item& item = items_[item_of_[task.candidate]];
  if (item.state == Item::State::kDropped) {
    ++wasted_;
    return Status::Ok();
  }
  item.state = Item::State::kBack;
  item.result = std::move(result);
  return Advance();
}

// Evaluate depends on the best it is given only through its first probe: a server-type result
// whose first probe differs under the best taken now goes back to be searched again.
bool SearchRun::SendBackIfStale(size_t i) {
  Item& item = items_[i];
  if (!server_ ||
      FirstProbe(item.beat, item.bound) == FirstProbe(options_->prune ? best_ : 0, item.bound))
    return false;
  item.state = Item::State::kWaiting;
  item.result.reset();
  ++wasted_;
  scan_ = std::min(scan_, i);
  return true;
}

// A new best: the results back from searches further on in order go back at once if it made them
// stale, to be searched again side by side, where each would otherwise wait for its turn to be
// found stale (Advance) and be searched again alone.
void SearchRun::Requeue() {
  for (size_t i = taken_ + 1; i < items_.size(); ++i) {
    const Item& item = items_[i];
    if (item.state == Item::State::kBack && !item.stored && !Pruned(item) && SendBackIfStale(i))
      ++requeued_;
  }
}

Status SearchRun::Advance() {
  const TuneOptions& o = *options_;
  for (; taken_ < items_.size(); ++taken_) {
    Item& item = items_[taken_];
    if (item.stored) {
      if (item.result->PrunedByRun()) {
        ++pruned_;
        if (item.result->screened) ++screened_;
      } else {
        kept_.push_back(*item.result);
        ++reused_;
      }
    } else if (Pruned(item)) {
      ++pruned_;
      if (item.state == Item::State::kOut || item.state == Item::State::kSearching)
        item.state = Item::State::kDropped;
      if (item.state == Item::State::kBack) ++wasted_;
      searching_.erase(taken_);
    } else if (item.state == Item::State::kBack) {
      if (SendBackIfStale(taken_)) return Status::Ok();
      // Offline, the screen by the best taken so far: a run against an older, lower best may
      // have gone on where a one-thread search would have stopped it.
      if (!server_ && o.prune) Screen(best_, &*item.result);
      const CandidateResult& r = *item.result;
      if (r.valid && r.Objective(server_) > best_) {
        best_ = r.Objective(server_);
        if (server_ && o.prune) Requeue();
      }
      if (r.PrunedByRun()) {
        ++pruned_;
        if (r.screened) ++screened_;
      } else {
        kept_.push_back(r);
        ++evaluated_;
      }
      if (log_->save) FATHOM_RETURN_IF_ERROR(log_->save(item.key, r));
    } else {
      return Status::Ok();  // waiting, or out
    }
    item.result.reset();
    if (o.progress) {
      o.progress({static_cast<int64_t>(taken_ + 1), static_cast<int64_t>(items_.size()), evaluated_,
                  reused_, pruned_, best_});
    }
  }
  return Status::Ok();
}

double SearchRun::ExpectedCost() const {
  // The bounds let through every candidate whose bound reaches the likeliest best's estimate (the
  // first item's); the others cost a short probe at most, counted as nothing.
  const double reach = items_.empty() ? 0 : items_.front().estimate;
  double cost = 0;
  for (size_t i = taken_; i < items_.size(); ++i) {
    const Item& item = items_[i];
    if (!item.stored && item.bound >= reach) cost += item.cost;
  }
  return cost;
}

TuneResult SearchRun::Outcome() const {
  TuneResult out;
  out.sweep_id = prepared_->info.id;
  out.candidates = prepared_->info.candidates;
  out.infeasible = prepared_->info.infeasible;
  out.simulated = kept_;
  out.ranked = RankValid(out.simulated, server_);
  out.frontier = ParetoFrontier(out.ranked);
  out.evaluated = evaluated_;
  out.reused = reused_;
  out.pruned = pruned_;
  out.screened = screened_;
  for (const auto& siblings : sibling_groups_) out.shared_probes += siblings->found();
  return out;
}

Result<TuneResult> Search(const TuneOptions& o, const models::HardwareCatalog& catalog,
                          const PreparedTune& prepared, const SearchLog& log) {
  const auto start = std::chrono::steady_clock::now();
  FATHOM_ASSIGN_OR_RETURN(SearchRun run, SearchRun::Start(o, catalog, prepared, log));
  Status failure;
  auto next = [&]() -> std::optional<SearchRun::Task> {
    if (!failure.ok()) return std::nullopt;
    std::optional<SearchRun::Task> task = run.Peek();
    if (task) run.Take(*task);
    return task;
  };
  // A candidate's result, or a probe's outcome (Task::probe).
  struct Done {
    CandidateResult candidate;
    ProbeOutcome probe;
  };
  auto evaluate = [&](const SearchRun::Task& t) -> Result<Done> {
    const sim::DeploymentConfig& d = prepared.candidates.feasible[t.candidate];
    Done out;
    if (t.probe) {
      FATHOM_ASSIGN_OR_RETURN(out.probe, RunProbe(d, o, catalog, *t.probe, run.Memo(t.candidate)));
    } else {
      FATHOM_ASSIGN_OR_RETURN(out.candidate,
                              Evaluate(d, o, catalog, t.beat, run.Memo(t.candidate)));
    }
    return out;
  };
  auto done = [&](const SearchRun::Task& t, Result<Done> r) {
    Status s = r.status();
    if (r.ok() && t.probe) run.FinishProbe(t, r->probe);
    if (r.ok() && !t.probe) s = run.Finish(t, std::move(r->candidate));
    if (!s.ok() && failure.ok()) failure = s;
  };
  // A task the best taken since has made useless stops (SearchRun::Drop).
  auto drop = [&](const SearchRun::Task& t) { return run.Drop(t); };
  ParallelTasks(o.jobs, next, evaluate, done, drop);
  FATHOM_RETURN_IF_ERROR(failure);
  TuneResult out = run.Outcome();
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

Result<CapacityPlan> PlanCapacity(const TuneOptions& options, double target_qps,
                                  std::vector<int> gpu_counts,
                                  const models::HardwareCatalog& catalog) {
  if (!ServerLike(options.space.scenario)) {
    return Status::InvalidArgument("capacity planning needs the server or interactive scenario");
  }
  if (!(target_qps > 0))
    return Status::InvalidArgument("--capacity-qps = " + std::to_string(target_qps) +
                                   ": must be > 0");
  std::sort(gpu_counts.begin(), gpu_counts.end());
  FATHOM_ASSIGN_OR_RETURN(models::Hardware hw, catalog.Find(options.space.hardware));
  const double price =
      options.price_per_gpu_hour > 0 ? options.price_per_gpu_hour : hw.price_per_gpu_hour_usd;
  CapacityPlan plan;
  for (int gpus : gpu_counts) {
    TuneOptions o = options;
    o.space.gpus = gpus;
    o.sweep_id = options.sweep_id.empty() ? "" : options.sweep_id + "-" + std::to_string(gpus);
    FATHOM_ASSIGN_OR_RETURN(TuneResult r, Tune(o, catalog));
    CapacityStep step;
    step.gpus = gpus;
    step.cost_per_hour = gpus * price;
    if (!r.ranked.empty()) step.best = r.ranked.front();
    step.failure = r.failure;
    step.meets = step.best && step.best->qps >= target_qps;
    plan.steps.push_back(step);
    if (step.meets) {
      plan.chosen = step;
      break;
    }
  }
  return plan;
}

Result<sim::SimulationResult> BreakdownRun(const sim::DeploymentConfig& d, const TuneOptions& o,
                                           const models::HardwareCatalog& catalog, double qps,
                                           int64_t samples) {
  FATHOM_ASSIGN_OR_RETURN(Probe p, Simulate(sim::Plan{d, {}, std::nullopt}, o, catalog, qps,
                                            samples, /*to_the_end=*/true, /*breakdown=*/true));
  if (!p.error.empty()) return Status::InvalidArgument(p.error);
  return p.result;
}

}  // namespace fathom::tuner
