// Engine: KV blocks of each sequence, admission and preemption.
#include <algorithm>
#include <iterator>

#include "sim/engine.h"
#include "traces/request.h"

namespace fathom::sim {

void Engine::RemoveRunning(Rank& rank, int64_t slot) {
  // From the back: preemption victims are the most recently admitted.
  auto it = std::find(rank.running.rbegin(), rank.running.rend(), slot);
  FATHOM_CHECK(it != rank.running.rend());
  rank.running.erase(std::next(it).base());
  --OutstandingOf(rank);
}

void Engine::RemovePrefilling(Rank& rank, int64_t slot) {
  auto it = std::find(rank.prefilling.begin(), rank.prefilling.end(), slot);
  if (it != rank.prefilling.end()) rank.prefilling.erase(it);
}

void Engine::ReleaseAll(Rank& rank, Sequence& s) {
  rank.kv->Release(s.owned_blocks);
  s.owned_blocks = 0;
  rank.kv->Unpin(s.prefix, s.pinned_prefix);
  s.pinned_prefix = 0;
}

bool Engine::Grow(Rank& rank, Sequence& s, int64_t tokens_after) {
  const int64_t need = BlocksToGrow(rank, s, tokens_after);  // mostly none: room in the last block
  if (need == 0) return true;
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
  ++OutstandingOf(rank);
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
  if (!kv.Fits(need + match * kv.prefix_block_kv_blocks())) return false;

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
  peak_running_ = std::max(peak_running_, static_cast<int64_t>(rank.running.size()));
  if (s.prefilling()) {
    rank.prefilling.push_back(slot);
  } else if (implicit_decode_) {
    rank.loose.push_back(slot);
  }
  return true;
}

std::vector<int64_t> Engine::Evacuate() {
  FATHOM_CHECK(Idle());
  multi_step_left_ = 0;
  std::vector<int64_t> running, waiting;
  for (Rank& rank : ranks_) {
    FATHOM_CHECK(OutstandingOf(rank) ==
                 static_cast<int64_t>(rank.waiting.size() + rank.running.size()));
    for (int c = 0; c < static_cast<int>(rank.cohorts.size()); ++c) Dissolve(rank, c);
    for (int64_t slot : rank.running) {
      ReleaseAll(rank, (*slots_)[slot]);
      running.push_back(slot);
    }
    waiting.insert(waiting.end(), rank.waiting.begin(), rank.waiting.end());
    rank.running.clear();
    rank.prefilling.clear();
    rank.loose.clear();
    rank.waiting.clear();
  }
  std::fill(outstanding_.begin(), outstanding_.end(), 0);
  std::stable_sort(running.begin(), running.end(), [&](int64_t a, int64_t b) {
    return (*slots_)[a].admitted_order < (*slots_)[b].admitted_order;
  });
  std::stable_sort(waiting.begin(), waiting.end(), [&](int64_t a, int64_t b) {
    return (*slots_)[a].issue_index < (*slots_)[b].issue_index;
  });
  running.insert(running.end(), waiting.begin(), waiting.end());
  return running;
}

void Engine::AddRemainingWork(RemainingWork* w) const {
  for (const Rank& rank : ranks_) {
    for (int64_t slot : rank.running) {
      const Sequence& s = (*slots_)[slot];
      // A cohort member's tokens since its counters' step.
      const Cohort* c = s.cohort >= 0 ? &rank.cohorts[s.cohort] : nullptr;
      w->Add(s, !c       ? 0
                : c->mtp ? MadeBefore(*c, s.cohort_index, s, c->clock)
                         : c->clock - s.cohort_mark);
    }
    for (int64_t slot : rank.waiting) w->Add((*slots_)[slot], 0);
  }
  for (const Batch& b : in_flight_) {
    for (size_t r = 0; r < b.ranks.size(); ++r) {
      if (b.cohort[r] >= 0) w->in_flight_output += ranks_[r].cohorts[b.cohort[r]].size() * b.steps;
      for (const Entry& e : b.ranks[r]) {
        if (e.decode) {
          w->in_flight_output += e.tokens * b.steps;
        } else {
          w->in_flight_prompt += e.tokens;
          w->in_flight_output += e.samples ? 1 : 0;
        }
      }
    }
  }
}

std::vector<int64_t> Engine::TakeUnstarted() {
  std::vector<int64_t> taken;
  for (Rank& rank : ranks_) {
    std::deque<int64_t> kept;
    for (int64_t slot : rank.waiting) {
      const Sequence& s = (*slots_)[slot];
      if (s.generated == 0 && s.kv_len == 0) {
        taken.push_back(slot);
      } else {
        kept.push_back(slot);
      }
    }
    rank.waiting = std::move(kept);
    OutstandingOf(rank) = static_cast<int64_t>(rank.waiting.size() + rank.running.size());
  }
  return taken;
}

}  // namespace fathom::sim
