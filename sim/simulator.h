// The discrete-event simulation of a serving deployment under an MLPerf-style workload.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/env.h"
#include "base/json_fields.h"
#include "base/random.h"
#include "sim/config.h"
#include "sim/engine.h"
#include "sim/event_queue.h"
#include "sim/mlperf.h"
#include "sim/response_path.h"
#include "sim/run_score.h"
#include "sim/workload.h"

namespace fathom::sim {

struct SimulationSpec {
  PoolSpec pool;                        // aggregated instances, or the prefill pool
  std::optional<PoolSpec> decode_pool;  // set when disaggregated
  EngineConfig engine;
  EngineConfig decode_engine;  // used by the decode pool
  DisaggConfig disagg;
  RouterKind router = RouterKind::kLeastOutstanding;
  ScenarioConfig scenario;
  std::string benchmark;  // model name, for the MLPerf latency limits
  int total_gpus = 1;
};

// When a scheduled configuration switch fires.
struct SwitchTrigger {
  enum class Kind {
    kAfter,            // `value` seconds into the run
    kInSystemAtMost,   // a completion leaves at most `value` requests in the system (a tail)
    kInSystemAtLeast,  // an arrival brings at least `value` requests into the system (a surge)
  };
  Kind kind = Kind::kAfter;
  double value = 0;
  bool operator==(const SwitchTrigger&) const = default;
};
// What happens to the KV of the sequences running when the layout changes.
enum class KvMove {
  kRecompute,  // dropped: each prefills its prompt and the tokens it has generated again
  kMigrate,    // copied to the new layout's ranks before the engines resume
  // Not moved: a rolling replacement on spare GPUs. The old engines serve on until the new ones
  // are up, then take no new request, hand over those that have not started, and finish the rest.
  kDrain,
};

// An aggregated deployment changing configuration during a run. In place (only the batch limits
// change), the engines apply the new limits from their next batch. Otherwise the engines form no
// new batch, and once every batch in the pipeline is done they stop: every sequence leaves them
// with its progress (KvMove says what becomes of its KV), arrivals are held, and after
// `restart_s` (plus the migration) the new engines take the sequences back, oldest first. A drain
// instead starts the new engines beside the old ones (KvMove::kDrain).
struct ConfigSwitch {
  SwitchTrigger when;
  bool in_place = false;
  // Only the instance count changes, with KvMove::kDrain: instances added start beside the
  // running ones after `restart_s`; instances taken away are the last ones, at once, draining as
  // a drain does. The others serve on untouched.
  bool scale_only = false;
  PoolSpec pool;  // the new instances (time model borrowed; unused in place)
  EngineConfig engine;
  int total_gpus = 1;
  KvMove kv = KvMove::kMigrate;
  double restart_s = 0;            // process start, weight load, CUDA-graph capture
  double migrate_bytes_per_s = 0;  // per GPU, for KvMove::kMigrate
};
// What a switch did.
struct SwitchRecord {
  double triggered_s = 0;  // its trigger held
  double stopped_s = 0;  // the last batch in the pipeline was done (a drain: the old took no more)
  double resumed_s = 0;  // the new engines took the first batch's sequences
  int64_t moved = 0;     // sequences taken out of the old engines
  int64_t running = 0;   // of them, holding KV (a drain: left to finish on the old engines)
  double kv_bytes = 0;   // migrated, over all GPUs
  double migrate_s = 0;
  int64_t generated_before = 0;  // tokens generated before the trigger held
};

// A front given work for this share of the arrivals' time or more bounds the run
// (SimulationResult::front_busy_share): its queue, not the GPUs, sets what the client sees.
inline constexpr double kFrontBoundShare = 0.9;

struct SimulationResult {
  int64_t completed_requests = 0;
  int64_t output_tokens = 0;
  int64_t input_tokens = 0;
  // LoadGen's measured time: Offline, until every sample of its one query is done; Server and
  // Interactive, until the last-issued sample is done (later completions of earlier samples do not
  // count); replay and closed loop, until the last completion.
  double duration_s = 0;
  double drain_end_s = 0;  // t = 0 to the last completion
  double throughput_tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  // The rate the run sustains: output tokens per second of arrivals in Server and Interactive
  // (QPS x mean output; a run that keeps its latency limits keeps up with it), which unlike
  // LoadGen's figure does not depend on how long the last-issued sample runs; elsewhere, the
  // throughput.
  double sustained_tokens_per_s = 0;
  double requests_per_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0, ttft_mean_ms = 0;
  double tpot_p50_ms = 0, tpot_p99_ms = 0, tpot_mean_ms = 0;
  double e2e_p50_ms = 0, e2e_p99_ms = 0, e2e_mean_ms = 0;
  std::optional<LatencyLimits> limits;
  bool latency_limits_met = false;
  bool min_duration_met = false;
  bool mlperf_valid = false;
  double run_length_s = 0, min_duration_s = 0;  // LoadGen's run length and the minimum it held to
  // Why the run is not MLPerf-valid, one phrase each ("p99 TTFT 2,310 ms over the 2,000 ms limit");
  // empty when it is.
  std::vector<std::string> InvalidReasons() const;
  // Ended by ScenarioConfig::stop_after_violations or stop_when_clearly_broken: partial figures.
  bool stopped_early = false;
  int64_t ttft_violations = 0, tpot_violations = 0;  // requests over each p99 limit
  // Arrivals over time (Server, Interactive, replay): when the last request arrived, and how many
  // were then still waiting for their first token. A queue holding more than a minute of arrivals
  // at the end is overload: the deployment falls behind the trace and latencies grow with its
  // length.
  double last_arrival_s = 0;
  int64_t waiting_at_last_arrival = 0;
  bool overloaded = false;
  int64_t preemptions = 0;
  // The serving front's response path (ResponsePath), where one is modelled: the share of the
  // time requests arrived (to the last arrival) that the busiest instance's front was given
  // responses to serve, and the output tokens a second one instance's front can stream at most.
  // Near 1, what the client sees waits on the front, not the GPUs.
  double front_busy_share = 0;
  double front_max_tokens_per_s = 0;
  // How near the run came to its batch limits (LimitSlack): the aggregated or prefill pool's,
  // and a disaggregated deployment's decode pool's.
  LimitSlack slack, decode_slack;
  double kv_peak_utilization = 0;
  double prefix_hit_rate = 0;
  int64_t iterations = 0;
  // Little's law: time-average requests in the system vs. arrival rate x mean latency.
  double mean_in_system = 0;
  double arrival_rate_per_s = 0;
  EngineCounters counters;  // summed over engines
  int64_t peak_in_flight = 0;
  std::vector<SwitchRecord> switches;  // configuration switches done, in order

