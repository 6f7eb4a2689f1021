// Engine: decode cohorts, the bookkeeping of decoding sequences that step together
// (EngineConfig::implicit_decode).
#include <algorithm>
#include <limits>

#include "sim/engine.h"

namespace fathom::sim {

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
  if (c.mtp) {
    if (c.clock >= c.drawn_until) MoveWindow(rank, c);
    s.cohort = cohort;
    s.cohort_mark = c.clock;
    s.cohort_index = c.size();
    c.members.push_back({slot, -1, false, s.admitted_order});
    c.made.resize(c.members.size() * draw_window_);
    c.context += s.kv_len;
    DrawAhead(rank, c, s.cohort_index, c.clock);
    return;
  }
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
  const int64_t window = pool_.sliding_window;
  const bool filling = window > 0 && s.kv_len < window;
  if (filling) {
    ++c.filling;
    c.filling_base += s.kv_len - c.clock;
    c.fills.push({c.clock + window - s.kv_len, slot});
  }
  s.cohort = cohort;
  s.cohort_mark = c.clock;
  s.cohort_index = c.size();
  c.members.push_back({slot, static_cast<int32_t>(phase), filling, s.admitted_order});
  c.base += s.kv_len - c.clock;
  c.completions.push({c.clock + remaining, slot});
}

void Engine::Sync(const Rank& rank, const Cohort& c, Sequence& s) const {
  const int64_t steps = c.clock - s.cohort_mark;
  if (steps == 0) return;
  if (c.mtp) {
    const Progress p = ProgressAt(rank, c, s, c.clock);
    s.kv_len = p.kv_len;
    s.generated = p.generated;
    s.owned_blocks = p.owned_blocks;
    s.kv_high = std::max(s.kv_high, s.kv_len);
    s.cohort_mark = c.clock;
    return;
  }
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
  c.made.clear();
  c.grows.clear();
  c.shrinks.clear();
  c.tokens.clear();
  c.context = 0;
  c.window_start = c.drawn_until = c.clock;
  c.base = 0;
  c.filling = c.filling_base = 0;
  c.fills = {};
  c.ahead = 0;
  std::fill(c.phase_count.begin(), c.phase_count.end(), 0);
  c.completions = {};
  c.tops_current = true;
}

int Engine::AddCohort(Rank& rank) {
  rank.cohorts.emplace_back();
  rank.cohorts.back().phase_count.assign(config_.block_tokens, 0);
  rank.cohorts.back().mtp = config_.mtp_depth > 0;
  return static_cast<int>(rank.cohorts.size()) - 1;
}

// The cohort the next batch's decodes can use: idle cohorts (not in a batch in flight) merge
// into the largest; a new one is made when every cohort is in flight.
int Engine::IdleCohort(Rank& rank) {
  int target = -1;
  for (int i = 0; i < static_cast<int>(rank.cohorts.size()); ++i) {
    const Cohort& c = rank.cohorts[i];
    if (!c.in_flight && (target < 0 || c.size() > rank.cohorts[target].size())) target = i;
  }
  if (target < 0) return AddCohort(rank);
  for (int i = 0; i < static_cast<int>(rank.cohorts.size()); ++i) {
    if (i == target || rank.cohorts[i].in_flight || rank.cohorts[i].size() == 0) continue;
    std::vector<int64_t> moved;
    for (const Cohort::Member& m : rank.cohorts[i].members) moved.push_back(m.slot);
    Dissolve(rank, i);
    for (int64_t slot : moved) Join(rank, target, slot);
  }
  return target;
}

