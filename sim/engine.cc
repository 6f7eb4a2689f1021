#include "sim/engine.h"

#include <algorithm>
#include <cmath>

#include "traces/request.h"

namespace fathom::sim {
namespace {

// P(one decode step accepts a drafts), a = 0..depth: `acceptance_dist`, or each draft accepted
// with probability `acceptance` until the first rejection.
std::vector<double> AcceptancePmf(const EngineConfig& config) {
  std::vector<double> pmf(config.mtp_depth + 1);
  for (int a = 0; a <= config.mtp_depth; ++a) {
    pmf[a] = !config.acceptance_dist.empty() ? config.acceptance_dist[a]
             : a < config.mtp_depth ? std::pow(config.acceptance, a) * (1 - config.acceptance)
                                    : std::pow(config.acceptance, a);
  }
  return pmf;
}

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
      shapes_(pool.ranks) {
  for (Rank& r : ranks_) {
    r.kv = std::make_unique<KvCacheManager>(pool.kv_blocks_per_rank, config.block_tokens,
                                            config.prefix_caching);
  }
  stage_free_at_.assign(pool.time->num_stages(), SimTime(0));
  implicit_decode_ = config.implicit_decode && config.mtp_depth == 0 && pool.sliding_window == 0;
  if (config.mtp_depth > 0)
    accept_cdfs_ = SumCdfs(AcceptancePmf(config), std::max<int64_t>(1, config.fast_forward));
  mean_step_tokens_ = MeanStepTokens();
}

int64_t Engine::Outstanding(int rank) const {
  return static_cast<int64_t>(ranks_[rank].waiting.size() + ranks_[rank].running.size());
}

double Engine::KvUtilization(int rank) const {
  const KvCacheManager& kv = *ranks_[rank].kv;
  return kv.capacity_blocks() > 0 ? static_cast<double>(kv.used_blocks()) / kv.capacity_blocks()
                                  : 1.0;
}

int64_t Engine::PrefixHits(int rank, const std::vector<uint64_t>& prefix) const {
  return ranks_[rank].kv->Peek(prefix);
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
  ranks_[rank].waiting.push_back(slot);
}

int64_t Engine::DecodeStepTokens(const Sequence&) const { return 1 + config_.mtp_depth; }

double Engine::MeanStepTokens() const {
  double mean = 1;
  const std::vector<double> pmf = AcceptancePmf(config_);
  for (size_t a = 1; a < pmf.size(); ++a) mean += static_cast<double>(a) * pmf[a];
  return mean;
}

// One uniform draw against the CDF of `steps` steps' total.
int64_t Engine::AcceptedDrafts(int64_t steps) {
  if (config_.mtp_depth == 0) return 0;
  const std::vector<double>& cdf = accept_cdfs_[steps - 1];
  return std::upper_bound(cdf.begin(), cdf.end() - 1, rng_->Uniform()) - cdf.begin();
}

void Engine::RemoveRunning(Rank& rank, int64_t slot) {
  // From the back: preemption victims are the most recently admitted.
  auto it = std::find(rank.running.rbegin(), rank.running.rend(), slot);
  FATHOM_CHECK(it != rank.running.rend());
  rank.running.erase(std::next(it).base());
}

int64_t Engine::HeldTokens(const Sequence& s) const {
  return s.owned_blocks * config_.block_tokens + s.pinned_prefix * traces::kPrefixBlockTokens;
}

int64_t Engine::OwnedBlocksFor(const Rank& rank, const Sequence& s, int64_t tokens) const {
  return rank.kv->BlocksFor(tokens - s.pinned_prefix * traces::kPrefixBlockTokens);
}

void Engine::RemovePrefilling(Rank& rank, int64_t slot) {
  auto it = std::find(rank.prefilling.begin(), rank.prefilling.end(), slot);
  if (it != rank.prefilling.end()) rank.prefilling.erase(it);
}

int64_t Engine::Cohort::Crossings(int64_t from, int64_t to) const {
  const int64_t period = static_cast<int64_t>(phase_count.size());
  int64_t n = 0;
  if (to - from >= period) {
    int64_t all = 0;
    for (int64_t c : phase_count) all += c;
    n += all * ((to - from) / period);
    from += (to - from) / period * period;
  }
  for (int64_t t = clock + from; t < clock + to; ++t) n += phase_count[t % period];
  if (from == 0 && to > 0 && ahead_clock == clock) n -= ahead;
  return n;
}

// A decoding sequence joins between steps: its KV covers `held` tokens, so it needs a new block
// when its kv_len reaches held, then every block_tokens steps. Admission may have allocated a
// whole block ahead (held = kv_len + block_tokens): its phase then skips the current step.
void Engine::Join(Rank& rank, int cohort, int64_t slot) {
  Sequence& s = (*slots_)[slot];
  Cohort& c = rank.cohorts[cohort];
  const int64_t gap = HeldTokens(s) - s.kv_len;
  const int64_t remaining = s.output - s.generated;
  int64_t phase = -1;
  if (gap < remaining) {
    FATHOM_CHECK(gap >= 0 && gap <= config_.block_tokens);
    phase = (c.clock + gap) % config_.block_tokens;
    ++c.phase_count[phase];
    if (gap == config_.block_tokens) {
      if (c.ahead_clock != c.clock) c.ahead = 0;
      c.ahead_clock = c.clock;
      ++c.ahead;
    }
  }
  s.cohort = cohort;
  s.cohort_mark = c.clock;
  s.cohort_index = c.size();
  c.members.push_back({slot, phase});
  c.base += s.kv_len - c.clock;
  c.completions.push({c.clock + remaining, slot});
}

void Engine::Sync(const Rank& rank, const Cohort& c, Sequence& s) const {
  const int64_t steps = c.clock - s.cohort_mark;
  if (steps == 0) return;
  s.kv_len += steps;
  s.generated += steps;
  s.kv_high = std::max(s.kv_high, s.kv_len);
  s.owned_blocks = std::max(s.owned_blocks, OwnedBlocksFor(rank, s, s.kv_len));
  s.cohort_mark = c.clock;
}

void Engine::Dissolve(Rank& rank, int cohort) {
  Cohort& c = rank.cohorts[cohort];
  for (const Cohort::Member& m : c.members) {
    Sequence& s = (*slots_)[m.slot];
    Sync(rank, c, s);
    s.cohort = -1;
  }
  c.members.clear();
  c.base = 0;
  c.ahead = 0;
  std::fill(c.phase_count.begin(), c.phase_count.end(), 0);
  c.completions = {};
}

// The cohort the next batch's decodes can use: idle cohorts (not in a batch in flight) merge
// into the largest; a new one is made when every cohort is in flight.
int Engine::IdleCohort(Rank& rank) {
  int target = -1;
  for (int i = 0; i < static_cast<int>(rank.cohorts.size()); ++i) {
    const Cohort& c = rank.cohorts[i];
    if (!c.in_flight && (target < 0 || c.size() > rank.cohorts[target].size())) target = i;
  }
  if (target < 0) {
    target = static_cast<int>(rank.cohorts.size());
    rank.cohorts.emplace_back();
    rank.cohorts.back().phase_count.assign(config_.block_tokens, 0);
    return target;
  }
  for (int i = 0; i < static_cast<int>(rank.cohorts.size()); ++i) {
    if (i == target || rank.cohorts[i].in_flight || rank.cohorts[i].size() == 0) continue;
    std::vector<int64_t> moved;
    for (const Cohort::Member& m : rank.cohorts[i].members) moved.push_back(m.slot);
    Dissolve(rank, i);
    for (int64_t slot : moved) Join(rank, target, slot);
  }
  return target;
}

bool Engine::Busy(const Rank& rank, const Sequence& s) const {
  return s.in_flight || (s.cohort >= 0 && rank.cohorts[s.cohort].in_flight);
}

// The cohort took `steps` steps; members whose last token that was leave, in admission order.
void Engine::AdvanceCohort(Rank& rank, int cohort, int64_t steps, SimTime now) {
  Cohort& c = rank.cohorts[cohort];
  c.in_flight = false;
  c.clock += steps;
  counters_.decode_tokens += c.size() * steps;
  counters_.generated_tokens += c.size() * steps;
  std::vector<int64_t> done;
  while (!c.completions.empty() && c.completions.top().first <= c.clock) {
    const auto [due, slot] = c.completions.top();
    c.completions.pop();
    if (!Completes(cohort, due, slot)) continue;
    FATHOM_CHECK(due == c.clock);
    done.push_back(slot);
  }
  PruneCompletions(cohort, c);
  std::sort(done.begin(), done.end(), [&](int64_t a, int64_t b) {
    return (*slots_)[a].admitted_order < (*slots_)[b].admitted_order;
  });
  // A member preempted and back at once can be due at the same step as its stale entry.
  done.erase(std::unique(done.begin(), done.end()), done.end());
  for (int64_t slot : done) {
    Sequence& s = (*slots_)[slot];
    Leave(rank, c, s);
    ReleaseAll(rank, s);
    RemoveRunning(rank, slot);
    listener_->OnComplete(slot, now);
  }
}

// A completion entry is stale once its member left early (preempted): the slot is elsewhere, or
// (recycled or rejoined) due at another step.
bool Engine::Completes(int cohort, int64_t due, int64_t slot) const {
  const Sequence& s = (*slots_)[slot];
  return s.cohort == cohort && s.cohort_mark + (s.output - s.generated) == due;
}

void Engine::PruneCompletions(int cohort, Cohort& c) const {
  while (!c.completions.empty() &&
         !Completes(cohort, c.completions.top().first, c.completions.top().second)) {
    c.completions.pop();
  }
}

// A member leaves between steps, its counters brought up to date.
void Engine::Leave(const Rank& rank, Cohort& c, Sequence& s) const {
  Sync(rank, c, s);
  const Cohort::Member m = c.members[s.cohort_index];
  if (m.phase >= 0) {
    --c.phase_count[m.phase];
    // Allocated a block ahead when it joined at this step: it was not among this step's crossings.
    if (c.ahead_clock == c.clock && m.phase == c.clock % config_.block_tokens &&
        HeldTokens(s) - s.kv_len == config_.block_tokens) {
      --c.ahead;
    }
  }
  c.base -= s.kv_len - c.clock;
  c.members[s.cohort_index] = c.members.back();
  (*slots_)[c.members[s.cohort_index].slot].cohort_index = s.cohort_index;
  c.members.pop_back();
  s.cohort = -1;
}

void Engine::ReleaseAll(Rank& rank, Sequence& s) {
  rank.kv->Release(s.owned_blocks);
  s.owned_blocks = 0;
  rank.kv->Unpin(s.prefix, s.pinned_prefix);
  s.pinned_prefix = 0;
}

bool Engine::Grow(Rank& rank, Sequence& s, int64_t tokens_after) {
  if (tokens_after <= HeldTokens(s))
    return true;  // the common decode step: room left in the last block
  const int64_t need = OwnedBlocksFor(rank, s, tokens_after) - s.owned_blocks;
  if (need <= 0) return true;
  if (!rank.kv->Allocate(need)) return false;
  s.owned_blocks += need;
  return true;
}

void Engine::Preempt(Rank& rank, int64_t slot) {
  Sequence& s = (*slots_)[slot];
  ++counters_.preemptions;
  ++s.preemptions;
  if (config_.preemption == PreemptionMode::kSwap) {
    s.swapped = true;  // KV moves to host memory; swap-out time joins the current iteration
    counters_.swapped_bytes += static_cast<int64_t>(s.kv_len * pool_.kv_bytes_per_token);
  } else {
    s.kv_len = 0;
    s.prefill_target = s.input + s.generated;
  }
  ReleaseAll(rank, s);
  RemoveRunning(rank, slot);
  RemovePrefilling(rank, slot);
  rank.waiting.push_front(slot);
}

bool Engine::Admit(Rank& rank, int64_t slot, double* swap_bytes) {
  Sequence& s = (*slots_)[slot];
  KvCacheManager& kv = *rank.kv;
  const int64_t block = traces::kPrefixBlockTokens;
  // Prefix blocks already cached on this rank, leaving at least one token to compute.
  int64_t match = 0;
  if (!s.swapped && config_.prefix_caching && !s.prefix.empty()) {
    match = std::min(kv.Peek(s.prefix), std::max<int64_t>(0, (s.prefill_target - 1) / block));
  }
  const int64_t kv_after = std::max(s.kv_len, match * block);
  const bool ready = kv_after >= s.prefill_target;
  const int64_t first_step = ready ? DecodeStepTokens(s) : 1;
  const int64_t tokens =
      config_.admission == AdmissionPolicy::kReserve ? s.input + s.output : kv_after + first_step;
  const int64_t need = kv.BlocksFor(tokens - match * block);
  if (need + match * kv.prefix_block_kv_blocks() > kv.Available()) return false;

  if (match > 0) {
    const int64_t pinned = kv.MatchAndPin(s.prefix);
    kv.Unpin(std::vector<uint64_t>(s.prefix.begin() + match, s.prefix.begin() + pinned),
             pinned - match);
    s.pinned_prefix = match;
    counters_.cached_tokens +=
        std::max<int64_t>(0, std::min(match * block, s.input) - std::max(s.kv_len, s.kv_high));
    s.kv_len = kv_after;
    s.kv_high = std::max(s.kv_high, s.kv_len);
  }
  FATHOM_CHECK(kv.Allocate(need));
  s.owned_blocks = need;
  if (s.swapped) {
    *swap_bytes += s.kv_len * pool_.kv_bytes_per_token;
    counters_.swapped_bytes += static_cast<int64_t>(s.kv_len * pool_.kv_bytes_per_token);
    s.swapped = false;
  }
  s.admitted_order = admissions_++;
  rank.waiting.pop_front();
  rank.running.push_back(slot);
  if (s.prefilling()) {
    rank.prefilling.push_back(slot);
  } else if (implicit_decode_) {
    rank.loose.push_back(slot);
  }
  return true;
}

// The cohort's next step needs more KV blocks than are free: preempt the most recently admitted
// sequences not in a batch in flight until it fits. The explicit walk below ends the same way (it
// keeps the longest admission-order prefix whose blocks fit), but this visits only the victims.
void Engine::ShedForCohort(Rank& rank, int cohort) {
  Cohort& c = rank.cohorts[cohort];
  size_t end = rank.running.size();
  while (c.Crossings(0, 1) > rank.kv->Available()) {
    while (end > 0 && Busy(rank, (*slots_)[rank.running[end - 1]])) --end;
    if (end == 0) break;
    const int64_t slot = rank.running[--end];
    Sequence& s = (*slots_)[slot];
    if (s.cohort == cohort) Leave(rank, c, s);
    Preempt(rank, slot);
  }
  PruneCompletions(cohort, c);
}

bool Engine::AddDecodes(Rank& rank, std::vector<Entry>* entries, int* cohort, int64_t* budget) {
  if (role_ == EngineRole::kPrefill) return false;  // its sequences leave with their first token
  if (implicit_decode_) {
    const int idle = IdleCohort(rank);
    for (int64_t slot : rank.loose) Join(rank, idle, slot);
    rank.loose.clear();
    Cohort& c = rank.cohorts[idle];
    if (c.size() > 0) {
      // The whole cohort steps, its newest members shed if the KV cache is short; when it
      // outnumbers the token budget, every member goes back to the explicit path below, which
      // picks one by one.
      if (c.size() <= *budget) ShedForCohort(rank, idle);
      const int64_t blocks = c.Crossings(0, 1);
      if (c.size() > 0 && c.size() <= *budget && blocks <= rank.kv->Available()) {
        FATHOM_CHECK(rank.kv->Allocate(blocks));
        c.in_flight = true;
        *cohort = idle;
        *budget -= c.size();
        return true;
      }
      Dissolve(rank, idle);
    } else {
      // No decoder is outside a cohort (all stepping in batches in flight): nothing to walk.
      size_t in_cohorts = 0;
      for (const Cohort& k : rank.cohorts) in_cohorts += k.size();
      if (rank.running.size() == rank.prefilling.size() + in_cohorts) return false;
    }
  }
  bool any = false;
  size_t i = 0;
  while (i < rank.running.size()) {
    const int64_t slot = rank.running[i];
    Sequence& s = (*slots_)[slot];
    if (Busy(rank, s) || s.prefilling()) {
      ++i;
      continue;
    }
    const int64_t step = DecodeStepTokens(s);
    if (step > *budget) break;
    bool preempted_self = false;
    while (!Grow(rank, s, s.kv_len + step)) {
      // Out of blocks: preempt the most recently admitted sequence not yet in this batch.
      size_t victim = rank.running.size();
      for (size_t j = rank.running.size(); j-- > i + 1;) {
        if (!Busy(rank, (*slots_)[rank.running[j]])) {
          victim = j;
          break;
        }
      }
      if (victim == rank.running.size()) {
        Preempt(rank, slot);
        preempted_self = true;
        break;
      }
      Preempt(rank, rank.running[victim]);
    }
    if (preempted_self) continue;  // running[i] is now the next sequence
    entries->push_back({slot, step, true});
    *budget -= step;
    any = true;
    ++i;
  }
  return any;
}

void Engine::AddPrefills(Rank& rank, std::vector<Entry>* entries, int64_t* budget,
                         bool whole_prompts, double* swap_bytes) {
  const int64_t chunk_cap = config_.chunk_size > 0 ? config_.chunk_size : config_.max_num_tokens;
  auto plan = [&](const Sequence& s) -> int64_t {
    const int64_t remaining = s.prefill_target - s.kv_len;
    if (whole_prompts) return remaining > *budget && !entries->empty() ? 0 : remaining;
    return std::min({remaining, chunk_cap, *budget});
  };
  for (int64_t slot : rank.prefilling) {
    if (*budget <= 0) return;
    Sequence& s = (*slots_)[slot];
    if (s.in_flight) continue;
    const int64_t tokens = plan(s);
    if (tokens <= 0 || !Grow(rank, s, s.kv_len + tokens)) return;
    entries->push_back({slot, tokens, false});
    *budget -= tokens;
  }
  const bool admit = config_.scheduler != SchedulerKind::kStatic;
  while (admit && *budget > 0 && !rank.waiting.empty() &&
         static_cast<int64_t>(rank.running.size()) < config_.max_batch) {
    const int64_t slot = rank.waiting.front();
    Sequence& s = (*slots_)[slot];
    if (whole_prompts && !entries->empty() && s.prefill_target - s.kv_len > *budget) return;
    if (!Admit(rank, slot, swap_bytes)) return;
    const bool decode = !s.prefilling();
    const int64_t tokens = decode ? DecodeStepTokens(s) : plan(s);
    if (tokens <= 0 || tokens > *budget || !Grow(rank, s, s.kv_len + tokens))
      continue;                                             // admitted, runs next time
    if (decode && implicit_decode_) rank.loose.pop_back();  // runs now, explicitly
    entries->push_back({slot, tokens, decode});
    *budget -= tokens;
  }
}

// TensorRT-LLM's rule (PyExecutor attention-DP balancing), counted per iteration: when every
// rank has a prefill to start and a free slot, prefills go after `batching_wait_iters` further
// iterations (or at once if a rank has nothing to decode); otherwise they wait, until a rank
// runs out of decode work or `timeout_iters` iterations have passed.
Engine::Balance Engine::DecideBalance() const {
  if (!config_.adp_balance || ranks_.size() < 2) return {};
  bool all_prefill = true, all_decode = true, all_free = true;
  for (const Rank& rank : ranks_) {
    const int64_t decoding = static_cast<int64_t>(rank.running.size() - rank.prefilling.size());
    bool prefill = !rank.waiting.empty();
    for (int64_t slot : rank.prefilling) prefill = prefill || !(*slots_)[slot].in_flight;
    all_prefill = all_prefill && prefill;
    all_decode = all_decode && decoding > 0;
    all_free = all_free && decoding < config_.max_batch;
  }
  Balance b;
  if (all_free && all_prefill) {
    if (!all_decode) return b;  // nothing to batch with: go
    if (adp_batching_iters_ < config_.adp_batching_wait_iters) {
      b.hold = true;
      b.max_steps = config_.adp_batching_wait_iters - adp_batching_iters_;
      b.counter = Balance::kBatching;
      return b;
    }
    b.counter = Balance::kResetBoth;
    return b;
  }
  if (!all_decode || adp_waiting_iters_ + 1 >= config_.adp_timeout_iters) {
    b.counter = Balance::kResetWaiting;
    return b;
  }
  b.hold = true;
  b.max_steps = config_.adp_timeout_iters - 1 - adp_waiting_iters_;
  b.counter = Balance::kWaiting;
  return b;
}

void Engine::AdvanceBalance(const Balance& b, int64_t steps) {
  switch (b.counter) {
    case Balance::kNone:
      break;
    case Balance::kBatching:
      adp_waiting_iters_ = 0;
      adp_batching_iters_ += steps;
      break;
    case Balance::kWaiting:
      adp_waiting_iters_ += steps;
      break;
    case Balance::kResetWaiting:
      adp_waiting_iters_ = 0;
      break;
    case Balance::kResetBoth:
      adp_waiting_iters_ = 0;
      adp_batching_iters_ = 0;
      break;
  }
}

void Engine::FormRankBatch(Rank& rank, std::vector<Entry>* entries, int* cohort, double* swap_bytes,
                           bool hold_prefills) {
  int64_t budget = config_.max_num_tokens;
  if (hold_prefills) {
    AddDecodes(rank, entries, cohort, &budget);
    return;
  }
  switch (config_.scheduler) {
    case SchedulerKind::kChunked:
      AddDecodes(rank, entries, cohort, &budget);
      AddPrefills(rank, entries, &budget, /*whole_prompts=*/false, swap_bytes);
      break;
    case SchedulerKind::kMixed:
      AddDecodes(rank, entries, cohort, &budget);
      AddPrefills(rank, entries, &budget, /*whole_prompts=*/true, swap_bytes);
      break;
    case SchedulerKind::kPrefillFirst:
      AddPrefills(rank, entries, &budget, /*whole_prompts=*/true, swap_bytes);
      if (entries->empty()) AddDecodes(rank, entries, cohort, &budget);
      break;
    case SchedulerKind::kDecodeFirst: {
      const auto decoding = static_cast<int64_t>(rank.running.size() - rank.prefilling.size());
      const bool crowded = 2 * static_cast<int64_t>(rank.running.size()) > config_.max_batch;
      if (decoding > 0 && (crowded || rank.waiting.empty())) {
        AddDecodes(rank, entries, cohort, &budget);
      } else {
        AddPrefills(rank, entries, &budget, /*whole_prompts=*/true, swap_bytes);
        if (entries->empty()) AddDecodes(rank, entries, cohort, &budget);
      }
      break;
    }
    case SchedulerKind::kStatic:
      // A new batch forms only when the previous one has drained.
      if (rank.running.empty()) {
        while (!rank.waiting.empty() &&
               static_cast<int64_t>(rank.running.size()) < config_.max_batch &&
               Admit(rank, rank.waiting.front(), swap_bytes)) {
        }
      }
      AddPrefills(rank, entries, &budget, /*whole_prompts=*/false, swap_bytes);
      if (entries->empty()) AddDecodes(rank, entries, cohort, &budget);
      break;
  }
  // Every running sequence is stuck waiting for blocks (prefills never preempt): free the most
  // recently admitted one, as vLLM does, and try again.
  for (size_t tries = rank.running.size(); entries->empty() && *cohort < 0 && tries > 1; --tries) {
    const bool busy = std::any_of(rank.running.begin(), rank.running.end(),
                                  [&](int64_t slot) { return Busy(rank, (*slots_)[slot]); });
    if (busy) return;
    for (int c = 0; c < static_cast<int>(rank.cohorts.size()); ++c) Dissolve(rank, c);
    Preempt(rank, rank.running.back());
    budget = config_.max_num_tokens;
    AddDecodes(rank, entries, cohort, &budget);
    AddPrefills(rank, entries, &budget, config_.scheduler != SchedulerKind::kChunked, swap_bytes);
  }
}

// With MTP a step generates 1 to 1 + depth tokens (the accepted drafts are drawn per sequence and
// step when the run ends), so the run is as long as no sequence can finish or outgrow its blocks
// even if every draft is accepted.
int64_t Engine::FastForwardSteps(const Batch& batch) const {
  if (config_.fast_forward <= 1) return 1;
  if (stage_free_at_.size() > 1) {
    // A pipeline takes several steps at once only when this batch is all it has: its stages then
    // run one after another, step after step, and nothing else could start in between.
    if (!in_flight_.empty()) return 1;
    for (size_t r = 0; r < batch.ranks.size(); ++r) {
      const Rank& rank = ranks_[r];
      const size_t cohort = batch.cohort[r] >= 0 ? rank.cohorts[batch.cohort[r]].size() : 0;
      if (!rank.waiting.empty() || rank.running.size() != batch.ranks[r].size() + cohort) return 1;
    }
  }
  int64_t steps = config_.fast_forward;
  for (size_t r = 0; r < batch.ranks.size(); ++r) {
    if (batch.cohort[r] >= 0) {
      const Cohort& c = ranks_[r].cohorts[batch.cohort[r]];
      steps = std::min(steps, c.completions.top().first - c.clock);
    }
    for (const Entry& e : batch.ranks[r]) {
      if (!e.decode) return 1;
      const Sequence& s = (*slots_)[e.slot];
      const int64_t most = DecodeStepTokens(s);
      steps = std::min(steps, (s.output - s.generated + most - 1) / most);
    }
  }
  steps = std::max<int64_t>(steps, 1);
  for (size_t r = 0; r < batch.ranks.size(); ++r) {
    int64_t blocks =
        batch.cohort[r] >= 0 ? ranks_[r].cohorts[batch.cohort[r]].Crossings(1, steps) : 0;
    for (const Entry& e : batch.ranks[r]) {
      const Sequence& s = (*slots_)[e.slot];
      blocks += std::max<int64_t>(
          0, OwnedBlocksFor(ranks_[r], s, s.kv_len + steps * DecodeStepTokens(s)) - s.owned_blocks);
    }
    if (blocks > ranks_[r].kv->Available()) return 1;
  }
  return steps;
}

void Engine::ShapeBatch(const Batch& batch, int64_t step) {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    shapes_[r] = models::BatchShape{};
    if (batch.cohort[r] >= 0) {
      const Cohort& c = ranks_[r].cohorts[batch.cohort[r]];
      shapes_[r].AddDecodeSteps(c.size(), static_cast<double>(c.Context() + c.size() * step));
    }
    for (const Entry& e : batch.ranks[r]) {
      const Sequence& s = (*slots_)[e.slot];
      const bool samples = e.decode || s.kv_len + e.tokens == s.prefill_target;
      const int64_t grown =
          e.decode ? std::llround(static_cast<double>(step) * mean_step_tokens_) : step;
      shapes_[r].Add({e.tokens, s.kv_len + grown, e.decode, samples}, pool_.sliding_window);
    }
  }
}

bool Engine::HasIdleWork() const {
  for (const Rank& rank : ranks_) {
    if (!rank.waiting.empty() || !rank.loose.empty()) return true;
    size_t in_cohorts = 0;
    for (const Cohort& c : rank.cohorts) {
      if (!c.in_flight && c.size() > 0) return true;
      in_cohorts += c.size();
    }
    for (int64_t slot : rank.prefilling) {
      if (!(*slots_)[slot].in_flight) return true;
    }
    if (rank.running.size() > rank.prefilling.size() + in_cohorts)
      return true;  // per-sequence decoders
  }
  return false;
}

bool Engine::TryStart(SimTime now, SimTime horizon, SimTime* stage_free, SimTime* done,
                      int64_t* batch_id) {
  if (stage0_busy_ || !HasIdleWork()) return false;
  Batch batch;
  if (!spare_batches_.empty()) {
    batch = std::move(spare_batches_.back());
    spare_batches_.pop_back();
  }
  batch.ranks.resize(ranks_.size());
  for (auto& entries : batch.ranks) entries.clear();
  batch.cohort.assign(ranks_.size(), -1);
  double swap_bytes = 0;
  bool any = false;
  const Balance balance = DecideBalance();
  for (size_t r = 0; r < ranks_.size(); ++r) {
    FormRankBatch(ranks_[r], &batch.ranks[r], &batch.cohort[r], &swap_bytes, balance.hold);
    any = any || batch.cohort[r] >= 0 || !batch.ranks[r].empty();
  }
  if (!any) {
    spare_batches_.push_back(std::move(batch));
    return false;
  }

  int64_t tokens = 0, sequences = 0;
  bool decodes = false;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (batch.cohort[r] >= 0) {
      tokens += ranks_[r].cohorts[batch.cohort[r]].size();
      sequences += ranks_[r].cohorts[batch.cohort[r]].size();
      decodes = true;
    }
    for (const Entry& e : batch.ranks[r]) {
      (*slots_)[e.slot].in_flight = true;
      tokens += e.tokens;
      decodes = decodes || e.decode;
    }
    sequences += static_cast<int64_t>(batch.ranks[r].size());
  }
  const double draft = decodes ? 1.0 + config_.mtp_depth * config_.draft_cost : 1.0;
  const SimTime swap = FromSeconds(swap_bytes / config_.swap_bytes_per_s);
  auto stage_time = [&](int stage) {
    return SimTime(static_cast<int64_t>(pool_.time->StageTime(shapes_, stage).count() * draft));
  };

