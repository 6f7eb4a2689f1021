// The offline tuner: search deployments for the best one under MLPerf's rules, simulating each
// candidate, pruning with analytical upper bounds, in parallel, resumable from SQLite.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/hardware.h"
#include "sim/deployment_config.h"
#include "sim/plan.h"
#include "traces/request.h"
#include "tuner/search/search_space.h"

namespace fathom::sim {
class Simulator;
}  // namespace fathom::sim

namespace fathom::tuner {

// Where a search stands, after each candidate.
struct TuneProgress {
  int64_t done = 0, total = 0;  // candidates
  int64_t simulated = 0, reused = 0, pruned = 0;
  double best = 0;  // the best valid objective so far: QPS (server-type scenarios) or tokens/s
};

// One simulation a search ran (TuneOptions::on_run): the candidate, the rate, what the run decided
// and what it cost, so that where a tune spends its time can be seen candidate by candidate.
struct TuneRun {
  sim::DeploymentConfig config;
  double qps = 0;              // a server-type probe's rate; 0 for an Offline run
  int64_t samples = 0;         // requests the run issues at most
  std::string outcome;         // "valid", what broke ("TPOT", ...), "done", "gave up", or an error
  bool stopped_early = false;  // stopped once the p99 limits could no longer be met
  int64_t completed = 0;       // requests completed
  double simulated_s = 0;      // simulated time the run covered
  double wall_s = 0;           // thread seconds it took, setting up included
  OrderedJson ToJson() const;
};

struct TuneOptions {
  SearchSpace space;
  std::vector<traces::Request> dataset;  // the workload's samples
  // The MLPerf benchmark the run is scored against (traces/benchmark.h): its p99 limits where the
  // options give none, and its minimum Server run; empty for none.
  std::string benchmark;
  // Offline run length in samples; 0 = whole data sets lasting LoadGen's 1.1 x 600 s or the
  // benchmark's published run, whichever is longer.
  int64_t offline_samples = 0;
  // Server-type scenarios: each QPS probe issues requests for this long (MLPerf's minimum run;
  // shorter probes never fill the system with long-output requests and look better than they
  // are), at least probe_min_samples and the benchmark's minimum Server run, at most
  // probe_max_samples requests.
  double probe_duration_s = 600;
  int64_t probe_min_samples = 300;
  int64_t probe_max_samples = 250000;
  int qps_steps = 7;                                   // bisection steps of the QPS search
  std::optional<double> ttft_limit_ms, tpot_limit_ms;  // default: the MLPerf benchmark's
  int jobs = 0;                                        // worker threads; 0 = all cores
  std::string db_path;            // results store; empty = none (nothing resumable)
  std::string sweep_id;           // empty = derived from the sweep's inputs
  double price_per_gpu_hour = 0;  // 0 = the hardware's default
  // Called after each candidate, from the worker threads one at a time; empty: none.
  std::function<void(const TuneProgress&)> progress;
  // Called after each simulation, from the worker threads at the same time (it must be
  // thread-safe); empty: none. Runs a candidate takes from the store or a batch sibling are none.
  std::function<void(const TuneRun&)> on_run;
  bool prune = true;
  sim::TimeModelFactory make_time;
  std::string time_model_tag;  // part of the derived sweep id (e.g. calibration file hash)
  // What prices the candidates, as the store and reports name it: a stack ("trtllm-1.0"),
  // "roofline", or a calibration file's path.
  std::string stack;
  uint64_t seed = 1;
};

// Server and Interactive: QPS searched under p99 latency limits (Offline maximises tokens/s).
bool ServerLike(sim::Scenario s);

struct CandidateResult {
  sim::DeploymentConfig config;
  bool valid = false;  // served every request (and, server-type, met the limits)
  // Server-type scenarios: the rate sustained at `qps` (output tokens per second of arrivals),
  // which costs are computed from; Offline: LoadGen's throughput.
  double throughput_tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double loadgen_tokens_per_s = 0;   // what LoadGen would report for the run
  double tokens_per_s_per_user = 0;  // 1000 / mean TPOT
  double qps = 0;                    // highest valid QPS (server-type scenarios)
  double ttft_p99_ms = 0, tpot_p99_ms = 0;
  double cost_per_million_tokens = 0;
  // Analytical upper bound on the objective (server-type: on the QPS the search can find, the grid
  // rate above the bound on the long-run rate).
  double bound = 0;
  // The run behind the figures: samples issued (over all instances) and LoadGen's measured time.
  int64_t run_samples = 0;
  double run_s = 0;
  bool reused = false;  // read back from the results store
  // An invalid candidate: what broke ("TTFT", "TPOT", "TTFT and TPOT", or why no run could serve
  // the requests), and for server-type scenarios the lowest QPS probed with its p99s there
  // (over the requests done when the probe stopped, its limits ruled out).
  std::string failure;
  double failed_qps = 0, failed_ttft_p99_ms = 0, failed_tpot_p99_ms = 0;
  // Server-type search pruned by a probe: it broke the limits just above this QPS, the best found
  // when it was reached, so it cannot beat that best (the search's figures are not known).
  double below_qps = 0;
  // Offline: the tokens/s of the full-length run as its length search's last two shorter runs
  // predict it (durations linear in the passes; 0 when fewer than two ran short). A candidate
  // whose prediction, raised by kScreenMargin, falls below the best found is pruned there
  // (screened, without figures): the screen that spares Offline searches most full-length runs.
  // So is one whose full-length run cannot come within kScreenMargin of the best: the run stops
  // once its clock proves that (its tokens over the time run so far, x the margin, below the best).
  double predicted_tokens_per_s = 0;
  bool screened = false;