// The idle cohort the next batch's decodes step with: every decoder not in a batch in flight
// (idle cohorts' members and loose ones) or, when they outnumber `room`, the `room` earliest
// admitted of them, those the explicit walk would take (it visits the running sequences in
// admission order); the others wait in another idle cohort. Only members on the wrong side move:
// a pipeline's microbatches, which together hold more than one can step, move none.
int Engine::CohortForBatch(Rank& rank, int64_t room) {
  int64_t idle = static_cast<int64_t>(rank.loose.size());
  for (const Cohort& c : rank.cohorts) idle += c.in_flight ? 0 : c.size();
  if (room <= 0 || idle <= room) {
    const int target = IdleCohort(rank);
    for (int64_t slot : rank.loose) Join(rank, target, slot);
    rank.loose.clear();
    return target;
  }
  // Admission orders travel with the slots (a member's in its cohort entry), so that sorting
  // and dividing them reads no sequence; no two are equal.
  std::vector<int64_t>& orders = order_scratch_;
  orders.clear();
  for (int64_t slot : rank.loose) orders.push_back((*slots_)[slot].admitted_order);
  for (const Cohort& c : rank.cohorts) {
    if (c.in_flight) continue;
    for (const Cohort::Member& m : c.members) orders.push_back(m.admitted);
  }
  std::nth_element(orders.begin(), orders.begin() + (room - 1), orders.end());
  const int64_t last = orders[room - 1];  // the latest admitted that steps
  auto steps = [&](int64_t admitted) { return admitted <= last; };
  // The stepping cohort is the idle one holding most of those that step; the waiting one, the
  // idle one holding most of the others.
  const int n = static_cast<int>(rank.cohorts.size());
  std::vector<int64_t> stepping(n, 0), resting(n, 0);
  for (int k = 0; k < n; ++k) {
    if (rank.cohorts[k].in_flight) continue;
    for (const Cohort::Member& m : rank.cohorts[k].members)
      ++(steps(m.admitted) ? stepping : resting)[k];
  }
  auto most = [&](const std::vector<int64_t>& count, int other) {
    int best = -1;
    for (int k = 0; k < n; ++k) {
      if (k == other || rank.cohorts[k].in_flight) continue;
      if (best < 0 || count[k] > count[best]) best = k;
    }
    return best < 0 ? AddCohort(rank) : best;
  };
  const int target = most(stepping, -1);
  const int rest = most(resting, target);
  for (int k = 0; k < static_cast<int>(rank.cohorts.size()); ++k) {
    Cohort& c = rank.cohorts[k];
    if (c.in_flight) continue;
    std::vector<std::pair<int64_t, int64_t>>& moving = moving_scratch_;
    moving.clear();
    for (const Cohort::Member& m : c.members) {
      if (steps(m.admitted) ? k != target : k != rest) moving.emplace_back(m.admitted, m.slot);
    }
    for (const auto& [admitted, slot] : moving) {
      Leave(rank, c, (*slots_)[slot]);
      Join(rank, steps(admitted) ? target : rest, slot);
    }
    if (c.size() == 0) {
      Dissolve(rank, k);
    } else if (!moving.empty()) {
      PruneStale(k, c);
    }
  }
  for (int64_t slot : rank.loose)
    Join(rank, steps((*slots_)[slot].admitted_order) ? target : rest, slot);
  rank.loose.clear();
  return target;
}

// The cohort took `steps` steps; members whose last token that was leave, in admission order.
void Engine::AdvanceCohort(Rank& rank, int cohort, int64_t steps, SimTime now) {
  Cohort& c = rank.cohorts[cohort];
  c.in_flight = false;
  if (c.mtp) {
    // The blocks held for the run past what its steps kept (rejected drafts' blocks) go back.
    int64_t kept = 0, made = 0;
    for (int64_t j = c.clock - c.window_start; j < c.clock + steps - c.window_start; ++j) {
      kept += c.grows[j] - c.shrinks[j];
      made += c.tokens[j];
    }
    FATHOM_CHECK(c.run_blocks >= kept);
    rank.kv->Release(c.run_blocks - kept);
    c.run_blocks = 0;
    c.context += made;
    counters_.decode_tokens += c.size() * steps * (1 + config_.mtp_depth);
    counters_.generated_tokens += made;
  } else {
    counters_.decode_tokens += c.size() * steps;
    counters_.generated_tokens += c.size() * steps;
  }
  c.clock += steps;
  // Fast-forward stops where a member fills the window, so each does so at a step's end.
  while (!c.fills.empty() && c.fills.top().first <= c.clock) {
    const auto [due, slot] = c.fills.top();
    c.fills.pop();
    c.tops_current = false;
    if (!Fills(c, cohort, due, slot)) continue;
    FATHOM_CHECK(due == c.clock);
    const Sequence& s = (*slots_)[slot];
    c.members[s.cohort_index].filling = false;
    --c.filling;
    c.filling_base -= s.kv_len - s.cohort_mark;
  }
  std::vector<int64_t> done;
  while (!c.completions.empty() && c.completions.top().first <= c.clock) {
    const auto [due, slot] = c.completions.top();
    c.completions.pop();
    c.tops_current = false;
    if (!Completes(c, cohort, due, slot)) continue;
    FATHOM_CHECK(due == c.clock);
    done.push_back(slot);
  }
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
  PruneStale(cohort, c);
}

