#include "tuner/online/online.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/format.h"
#include "base/parallel.h"
#include "base/stats.h"
#include "sim/simulator.h"

namespace fathom::tuner {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// Judging a change waits at most this many windows for enough finished requests.
constexpr int kGuardPatience = 3;

}  // namespace

std::string BatchLimits::Label() const {
  return std::to_string(max_batch) + " seqs, " + std::to_string(max_num_tokens) + " tokens";
}

std::string_view Name(Decision::Action a) {
  switch (a) {
    case Decision::Action::kHold:
      return "hold";
    case Decision::Action::kApply:
      return "apply";
    case Decision::Action::kRollback:
      return "rollback";
  }
  return "?";
}

Status OnlineOptions::Validate() const {
  auto positive = [](const std::vector<int64_t>& v, const char* name) -> Status {
    if (v.empty()) return Status::InvalidArgument(std::string(name) + ": give at least one value");
    for (int64_t x : v) {
      if (x < 1)
        return Status::InvalidArgument(std::string(name) + " = " + std::to_string(x) +
                                       ": must be >= 1");
    }
    return Status::Ok();
  };
  FATHOM_RETURN_IF_ERROR(positive(max_batch, "--max-batch"));
  FATHOM_RETURN_IF_ERROR(positive(max_num_tokens, "--max-num-tokens"));
  auto check = [](bool ok, const std::string& what, double v, const char* rule) -> Status {
    return ok ? Status::Ok()
              : Status::InvalidArgument(what + " = " + StrFormat("%g", v) + ": must be " + rule);
  };
  FATHOM_RETURN_IF_ERROR(check(ttft_limit_ms > 0, "--ttft-ms", ttft_limit_ms, "> 0"));
  FATHOM_RETURN_IF_ERROR(check(tpot_limit_ms > 0, "--tpot-ms", tpot_limit_ms, "> 0"));
  FATHOM_RETURN_IF_ERROR(check(headroom >= 0, "--headroom", headroom, ">= 0"));
  FATHOM_RETURN_IF_ERROR(check(min_gain >= 0, "--min-gain", min_gain, ">= 0"));
  FATHOM_RETURN_IF_ERROR(check(confirm_windows >= 1, "--confirm-windows", confirm_windows, ">= 1"));
  FATHOM_RETURN_IF_ERROR(
      check(cooldown_windows >= 0, "--cooldown-windows", cooldown_windows, ">= 0"));
  FATHOM_RETURN_IF_ERROR(check(ban_windows >= 0, "--ban-windows", ban_windows, ">= 0"));
  FATHOM_RETURN_IF_ERROR(
      check(distrust_windows >= 1, "--distrust-windows", distrust_windows, ">= 1"));
  FATHOM_RETURN_IF_ERROR(
      check(min_requests >= 1, "--min-requests", static_cast<double>(min_requests), ">= 1"));
  FATHOM_RETURN_IF_ERROR(check(history_requests >= min_requests, "--history-requests",
                               static_cast<double>(history_requests), ">= --min-requests"));
  FATHOM_RETURN_IF_ERROR(check(warmup_s >= 0, "--warmup-s", warmup_s, ">= 0"));
  FATHOM_RETURN_IF_ERROR(check(probe_s > 0, "--probe-s", probe_s, "> 0"));
  return Status::Ok();
}

OrderedJson Decision::ToJson() const {
  OrderedJson j;
  j["action"] = std::string(Name(action));
  j["max_batch"] = limits.max_batch;
  j["max_num_tokens"] = limits.max_num_tokens;
  j["reason"] = reason;
  j["forecast_qps"] = forecast_qps;
  auto or_null = [](double v) { return std::isnan(v) ? OrderedJson() : OrderedJson(v); };
  j["current_margin"] = or_null(current_margin);
  j["best_margin"] = or_null(best_margin);
  j["observed_margin"] = or_null(observed_margin);
  return j;
}

OrderedJson OnlineSummary::ToJson() const {
  OrderedJson j;
  j["windows"] = windows;
  j["changes"] = changes;
  j["rollbacks"] = rollbacks;
  j["arrived"] = arrived;
  j["completed"] = completed;
  j["dropped"] = dropped;
  j["windows_judged"] = windows_judged;
  j["windows_within_limits"] = windows_within_limits;
  return j;
}