  double Objective(bool server) const { return server ? qps : throughput_tokens_per_s; }
  // Pruned by a run of its own (a probe, or the Offline screen): no figures to report.
  bool PrunedByRun() const { return below_qps > 0 || screened; }
  OrderedJson ToJson() const;
  bool operator==(const CandidateResult&) const = default;
};

// One QPS probe of a server-type candidate as its search uses it: whether the rate met the p99
// limits, what broke where it did not, and the figures of a valid one.
struct ProbeOutcome {
  bool valid = false;
  std::string failure;  // invalid: "TTFT", "TPOT", "TTFT and TPOT", or why no run could serve it
  double ttft_p99_ms = 0, tpot_p99_ms = 0;
  double sustained_tokens_per_s = 0, throughput_tokens_per_s = 0, tpot_mean_ms = 0;
  int64_t completed_requests = 0;
  double duration_s = 0;

  OrderedJson ToJson() const;
  // `where` names the source in errors.
  static Result<ProbeOutcome> FromJson(const Json& j, const std::string& where);
  bool operator==(const ProbeOutcome&) const = default;
};

// What a candidate's max_batch sets in each pool of its resolved deployment: the running limit,
// the KV cache (its logits buffer takes memory), the CUDA graphs captured and the requests the
// client keeps in flight on an instance (max_batch x the attention-DP ranks, as MLPerf's
// TensorRT-LLM harness sets it).
struct RunLimits {
  struct Pool {
    int64_t max_batch = 0;
    int stages = 1;
    bool decode_first = false;  // SchedulerKind::kDecodeFirst, which also reads max_batch
    int64_t kv_blocks_per_rank = 0;
    std::vector<int64_t> graph_sizes;
    int64_t max_concurrency = 0;  // sim::EngineConfig's (0: none); the aggregated or prefill pool's
    bool operator==(const Pool&) const = default;
  };
  Pool pool;                   // the aggregated or prefill pool
  std::optional<Pool> decode;  // a disaggregated deployment's decode pool
  static RunLimits Of(const sim::ResolvedDeployment& r);
  // Whether a run under these limits that stayed `slack` (`decode_slack`) clear of them would have
  // run the same under `other`'s: every admission and KV request answered alike, every batch
  // padded to the same graph.
  bool SameRun(const sim::LimitSlack& slack, const sim::LimitSlack& decode_slack,
               const RunLimits& other) const;
};

// Probes shared by candidates that differ only in max_batch (decode_max_batch): a probe run on
// one stands for another at the same rate (an Offline run, of the same samples) where it stayed
// clear of both's batch limits (RunLimits::SameRun), as the runs of a lightly loaded Interactive
// search and the short first runs of an Offline length search do. Thread-safe.
class BatchSiblings {
 public:
  std::optional<ProbeOutcome> Find(int64_t k, const RunLimits& limits) const;
  void Add(int64_t k, const ProbeOutcome& p, const RunLimits& limits, const sim::LimitSlack& slack,
           const sim::LimitSlack& decode_slack);
  int64_t found() const;  // probes Find gave a sibling