// Whether `s` is a member of `c`, cohort number `cohort` of its rank: a queue entry of a member
// that left (preempted, moved, done) is stale, and its slot may since be another request's, in a
// cohort of the same number on another rank or instance.
bool Engine::MemberOf(const Cohort& c, int cohort, const Sequence& s) const {
  return s.instance == id_ && s.cohort == cohort && &ranks_[s.rank].cohorts[cohort] == &c;
}

// A completion entry is stale once its member left early, or is due at another step.
bool Engine::Completes(const Cohort& c, int cohort, int64_t due, int64_t slot) const {
  const Sequence& s = (*slots_)[slot];
  if (!MemberOf(c, cohort, s)) return false;
  return c.mtp ? c.members[s.cohort_index].due == due
               : s.cohort_mark + (s.output - s.generated) == due;
}

// A fill entry is stale once its member left or filled the window already.
bool Engine::Fills(const Cohort& c, int cohort, int64_t due, int64_t slot) const {
  const Sequence& s = (*slots_)[slot];
  return MemberOf(c, cohort, s) && c.members[s.cohort_index].filling &&
         s.cohort_mark + pool_.sliding_window - s.kv_len == due;
}

void Engine::PruneStale(int cohort, Cohort& c) const {
  if (c.tops_current) return;
  while (!c.completions.empty() &&
         !Completes(c, cohort, c.completions.top().first, c.completions.top().second)) {
    c.completions.pop();
  }
  while (!c.fills.empty() && !Fills(c, cohort, c.fills.top().first, c.fills.top().second)) {
    c.fills.pop();
  }
  c.tops_current = true;
}

// A member leaves between steps, its counters brought up to date.
void Engine::Leave(const Rank& rank, Cohort& c, Sequence& s) const {
  c.tops_current = false;
  if (c.mtp) Retract(rank, c, s.cohort_index);
  Sync(rank, c, s);
  if (c.mtp) {
    c.context -= s.kv_len;
    const int64_t last = c.size() - 1, window = draw_window_;
    std::copy_n(c.made.begin() + last * window, window, c.made.begin() + s.cohort_index * window);
    c.made.resize(last * window);
  }
  const Cohort::Member m = c.members[s.cohort_index];
  if (m.phase >= 0) {
    --c.phase_count[m.phase];
    // Allocated a block ahead when it joined at this step: it was not among this step's crossings.
    if (c.ahead_clock == c.clock && m.phase == c.clock % config_.block_tokens &&
        HeldTokens(s) - s.kv_len == config_.block_tokens) {
      --c.ahead;
    }
  }
  if (!c.mtp) c.base -= s.kv_len - c.clock;
  if (m.filling) {
    --c.filling;
    c.filling_base -= s.kv_len - c.clock;
  }
  c.members[s.cohort_index] = c.members.back();
  (*slots_)[c.members[s.cohort_index].slot].cohort_index = s.cohort_index;
  c.members.pop_back();
  s.cohort = -1;
}

// The cohort's next step needs more KV blocks than are free: preempt the most recently admitted
// sequences not in a batch in flight until it fits. The explicit walk below ends the same way (it
// keeps the longest admission-order prefix whose blocks fit), but this visits only the victims.
void Engine::ShedForCohort(Rank& rank, int cohort) {
  Cohort& c = rank.cohorts[cohort];
  size_t end = rank.running.size();
  while (!rank.kv->Fits(RunBlocks(c, 1))) {
    while (end > 0 && Busy(rank, (*slots_)[rank.running[end - 1]])) --end;
    if (end == 0) break;
    const int64_t slot = rank.running[--end];
    Sequence& s = (*slots_)[slot];
    if (s.cohort >= 0) Leave(rank, rank.cohorts[s.cohort], s);  // this cohort, or a split's rest
    Preempt(rank, slot);
  }
  PruneStale(cohort, c);
}

