// One serving-engine instance (a model replica): attention ranks with their own batches and KV
// caches that step together, an iteration-level scheduler, and pipeline stages.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

#include "base/random.h"
#include "base/sim_time.h"
#include "models/batch_shape.h"
#include "models/execution_time.h"
#include "sim/config.h"
#include "sim/kv_cache.h"
#include "sim/sequence.h"
#include "traces/request.h"

namespace fathom::sim {

enum class EngineRole { kAggregated, kPrefill, kDecode };

// Where an engine reports what happened to its requests. Implemented by the Simulator.
class EngineListener {
 public:
  virtual ~EngineListener() = default;
  virtual void OnFirstToken(int64_t slot, SimTime t) = 0;
  virtual void OnComplete(int64_t slot, SimTime t) = 0;
  virtual void OnPrefillDone(int64_t slot, SimTime t) = 0;  // disaggregated prefill instances
  // Tokens a sequence stepped explicitly produced (every token when implicit_decode is off).
  virtual void OnTokens(int64_t slot, int64_t count, SimTime t) {
    (void)slot, (void)count, (void)t;
  }
  // `steps` identical decode iterations back to back (merged into one call), `tokens` over all.
  virtual void OnIteration(int instance, int stage, SimTime start, SimTime end, int64_t steps,
                           int64_t tokens, int64_t sequences) = 0;
};

struct PoolSpec {
  const models::ExecutionTimeModel* time = nullptr;  // borrowed; outlives the simulation
  int instances = 1;
  int ranks = 1;  // attention DP ranks per instance
  int64_t kv_blocks_per_rank = 0;
  int64_t sliding_window = 0;
  double kv_bytes_per_token = 0;  // KV of one token on one GPU (transfers, swaps)
  int stage_gpus = 1;             // GPUs one pipeline stage of an instance runs on

  // Tokens of a sequence a streamed response carries: the engine's own setting, else the stack's.
  int64_t StreamInterval(const EngineConfig& engine) const {
    return engine.stream_interval > 0 ? engine.stream_interval : time->StreamInterval();
  }
};

struct EngineCounters {
  int64_t iterations = 0;
  int64_t prefill_tokens = 0;     // prompt tokens computed (prefix-cache hits excluded)
  int64_t cached_tokens = 0;      // prompt tokens served by the prefix cache
  int64_t recomputed_tokens = 0;  // tokens prefilled again after a recompute preemption
  int64_t decode_tokens = 0;      // query tokens of decode steps (drafts included)
  int64_t generated_tokens = 0;   // tokens sampled
  int64_t preemptions = 0;
  int64_t swapped_bytes = 0;
  SimTime busy{0};
  // GPU-seconds (each stage's time on its GPUs) by where they went (EngineConfig::cost_breakdown;
  // zero otherwise). KV swaps count as unattributed.
  models::StageCost cost;
};

// How near a run came to the limits a pool's max_batch sets, over its engines: the most sequences
// one rank ran at once, the least KvCacheManager::free_slack, and the most requests the client
// kept in flight on one instance (EngineConfig::max_concurrency, which the tuner sizes from
// max_batch; the simulator fills it in). A run of a pool whose max_batch (and the KV cache, CUDA
// graphs and client limit it sizes) none of these reached stands for that pool at another
// max_batch that they also stay clear of (tuner/search shares probes so).
struct LimitSlack {
  int64_t peak_running = 0;
  int64_t kv_free_slack = INT64_MAX;
  int64_t peak_instance_in_flight = 0;
  void Add(const LimitSlack& o) {
    peak_running = std::max(peak_running, o.peak_running);
    kv_free_slack = std::min(kv_free_slack, o.kv_free_slack);
    peak_instance_in_flight = std::max(peak_instance_in_flight, o.peak_instance_in_flight);
  }
};

class Engine {
 public:
  Engine(int id, EngineRole role, const PoolSpec& pool, const EngineConfig& config,
         std::vector<Sequence>* slots, EngineListener* listener, Rng* rng);