 private:
  struct Run {
    ProbeOutcome outcome;
    RunLimits limits;
    sim::LimitSlack slack, decode_slack;
  };
  mutable std::mutex mu_;
  std::map<int64_t, std::vector<Run>> runs_;
  mutable int64_t found_ = 0;
};

// The probes run on one candidate, by grid rate index. A probe's outcome depends only on the
// candidate, the options and the rate, never on the best it was judged against, so a candidate
// simulated again after the best rose, or one whose probes idle workers ran ahead of its search,
// reuses them: the search's outcome is the same with or without them. With siblings joined, a
// probe one of them ran that stands for this candidate is taken as its own. Thread-safe.
class ProbeMemo {
 public:
  std::optional<ProbeOutcome> Find(int64_t k) const;
  bool Has(int64_t k) const { return Find(k).has_value(); }
  void Put(int64_t k, const ProbeOutcome& p);
  // Put, and offered to the siblings with how near the run came to its batch limits.
  void Share(int64_t k, const ProbeOutcome& p, const sim::LimitSlack& slack,
             const sim::LimitSlack& decode_slack);
  void JoinSiblings(std::shared_ptr<BatchSiblings> siblings, RunLimits limits);
  std::map<int64_t, ProbeOutcome> Probes() const;
  // {"k": outcome, ...} (with "slack" and "decode_slack" where known), and its probes added back,
  // shared with the siblings where the slack came with them (`where` names the source in errors).
  OrderedJson ToJson() const;
  Status AddJson(const Json& j, const std::string& where);

 private:
  mutable std::mutex mu_;
  mutable std::map<int64_t, ProbeOutcome> probes_;  // a sibling's found joins them
  // Of the probes run here (Share): how near they came to the batch limits (in ToJson, so that a
  // sweep's coordinator shares what its workers ran).
  std::map<int64_t, std::pair<sim::LimitSlack, sim::LimitSlack>> slack_;
  std::shared_ptr<BatchSiblings> siblings_;
  RunLimits limits_;
};

// Why a search found nothing valid, and what to relax.
struct SearchFailure {
  int64_t out_of_memory = 0;         // candidates that do not fit (Candidates::out_of_memory)
  double least_shortfall_bytes = 0;  // per GPU, of the one that comes closest
  std::string least_shortfall;
  int64_t ttft_broken = 0, tpot_broken = 0,
          unservable = 0;  // simulated candidates, at their lowest load
  // The simulated candidate nearest the limits (least max(p99 / limit) at its lowest QPS), re-run
  // there to the end so its p99s are whole.
  std::optional<CandidateResult> closest;
  std::optional<double> ttft_limit_ms, tpot_limit_ms;
  std::vector<std::string> advice;  // what to relax, most promising first
  OrderedJson ToJson() const;
};

// What a sweep searched, as of its latest run.
struct SweepInfo {
  std::string id;
  std::string model, hardware;
  int gpus = 0;
  sim::Scenario scenario = sim::Scenario::kOffline;
  std::optional<double> ttft_limit_ms, tpot_limit_ms;  // the p99 limits held to (server-type)
  double price_per_gpu_hour = 0;                       // what costs were computed at
  int64_t candidates = 0, infeasible = 0;              // feasible and infeasible in the space
  // False for sweeps stored by a fathom that kept no record: model, GPU and GPU count then come
  // from the candidates, the scenario from whether they have a QPS, and the rest is unknown.
  bool recorded = true;
  std::string stack = "";  // what priced the candidates (TuneOptions::stack); empty: not recorded
  int64_t position = -1;   // the cell's place in its sweep plan; -1 for a tune of its own