int64_t Engine::RunBlocks(const Cohort& c, int64_t steps) const {
  if (!c.mtp) return c.Crossings(0, steps);
  // Blocks grown before a step are held to the run's end; those given back after it, only then.
  int64_t held = 0, most = 0;
  for (int64_t j = c.clock - c.window_start; j < c.clock + steps - c.window_start; ++j) {
    held += c.grows[j];
    most = std::max(most, held);
    held -= c.shrinks[j];
  }
  return most;
}

Engine::Progress Engine::ProgressAt(const Rank& rank, const Cohort& c, const Sequence& s,
                                    int64_t step) const {
  const int64_t pinned = s.pinned_prefix * traces::kPrefixBlockTokens;
  const int64_t made = MadeBefore(c, s.cohort_index, s, step);
  Progress p{s.kv_len + made, s.generated + made, s.owned_blocks, 0};
  if (step > s.cohort_mark) {
    // Past a step a member holds the blocks its KV needs (greedy admission gives the rest back),
    // or with reserve admission the most any step grew it to.
    if (config_.admission == AdmissionPolicy::kGreedy) {
      p.owned_blocks = rank.kv->BlocksFor(p.kv_len - pinned);
    } else {
      const int64_t before = s.kv_len + MadeBefore(c, s.cohort_index, s, step - 1);
      p.owned_blocks =
          std::max(s.owned_blocks, rank.kv->BlocksFor(before + 1 + config_.mtp_depth - pinned));
    }
  }
  p.held_tokens = p.owned_blocks * config_.block_tokens + pinned;
  return p;
}

void Engine::DrawAhead(const Rank& rank, Cohort& c, int64_t index, int64_t from) {
  const Cohort::Member& m = c.members[index];
  if (m.due >= 0) return;  // its last token is drawn already
  const Sequence& s = (*slots_)[m.slot];
  const Progress p = ProgressAt(rank, c, s, from);
  switch (accept_->step_thresholds.size()) {
    case 1:
      return DrawMember<1>(c, index, s, p, from);
    case 2:
      return DrawMember<2>(c, index, s, p, from);
    case 3:
      return DrawMember<3>(c, index, s, p, from);
    default:
      return DrawMember<0>(c, index, s, p, from);
  }
}

