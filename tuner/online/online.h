// The online tuner: watches a serving runtime window by window, predicts with the simulator which
// batch limits serve the load it now sees best, and applies them back only when the gain is clear
// and confirmed, undoing a change the next window shows made things worse.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/hardware.h"
#include "sim/deployment_config.h"
#include "sim/workload.h"
#include "traces/request.h"

namespace fathom::tuner {

// Limits a serving runtime can change while it runs: running sequences and tokens per iteration
// per attention rank (vLLM's max_num_seqs and max_num_batched_tokens, TensorRT-LLM's
// max_batch_size and max_num_tokens).
struct BatchLimits {
  int64_t max_batch = 0;
  int64_t max_num_tokens = 0;

  bool operator==(const BatchLimits&) const = default;
  std::string Label() const;  // "256 seqs, 8192 tokens"
};

// What the runtime saw in one observation window.
struct Window {
  double start_s = 0, end_s = 0;
  int64_t arrived = 0;    // requests that came in
  int64_t completed = 0;  // requests that finished
  int64_t dropped = 0;    // requests the runtime failed or refused
  int64_t in_flight = 0;  // at the window's end
  int64_t waiting =
      0;  // of those, requests still without a first token (vLLM's num_requests_waiting)
  std::vector<traces::Request> finished;  // lengths of the finished requests (no times)
  // TTFT of the first tokens in the window (from the gateway: of the requests finished in it, and
  // of the streams still waiting at their age so far), TPOT of the requests finished in it; 0
  // when none.
  double ttft_p99_ms = 0, tpot_p99_ms = 0;

  double ArrivalRate() const { return end_s > start_s ? arrived / (end_s - start_s) : 0; }
};

// What Apply did: the new limits are in force, or the runtime could not start them and serves on
// with the limits before (the change is rolled back), for the reason given.
struct ApplyOutcome {
  bool applied = true;
  std::string why_not;  // "failed to start: ...", or what its canary showed
  // What the runtime started where it is not what was asked (a canary test's injected limits).
  std::optional<BatchLimits> started_instead;
  bool canary_failed = false;  // it started, and its canary showed it worse: banned a while
};

// A serving runtime as the loop sees it.
class ServingRuntime {
 public:
  virtual ~ServingRuntime() = default;
  // Waits for the current window to end and reports it; nullopt once the runtime has no more.
  virtual Result<std::optional<Window>> Observe() = 0;
  // Takes effect from the runtime's next batch; running requests keep their place. An error means
  // the runtime is in no known state, and ends the loop.
  virtual Result<ApplyOutcome> Apply(const BatchLimits& limits) = 0;
};

struct OnlineOptions {
  std::vector<int64_t> max_batch = {64, 128, 256, 512};  // the limits the tuner may choose
  std::vector<int64_t> max_num_tokens = {2048, 4096, 8192};
  double ttft_limit_ms = 2000, tpot_limit_ms = 80;  // p99 service levels
  double headroom = 0.2;  // plan for the forecast arrival rate x (1 + headroom)
  double min_gain =
      0.1;  // change only for a predicted margin this much better (a fraction of
            // the limits); undo a change whose window's TPOT margin is this much worse
  int confirm_windows = 2;   // the same choice this many windows running (1 while limits break)
  int cooldown_windows = 2;  // windows after a change before the next
  int ban_windows = 10;      // an undone choice is not tried again for this long
  // The watchdog: when this many windows break the p99 limits that the model predicts the limits
  // in force keep (TTFT only while the waiting queue does not shrink), the model is wrong about
  // them; back to the other limits that held most recently, and the distrusted ones are no
  // longer taken to have held.
  int distrust_windows = 5;
  int64_t min_requests = 30;  // finished requests needed to predict, and for the guard to judge
  int64_t history_requests = 2000;  // the workload sample: the latest finished requests
  // Each prediction issues Poisson traffic at the planned rate for warmup_s, unmeasured, then
  // probe_s measured: long requests take minutes to fill a system, which a probe from empty misses.
  double warmup_s = 600;
  double probe_s = 300;
  int jobs = 0;  // prediction threads; 0 = all cores
  uint64_t seed = 1;

  Status Validate() const;
};

struct Decision {
  enum class Action { kHold, kApply, kRollback };
  Action action = Action::kHold;
  BatchLimits limits;  // in force after this decision
  std::string reason;
  double forecast_qps = 0;
  // Predicted p99 margin, min(1 - TTFT/limit, 1 - TPOT/limit), at forecast x (1 + headroom):
  // of the limits in force before the decision and of the best choice (NaN when not predicted).
  double current_margin = 0, best_margin = 0;
  double observed_margin = 0;  // the window's own
  OrderedJson ToJson() const;
};
std::string_view Name(Decision::Action a);

// Decides, window by window, which batch limits a deployment should run with.
class Controller {
 public:
  // `deployment` is resolved with the grid's largest limits (the memory a runtime sets aside at
  // start); `initial` are the limits the runtime runs with now.
  static Result<std::unique_ptr<Controller>> Create(const sim::DeploymentConfig& deployment,
                                                    BatchLimits initial, OnlineOptions options,
                                                    const models::HardwareCatalog& catalog,
                                                    const sim::TimeModelFactory& make_time);
  ~Controller();