  int id() const { return id_; }
  int num_ranks() const { return static_cast<int>(ranks_.size()); }
  // Sequences waiting or running on a rank (the router's key, read for every rank it weighs, so
  // kept apart from the ranks in one array).
  int64_t Outstanding(int rank) const { return outstanding_[rank]; }
  double KvUtilization(int rank) const;
  int64_t PrefixHits(int rank, const std::vector<uint64_t>& prefix) const;
  double PeakKvUtilization() const { return peak_kv_utilization_; }
  const EngineCounters& counters() const { return counters_; }
  EngineRole role() const { return role_; }
  LimitSlack Slack() const;
  int64_t prefix_lookups() const;
  int64_t prefix_hits() const;

  // New limits for the batches formed from now on (running sequences keep their place).
  void SetBatchLimits(int64_t max_batch, int64_t max_num_tokens) {
    config_.max_batch = max_batch;
    config_.max_num_tokens = max_num_tokens;
    graph_sizes_ = CudaGraphSizes(config_, *pool_.time);  // a restarted engine captures anew
  }
  // Queues a sequence on one of this engine's ranks.
  void Enqueue(int rank, int64_t slot);
  // Starts a batch if the first stage is free and there is work. Returns the time the first
  // stage frees up again and, via *done, when the batch leaves the last stage; false when
  // nothing started. Nothing outside this engine changes its state before `horizon`
  // (Simulator::Horizon), which lets a run of pure decode steps be taken as one batch (see
  // fast_forward).
  bool TryStart(SimTime now, SimTime horizon, SimTime* stage_free, SimTime* done,
                int64_t* batch_id);
  void StageFreed() { stage0_busy_ = false; }
  // The batch's sequences leave the last stage. Empty, or the time it now ends: a pipeline's
  // batch in flight that stepped on with the batch formed after it (its done event comes again
  // then; see JointRun).
  std::optional<SimTime> Finish(int64_t batch_id, SimTime now);
  // No batch in the pipeline: every sequence is between iterations.
  bool Idle() const { return in_flight_.empty(); }
  // The earliest this engine can next finish a batch: its first batch in flight's end, `now` when
  // it is idle with work to start, else never before `next_work` (when work can next reach it).
  SimTime EarliestFinish(SimTime now, SimTime next_work) const;
  // Adds the work left on the sequences this engine holds, and what its batches in flight
  // compute of it.
  void AddRemainingWork(RemainingWork* w) const;
  // Takes every sequence out of an idle engine, its KV freed and its progress (kv_len,
  // generated) kept: the running ones in admission order, then the waiting ones in their queue
  // order. For a configuration switch (Simulator::ScheduleSwitch).
  std::vector<int64_t> Evacuate();
  // Takes the waiting sequences that have not started (no token generated, no KV) out of the
  // queues, rank by rank; the rest stay. For a drain (KvMove::kDrain).
  std::vector<int64_t> TakeUnstarted();

