// Engine: starting an iteration (its length, fast-forwarded decode steps, stage times) and
// finishing it (tokens produced, sequences that complete or move on).
#include <algorithm>
#include <cmath>

#include "sim/engine.h"
#include "traces/request.h"

namespace fathom::sim {

// With MTP a step generates 1 to 1 + depth tokens (the accepted drafts are drawn per sequence and
// step when the run ends), so the run is as long as no sequence can finish or outgrow its blocks
// even if every draft is accepted.
int64_t Engine::RunLimit(const Batch& batch, int64_t offset) const {
  int64_t steps = config_.fast_forward;
  for (size_t r = 0; r < batch.ranks.size(); ++r) {
    if (batch.cohort[r] >= 0) {
      const Cohort& c = ranks_[r].cohorts[batch.cohort[r]];
      if (!c.completions.empty())
        steps = std::min(steps, c.completions.top().first - c.clock - offset);
      if (!c.fills.empty()) steps = std::min(steps, c.fills.top().first - c.clock - offset);
      if (c.mtp) steps = std::min(steps, c.drawn_until - c.clock - offset);  // as far as drawn
    }
    for (const Entry& e : batch.ranks[r]) {
      if (!e.decode) return 0;
      const Sequence& s = (*slots_)[e.slot];
      const int64_t most = DecodeStepTokens(s);
      steps = std::min(steps, (s.output - s.generated - offset * most + most - 1) / most);
      // A run's step times are interpolated between its first and last: it ends before a
      // sequence's context fills the sliding window (its windowed attention stops growing).
      // Past `offset` steps of a run that ended where a context filled the window, the run ends
      // there (as a cohort's queue of fills says).
      const int64_t window = pool_.sliding_window, kv_len = s.kv_len + offset * most;
      if (window > 0 && s.kv_len < window) {
        steps =
            kv_len >= window
                ? 0
                : std::min(steps, std::max<int64_t>(1, (window - kv_len - e.tokens) / most + 1));
      }
    }
  }
  return steps;
}

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
  int64_t steps = std::max<int64_t>(RunLimit(batch, 0), 1);
  for (size_t r = 0; r < batch.ranks.size(); ++r) {
    int64_t blocks = 0;
    if (batch.cohort[r] >= 0) {
      const Cohort& c = ranks_[r].cohorts[batch.cohort[r]];
      blocks = c.mtp ? RunBlocks(c, steps) - c.run_blocks : c.Crossings(1, steps);
    }
    for (const Entry& e : batch.ranks[r]) {
      const Sequence& s = (*slots_)[e.slot];
      blocks += BlocksToGrow(ranks_[r], s, s.kv_len + steps * DecodeStepTokens(s));
    }
    if (!ranks_[r].kv->Fits(blocks)) return 1;
  }
  return steps;
}

// Copied rather than value-initialised in place: a copy of a constant is plain stores, a fresh
// value a string store per rank (most of ShapeBatch's own time).
const models::BatchShape kEmptyShape{};