  ShapeBatch(batch, 0);
  int64_t steps = swap_bytes > 0 ? 1 : std::min(FastForwardSteps(batch), balance.max_steps);
  SimTime t = now;
  if (steps > 1) {
    // Stage s of step j takes first + slope * j; a step's stages run one after another (see
    // FastForwardSteps). Stop after the step during which the horizon passes.
    const size_t stages = stage_free_at_.size();
    ff_first_.resize(stages);
    ff_slope_.resize(stages);
    ff_end_.resize(stages);
    for (size_t st = 0; st < stages; ++st) {
      ff_first_[st] =
          static_cast<double>(std::max(stage_time(static_cast<int>(st)), SimTime(1)).count());
    }
    ShapeBatch(batch, steps - 1);
    for (size_t st = 0; st < stages; ++st) {
      const double last =
          static_cast<double>(std::max(stage_time(static_cast<int>(st)), SimTime(1)).count());
      ff_slope_[st] = (last - ff_first_[st]) / static_cast<double>(steps - 1);
    }
    double total = 0, stage0 = 0;
    int64_t taken = 0;
    while (taken < steps) {
      for (size_t st = 0; st < stages; ++st) {
        const double d = ff_first_[st] + ff_slope_[st] * static_cast<double>(taken);
        if (st == 0) stage0 += d;
        total += d;
        ff_end_[st] = total;
      }
      ++taken;
      if (now + SimTime(static_cast<int64_t>(total)) >= horizon) break;
    }
    steps = taken;
    t = now + SimTime(static_cast<int64_t>(std::llround(total)));
    counters_.busy += SimTime(static_cast<int64_t>(std::llround(stage0)));
    for (size_t st = 0; st < stages; ++st) {
      stage_free_at_[st] = now + SimTime(static_cast<int64_t>(std::llround(ff_end_[st])));
      listener_->OnIteration(id_, static_cast<int>(st), now, stage_free_at_[st], steps,
                             tokens * steps, sequences);
    }
    *stage_free = stage_free_at_[0];
  } else {
    for (size_t st = 0; st < stage_free_at_.size(); ++st) {
      SimTime dur = stage_time(static_cast<int>(st));
      if (st == 0) dur += swap;
      dur = std::max(dur, SimTime(1));
      const SimTime start = std::max(t, stage_free_at_[st]);
      const SimTime end = start + dur;
      stage_free_at_[st] = end;
      listener_->OnIteration(id_, static_cast<int>(st), start, end, 1, tokens, sequences);
      if (st == 0) {
        *stage_free = end;
        counters_.busy += dur;
      }
      t = end;
    }
  }
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (steps > 1) {
      if (batch.cohort[r] >= 0) {
        FATHOM_CHECK(
            ranks_[r].kv->Allocate(ranks_[r].cohorts[batch.cohort[r]].Crossings(1, steps)));
      }
      for (Entry& e : batch.ranks[r]) {
        const Sequence& s = (*slots_)[e.slot];
        FATHOM_CHECK(Grow(ranks_[r], (*slots_)[e.slot], s.kv_len + steps * DecodeStepTokens(s)));
      }
    }
    peak_kv_utilization_ = std::max(peak_kv_utilization_, KvUtilization(static_cast<int>(r)));
  }
  AdvanceBalance(balance, steps);
  *done = t;
  stage0_busy_ = true;
  batch.id = next_batch_id_++;
  batch.steps = steps;
  *batch_id = batch.id;
  in_flight_.push_back(std::move(batch));
  counters_.iterations += steps;
  return true;
}