// ---- Controller ----

Controller::Controller(const sim::DeploymentConfig& deployment, BatchLimits initial,
                       OnlineOptions options, const models::HardwareCatalog& catalog,
                       const sim::TimeModelFactory& make_time)
    : deployment_(deployment),
      catalog_(catalog),
      make_time_(make_time),
      options_(std::move(options)),
      limits_(initial) {}

Controller::~Controller() = default;

Result<std::unique_ptr<Controller>> Controller::Create(const sim::DeploymentConfig& deployment,
                                                       BatchLimits initial, OnlineOptions options,
                                                       const models::HardwareCatalog& catalog,
                                                       const sim::TimeModelFactory& make_time) {
  FATHOM_RETURN_IF_ERROR(options.Validate());
  if (deployment.disaggregated) {
    return Status::InvalidArgument(
        "the online tuner changes the batch limits of aggregated deployments only");
  }
  // The runtime set its memory aside for the limits it started with; it cannot go above them.
  const BatchLimits started{deployment.engine.max_batch, deployment.engine.max_num_tokens};
  auto within = [&](const BatchLimits& l, const std::string& what) -> Status {
    if (l.max_batch <= started.max_batch && l.max_num_tokens <= started.max_num_tokens)
      return Status::Ok();
    return Status::InvalidArgument(
        what + " (" + l.Label() + ") exceeds the limits the runtime started with (" +
        started.Label() + "): its KV cache is planned for at most those");
  };
  FATHOM_RETURN_IF_ERROR(within(initial, "the initial limits"));
  FATHOM_RETURN_IF_ERROR(sim::Resolve(deployment, catalog, make_time).status());  // the layout fits
  std::unique_ptr<Controller> c(
      new Controller(deployment, initial, std::move(options), catalog, make_time));
  for (int64_t b : c->options_.max_batch) {
    for (int64_t t : c->options_.max_num_tokens) {
      const BatchLimits l{b, t};
      FATHOM_RETURN_IF_ERROR(within(l, "the choice"));
      if (std::find(c->grid_.begin(), c->grid_.end(), l) == c->grid_.end()) c->grid_.push_back(l);
    }
  }
  if (std::find(c->grid_.begin(), c->grid_.end(), initial) == c->grid_.end())
    c->grid_.push_back(initial);
  return c;
}

double Controller::Margin(double ttft_ms, double tpot_ms) const {
  return std::min(1 - ttft_ms / options_.ttft_limit_ms, 1 - tpot_ms / options_.tpot_limit_ms);
}

Result<double> Controller::PredictMargin(const BatchLimits& limits, double qps) const {
  if (sample_.empty() || !(qps > 0))
    return Status::InvalidArgument("nothing to predict from: no finished request or no arrivals");
  FATHOM_ASSIGN_OR_RETURN(auto resolved, sim::Resolve(deployment_, catalog_, make_time_));
  sim::SimulationSpec spec = resolved->spec;
  spec.engine.max_batch = limits.max_batch;
  spec.engine.max_num_tokens = limits.max_num_tokens;
  spec.scenario.scenario = sim::Scenario::kReplay;
  spec.scenario.min_duration_s = 0;
  spec.scenario.seed = options_.seed;
  const double total_s = options_.warmup_s + options_.probe_s;
  const int64_t n = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(qps * total_s)), 100, 50000);
  sim::Simulator simulator(std::move(spec), sim::PoissonSource(sample_, n, qps, options_.seed));
  // Only requests issued after the warm-up count: by then long requests fill the system as they
  // fill a runtime that has served this load for a while.
  const double from_s = options_.warmup_s * static_cast<double>(n) / (qps * total_s);
  std::vector<double> ttft, tpot;
  simulator.set_on_complete([&](const sim::RequestRecord& r) {
    if (r.issue_s < from_s) return;
    ttft.push_back((r.first_token_s - r.issue_s) * 1e3);
    if (r.output > 1)
      tpot.push_back((r.done_s - r.first_token_s) * 1e3 / static_cast<double>(r.output - 1));
  });
  if (!simulator.Run().ok())
    return -std::numeric_limits<double>::infinity();  // a request can never be served
  return Margin(Percentile(ttft, 0.99), Percentile(tpot, 0.99));
}