  OrderedJson ToJson() const;
};

// A request's first token or its end, as a live runtime's request metrics see them.
struct RequestRecord {
  int64_t id = 0;
  int64_t input = 0, output = 0;
  double issue_s = 0, first_token_s = 0, done_s = 0;  // done_s: 0 until it has finished
};

class Simulator : public EngineListener {
 public:
  Simulator(SimulationSpec spec, std::unique_ptr<RequestSource> source);
  ~Simulator() override;

  // Optional outputs, borrowed files: per-request CSV rows, Chrome trace events (the caller
  // writes the surrounding brackets), and the event log (one line per event).
  void set_requests_csv(OutputFile* f) { requests_csv_ = f; }
  void set_timeline(OutputFile* f) { timeline_ = f; }
  void set_event_log(OutputFile* f) { event_log_ = f; }

  // Runs to the end (from wherever Advance stopped) and scores the run.
  Result<SimulationResult> Run();

  // A run watched as it goes, as a live runtime is: Advance processes every event due by `until`
  // and moves the clock there; between calls the caller may read the counters below and change
  // the batch limits, which running requests keep their place under and which the engines apply
  // from the next batch they form (aggregated deployments).
  Status Advance(SimTime until);
  Status SetBatchLimits(int64_t max_batch, int64_t max_num_tokens);
  // Queues a configuration switch (aggregated deployments), before the run when its engine orders
  // its queue by prediction (requests issued earlier have none): switches fire one after another,
  // in the order given, each armed once the one before it is done.
  Status ScheduleSwitch(ConfigSwitch s);
  // Switches done go back to the end of the queue: the last one scheduled must return to the
  // start's configuration (a rule that fires whenever its trigger holds again).
  void set_cycle_switches(bool cycle) { cycle_switches_ = cycle; }
  void set_on_first_token(std::function<void(const RequestRecord&)> f) {
    on_first_token_ = std::move(f);
  }
  void set_on_complete(std::function<void(const RequestRecord&)> f) { on_complete_ = std::move(f); }
  // Live serving: a request issued now (the source may have none of its own), tokens as each
  // iteration produces them (needs EngineConfig::implicit_decode off), and what is due next.
  void Inject(const traces::Request& r);
  // Ends a request still in the system after the token it is computing now (a waiting one after
  // its first), its KV freed as any finished request's: a live runtime's client that left. False
  // when no slot has that id. A finished request's slot keeps its id until reused: call it only
  // for a request still in the system, with ids unique over the run (the live engine's are).
  bool Cancel(int64_t request_id);
  void set_on_tokens(std::function<void(int64_t request_id, int64_t count, SimTime t)> f) {
    on_tokens_ = std::move(f);
  }
  std::optional<SimTime> NextEventTime() const;
  int64_t awaiting_first_token() const { return awaiting_first_token_; }
  double KvUtilization() const;     // mean over attention ranks of every engine, now
  EngineCounters Counters() const;  // summed over engines, so far
  SimTime now() const { return queue_.now(); }
  int64_t issued() const { return score_.issued(); }
  int64_t in_system() const { return in_system_; }
  // The work left on the requests in the system (not those in a KV transfer), as of the last
  // event: with the batches in flight, what they compute of it.
  RemainingWork Remaining() const;
  const SimulationSpec& spec() const { return spec_; }
  // No event left: every issued request has finished (or can never be served).
  bool finished() const { return started_ && queue_.empty(); }