void Engine::Finish(int64_t batch_id, SimTime now) {
  auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                         [&](const Batch& b) { return b.id == batch_id; });
  FATHOM_CHECK(it != in_flight_.end());
  Batch batch = std::move(*it);
  in_flight_.erase(it);
  for (size_t r = 0; r < batch.ranks.size(); ++r) {
    Rank& rank = ranks_[r];
    if (batch.cohort[r] >= 0) AdvanceCohort(rank, batch.cohort[r], batch.steps, now);
    int joins = batch.cohort[r];  // where this batch's decoders continue
    for (const Entry& e : batch.ranks[r]) {
      Sequence& s = (*slots_)[e.slot];
      s.in_flight = false;
      const int64_t generated_before = s.generated;
      bool sampled = false;
      if (!e.decode) {
        counters_.prefill_tokens += e.tokens;
        // Prompt tokens computed for the first time; the rest recomputes what a preemption lost.
        const int64_t fresh = std::max<int64_t>(
            0, std::min(s.kv_len + e.tokens, s.input) - std::max(s.kv_len, s.kv_high));
        counters_.recomputed_tokens += e.tokens - fresh;
        s.kv_len += e.tokens;
        s.kv_high = std::max(s.kv_high, s.kv_len);
        if (s.kv_len == s.prefill_target) {
          RemovePrefilling(rank, e.slot);
          ++s.generated;
          ++counters_.generated_tokens;
          sampled = true;
          if (config_.prefix_caching && !s.prefix.empty()) {
            const int64_t full =
                std::min<int64_t>(s.prefix.size(), s.kv_len / traces::kPrefixBlockTokens);
            if (full > s.pinned_prefix) {
              s.owned_blocks -= rank.kv->Insert(s.prefix, s.pinned_prefix, full);
              s.pinned_prefix = full;
            }
          }
        }
      } else {
        counters_.decode_tokens += e.tokens * batch.steps;
        const int64_t produced =
            std::min<int64_t>(batch.steps + AcceptedDrafts(batch.steps), s.output - s.generated);
        s.generated += produced;
        s.kv_len += produced;
        s.kv_high = std::max(s.kv_high, s.kv_len);
        counters_.generated_tokens += produced;
        sampled = true;
        if (config_.admission == AdmissionPolicy::kGreedy) {
          // Drafts that were rejected give back their blocks.
          const int64_t keep = OwnedBlocksFor(rank, s, s.kv_len);
          if (s.owned_blocks > keep) {
            rank.kv->Release(s.owned_blocks - keep);
            s.owned_blocks = keep;
          }
        }
      }
      if (!sampled) continue;
      listener_->OnTokens(e.slot, s.generated - generated_before, now);
      if (!s.has_first_token) {
        s.has_first_token = true;
        s.first_token = now;
        listener_->OnFirstToken(e.slot, now);
      }
      if (s.generated >= s.output) {
        ReleaseAll(rank, s);
        RemoveRunning(rank, e.slot);
        listener_->OnComplete(e.slot, now);
      } else if (role_ == EngineRole::kPrefill && !e.decode) {
        ReleaseAll(rank, s);
        RemoveRunning(rank, e.slot);
        listener_->OnPrefillDone(e.slot, now);
      } else if (implicit_decode_) {
        if (joins < 0) joins = IdleCohort(rank);
        Join(rank, joins, e.slot);
      }
    }
  }
  spare_batches_.push_back(std::move(batch));
}

}  // namespace fathom::sim