 private:
  struct Entry {
    int64_t slot;
    int64_t tokens;   // per step
    int64_t context;  // the sequence's kv_len when the batch formed
    bool decode;
    bool samples;  // a decode step or the last prefill chunk: it produces logits
  };
  // A rank's decoding sequences while they all step together. Members' own counters stand still;
  // the cohort counts its steps (`clock`) and knows, without visiting members, their summed
  // context (and for a sliding-window model its windowed sum), who completes at which step and
  // how many need a new KV block at each step.
  //
  // With MTP a member's tokens per step are drawn: each member's draws for the steps up to
  // `drawn_until` (from `window_start`, at most Engine::draw_window_) are made when it joins or the
  // window moves on, and the cohort sums what they do at each step of the window (KV blocks grown
  // before it and given back after it, tokens generated); completions are known as far as the draws
  // go.
  struct Cohort {
    struct Member {
      int64_t slot;
      int32_t phase;     // needs a new block when clock % block_tokens == phase; -1: never again
      bool filling;      // sliding window: its context has not yet filled the window
      int64_t admitted;  // its Sequence::admitted_order (read here, not from the slot)
      int64_t due = -1;  // MTP: the clock at its last token, -1 while past the draws
    };
    using Due = std::pair<int64_t, int64_t>;  // (clock, slot); stale once the member left early
    using DueQueue = std::priority_queue<Due, std::vector<Due>, std::greater<Due>>;
    std::vector<Member> members;
    bool in_flight = false;  // part of a batch in the pipeline
    int64_t clock = 0;
    int64_t base = 0;  // sum of (kv_len - cohort_mark): summed context = base + size * clock
    std::vector<int64_t> phase_count;  // members per phase
    DueQueue completions;              // at the clock of their last token
    // Sliding window: a step reads kv_len + 1 windowed KV tokens of each member still filling
    // the window (their sum of kv_len - cohort_mark: filling_base), the window of the others.
    int64_t filling = 0, filling_base = 0;
    DueQueue fills;  // at the clock from which each reads the whole window
    // Both queues' tops are entries of members (PruneStale ran, and since then entries were only
    // added, each for a member): a member's leaving or a pop may put a stale entry on top.
    bool tops_current = true;
    // Members that joined at step `ahead_clock` with a block allocated ahead: their phase is
    // registered but they need no block at that step.
    int64_t ahead = 0, ahead_clock = -1;

    // MTP (members draw their tokens a step).
    bool mtp = false;
    int64_t window_start = 0, drawn_until = 0;
    // [member index * draw_window_ + step - window_start]: tokens the member generated from its
    // counters' step (Sequence::cohort_mark) through that step.
    std::vector<uint16_t> made;
    // [step - window_start]: blocks the members add before the step, give back after it, and the
    // tokens they generate in it.
    std::vector<int64_t> grows, shrinks, tokens;
    int64_t context = 0;     // summed kv_len
    int64_t run_blocks = 0;  // blocks added for the run in flight, the first step's and beyond

    int64_t size() const { return static_cast<int64_t>(members.size()); }
    int64_t Context() const { return mtp ? context : base + size() * clock; }
    // Windowed KV tokens read by the step `step` steps ahead (before any member fills it).
    int64_t WindowKv(int64_t step, int64_t window) const {
      return window * (size() - filling) + filling_base + filling * (clock + step + 1);
    }
    // KV blocks the members need for steps clock + from .. clock + to - 1.
    int64_t Crossings(int64_t from, int64_t to) const;
  };
  struct Rank {
    std::unique_ptr<KvCacheManager> kv;
    std::deque<int64_t> waiting;
    std::vector<int64_t> running;     // in admission order
    std::vector<int64_t> prefilling;  // the running ones still prefilling, in admission order
    std::vector<int64_t> loose;       // admitted ready to decode, not yet stepped or in the cohort
    std::vector<Cohort> cohorts;  // more than one with pipeline stages (one per batch in flight)
  };
  struct Batch {
    int64_t id = 0;
    int64_t steps = 1;                      // decode steps taken together (fast-forward)
    SimTime done;                           // when it leaves the last stage
    std::vector<std::vector<Entry>> ranks;  // explicit entries
    std::vector<int> cohort;                // each rank's cohort taking part, or -1
  };

  // What attention-DP balancing decides for the next batch: hold new prefills or not, for how
  // many steps at most, and how its counters move per step.
  struct Balance {
    bool hold = false;
    int64_t max_steps = INT64_MAX;
    enum Counter { kNone, kBatching, kWaiting, kResetWaiting, kResetBoth } counter = kNone;
  };