  bool ServerLike() const { return tuner::ServerLike(scenario); }
};

struct TuneResult {
  std::string sweep_id;
  std::vector<CandidateResult> simulated;  // simulated or read back, valid or not, in bound order
  std::vector<CandidateResult> ranked;     // valid candidates, best first
  std::vector<CandidateResult> frontier;   // Pareto: tokens/s per GPU vs tokens/s per user
  int64_t candidates = 0;                  // feasible candidates in the space
  int64_t evaluated = 0;                   // simulated in this run
  int64_t reused = 0;                      // answered by the results store
  int64_t pruned = 0;                      // bound below the best found
  int64_t screened = 0;                    // of pruned: by the Offline screen (kScreenMargin)
  int64_t infeasible = 0;                  // invalid layouts or out of memory
  // Probes (Offline: runs of the length search) a candidate took from a batch sibling's run
  // instead of simulating them (BatchSiblings; how many depends on which runs finished first,
  // never what they answer).
  int64_t shared_probes = 0;
  double wall_s = 0;
  std::optional<SearchFailure> failure;  // set when no candidate is valid
};

Result<TuneResult> Tune(const TuneOptions& options, const models::HardwareCatalog& catalog);

// A tune split in two, so that one process can keep the results store while another searches
// (fathom sweep): Prepare checks the options and enumerates the space, Search simulates.
struct PreparedTune {
  Candidates candidates;
  SweepInfo info;  // what the results store records; info.id names the sweep
};
Result<PreparedTune> Prepare(const TuneOptions& options, const models::HardwareCatalog& catalog);

// What an earlier run of the sweep stored, by candidate key, and where each new result goes as it
// completes (`save` is called one result at a time; it may be empty).
struct SearchLog {
  std::map<std::string, Json> stored;
  std::string source;  // where `stored` came from (the store's path), for errors
  std::function<Status(const std::string& key, const CandidateResult& result)> save;
};
// Simulates the prepared candidates, likeliest best first (on `options.jobs` threads), reusing
// stored results and pruning below the best found; does not diagnose an empty result. The outcome
// depends only on the inputs and what is stored, never on the number of threads or on timing.
Result<TuneResult> Search(const TuneOptions& options, const models::HardwareCatalog& catalog,
                          const PreparedTune& prepared, const SearchLog& log);

// One search's bookkeeping, for whoever simulates its candidates (Search's threads, a sweep's work
// pool): candidates are handed out likeliest best first and their results taken in that order,
// each judged against the best taken before it, as one thread would; a result computed against an
// incumbent that has since changed in a way that matters is computed again. Not thread-safe.
class SearchRun {
 public:
  // Borrows its arguments for its lifetime.
  static Result<SearchRun> Start(const TuneOptions& options, const models::HardwareCatalog& catalog,
                                 const PreparedTune& prepared, const SearchLog& log);

  // Work for one worker. A candidate: Evaluate(prepared.candidates.feasible[candidate], options,
  // catalog, beat, Memo(candidate)). Server-type searches go a probe at a time, each one
  // simulation (RunProbe at grid index `probe`, its outcome to FinishProbe), so that one
  // candidate's QPS search spreads over workers; once a candidate has every probe its search
  // needs, its task evaluates it from them without simulating. A probe that a search under way
  // may ask for later goes out early where fewer results stand before it than before any probe
  // asked for now (a worker would otherwise wait, or run a later candidate's).
  struct Task {
    size_t candidate = 0;
    double beat = 0;
    // Results not yet taken before it: candidates before it in order, and for an early probe the
    // outcomes it supposes.
    size_t ahead = 0;
    std::optional<int64_t> probe;
    bool early = false;  // a probe ahead of its search
  };
  // The first candidate not handed out that the best taken so far does not prune; empty when
  // none is left until a result comes back.
  std::optional<Task> Peek();
  void Take(const Task& task);  // hands out what Peek returned
  // A task's result: takes every result that is now next in order (saving each to the log).
  Status Finish(const Task& task, CandidateResult result);
  // A probe task's outcome (kept in the candidate's memo).
  void FinishProbe(const Task& task, const ProbeOutcome& outcome);
  // Whether a task out is of no more use since the best rose: a probe below the rate a search
  // against the best starts from. If so it is forgotten (counted as wasted), and its outcome must
  // not be given to FinishProbe; a worker running it may stop.
  bool Drop(const Task& task);
  // The probes run so far on a candidate (server-type searches; shared with its evaluations).
  ProbeMemo* Memo(size_t candidate) { return items_[item_of_[candidate]].memo.get(); }
  bool done() const { return taken_ == items_.size(); }
  bool server() const { return server_; }