Decision Controller::Change(Decision d, BatchLimits to, Decision::Action action, const Window& w) {
  if (action == Decision::Action::kApply) {
    const double tpot = w.completed > 0 ? 1 - w.tpot_p99_ms / options_.tpot_limit_ms : 0;
    const bool held = w.completed > 0 && Margin(w.ttft_p99_ms, w.tpot_p99_ms) >= 0;
    guard_ = Guard{limits_, tpot, last_queue_growth_, 0, held};
  } else {
    guard_.reset();
  }
  limits_ = to;
  predicted_in_force_ = kNan;
  contradicted_ = 0;
  d.limits = to;
  d.action = action;
  windows_since_change_ = 0;
  pending_.reset();
  pending_count_ = 0;
  return d;
}

// A change made while both limits held must keep them (its window is a canary). Otherwise: TPOT
// follows the batches formed at once, so it is judged directly; TTFT also carries the wait of
// requests queued before the change, so a broken TTFT counts against the change only while the
// waiting queue still grows: a change made to mend broken limits must at least stop that (one that
// only slows it, or serves fewer requests to fewer arrivals, leaves the limits broken for good).
std::string Controller::Worse(const Window& w) const {
  if (w.dropped > 0) return std::to_string(w.dropped) + " requests dropped";
  if (guard_->held && w.completed > 0 && Margin(w.ttft_p99_ms, w.tpot_p99_ms) < 0) {
    return "the canary window broke the p99 limits that held before (TTFT " +
           StrFormat("%.0f", w.ttft_p99_ms) + " ms, TPOT " + StrFormat("%.0f", w.tpot_p99_ms) +
           " ms)";
  }
  const double tpot = 1 - w.tpot_p99_ms / options_.tpot_limit_ms;
  if (w.completed > 0 && tpot < 0 && tpot < guard_->tpot_margin - options_.min_gain) {
    return "p99 TPOT " + StrFormat("%.0f", w.tpot_p99_ms) + " ms broke the limit (margin " +
           StrFormat("%.2f", guard_->tpot_margin) + " before, " + StrFormat("%.2f", tpot) +
           " after)";
  }
  if (w.ttft_p99_ms > options_.ttft_limit_ms && last_queue_growth_ > 0) {
    return "p99 TTFT " + StrFormat("%.0f", w.ttft_p99_ms) +
           " ms broke the limit and the queue grew by " + std::to_string(last_queue_growth_) +
           " (" + std::to_string(guard_->queue_growth) + " the window before)";
  }
  return "";
}

std::optional<BatchLimits> Controller::Distrust(const Window& w, double observed_margin) {
  if (w.completed < options_.min_requests) return std::nullopt;  // too little to judge by
  if (observed_margin >= 0) {
    contradicted_ = 0;
    std::erase(held_, limits_);
    held_.push_back(limits_);
    return std::nullopt;
  }
  // A broken TTFT also carries the wait of requests queued before (as in Worse): it counts against
  // the limits only while the waiting queue does not shrink; a backlog draining neither counts
  // nor clears the count.
  const bool tpot_broken = w.completed > 0 && w.tpot_p99_ms > options_.tpot_limit_ms;
  if (!tpot_broken && last_queue_growth_ < 0) return std::nullopt;
  contradicted_ = predicted_in_force_ >= 0 ? contradicted_ + 1 : 0;  // NaN: no prediction
  if (contradicted_ < options_.distrust_windows) return std::nullopt;
  for (auto it = held_.rbegin(); it != held_.rend(); ++it) {
    const bool banned =
        std::any_of(banned_.begin(), banned_.end(), [&](const auto& b) { return b.first == *it; });
    if (!(*it == limits_) && !banned) return *it;
  }
  return std::nullopt;
}

void Controller::Withdraw(const BatchLimits& in_force) {
  limits_ = in_force;
  predicted_in_force_ = kNan;
  guard_.reset();
}

void Controller::FailedToStart(const BatchLimits& in_force) {
  unstartable_.push_back(limits_);
  Withdraw(in_force);
}

void Controller::CanaryFailed(const BatchLimits& in_force, bool chosen_ran) {
  if (chosen_ran) banned_.emplace_back(limits_, options_.ban_windows);
  Withdraw(in_force);
}