  // Speculative decoding (engine.cc).
  int64_t DecodeStepTokens(const Sequence& s) const;
  int64_t AcceptedDrafts(int64_t steps);  // drafts accepted over `steps` decode steps
  // One step's drafts accepted, the draw compared in integers (AcceptedDrafts(1); a cohort draws
  // every member's steps, with the thresholds' count known where `kDrafts` is).
  template <int kDrafts = 0>
  static int64_t DrawStep(Rng& rng, const uint64_t* thresholds, int n = kDrafts) {
    const uint64_t bits = rng.Next() >> 11;
    int64_t accepted = 0;
    for (int i = 0; i < (kDrafts > 0 ? kDrafts : n); ++i) accepted += bits >= thresholds[i] ? 1 : 0;
    return accepted;
  }
  int64_t DrawStep() {
    const std::vector<uint64_t>& t = accept_->step_thresholds;
    return DrawStep(*rng_, t.data(), static_cast<int>(t.size()));
  }
  double MeanStepTokens() const;  // tokens a decode step generates on average: 1 + accepted drafts

  // KV blocks, admission and preemption (engine_kv.cc).
  bool Admit(Rank& rank, int64_t slot, double* swap_bytes);
  bool Grow(Rank& rank, Sequence& s, int64_t tokens_after);
  void Preempt(Rank& rank, int64_t slot);
  void ReleaseAll(Rank& rank, Sequence& s);
  void RemoveRunning(Rank& rank, int64_t slot);
  void RemovePrefilling(Rank& rank, int64_t slot);
  // Tokens its KV blocks cover.
  int64_t HeldTokens(const Sequence& s) const {
    return s.owned_blocks * config_.block_tokens + s.pinned_prefix * traces::kPrefixBlockTokens;
  }
  // KV blocks a sequence owns once it holds `tokens` (pinned prefix blocks cover the rest).
  int64_t OwnedBlocksFor(const Rank& rank, const Sequence& s, int64_t tokens) const {
    return rank.kv->BlocksFor(tokens - s.pinned_prefix * traces::kPrefixBlockTokens);
  }
  // Blocks it must add to hold `tokens`: none, without dividing, while its blocks cover them.
  int64_t BlocksToGrow(const Rank& rank, const Sequence& s, int64_t tokens) const {
    if (tokens <= HeldTokens(s)) return 0;
    return std::max<int64_t>(0, OwnedBlocksFor(rank, s, tokens) - s.owned_blocks);
  }

