// Engine: forming each rank's next batch under the scheduler policy, and attention-DP balance.
#include <algorithm>
#include <limits>

#include "sim/engine.h"

namespace fathom::sim {

bool Engine::AddDecodes(Rank& rank, std::vector<Entry>* entries, int* cohort, int64_t* budget) {
  if (role_ == EngineRole::kPrefill) return false;  // its sequences leave with their first token
  if (implicit_decode_) {
    // The decoders step as a cohort, the earliest admitted when they outnumber the room in the
    // batch, its newest members shed if the KV cache is short; when the cohort still does not fit,
    // every idle decoder goes back to the explicit path below, which picks one by one.
    const int64_t step = 1 + config_.mtp_depth;  // tokens a decoder's step takes of the budget
    const int64_t room = std::min(*budget / step, Seats(rank, *entries, -1));
    const int idle = CohortForBatch(rank, room);
    Cohort& c = rank.cohorts[idle];
    if (c.size() > 0) {
      // MTP: drawn for a whole run (fast_forward steps, or half the window) or the window moves.
      if (c.mtp && c.drawn_until - c.clock < std::min(config_.fast_forward, draw_window_ / 2))
        MoveWindow(rank, c);
      if (c.size() <= room) ShedForCohort(rank, idle);
      const int64_t blocks = RunBlocks(c, 1);
      if (c.size() > 0 && c.size() <= room && rank.kv->Fits(blocks)) {
        FATHOM_CHECK(rank.kv->Allocate(blocks));
        c.run_blocks = blocks;
        c.in_flight = true;
        *cohort = idle;
        *budget -= c.size() * step;
        return true;
      }
      for (int k = 0; k < static_cast<int>(rank.cohorts.size()); ++k) {
        if (!rank.cohorts[k].in_flight) Dissolve(rank, k);
      }
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
    if (i + kPrefetchAhead < rank.running.size()) Prefetch(rank.running[i + kPrefetchAhead]);
    Sequence& s = (*slots_)[slot];
    if (Busy(rank, s) || s.prefilling()) {
      ++i;
      continue;
    }
    const int64_t step = DecodeStepTokens(s);
    if (step > *budget || Seats(rank, *entries, *cohort) <= 0) break;
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
    entries->push_back({slot, step, s.kv_len, true, true});
    *budget -= step;
    any = true;
    ++i;
  }
  return any;
}

int64_t Engine::Seats(const Rank& rank, const std::vector<Entry>& entries, int cohort) const {
  // Without a pipeline the running limit bounds the batch (and sequences running past a lowered
  // limit keep stepping).
  if (stages() == 1) return std::numeric_limits<int64_t>::max();
  const int64_t in_cohort = cohort >= 0 ? rank.cohorts[cohort].size() : 0;
  return config_.max_batch - static_cast<int64_t>(entries.size()) - in_cohort;
}

void Engine::AddPrefills(Rank& rank, std::vector<Entry>* entries, int cohort, int64_t* budget,
                         bool whole_prompts, double* swap_bytes, bool admit_new) {
  const int64_t chunk_cap = config_.chunk_size > 0 ? config_.chunk_size : config_.max_num_tokens;
  auto plan = [&](const Sequence& s) -> int64_t {
    const int64_t remaining = s.prefill_target - s.kv_len;
    if (whole_prompts) return remaining > *budget && !entries->empty() ? 0 : remaining;
    return std::min({remaining, chunk_cap, *budget});
  };
  for (int64_t slot : rank.prefilling) {
    if (*budget <= 0 || Seats(rank, *entries, cohort) <= 0) return;
    Sequence& s = (*slots_)[slot];
    if (s.in_flight) continue;
    const int64_t tokens = plan(s);
    if (tokens <= 0 || !Grow(rank, s, s.kv_len + tokens)) return;
    entries->push_back({slot, tokens, s.kv_len, false, s.kv_len + tokens == s.prefill_target});
    *budget -= tokens;
  }
  const bool admit = admit_new && config_.scheduler != SchedulerKind::kStatic;
  while (admit && *budget > 0 && !rank.waiting.empty() && Seats(rank, *entries, cohort) > 0 &&
         static_cast<int64_t>(rank.running.size()) < MaxRunning()) {
    const int64_t slot = rank.waiting.front();
    Sequence& s = (*slots_)[slot];
    if (whole_prompts && !entries->empty() && s.prefill_target - s.kv_len > *budget) return;
    if (!Admit(rank, slot, swap_bytes)) return;
    const bool decode = !s.prefilling();
    const int64_t tokens = decode ? DecodeStepTokens(s) : plan(s);
    if (tokens <= 0 || tokens > *budget || !Grow(rank, s, s.kv_len + tokens))
      continue;                                             // admitted, runs next time
    if (decode && implicit_decode_) rank.loose.pop_back();  // runs now, explicitly
    entries->push_back(
        {slot, tokens, s.kv_len, decode, decode || s.kv_len + tokens == s.prefill_target});
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
    all_free = all_free && decoding < MaxRunning();
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

bool Engine::GateClosed() const {
  if (config_.gate_steps == 0 || gate_step_ == 0) return false;
  int64_t running = 0;
  for (const Rank& rank : ranks_) running += static_cast<int64_t>(rank.running.size());
  return running > 0 && running >= config_.gate_min_running;
}

void Engine::FormRankBatch(Rank& rank, std::vector<Entry>* entries, int* cohort, double* swap_bytes,
                           bool hold_prefills, bool admit_new) {
  int64_t budget = config_.max_num_tokens;
  if (hold_prefills) {
    AddDecodes(rank, entries, cohort, &budget);
    return;
  }
  switch (config_.scheduler) {
    case SchedulerKind::kChunked:
      AddDecodes(rank, entries, cohort, &budget);
      AddPrefills(rank, entries, *cohort, &budget, /*whole_prompts=*/false, swap_bytes, admit_new);
      break;
    case SchedulerKind::kMixed:
      AddDecodes(rank, entries, cohort, &budget);
      AddPrefills(rank, entries, *cohort, &budget, /*whole_prompts=*/true, swap_bytes, admit_new);
      break;
    case SchedulerKind::kPrefillFirst:
      AddPrefills(rank, entries, *cohort, &budget, /*whole_prompts=*/true, swap_bytes, admit_new);
      if (entries->empty()) AddDecodes(rank, entries, cohort, &budget);
      break;
    case SchedulerKind::kDecodeFirst: {
      const auto decoding = static_cast<int64_t>(rank.running.size() - rank.prefilling.size());
      const bool crowded = 2 * static_cast<int64_t>(rank.running.size()) > MaxRunning();
      if (decoding > 0 && (crowded || rank.waiting.empty())) {
        AddDecodes(rank, entries, cohort, &budget);
      } else {
        AddPrefills(rank, entries, *cohort, &budget, /*whole_prompts=*/true, swap_bytes, admit_new);
        if (entries->empty()) AddDecodes(rank, entries, cohort, &budget);
      }
      break;
    }
    case SchedulerKind::kStatic:
      // A new batch forms only when the previous one has drained.
      if (rank.running.empty()) {
        while (!rank.waiting.empty() && static_cast<int64_t>(rank.running.size()) < MaxRunning() &&
               Admit(rank, rank.waiting.front(), swap_bytes)) {
        }
      }
      AddPrefills(rank, entries, *cohort, &budget, /*whole_prompts=*/false, swap_bytes, admit_new);
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
    AddPrefills(rank, entries, *cohort, &budget, config_.scheduler != SchedulerKind::kChunked,
                swap_bytes, admit_new);
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

}  // namespace fathom::sim