void Engine::ShapeBatch(const Batch& batch, int64_t step, double host_share) {
  // The context a decode has grown by `step` steps into a fast-forwarded run (MTP: on average).
  const int64_t decode_grown = std::llround(static_cast<double>(step) * mean_step_tokens_);
  for (size_t r = 0; r < ranks_.size(); ++r) {
    shapes_[r] = kEmptyShape;
    // Without a sliding window a decode's terms are integers, so the decodes are summed here and
    // added at once (the same doubles as an Add each, in any order).
    const bool sum_decodes = pool_.sliding_window == 0;
    models::DecodeSums decodes;
    if (batch.cohort[r] >= 0) {
      const Cohort& c = ranks_[r].cohorts[batch.cohort[r]];
      if (c.mtp) {  // as the explicit path's entries (no sliding window)
        decodes.AddSame(c.size(), 1 + config_.mtp_depth, c.Context() + c.size() * decode_grown);
      } else {
        const int64_t context = c.Context() + c.size() * step;
        const int64_t window = pool_.sliding_window;
        shapes_[r].AddDecodeSteps(
            c.size(), static_cast<double>(context),
            static_cast<double>(window > 0 ? c.WindowKv(step, window) : context + c.size()));
      }
    }
    for (const Entry& e : batch.ranks[r]) {
      if (sum_decodes && e.decode) {
        decodes.Add(e.tokens, e.context + decode_grown);
        continue;
      }
      shapes_[r].Add({e.tokens, e.context + (e.decode ? decode_grown : step), e.decode, e.samples},
                     pool_.sliding_window);
    }
    shapes_[r].AddDecodes(decodes);
  }
  models::PadToCudaGraph(shapes_, graph_sizes_, 1 + config_.mtp_depth);
  for (models::BatchShape& shape : shapes_) {
    shape.host_share = host_share;
    shape.host_ahead = config_.async_scheduling;
  }
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
  const bool gate_closed = GateClosed();
  // Within a multi-step run only its decodes step; a run whose decoders all finished ends.
  for (bool in_run = multi_step_left_ > 0;; in_run = false) {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      FormRankBatch(ranks_[r], &batch.ranks[r], &batch.cohort[r], &swap_bytes,
                    balance.hold || in_run, !gate_closed);
      any = any || batch.cohort[r] >= 0 || !batch.ranks[r].empty();
    }
    if (any || !in_run) break;
    multi_step_left_ = 0;
  }
  if (!any) {
    spare_batches_.push_back(std::move(batch));
    return false;
  }

  int64_t tokens = 0, sequences = 0;
  bool decodes = false, prefills = false;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (batch.cohort[r] >= 0) {
      const Cohort& c = ranks_[r].cohorts[batch.cohort[r]];
      tokens += c.size() * (c.mtp ? 1 + config_.mtp_depth : 1);
      sequences += c.size();
      decodes = true;
    }
    for (const Entry& e : batch.ranks[r]) {
      (*slots_)[e.slot].in_flight = true;
      tokens += e.tokens;
      decodes = decodes || e.decode;
      prefills = prefills || !e.decode;
    }
    sequences += static_cast<int64_t>(batch.ranks[r].size());
  }
  const double draft = decodes ? 1.0 + config_.mtp_depth * config_.draft_cost : 1.0;
  const SimTime swap = FromSeconds(swap_bytes / config_.swap_bytes_per_s);
  auto stage_time = [&](int stage) {
    return SimTime(static_cast<int64_t>(pool_.time->StageTime(shapes_, stage).count() * draft));
  };

  // A batch that only decodes starts or continues a multi-step run: each of its steps pays 1 / N
  // of the host's per-iteration work, and it takes no more steps than the run has left.
  const bool multi_step = config_.scheduler_steps > 1 && !prefills;
  if (!multi_step) multi_step_left_ = 0;
  if (multi_step && multi_step_left_ == 0) multi_step_left_ = config_.scheduler_steps;
  const double host_share = config_.HostShare(!prefills);
  ShapeBatch(batch, 0, host_share);
  // Without a pipeline, a first step that already passes the horizon is the whole batch: no run
  // of steps to look for (the run below would stop after it too).
  const bool one_stage = stage_free_at_.size() == 1;
  const SimTime first = one_stage ? stage_time(0) : SimTime(0);
  const bool past_horizon = one_stage && now + std::max(first, SimTime(1)) >= horizon;
  int64_t steps = swap_bytes > 0 || config_.cost_breakdown || past_horizon
                      ? 1
                      : std::min(FastForwardSteps(batch), balance.max_steps);
  if (multi_step) steps = std::min(steps, multi_step_left_);
  // A closed gate with requests waiting: stop at the step where it opens.
  if (gate_closed && std::any_of(ranks_.begin(), ranks_.end(),
                                 [](const Rank& rank) { return !rank.waiting.empty(); }))
    steps = std::min<int64_t>(steps, config_.gate_steps + 1 - gate_step_);
  SimTime t = now;
  // A pipeline's microbatches that only decode step on together.
  const int64_t joint = !one_stage && !in_flight_.empty() && steps == 1 && !prefills &&
                                swap_bytes == 0 && !config_.cost_breakdown && !multi_step &&
                                config_.fast_forward > 1 && config_.mtp_depth == 0 &&
                                balance.counter == Balance::kNone && !balance.hold
                            ? JointRun(batch, now, horizon, host_share, &t)
                            : 0;
  if (joint > 0) {
    steps = joint;
    *stage_free = stage_free_at_[0];
  } else if (steps > 1) {
    // Stage s of step j takes first + slope * j; a step's stages run one after another (see
    // FastForwardSteps). Stop after the step during which the horizon passes.
    const size_t stages = stage_free_at_.size();
    ff_first_.resize(stages);
    ff_slope_.resize(stages);
    ff_end_.resize(stages);
    for (size_t st = 0; st < stages; ++st) {
      const SimTime d = one_stage ? first : stage_time(static_cast<int>(st));
      ff_first_[st] = static_cast<double>(std::max(d, SimTime(1)).count());
    }
    ShapeBatch(batch, steps - 1, host_share);
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
      SimTime dur = one_stage ? first : stage_time(static_cast<int>(st));
      if (st == 0) dur += swap;
      dur = std::max(dur, SimTime(1));
      if (config_.cost_breakdown) {
        // Draft tokens scale every part; what is left of the stage's time (a swap) is unattributed.
        models::StageCost cost;
        cost.Add(pool_.time->StageCostOf(shapes_, static_cast<int>(st)), draft);
        cost.unattributed += ToSeconds(dur) - cost.Total();
        counters_.cost.Add(cost, pool_.stage_gpus);
      }
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
        Cohort& c = ranks_[r].cohorts[batch.cohort[r]];
        if (c.mtp) {
          const int64_t blocks = RunBlocks(c, steps);
          FATHOM_CHECK(ranks_[r].kv->Allocate(blocks - c.run_blocks));
          c.run_blocks = blocks;
        } else {
          FATHOM_CHECK(ranks_[r].kv->Allocate(c.Crossings(1, steps)));
        }
      }
      for (Entry& e : batch.ranks[r]) {
        const Sequence& s = (*slots_)[e.slot];
        FATHOM_CHECK(Grow(ranks_[r], (*slots_)[e.slot], s.kv_len + steps * DecodeStepTokens(s)));
      }
    }
    peak_kv_utilization_ = std::max(peak_kv_utilization_, KvUtilization(static_cast<int>(r)));
  }
  AdvanceBalance(balance, steps);
  if (multi_step) multi_step_left_ -= steps;
  if (config_.gate_steps > 0) gate_step_ = (gate_step_ + steps) % (config_.gate_steps + 1);
  *done = t;
  stage0_busy_ = true;
  batch.id = next_batch_id_++;
  batch.steps = steps;
  batch.done = t;
  *batch_id = batch.id;
  in_flight_.push_back(std::move(batch));
  counters_.iterations += steps;
  return true;
}