  // EngineListener (called by the engines during Run).
  void OnFirstToken(int64_t slot, SimTime t) override;
  void OnComplete(int64_t slot, SimTime t) override;
  void OnPrefillDone(int64_t slot, SimTime t) override;
  void OnTokens(int64_t slot, int64_t count, SimTime t) override;
  void OnIteration(int instance, int stage, SimTime start, SimTime end, int64_t steps,
                   int64_t tokens, int64_t sequences) override;

 private:
  void Issue(const traces::Request& r);
  // The output length the engines' predictor gives a request (EngineConfig::queue_order).
  double PredictedOutput(const traces::Request& r) const;
  // Offline under a predicted queue order: the query's samples sorted as the engines take them,
  // so that each rank's queue is in order as it fills.
  Status SortOfflineQuery();
  // Sends the sequence in `slot` to an instance below its max_concurrency, by the router policy;
  // false, sending nothing, when every instance is at it. `event` names it in the event log
  // ("arrival", or "dispatch" for one the client held).
  bool TryDispatch(int64_t slot, const char* event);
  // Pulls the next request from the source and schedules its arrival at `issue`, or at the
  // source's own time when `issue` is not given. False when the source is exhausted.
  Result<bool> ScheduleNext(std::optional<SimTime> issue);
  // Picks an (engine, rank) of `engines` for the sequence in `slot` by the router policy.
  std::pair<int, int> Route(int64_t slot, const std::vector<int>& engines, RouterKind policy);
  void Kick(int engine);
  // What the client sees, when the response path delivers it (OnFirstToken/OnComplete at once
  // when it does not delay).
  void FirstTokenSeen(int64_t slot, SimTime t);
  void CompletionSeen(int64_t slot, SimTime t);
  void StartIfIdle(int engine);
  // The time before which nothing outside `engine` changes what it does (Engine::TryStart).
  SimTime Horizon(int engine) const;
  void AddEngines(const PoolSpec& pool, const EngineConfig& config, EngineRole role,
                  std::vector<int>* ids);
  // Configuration switches: arming the next, checking a state trigger, stopping the engines,
  // taking the sequences out, and resuming on the new engines.
  void ArmSwitch();
  void CheckSwitchTrigger(bool completion);
  void BeginSwitch();
  void EvacuateIfStopped();
  // The switch due, out of the queue (with cycling, back at its end).
  ConfigSwitch TakeSwitch();
  // A scale-only switch: instances added beside the running ones, or the last ones drained away.
  void ScaleTo();
  // Takes the unstarted sequences of `engines` into evacuated_ (oldest first), counting them and
  // those left running in `record`.
  void TakeUnstartedFrom(const std::vector<int>& engines, SwitchRecord* record);
  // Dispatches the evacuated sequences, oldest first, then the arrivals held meanwhile.
  void DispatchMoved();
  void ResumeAfterSwitch();
  void AdvanceLittle(SimTime now);
  int64_t NewSlot();