void Controller::StartedInstead(const BatchLimits& actual) {
  limits_ = actual;
  predicted_in_force_ = kNan;  // the prediction was the chosen limits'
}

Result<Decision> Controller::Step(const Window& w) {
  Decision d;
  d.limits = limits_;
  d.current_margin = d.best_margin = kNan;
  d.observed_margin = w.completed > 0 ? Margin(w.ttft_p99_ms, w.tpot_p99_ms) : kNan;
  for (const traces::Request& r : w.finished) {
    if (static_cast<int64_t>(sample_.size()) < options_.history_requests) {
      sample_.push_back(r);
    } else {
      sample_[sample_next_] = r;
      sample_next_ = (sample_next_ + 1) % sample_.size();
    }
  }
  // Forecast: up at once with the load, down slowly (an average over the windows).
  const double rate = w.ArrivalRate();
  rate_ewma_ = rate_ewma_ ? 0.5 * rate + 0.5 * *rate_ewma_ : rate;
  d.forecast_qps = std::max(rate, *rate_ewma_);
  ++windows_since_change_;
  for (auto& [limits, left] : banned_) --left;
  std::erase_if(banned_, [](const auto& b) { return b.second <= 0; });

  last_queue_growth_ = w.waiting - last_waiting_;
  last_waiting_ = w.waiting;

  // The window after a change judges it.
  if (guard_) {
    if (w.dropped == 0 && w.completed < options_.min_requests &&
        ++guard_->windows < kGuardPatience) {
      d.reason = "judging the change: " + std::to_string(w.completed) + " requests finished, " +
                 std::to_string(options_.min_requests) + " needed";
      return d;
    }
    if (const std::string why = Worse(w); !why.empty()) {
      banned_.emplace_back(limits_, options_.ban_windows);
      d.reason = why + " after the change to " + limits_.Label();
      return Change(d, guard_->previous, Decision::Action::kRollback, w);
    }
    guard_.reset();
  }
  if (const std::optional<BatchLimits> back = Distrust(w, d.observed_margin)) {
    banned_.emplace_back(limits_, options_.ban_windows);
    std::erase(held_, limits_);
    d.reason = StrFormat(
                   "%d windows running broke the p99 limits (margin %.2f now) where the model "
                   "predicts %.2f for ",
                   contradicted_, d.observed_margin, predicted_in_force_) +
               limits_.Label() + ": back to " + back->Label() + ", the last other limits that held";
    return Change(d, *back, Decision::Action::kRollback, w);
  }
  if (static_cast<int64_t>(sample_.size()) < options_.min_requests) {
    d.reason = "too little evidence: " + std::to_string(sample_.size()) + " of " +
               std::to_string(options_.min_requests) + " finished requests";
    return d;
  }
  if (windows_since_change_ <= options_.cooldown_windows) {
    d.reason = "cooling down after the last change";
    return d;
  }
  if (!(d.forecast_qps > 0)) {
    d.reason = "no arrivals";
    return d;
  }

  // Predict every choice not banned (and the limits in force) at the planned rate.
  std::vector<BatchLimits> choices;
  for (const BatchLimits& l : grid_) {
    const bool banned =
        std::any_of(banned_.begin(), banned_.end(), [&](const auto& b) { return b.first == l; }) ||
        std::find(unstartable_.begin(), unstartable_.end(), l) != unstartable_.end();
    if (l == limits_ || !banned) choices.push_back(l);
  }
  const double qps = d.forecast_qps * (1 + options_.headroom);
  std::vector<Result<double>> margins(choices.size(), Status::InvalidArgument("not run"));
  ParallelFor(choices.size(), options_.jobs,
              [&](size_t i) { margins[i] = PredictMargin(choices[i], qps); });
  size_t best = 0, current = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    FATHOM_RETURN_IF_ERROR(margins[i].status());
    if (choices[i] == limits_) current = i;
    if (*margins[i] > *margins[best]) best = i;
  }
  d.current_margin = predicted_in_force_ = *margins[current];
  d.best_margin = *margins[best];
  const std::string at = " at " + StrFormat("%.2f", qps) + " QPS";
  // Far past the limits, margins differ by noise: the gain needed grows with the shortfall.
  const double needed_gain = options_.min_gain * std::max(1.0, -d.current_margin);
  auto clear_gain = [&](double m) { return m >= d.current_margin + needed_gain; };
  if (best == current || !clear_gain(d.best_margin)) {
    pending_.reset();
    pending_count_ = 0;
    d.reason = "keeping " + limits_.Label() + ": predicted margin " +
               StrFormat("%.2f", d.current_margin) + at + ", best " +
               StrFormat("%.2f", d.best_margin);
    if (d.best_margin < 0)
      d.reason += "; no choice keeps the limits at this rate: it needs more GPUs";
    return d;
  }
  // A clear gain: confirmed over windows (at once when the limits break now and are predicted to).
  // A proposal stays pending while it still clearly beats the limits in force and is within
  // min_gain of the best, so near-equal choices trading places do not restart the count.
  size_t pick = best;
  const auto pending =
      pending_ ? std::find(choices.begin(), choices.end(), *pending_) : choices.end();
  if (pending != choices.end()) {
    const double m = *margins[pending - choices.begin()];
    if (clear_gain(m) && m >= d.best_margin - options_.min_gain) {
      pick = pending - choices.begin();
    }
  }
  const BatchLimits& choice = choices[pick];
  if (pending_ == choice) {
    ++pending_count_;
  } else {
    pending_ = choice;
    pending_count_ = 1;
  }
  const bool urgent =
      !std::isnan(d.observed_margin) && d.observed_margin < 0 && d.current_margin < 0;
  const int needed = urgent ? 1 : options_.confirm_windows;
  const std::string gain = choice.Label() + ": predicted margin " +
                           StrFormat("%.2f", *margins[pick]) + " against " +
                           StrFormat("%.2f", d.current_margin) + at;
  if (pending_count_ < needed) {
    d.reason = "proposing " + gain + " (" + std::to_string(pending_count_) + " of " +
               std::to_string(needed) + " windows)";
    return d;
  }
  d.reason = (urgent ? "limits broken, changing to " : "changing to ") + gain;
  return Change(d, choice, Decision::Action::kApply, w);
}