  // Expected cost of the candidates not yet taken, in simulated requests (what their runs issue:
  // the simulator fast-forwards decode steps, so requests, not tokens, set its work), counting
  // those the bounds let through.
  double ExpectedCost() const;
  // Candidates taken so far, of all.
  int64_t taken() const { return static_cast<int64_t>(taken_); }
  int64_t size() const { return static_cast<int64_t>(items_.size()); }
  // Results computed and not used: against an incumbent that changed (computed again), or for a
  // candidate pruned before its turn.
  int64_t wasted() const { return wasted_; }
  int64_t probes_ahead() const { return probes_ahead_; }  // early probes handed out
  // Results further on in order sent back to be searched again as soon as a new best made them
  // stale, not at their turn (wasted() counts them too).
  int64_t requeued() const { return requeued_; }
  TuneResult Outcome() const;

 private:
  struct Item {
    size_t candidate = 0;
    std::string key;
    double bound = 0;
    double estimate = 0;  // the order
    double cost = 0;      // ExpectedCost's share
    // kSearching: server-type, its probes going out one at a time (Task::probe).
    enum class State { kWaiting, kSearching, kOut, kBack, kDropped } state = State::kWaiting;
    double beat = 0;  // what it went out against
    std::optional<CandidateResult> result;
    bool stored = false;
    std::shared_ptr<ProbeMemo> memo = std::make_shared<ProbeMemo>();
    size_t group = 0;  // its batch siblings' (sibling_groups_)
  };
  SearchRun(const TuneOptions& o, const PreparedTune& p, const SearchLog& log)
      : options_(&o), prepared_(&p), log_(&log) {}
  bool Pruned(const Item& item) const;
  Status Advance();
  std::optional<int64_t> OwnProbe(const Item& item, double beat) const;
  // A probe a search under way may ask for later (SearchRun::Peek).
  struct Ahead {
    int64_t probe = 0;
    size_t depth = 0;        // outcomes not yet known that stand before it
    bool long_shot = false;  // it supposes a first probe, the rate above the best, valid
  };
  std::optional<Ahead> ProbeAhead(const Item& item, double beat) const;
  void ProbeBack(const Task& task);  // a probe task no longer out
  bool SendBackIfStale(size_t i);
  void Requeue();