  SimulationSpec spec_;
  std::unique_ptr<RequestSource> source_;
  Rng rng_;
  EventQueue queue_;
  std::vector<Sequence> slots_;
  std::vector<int64_t> free_slots_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<int> main_engines_, decode_engines_;
  std::vector<bool> kick_pending_;
  std::vector<SimTime> link_free_;       // per decode engine: its KV ingress link
  std::vector<ResponsePath> responses_;  // per engine
  // Each engine's front busy time handed to it by the latest arrival (empty: no front modelled).
  std::vector<double> front_busy_at_last_issue_;
  std::vector<int> last_stage_;     // per engine
  std::vector<int64_t> in_flight_;  // per main engine: requests sent to it, not yet seen complete
  int64_t peak_instance_in_flight_ = 0;  // the most in_flight_ of any main engine (LimitSlack)
  std::deque<int64_t> held_;       // slots the client holds back (every instance at its limit)
  std::vector<int> open_engines_;  // TryDispatch's: main engines below max_concurrency
  std::unordered_map<int64_t, traces::Request> pending_arrivals_;  // keyed by arrival event
  int64_t next_arrival_key_ = 0;
  std::multiset<SimTime> pending_times_;  // arrivals and KV arrivals not yet processed
  std::multiset<SimTime> kv_arrivals_;    // the KV arrivals of those
  int64_t round_robin_ = 0;
  bool closed_loop_ = false;
  bool started_ = false;
  std::deque<ConfigSwitch> switches_;  // pending, the first armed
  bool switch_due_ = false;            // a SwitchEvent for the armed one is queued
  bool cycle_switches_ = false;
  bool stopping_ = false;           // no new batches: waiting for the pipelines to empty
  bool restarting_ = false;         // engines down
  std::vector<int64_t> evacuated_;  // sequences waiting for the new engines
  std::vector<SwitchRecord> switch_records_;
  std::vector<bool> retired_;  // per engine: replaced by a switch
  // An engine, now or after a switch, takes its queue by predicted length: requests get one.
  bool predict_ = false;
  int phase_gpus_ = 1;  // GPUs the current engines use
  std::function<void(const RequestRecord&)> on_first_token_, on_complete_;
  std::function<void(int64_t, int64_t, SimTime)> on_tokens_;

  // Metrics.
  void CountViolation(int64_t* violations);  // sets stopped_ as ScenarioConfig's stop rules say
  bool Watching() const;  // counting violations as soon as they are certain (stop_after_violations)
  void CountCertainViolations(SimTime now);
  struct Deadline {
    SimTime at;
    int64_t issue_index;
    int64_t slot;
    bool tpot;  // else TTFT
    bool operator>(const Deadline& o) const { return at > o.at; }
  };
  // TTFT deadlines come due in the order requests are issued (issue time + the limit, the clock
  // never going back), so they queue in order; TPOT ones (first token + the limit x its output)
  // in a heap.
  std::deque<Deadline> ttft_deadlines_;
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<Deadline>> deadlines_;
  RunScore score_;
  std::optional<LatencyLimits> limits_;
  int64_t ttft_violations_ = 0, tpot_violations_ = 0;
  bool stopped_ = false;
  uint32_t events_ = 0;  // handled, for polling CancelRequested now and then
  int64_t in_system_ = 0, peak_in_system_ = 0;
  int64_t awaiting_first_token_ = 0, waiting_at_last_issue_ = 0;
  SimTime little_last_{0};
  double little_area_ = 0;  // request-seconds

  OutputFile* requests_csv_ = nullptr;
  OutputFile* timeline_ = nullptr;
  OutputFile* event_log_ = nullptr;
  bool first_timeline_event_ = true;
};

}  // namespace fathom::sim