Result<OnlineSummary> RunOnline(ServingRuntime& runtime, Controller& controller,
                                int64_t max_windows,
                                const std::function<void(const Window&, const Decision&)>& on_step,
                                bool advise) {
  OnlineSummary s;
  while (max_windows <= 0 || s.windows < max_windows) {
    FATHOM_ASSIGN_OR_RETURN(std::optional<Window> w, runtime.Observe());
    if (!w) break;
    const BatchLimits in_force = controller.limits();
    FATHOM_ASSIGN_OR_RETURN(Decision d, controller.Step(*w));
    if (advise && d.action != Decision::Action::kHold) {
      controller.Withdraw(in_force);
    } else if (d.action != Decision::Action::kHold) {
      FATHOM_ASSIGN_OR_RETURN(const ApplyOutcome outcome, runtime.Apply(d.limits));
      if (!outcome.applied && outcome.canary_failed) {
        controller.CanaryFailed(in_force,
                                !outcome.started_instead || *outcome.started_instead == d.limits);
      } else if (!outcome.applied) {
        controller.FailedToStart(in_force);
      }
      if (!outcome.applied) {
        const bool instead = outcome.started_instead && !(*outcome.started_instead == d.limits);
        d.reason +=
            "; rolled back, " +
            (instead ? outcome.started_instead->Label() + " (started instead)" : d.limits.Label()) +
            ": " + outcome.why_not;
        d.action = Decision::Action::kRollback;
        d.limits = in_force;
      } else if (outcome.started_instead && !(*outcome.started_instead == d.limits)) {
        d.reason += "; the runtime started " + outcome.started_instead->Label() + " instead of " +
                    d.limits.Label();
        d.limits = *outcome.started_instead;
        controller.StartedInstead(d.limits);
      }
      ++(d.action == Decision::Action::kApply ? s.changes : s.rollbacks);
    }
    ++s.windows;
    s.arrived += w->arrived;
    s.completed += w->completed;
    s.dropped += w->dropped;
    if (!std::isnan(d.observed_margin) && w->completed >= 1) {
      ++s.windows_judged;
      if (d.observed_margin >= 0) ++s.windows_within_limits;
    }
    if (on_step) on_step(*w, d);
  }
  return s;
}

// ---- SimulatedRuntime ----