  // Decode cohorts, EngineConfig::implicit_decode (engine_cohort.cc).
  void Join(Rank& rank, int cohort, int64_t slot);
  void Sync(const Rank& rank, const Cohort& cohort, Sequence& s) const;
  void Dissolve(Rank& rank, int cohort);  // every member back to explicit bookkeeping
  int AddCohort(Rank& rank);              // a new, empty one
  int IdleCohort(Rank& rank);
  int CohortForBatch(Rank& rank, int64_t room);
  void AdvanceCohort(Rank& rank, int cohort, int64_t steps, SimTime now);
  void Leave(const Rank& rank, Cohort& c, Sequence& s) const;
  void ShedForCohort(Rank& rank, int cohort);
  bool MemberOf(const Cohort& c, int cohort, const Sequence& s) const;
  bool Completes(const Cohort& c, int cohort, int64_t due, int64_t slot) const;
  bool Fills(const Cohort& c, int cohort, int64_t due, int64_t slot) const;
  void PruneStale(int cohort, Cohort& c) const;  // drops stale entries off the queues' tops
  // KV blocks the cohort adds to take its next `steps` steps (and holds until their end).
  int64_t RunBlocks(const Cohort& c, int64_t steps) const;
  // MTP cohorts (engine_cohort.cc). A member's counters as of a step; `held_tokens` is what its
  // blocks cover (with its pinned prefix), kept beside them so that a step divides nothing.
  struct Progress {
    int64_t kv_len, generated, owned_blocks, held_tokens;
  };
  // Tokens member `index` generated from its counters' step to step `step` (exclusive).
  int64_t MadeBefore(const Cohort& c, int64_t index, const Sequence& s, int64_t step) const {
    return step > s.cohort_mark ? c.made[index * draw_window_ + step - 1 - c.window_start] : 0;
  }
  // A member's counters as of step `step` of its cohort (at most its last drawn).
  Progress ProgressAt(const Rank& rank, const Cohort& c, const Sequence& s, int64_t step) const;
  // One step from `p` generating `produced` tokens: the blocks grown before it (room for every
  // draft, as AddDecodes grows them) and given back after it (the rejected drafts', Finish). The
  // engine's terms are copied into the rule, so that a loop of steps holds them in registers.
  struct StepRule {
    int64_t block, step_tokens;  // KV block tokens; the tokens a step may write (1 + drafts)
    bool give_back;              // greedy admission: blocks past the KV go back after a step
    void Step(int64_t produced, Progress* p, int64_t* grown, int64_t* shrunk) const {
      *grown = *shrunk = 0;
      for (const int64_t before = p->kv_len + step_tokens; p->held_tokens < before;) {
        ++*grown;
        p->held_tokens += block;
      }
      p->owned_blocks += *grown;
      p->kv_len += produced;
      p->generated += produced;
      if (!give_back) return;
      while (p->owned_blocks > *shrunk && p->held_tokens - block >= p->kv_len) {
        ++*shrunk;
        p->held_tokens -= block;
      }
      p->owned_blocks -= *shrunk;
    }
  };
  StepRule MemberStepRule() const {
    return {config_.block_tokens, 1 + config_.mtp_depth,
            config_.admission == AdmissionPolicy::kGreedy};
  }
  // Draws member `index`'s tokens for the steps from `from` to drawn_until (those before drawn)
  // and adds what they do to the window's sums; Retract takes its steps from the clock on back
  // out (before Sync).
  void DrawAhead(const Rank& rank, Cohort& c, int64_t index, int64_t from);
  template <int kDrafts>
  void DrawMember(Cohort& c, int64_t index, const Sequence& s, Progress p, int64_t from);
  void Retract(const Rank& rank, Cohort& c, int64_t index) const;
  // Moves the window on to start at the clock: members synced, their draws made to its end.
  void MoveWindow(const Rank& rank, Cohort& c);
  bool Busy(const Rank& rank, const Sequence& s) const {  // in a batch in flight
    return s.in_flight || (s.cohort >= 0 && rank.cohorts[s.cohort].in_flight);
  }
  // Walks over a rank's sequences read them in no order the memory follows: each loop asks for
  // the sequence kPrefetchAhead places on while it works on this one (a decode step's fields are
  // one cache line, Sequence).
  static constexpr size_t kPrefetchAhead = 8;
  void Prefetch(int64_t slot) const { __builtin_prefetch(slots_->data() + slot); }
  // A cohort member's step fields and its cohort fields (Sequence::cohort_mark, a line on).
  void PrefetchMember(int64_t slot) const {
    Prefetch(slot);
    __builtin_prefetch(&(*slots_)[slot].cohort_mark);
  }

  // Batch forming and attention-DP balance (engine_batch.cc).
  Balance DecideBalance() const;
  void AdvanceBalance(const Balance& b, int64_t steps);
  // `hold_prefills`: decodes only; `admit_new` false: no waiting request joins (prefills already
  // under way continue).
  void FormRankBatch(Rank& rank, std::vector<Entry>* entries, int* cohort, double* swap_bytes,
                     bool hold_prefills, bool admit_new = true);
  // Whether the admission gate (EngineConfig::gate_steps) keeps waiting requests out this
  // iteration: the counter is not 0 and enough sequences run (with none running, the scheduler's
  // empty steps pass the counter round at once).
  bool GateClosed() const;
  // Whether a batch could form now: a request waits, or a running sequence is in no batch in
  // flight (conservative: per-sequence decoders always count). Pipelines ask at every stage-0 end.
  bool HasIdleWork() const;
  bool AddDecodes(Rank& rank, std::vector<Entry>* entries, int* cohort, int64_t* budget);
  void AddPrefills(Rank& rank, std::vector<Entry>* entries, int cohort, int64_t* budget,
                   bool whole_prompts, double* swap_bytes, bool admit_new = true);
  int stages() const { return static_cast<int>(stage_free_at_.size()); }
  int64_t MaxRunning() const { return config_.MaxRunning(stages()); }
  // Sequences the batch being formed may still take: a pipeline's microbatch holds max_batch.
  int64_t Seats(const Rank& rank, const std::vector<Entry>& entries, int cohort) const;