// The draws of DrawAhead, the generator's state and the window's rows held in locals (stores to
// the sums could otherwise alias them, and reload them every step).
template <int kDrafts>
void Engine::DrawMember(Cohort& c, int64_t index, const Sequence& s, Progress p, int64_t from) {
  Rng rng = *rng_;
  const StepRule rule = MemberStepRule();
  const std::vector<uint64_t>& all = accept_->step_thresholds;
  const int drafts = static_cast<int>(all.size());
  uint64_t local[kDrafts > 0 ? kDrafts : 1];
  const uint64_t* thresholds = all.data();
  if constexpr (kDrafts > 0) {
    std::copy_n(all.data(), kDrafts, local);
    thresholds = local;
  }
  uint16_t* made = c.made.data() + index * draw_window_;
  int64_t* grows = c.grows.data();
  int64_t* shrinks = c.shrinks.data();
  int64_t* tokens = c.tokens.data();
  const int64_t start = c.window_start, until = c.drawn_until;
  // The loop counts in tokens made since the window's start (`so_far`, as `made` holds them): the
  // member's KV and tokens generated are fixed offsets from it.
  int64_t so_far = MadeBefore(c, index, s, from);
  const int64_t kv_offset = p.kv_len - so_far, end = s.output - p.generated + so_far;
  // Most steps cross no block and leave the rule's sums alone: only a step that starts past
  // `grow_after` (the KV its blocks hold, less a step's tokens) needs the rule. None gives a block
  // back either: after one step by the rule a member holds none past its KV (greedy admission;
  // reserve admission gives none back), and its KV only grows. The first step takes the rule,
  // whatever blocks the member came with. After it the blocks hold the KV and less than a block
  // more (with reserve admission, at least the KV), so where a step's tokens fit in a block a step
  // that needs the rule adds one block, which greedy admission gives back if the step stayed
  // within the others: the rule's answer without its loops.
  int64_t grow_after = std::numeric_limits<int64_t>::min();
  int64_t held = 0;  // the tokens its blocks hold, less kv_offset
  bool one_block = false;
  for (int64_t k = from - start; k < until - start; ++k) {
    int64_t produced = 1 + DrawStep<kDrafts>(rng, thresholds, drafts);
    const bool last = so_far + produced >= end;
    if (last) produced = end - so_far;
    if (so_far > grow_after) [[unlikely]] {
      int64_t grown = 1, shrunk = 0;
      if (one_block) {
        held += rule.block;
        if (rule.give_back && so_far + produced <= held - rule.block) {
          shrunk = 1;
          held -= rule.block;
        }
      } else {
        p.kv_len = kv_offset + so_far;
        p.generated = s.output - end + so_far;
        rule.Step(produced, &p, &grown, &shrunk);
        held = p.held_tokens - kv_offset;
        one_block = rule.step_tokens <= rule.block;
      }
      grows[k] += grown;
      shrinks[k] += shrunk;
      grow_after = held - rule.step_tokens;
    }
    so_far += produced;
    made[k] = static_cast<uint16_t>(so_far);
    tokens[k] += produced;
    if (last) {
      c.members[index].due = start + k + 1;
      c.completions.push({start + k + 1, c.members[index].slot});
      break;
    }
  }
  *rng_ = rng;
}

void Engine::Retract(const Rank& rank, Cohort& c, int64_t index) const {
  const Sequence& s = (*slots_)[c.members[index].slot];
  Progress p = ProgressAt(rank, c, s, c.clock);
  const StepRule rule = MemberStepRule();
  const uint16_t* made = c.made.data() + index * draw_window_;
  int64_t so_far = MadeBefore(c, index, s, c.clock);
  for (int64_t j = c.clock; j < c.drawn_until && p.generated < s.output; ++j) {
    const int64_t k = j - c.window_start;
    const int64_t produced = made[k] - so_far;
    so_far = made[k];
    int64_t grown, shrunk;
    rule.Step(produced, &p, &grown, &shrunk);
    c.grows[k] -= grown;
    c.shrinks[k] -= shrunk;
    c.tokens[k] -= produced;
  }
}

void Engine::MoveWindow(const Rank& rank, Cohort& c) {
  // The steps before the clock are done with; the draws after it stay, counted from the clock
  // (each member's counters synced to it), and more are made.
  const int64_t window = draw_window_;
  const int64_t done = std::min(c.clock - c.window_start, window);
  const int64_t from = std::max(c.drawn_until, c.clock);
  c.made.resize(c.members.size() * window);
  for (int64_t i = 0; i < c.size(); ++i) {
    if (i + kPrefetchAhead < c.members.size()) PrefetchMember(c.members[i + kPrefetchAhead].slot);
    Sequence& s = (*slots_)[c.members[i].slot];
    const auto base = static_cast<uint16_t>(MadeBefore(c, i, s, c.clock));
    Sync(rank, c, s);
    uint16_t* made = c.made.data() + i * window;
    for (int64_t k = done; k < window; ++k) made[k - done] = static_cast<uint16_t>(made[k] - base);
  }
  for (std::vector<int64_t>* sums : {&c.grows, &c.shrinks, &c.tokens}) {
    sums->resize(window);
    std::copy(sums->begin() + done, sums->end(), sums->begin());
    std::fill(sums->end() - done, sums->end(), 0);
  }
  c.window_start = c.clock;
  c.drawn_until = c.clock + window;
  for (int64_t i = 0; i < c.size(); ++i) DrawAhead(rank, c, i, from);
}

}  // namespace fathom::sim