// The step-at-a-time schedule of a pipeline whose microbatches all decode, replayed without
// events: stage 0 takes the microbatch that is idle when it frees (or the first to return), and
// each stage serves steps in the order they reach it. Each microbatch's stage times are
// interpolated between its first and last step, as a single batch's run is. The replay stops
// before a step that would start at or past the horizon, a step past a microbatch's run limit,
// and a moment two microbatches are idle at once (the next batch would merge them). The batches
// in flight take the steps replayed for them (their done events come again at their new ends).
int64_t Engine::JointRun(const Batch& batch, SimTime now, SimTime horizon, double host_share,
                         SimTime* done) {
  // Nothing waits, and every running sequence is in a decode-only batch: this one or one in
  // flight.
  for (const Rank& rank : ranks_)
    if (!rank.waiting.empty()) return 0;
  std::vector<const Batch*> runs{&batch};
  for (const Batch& b : in_flight_) runs.push_back(&b);
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Rank& rank = ranks_[r];
    size_t members = 0;
    for (const Batch* b : runs) {
      for (const Entry& e : b->ranks[r])
        if (!e.decode) return 0;
      members += b->ranks[r].size() +
                 (b->cohort[r] >= 0 ? static_cast<size_t>(rank.cohorts[b->cohort[r]].size()) : 0);
    }
    if (members != rank.running.size()) return 0;
  }
  const size_t n = runs.size(), stages = stage_free_at_.size();
  std::vector<int64_t> offset(n), limit(n), taken(n, 0);
  std::vector<SimTime> ready(n);
  joint_first_.assign(n * stages, 0);
  joint_slope_.assign(n * stages, 0);
  joint_start_.assign(n * stages, SimTime(0));
  joint_end_.assign(n * stages, SimTime(0));
  for (size_t m = 0; m < n; ++m) {
    offset[m] = m == 0 ? 0 : runs[m]->steps;
    limit[m] = m == 0 ? std::max<int64_t>(RunLimit(*runs[m], 0), 1)
                      : std::max<int64_t>(RunLimit(*runs[m], offset[m]), 0);
    ready[m] = m == 0 ? now : runs[m]->done;
    if (limit[m] == 0) continue;
    ShapeBatch(*runs[m], offset[m], host_share);
    for (size_t st = 0; st < stages; ++st) {
      joint_first_[m * stages + st] = static_cast<double>(
          std::max(pool_.time->StageTime(shapes_, static_cast<int>(st)), SimTime(1)).count());
    }
    if (limit[m] == 1) continue;
    ShapeBatch(*runs[m], offset[m] + limit[m] - 1, host_share);
    for (size_t st = 0; st < stages; ++st) {
      const double last = static_cast<double>(
          std::max(pool_.time->StageTime(shapes_, static_cast<int>(st)), SimTime(1)).count());
      joint_slope_[m * stages + st] =
          (last - joint_first_[m * stages + st]) / static_cast<double>(limit[m] - 1);
    }
  }
  // KV blocks for every step the limits allow, or no joint run.
  for (size_t r = 0; r < ranks_.size(); ++r) {
    int64_t blocks = 0;
    for (size_t m = 0; m < n; ++m) {
      const int64_t from = offset[m] + (m == 0 ? 1 : 0), to = offset[m] + limit[m];
      if (runs[m]->cohort[r] >= 0 && to > from)
        blocks += ranks_[r].cohorts[runs[m]->cohort[r]].Crossings(from, to);
      for (const Entry& e : runs[m]->ranks[r]) {
        const Sequence& s = (*slots_)[e.slot];
        blocks += BlocksToGrow(ranks_[r], s, s.kv_len + offset[m] + limit[m]);
      }
    }
    if (!ranks_[r].kv->Fits(blocks)) {
      ShapeBatch(batch, 0, host_share);  // the caller's shapes again
      return 0;
    }
  }

  std::vector<SimTime> free = stage_free_at_;
  SimTime busy(0);
  int64_t steps = 0;
  for (;;) {
    size_t next = 0;
    for (size_t m = 1; m < n; ++m)
      if (ready[m] < ready[next]) next = m;
    const SimTime start = std::max(free[0], ready[next]);
    int idle = 0;
    for (size_t m = 0; m < n; ++m) idle += ready[m] <= start ? 1 : 0;
    if (idle > 1 || taken[next] == limit[next] || (steps > 0 && start >= horizon)) break;
    SimTime t = start;
    for (size_t st = 0; st < stages; ++st) {
      const size_t k = next * stages + st;
      const SimTime d(
          std::llround(joint_first_[k] + joint_slope_[k] * static_cast<double>(taken[next])));
      const SimTime begin = std::max(t, free[st]);
      if (taken[next] == 0) joint_start_[k] = begin;
      t = joint_end_[k] = free[st] = begin + d;
      if (st == 0) busy += d;
    }
    ready[next] = t;
    ++taken[next];
    ++steps;
  }
  if (steps == taken[0]) {  // no batch in flight stepped on: the step as it was
    ShapeBatch(batch, 0, host_share);
    return 0;
  }

  // In the order they end (the serving front takes each run's responses in that order).
  std::vector<size_t> order(n);
  for (size_t m = 0; m < n; ++m) order[m] = m;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ready[a] != ready[b] ? ready[a] < ready[b] : a < b; });
  for (const size_t m : order) {
    if (taken[m] == 0) continue;
    int64_t tokens = 0, sequences = 0;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const Batch& b = *runs[m];
      if (b.cohort[r] >= 0) {
        Cohort& c = ranks_[r].cohorts[b.cohort[r]];
        tokens += c.size();
        sequences += c.size();
        if (m > 0)
          FATHOM_CHECK(ranks_[r].kv->Allocate(c.Crossings(offset[m], offset[m] + taken[m])));
      }
      for (const Entry& e : b.ranks[r]) {
        tokens += e.tokens;
        ++sequences;
        Sequence& s = (*slots_)[e.slot];
        if (m > 0) FATHOM_CHECK(Grow(ranks_[r], s, s.kv_len + offset[m] + taken[m]));
      }
    }
    for (size_t st = 0; st < stages; ++st) {
      listener_->OnIteration(id_, static_cast<int>(st), joint_start_[m * stages + st],
                             joint_end_[m * stages + st], taken[m], tokens * taken[m], sequences);
    }
    if (m == 0) continue;
    Batch& b = in_flight_[m - 1];
    b.steps += taken[m];
    b.done = ready[m];
    counters_.iterations += taken[m];
    if (config_.gate_steps > 0) gate_step_ = (gate_step_ + taken[m]) % (config_.gate_steps + 1);
  }
  counters_.busy += busy;
  stage_free_at_ = free;
  *done = ready[0];
  return taken[0];
}

std::optional<SimTime> Engine::Finish(int64_t batch_id, SimTime now) {
  auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                         [&](const Batch& b) { return b.id == batch_id; });
  FATHOM_CHECK(it != in_flight_.end());
  if (it->done > now) return it->done;
  Batch batch = std::move(*it);
  in_flight_.erase(it);
  for (size_t r = 0; r < batch.ranks.size(); ++r) {
    Rank& rank = ranks_[r];
    if (batch.cohort[r] >= 0) AdvanceCohort(rank, batch.cohort[r], batch.steps, now);
    int joins = batch.cohort[r];  // where this batch's decoders continue
    const std::vector<Entry>& entries = batch.ranks[r];
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      if (i + kPrefetchAhead < entries.size()) Prefetch(entries[i + kPrefetchAhead].slot);
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
          // Drafts that were rejected give back their blocks (none while the last one is used).
          const int64_t keep = HeldTokens(s) - config_.block_tokens < s.kv_len
                                   ? s.owned_blocks
                                   : OwnedBlocksFor(rank, s, s.kv_len);
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
  return std::nullopt;
}

}  // namespace fathom::sim