  // Iteration start and finish, beside TryStart and Finish (engine_iteration.cc).
  // How many identical decode steps the formed batch can take at once: until the first sequence
  // completes, the horizon passes, or KV blocks would run out (1 when not a pure decode batch).
  int64_t FastForwardSteps(const Batch& batch) const;
  // Decode steps a decode-only batch may take from `offset` steps into it until one of its
  // sequences completes or fills the sliding window, at most fast_forward (0: not decode-only).
  int64_t RunLimit(const Batch& batch, int64_t offset) const;
  // A pipeline's batch formed while others are in flight, all of them decode-only and nothing
  // waiting: every microbatch steps on together, as one step at a time would schedule them.
  // Returns the formed batch's steps (0: no such state, nothing changed); sets *done.
  int64_t JointRun(const Batch& batch, SimTime now, SimTime horizon, double host_share,
                   SimTime* done);
  // The ranks' shapes `step` steps into the batch, each paying `host_share` of the host's work.
  void ShapeBatch(const Batch& batch, int64_t step, double host_share);

  int id_;
  EngineRole role_;
  PoolSpec pool_;
  EngineConfig config_;
  std::vector<Sequence>* slots_;
  EngineListener* listener_;
  Rng* rng_;
  std::vector<Rank> ranks_;
  std::vector<int64_t> outstanding_;  // each rank's waiting + running (Outstanding)
  int64_t& OutstandingOf(const Rank& rank) { return outstanding_[&rank - ranks_.data()]; }
  std::vector<Batch> in_flight_;
  std::vector<Batch> spare_batches_;  // finished batches, reused to avoid allocations
  std::vector<models::BatchShape> shapes_;
  std::vector<int64_t> graph_sizes_;                         // CudaGraphSizes
  std::vector<std::pair<int64_t, int64_t>> moving_scratch_;  // CohortForBatch's (admitted, slot)
  std::vector<int64_t> order_scratch_;                       // CohortForBatch's admission orders
  std::vector<SimTime> stage_free_at_;
  std::vector<double> ff_first_, ff_slope_, ff_end_;  // fast-forward scratch, by stage
  // JointRun's scratch: by microbatch, then stage.
  std::vector<double> joint_first_, joint_slope_;
  std::vector<SimTime> joint_start_, joint_end_;
  bool stage0_busy_ = false;
  bool implicit_decode_ = false;
  // The draws' tables, the same for every engine of one acceptance and run length (shared).
  struct AcceptTables {
    std::vector<std::vector<double>> cdfs;  // [k - 1]: P(drafts accepted over k steps <= a)
    // [k - 1][g]: where the draw of a uniform u in [g, g + 1) / size starts looking in that CDF.
    std::vector<std::vector<int32_t>> guides;
    // One step's CDF but its last entry, times 2^53 rounded up: a draw of Rng::Uniform's 53 bits
    // at or past entry a accepts more than a drafts (DrawStep).
    std::vector<uint64_t> step_thresholds;
  };
  std::shared_ptr<const AcceptTables> accept_;
  int64_t multi_step_left_ = 0;  // decode steps left in the multi-step run (scheduler_steps)
  int64_t gate_step_ = 0;        // the admission gate's counter, 0..gate_steps (0: open)
  double mean_step_tokens_ = 1;  // MeanStepTokens(), for the contexts of fast-forwarded steps
  // MTP cohorts' draws ahead: twice a run (fast_forward), so that the window moves on at most
  // every other run's worth of steps, within bounds.
  int64_t draw_window_ = 0;
  int64_t next_batch_id_ = 0;
  int64_t admissions_ = 0;
  int64_t adp_waiting_iters_ = 0, adp_batching_iters_ = 0;  // attention-DP balancing counters
  double peak_kv_utilization_ = 0;
  int64_t peak_running_ = 0;  // most sequences running on one rank
  EngineCounters counters_;
};

}  // namespace fathom::sim