  Result<Decision> Step(const Window& window);
  const BatchLimits& limits() const { return limits_; }
  // The change Step just decided was not applied (advice only): `in_force` stay, nothing is judged.
  void Withdraw(const BatchLimits& in_force);
  // The runtime could not start the limits Step just chose and still runs `in_force`: those stay,
  // and the failed limits are never chosen again.
  void FailedToStart(const BatchLimits& in_force);
  // The runtime's canary of the limits Step just chose showed them worse, and `in_force` stay:
  // the chosen limits are not tried again for ban_windows when they are what the canary ran.
  void CanaryFailed(const BatchLimits& in_force, bool chosen_ran);
  // The runtime started `actual` in place of the limits Step just chose: they are in force, and
  // the window after judges them.
  void StartedInstead(const BatchLimits& actual);

  // The predicted p99 margin of `limits` at `qps` on the workload sample so far.
  Result<double> PredictMargin(const BatchLimits& limits, double qps) const;

 private:
  Controller(const sim::DeploymentConfig& deployment, BatchLimits initial, OnlineOptions options,
             const models::HardwareCatalog& catalog, const sim::TimeModelFactory& make_time);
  double Margin(double ttft_ms, double tpot_ms) const;
  // `to` by value: a rollback passes guard_->previous, which this resets.
  Decision Change(Decision d, BatchLimits to, Decision::Action action, const Window& w);
  // Why the window after a change says it made things worse; empty when it did not.
  std::string Worse(const Window& w) const;
  // Counts the windows whose p99s contradict the prediction for the limits in force, and where
  // enough have, the other limits that held most recently (not banned) to go back to.
  std::optional<BatchLimits> Distrust(const Window& w, double observed_margin);

  // Each prediction resolves its own copy (time models keep caches and are not shared by threads).
  sim::DeploymentConfig deployment_;
  models::HardwareCatalog catalog_;
  sim::TimeModelFactory make_time_;
  OnlineOptions options_;
  std::vector<BatchLimits> grid_;
  BatchLimits limits_;
  std::vector<traces::Request> sample_;  // ring of the latest finished requests
  size_t sample_next_ = 0;
  std::optional<double> rate_ewma_;
  int64_t last_waiting_ = 0, last_queue_growth_ = 0;
  int windows_since_change_ = 1 << 20;
  std::optional<BatchLimits> pending_;
  int pending_count_ = 0;
  // What the window before a change showed, for the window after it to be judged against.
  struct Guard {
    BatchLimits previous;
    double tpot_margin = 0;    // 1 - p99 TPOT / limit
    int64_t queue_growth = 0;  // change of the waiting queue over the window
    int windows = 0;           // windows waited for enough evidence
    bool held = false;         // it kept both p99 limits: the window after (the canary) must too
  };
  std::optional<Guard> guard_;
  std::vector<std::pair<BatchLimits, int>> banned_;  // choice, windows left
  // The watchdog's evidence: the latest predicted margin of the limits in force (NaN until
  // predicted), the windows running that broke it, and the limits that held, latest last.
  double predicted_in_force_ = std::numeric_limits<double>::quiet_NaN();
  int contradicted_ = 0;
  std::vector<BatchLimits> held_;
  std::vector<BatchLimits> unstartable_;  // limits the runtime failed to start
};

struct OnlineSummary {
  int64_t windows = 0, changes = 0, rollbacks = 0;
  int64_t arrived = 0, completed = 0, dropped = 0;
  int64_t windows_within_limits = 0;  // windows with enough requests to judge, and within both p99s
  int64_t windows_judged = 0;
  OrderedJson ToJson() const;
};

// Observe, decide, apply, until the runtime has no more windows or `max_windows` (0: no cap) are
// done. `on_step` sees every window and its decision (a log line, a JSON record). With `advise`,
// decisions are only reported: nothing is applied.
Result<OnlineSummary> RunOnline(ServingRuntime& runtime, Controller& controller,
                                int64_t max_windows,
                                const std::function<void(const Window&, const Decision&)>& on_step,
                                bool advise = false);

// A live runtime emulated by the simulator, the way Dynamo's mocker stands in for engines: the
// deployment serves a timed request stream and reports a window every `window_s` of simulated
// time; limits applied between windows hold from each engine's next batch.
class SimulatedRuntime : public ServingRuntime {
 public:
  static Result<std::unique_ptr<SimulatedRuntime>> Create(const sim::DeploymentConfig& deployment,
                                                          BatchLimits initial,
                                                          std::unique_ptr<sim::RequestSource> load,
                                                          double window_s,
                                                          const models::HardwareCatalog& catalog,
                                                          const sim::TimeModelFactory& make_time);
  ~SimulatedRuntime() override;

  Result<std::optional<Window>> Observe() override;
  Result<ApplyOutcome> Apply(const BatchLimits& limits) override;

 private:
  SimulatedRuntime() = default;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fathom::tuner