struct SimulatedRuntime::State {
  std::unique_ptr<sim::ResolvedDeployment> resolved;
  std::unique_ptr<sim::Simulator> simulator;
  double window_s = 0;
  double window_start_s = 0;
  int64_t issued_before = 0;
  int64_t first_tokens = 0;  // since the start
  // In the current window, as a runtime's histograms record them: TTFT at the first token, TPOT
  // and lengths at the end.
  std::vector<double> ttft_ms, tpot_ms;
  std::vector<traces::Request> finished;
  bool over = false;
};

SimulatedRuntime::~SimulatedRuntime() = default;

Result<std::unique_ptr<SimulatedRuntime>> SimulatedRuntime::Create(
    const sim::DeploymentConfig& deployment, BatchLimits initial,
    std::unique_ptr<sim::RequestSource> load, double window_s,
    const models::HardwareCatalog& catalog, const sim::TimeModelFactory& make_time) {
  // Windows of simulated time: shorter than a second they hold no evidence and only multiply.
  if (!(window_s >= 1) || !std::isfinite(window_s)) {
    return Status::InvalidArgument("--window-s = " + StrFormat("%g", window_s) +
                                   ": must be >= 1 and finite");
  }
  auto state = std::make_unique<State>();
  FATHOM_ASSIGN_OR_RETURN(state->resolved, sim::Resolve(deployment, catalog, make_time));
  sim::SimulationSpec spec = state->resolved->spec;
  spec.scenario.scenario = sim::Scenario::kReplay;
  spec.scenario.min_duration_s = 0;
  state->simulator = std::make_unique<sim::Simulator>(std::move(spec), std::move(load));
  FATHOM_RETURN_IF_ERROR(
      state->simulator->SetBatchLimits(initial.max_batch, initial.max_num_tokens));
  State* raw = state.get();
  state->simulator->set_on_first_token([raw](const sim::RequestRecord& r) {
    ++raw->first_tokens;
    raw->ttft_ms.push_back((r.first_token_s - r.issue_s) * 1e3);
  });
  state->simulator->set_on_complete([raw](const sim::RequestRecord& r) {
    if (r.output > 1)
      raw->tpot_ms.push_back((r.done_s - r.first_token_s) * 1e3 /
                             static_cast<double>(r.output - 1));
    traces::Request q;
    q.id = r.id;
    q.input_tokens = r.input;
    q.output_tokens = r.output;
    raw->finished.push_back(q);
  });
  state->window_s = window_s;
  std::unique_ptr<SimulatedRuntime> runtime(new SimulatedRuntime());
  runtime->state_ = std::move(state);
  return runtime;
}

Result<std::optional<Window>> SimulatedRuntime::Observe() {
  State& st = *state_;
  if (st.over) return std::optional<Window>();
  const double end = st.window_start_s + st.window_s;
  FATHOM_RETURN_IF_ERROR(st.simulator->Advance(FromSeconds(end)));
  Window w;
  w.start_s = st.window_start_s;
  w.end_s = end;
  w.arrived = st.simulator->issued() - st.issued_before;
  w.completed = static_cast<int64_t>(st.finished.size());
  w.in_flight = st.simulator->in_system();
  w.waiting = st.simulator->issued() - st.first_tokens;
  w.finished = std::move(st.finished);
  w.ttft_p99_ms = Percentile(st.ttft_ms, 0.99);
  w.tpot_p99_ms = Percentile(st.tpot_ms, 0.99);
  st.finished.clear();
  st.ttft_ms.clear();
  st.tpot_ms.clear();
  st.issued_before = st.simulator->issued();
  st.window_start_s = end;
  if (st.simulator->finished()) {
    if (st.simulator->in_system() > 0) {
      return Status::InvalidArgument(
          std::to_string(st.simulator->in_system()) +
          " requests can never be served: each needs more KV cache than an attention "
          "rank has");
    }
    st.over = true;
  }
  return std::optional<Window>(std::move(w));
}

Result<ApplyOutcome> SimulatedRuntime::Apply(const BatchLimits& limits) {
  FATHOM_RETURN_IF_ERROR(
      state_->simulator->SetBatchLimits(limits.max_batch, limits.max_num_tokens));
  return ApplyOutcome{};
}

}  // namespace fathom::tuner