  const TuneOptions* options_;
  const PreparedTune* prepared_;
  const SearchLog* log_;
  bool server_ = false;
  std::vector<Item> items_;            // in the order results are taken
  std::vector<size_t> item_of_;        // by candidate
  size_t taken_ = 0, scan_ = 0;        // results taken; where Peek looks first
  double best_ = 0;                    // the best objective taken (or stored)
  std::vector<CandidateResult> kept_;  // taken results that count as simulated or reused
  int64_t evaluated_ = 0, reused_ = 0, pruned_ = 0, screened_ = 0, wasted_ = 0;
  std::vector<std::shared_ptr<BatchSiblings>> sibling_groups_;  // one a sibling key
  std::set<std::pair<size_t, int64_t>> probing_;  // probe tasks out: (candidate, grid index)
  std::multiset<std::pair<size_t, int64_t>> group_probing_;  // and (sibling group, grid index)
  std::set<size_t> searching_;                               // items kSearching
  int64_t probes_ahead_ = 0, requeued_ = 0;
};

// The valid results, best first (ties in key order).
std::vector<CandidateResult> RankValid(const std::vector<CandidateResult>& results, bool server);
// The valid results no other valid one matches or beats on both tokens/s per GPU and tokens/s
// per user, in increasing tokens/s per user; of equal ones, only the first.
std::vector<CandidateResult> ParetoFrontier(const std::vector<CandidateResult>& results);

// Capacity planning: the fewest GPUs (and so the lowest cost on one GPU type) whose best
// deployment sustains `target_qps` within the latency limits.
struct CapacityStep {
  int gpus = 0;
  bool meets = false;
  std::optional<CandidateResult> best;   // the highest-QPS deployment on this many GPUs
  std::optional<SearchFailure> failure;  // why none is valid, where none is
  double cost_per_hour = 0;
};
struct CapacityPlan {
  std::vector<CapacityStep> steps;  // in the order tried
  std::optional<CapacityStep> chosen;
};
// Tries each count of `gpu_counts` in increasing order and stops at the first that meets the
// target. `options.space.scenario` must be server or interactive.
Result<CapacityPlan> PlanCapacity(const TuneOptions& options, double target_qps,
                                  std::vector<int> gpu_counts,
                                  const models::HardwareCatalog& catalog);

// How far an Offline candidate's full-length tokens/s may exceed the prediction from its shorter
// runs (CandidateResult::predicted_tokens_per_s) before the screen would wrongly prune it: the
// screen prunes a candidate whose prediction x kScreenMargin is below the best found. Ranked
// results come within it of the best: a full-length run whose tokens/s x kScreenMargin is below
// the best stops on its clock.
inline constexpr double kScreenMargin = 1.15;

// The screen's arithmetic. The full-length run's tokens/s as two shorter runs of the length search
// predict it: durations linear in the passes (the ramp and drain once, then a steady time per
// pass), the full run the first whole pass count whose line reaches `target_s`; 0 where the line
// does not rise.
double PredictedTokensPerS(int64_t passes1, double s1, int64_t passes2, double s2,
                           double tokens_per_pass, double target_s);
// The simulated time past which the second of those runs (`passes2`, after `passes1` that lasted
// `s1`) predicts less than `floor` however long it lasts short of `target_s`, so that a run still
// going there is screened as surely as had it run to its end; `target_s` where no such time comes
// before it. The prediction falls as the run lengthens but for a jump up where the line's pass
// count drops by one, so the time is not simply where it crosses the floor.
double ScreenedPastS(int64_t passes1, double s1, int64_t passes2, double tokens_per_pass,
                     double target_s, double floor);
// The least simulated time the work an Offline run has left can take from its last event:
// ThroughputBound's full batches over that work (its prompt tokens per generated token, the mean
// context of its tokens to generate counted from where each sequence stands, so no more than
// theirs), less what the batches in flight compute of it. A lower bound as ThroughputBound is an
// upper one, so a run whose clock plus this passes its give-up time is stopped there, exactly.
double LeastSecondsLeft(const sim::Simulator& simulator);

// Evaluates one candidate (exposed for tests and for the calibration comparison). Server-type:
// with `beat` > 0 the search first probes the grid rate above `beat` and stops there (below_qps)
// when the candidate breaks the limits, since it cannot then beat `beat`. Offline: with `beat` >
// 0 the run-length search stops (screened) once its shorter runs predict less than `beat` /
// kScreenMargin. A server-type search takes the probes it needs from `memo` where they are and
// adds those it runs.
Result<CandidateResult> Evaluate(const sim::DeploymentConfig& d, const TuneOptions& options,
                                 const models::HardwareCatalog& catalog, double beat = 0,
                                 ProbeMemo* memo = nullptr);
// One probe of a server-type candidate at grid rate index `k`, as its search runs it (shared
// through `memo`, when given, with its batch siblings).
Result<ProbeOutcome> RunProbe(const sim::DeploymentConfig& d, const TuneOptions& options,
                              const models::HardwareCatalog& catalog, int64_t k,
                              ProbeMemo* memo = nullptr);
// The same for a plan: its start switched as its triggers fire in every run (Offline runs the
// whole deployment when it switches); the figures are the plan's, `config` its start.
Result<CandidateResult> EvaluatePlan(const sim::Plan& plan, const TuneOptions& options,
                                     const models::HardwareCatalog& catalog, double beat = 0,
                                     ProbeMemo* memo = nullptr);

// A run of `d` as the tuner scores it (Server-type at `qps`, its probe's length; Offline,
// `samples` over the whole deployment), to its end, each iteration's time broken down
// (sim::EngineConfig::cost_breakdown): where a configuration's GPU time goes.
Result<sim::SimulationResult> BreakdownRun(const sim::DeploymentConfig& d,
                                           const TuneOptions& options,
                                           const models::HardwareCatalog& catalog, double qps,
                                           int64_t samples);

}  // namespace fathom::tuner
