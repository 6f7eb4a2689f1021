#include "tuner/online/online.h"

#include <catch2/catch.hpp>

#include "base/files.h"
#include "models/cost_model.h"
#include "sim/time_model.h"
#include "traces/reader.h"
#include "traces/synth.h"
#include "traces/transforms.h"

namespace fathom::tuner {
namespace {

using Action = Decision::Action;

sim::TimeModelFactory Calibrated() {
  // The v5.1 stack, which these decisions were worked out on (a fixed calibration keeps them put).
  const models::CostParams params =
      models::LoadCalibration(DataDir() + "/models/calibration/trtllm-1.0.json")->params;
  return sim::CalibratedFactory(params, nullptr);
}

models::HardwareCatalog Catalog() { return *models::HardwareCatalog::LoadBuiltin(); }

std::vector<traces::Request> MlperfSet() {
  traces::ReadOptions o;
  o.max_output = 20000;
  auto reader = traces::OpenTrace(traces::DefaultTracePath(), o);
  REQUIRE(reader.ok());
  return *traces::ReadAll(**reader);
}

// The built-in deployment (DeepSeek-R1 on 8xB200; memory planned for 256 sequences and 8192
// tokens a rank) and shorter predictions than the defaults, to keep the tests quick.
OnlineOptions Options() {
  OnlineOptions o;
  o.max_batch = {32, 64, 128, 256};
  o.max_num_tokens = {2048, 8192};
  o.warmup_s = 300;
  o.probe_s = 300;
  o.jobs = 2;
  return o;
}

// A window of `n` requests (of the MLPerf set, from `offset`) at `qps` that kept its limits.
Window Calm(const std::vector<traces::Request>& data, size_t offset, int64_t n, double qps) {
  Window w;
  w.end_s = 60;
  w.arrived = static_cast<int64_t>(qps * 60);
  w.completed = n;
  for (int64_t i = 0; i < n; ++i) w.finished.push_back(data[(offset + i) % data.size()]);
  w.ttft_p99_ms = 300;
  w.tpot_p99_ms = 50;
  return w;
}

std::unique_ptr<Controller> Make(BatchLimits initial, OnlineOptions o = Options()) {
  auto c = Controller::Create(sim::DeploymentConfig{}, initial, o, Catalog(), Calibrated());
  INFO(c.status().message());
  REQUIRE(c.ok());
  return std::move(*c);
}

}  // namespace

TEST_CASE(
    "Controller: waits for evidence, then applies a clear gain only once confirmed, then cools "
    "down",
    "[online]") {
  const auto data = MlperfSet();
  auto c = Make({32, 8192});
  // Too few finished requests to predict from.
  auto d = c->Step(Calm(data, 0, 10, 3.0));
  REQUIRE(d.ok());
  CHECK(d->action == Action::kHold);
  CHECK(d->reason.find("too little evidence") != std::string::npos);
  // 32 sequences a rank cannot hold 3 QPS of DeepSeek-R1 (minutes a request): a larger limit is
  // predicted far better, but the windows kept their limits, so it must be confirmed first.
  d = c->Step(Calm(data, 10, 200, 3.0));
  REQUIRE(d.ok());
  INFO(d->reason);
  CHECK(d->action == Action::kHold);
  CHECK(d->reason.find("(1 of 2 windows)") != std::string::npos);
  CHECK(d->current_margin < 0);
  CHECK(d->best_margin >= d->current_margin + Options().min_gain);
  d = c->Step(Calm(data, 210, 200, 3.0));
  REQUIRE(d.ok());
  CHECK(d->action == Action::kApply);
  CHECK(d->limits.max_batch > 32);
  CHECK(c->limits() == d->limits);
  // The next windows: judged (kept, it did no harm), then cooling down.
  d = c->Step(Calm(data, 410, 200, 3.0));
  REQUIRE(d.ok());
  CHECK(d->action == Action::kHold);
  CHECK(d->reason == "cooling down after the last change");
}

TEST_CASE("Controller: acts at once while the limits break, and undoes a change that breaks TPOT",
          "[online]") {
  const auto data = MlperfSet();
  auto c = Make({32, 8192});
  Window broken = Calm(data, 0, 200, 3.0);
  broken.ttft_p99_ms = 40000;  // queueing: far past the 2 s limit
  auto d = c->Step(broken);
  REQUIRE(d.ok());
  INFO(d->reason);
  REQUIRE(d->action == Action::kApply);
  CHECK(d->reason.find("limits broken") != std::string::npos);
  const BatchLimits tried = d->limits;
  // The window after: TPOT far over its limit where it was well within before.
  Window worse = Calm(data, 200, 200, 3.0);
  worse.tpot_p99_ms = 200;
  d = c->Step(worse);
  REQUIRE(d.ok());
  CHECK(d->action == Action::kRollback);
  CHECK(d->limits == BatchLimits{32, 8192});
  CHECK(d->reason.find("p99 TPOT 200 ms broke the limit") != std::string::npos);
  // Once cooled down, the undone choice is not proposed again while it is banned.
  for (int i = 0; i < 4; ++i) {
    d = c->Step(Calm(data, 400 + 200 * i, 200, 3.0));
    REQUIRE(d.ok());
    CHECK_FALSE(d->limits == tried);
  }
}

TEST_CASE(
    "Controller: dropped requests undo a change, and so does a queue that still grows; one that "
    "only drains does not",
    "[online]") {
  const auto data = MlperfSet();
  enum After { kDrops, kStillGrows, kDrains };
  for (After after_change : {kDrops, kStillGrows, kDrains}) {
    auto c = Make({32, 8192});
    Window broken = Calm(data, 0, 200, 3.0);
    broken.ttft_p99_ms = 40000;
    broken.waiting = 300;  // grew by 300 in the window
    REQUIRE(c->Step(broken)->action == Action::kApply);
    // After the change TTFT still breaks (requests queued before it); the queue shrinks, or grows
    // more slowly than before.
    Window after = broken;
    after.waiting = after_change == kStillGrows ? 350 : 250;
    after.dropped = after_change == kDrops ? 3 : 0;
    auto d = c->Step(after);
    REQUIRE(d.ok());
    INFO(d->reason);
    CHECK(d->action == (after_change == kDrains ? Action::kHold : Action::kRollback));
    if (after_change == kDrops) CHECK(d->reason.find("3 requests dropped") != std::string::npos);
    if (after_change == kStillGrows)
      CHECK(d->reason.find("the queue grew by 50 (300 the window before)") != std::string::npos);
  }
}

// The model can be wrong about the limits it chose: it predicts they keep the p99s while the
// runtime shows them broken, window after window. The watchdog trusts the runtime.
TEST_CASE(
    "Controller: limits the runtime shows breaking where the model predicts they hold are undone "
    "for the last other limits that held",
    "[online]") {
  const auto data = MlperfSet();
  OnlineOptions o = Options();
  o.distrust_windows = 2;
  auto c = Make({32, 8192}, o);
  // 32 sequences a rank hold in these windows, though the model predicts otherwise: it changes.
  REQUIRE(c->Step(Calm(data, 0, 200, 3.0))->action == Action::kHold);
  auto d = c->Step(Calm(data, 200, 200, 3.0));
  REQUIRE(d->action == Action::kApply);
  const BatchLimits chosen = d->limits;
  REQUIRE(c->Step(Calm(data, 400, 200, 3.0))->action == Action::kHold);  // the canary holds
  // Then every window breaks TTFT while the model still predicts the new limits keep it, and the
  // waiting queue grows, but in the third, where it drains (that one does not count).
  std::vector<Decision> after;
  for (int i = 0; i < 8 && (after.empty() || after.back().action == Action::kHold); ++i) {
    Window broken = Calm(data, 600 + 200 * i, 200, 3.0);
    broken.ttft_p99_ms = 40000;
    broken.waiting = i == 2 ? 0 : 100 + 10 * i;
    d = c->Step(broken);
    REQUIRE(d.ok());
    after.push_back(*d);
  }
  INFO(after.back().reason);
  REQUIRE(after.back().action == Action::kRollback);
  CHECK(after.back().limits == BatchLimits{32, 8192});
  CHECK(after.back().reason.find("back to 32 seqs, 8192 tokens, the last other limits that held") !=
        std::string::npos);
  // The cooldown's last window, one to predict, the draining one, two contradicting the
  // prediction.
  CHECK(after.size() == 5);
  CHECK(after[1].current_margin >= 0);
  // The distrusted limits are not chosen again while banned.
  for (int i = 0; i < 4; ++i) {
    d = c->Step(Calm(data, 2400 + 200 * i, 200, 3.0));
    REQUIRE(d.ok());
    CHECK_FALSE(d->limits == chosen);
  }

  // With no other limits known to hold, there is nothing to go back to: it holds.
  auto fresh = Make(chosen, o);
  for (int i = 0; i < 6; ++i) {
    Window broken = Calm(data, 200 * i, 200, 3.0);
    broken.ttft_p99_ms = 40000;
    d = fresh->Step(broken);
    REQUIRE(d.ok());
    CHECK(d->action != Action::kRollback);
  }
}

TEST_CASE("Controller: choices it cannot make are errors naming the rule", "[online]") {
  OnlineOptions o = Options();
  o.max_batch = {512};
  auto c = Controller::Create(sim::DeploymentConfig{}, {256, 8192}, o, Catalog(), Calibrated());
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find(
            "exceeds the limits the runtime started with (256 seqs, 8192 tokens)") !=
        std::string::npos);
  o = Options();
  o.history_requests = 10;
  c = Controller::Create(sim::DeploymentConfig{}, {256, 8192}, o, Catalog(), Calibrated());
  CHECK(c.status().message() == "--history-requests = 10: must be >= --min-requests");
  o = Options();
  o.distrust_windows = 0;
  c = Controller::Create(sim::DeploymentConfig{}, {256, 8192}, o, Catalog(), Calibrated());
  CHECK(c.status().message() == "--distrust-windows = 0: must be >= 1");
  sim::DeploymentConfig disagg;
  disagg.disaggregated = true;
  c = Controller::Create(disagg, {256, 8192}, Options(), Catalog(), Calibrated());
  CHECK(c.status().message().find("aggregated deployments only") != std::string::npos);
}

TEST_CASE(
    "RunOnline: on an emulated runtime every request finishes, and tuning beats holding bad limits",
    "[online]") {
  const auto data = MlperfSet();
  auto run = [&](const OnlineOptions& o) {
    traces::SynthSpec load;
    load.arrivals.schedule = {{900, 3.0}};
    load.lengths.kind = traces::LengthModel::kEmpirical;
    for (const auto& r : data) load.lengths.samples.emplace_back(r.input_tokens, r.output_tokens);
    load.requests = 1 << 30;
    auto reader = traces::Synthesize(load);
    REQUIRE(reader.ok());
    const BatchLimits initial{32, 8192};
    auto runtime = SimulatedRuntime::Create(sim::DeploymentConfig{}, initial,
                                            sim::ReplaySource(std::move(*reader)), 60, Catalog(),
                                            Calibrated());
    REQUIRE(runtime.ok());
    auto controller =
        Controller::Create(sim::DeploymentConfig{}, initial, o, Catalog(), Calibrated());
    REQUIRE(controller.ok());
    std::vector<Decision> decisions;
    auto s = RunOnline(**runtime, **controller, 0,
                       [&](const Window&, const Decision& d) { decisions.push_back(d); });
    REQUIRE(s.ok());
    return std::make_pair(*s, decisions);
  };
  const auto [tuned, decisions] = run(Options());
  OnlineOptions fixed = Options();
  fixed.max_batch = {32};
  fixed.max_num_tokens = {8192};
  const auto [held, unused] = run(fixed);
  // No request is lost to a change: all that arrived finished, none dropped.
  CHECK(tuned.arrived == held.arrived);
  CHECK(tuned.completed == tuned.arrived);
  CHECK(tuned.dropped == 0);
  CHECK(held.completed == held.arrived);
  // It changed the limits, did not flap under a steady load, and kept them in more windows.
  CHECK(tuned.changes >= 1);
  CHECK(tuned.changes <= 3);
  CHECK(held.changes == 0);
  CHECK(tuned.windows_within_limits > held.windows_within_limits);
  CHECK(tuned.windows < held.windows);  // the backlog drained sooner
  for (size_t i = 1; i < decisions.size(); ++i) {
    // Between two changes, at least the cooldown.
    if (decisions[i].action == Action::kApply) {
      for (size_t j = i >= 3 ? i - 2 : 0; j < i; ++j) CHECK(decisions[j].action != Action::kApply);
    }
  }
}

// A runtime whose every change fails to start (its new replica exits): it serves on with the
// limits it has, broken windows after broken windows.
class RefusingRuntime : public ServingRuntime {
 public:
  RefusingRuntime(std::vector<traces::Request> data, int windows)
      : data_(std::move(data)), windows_(windows) {}
  Result<std::optional<Window>> Observe() override {
    if (windows_-- <= 0) return std::optional<Window>();
    Window w = Calm(data_, 200 * static_cast<size_t>(windows_), 200, 3.0);
    w.ttft_p99_ms = 40000;
    return std::optional<Window>(w);
  }
  Result<ApplyOutcome> Apply(const BatchLimits& limits) override {
    tried.push_back(limits);
    return ApplyOutcome{
        false, "failed to start: the replica on port 1 exited with status 1 before it was healthy",
        std::nullopt};
  }
  std::vector<BatchLimits> tried;

 private:
  std::vector<traces::Request> data_;
  int windows_;
};

TEST_CASE("RunOnline: a change that fails to start is rolled back at once, and never tried again",
          "[online]") {
  const auto data = MlperfSet();
  RefusingRuntime runtime(data, 9);
  OnlineOptions o = Options();
  o.cooldown_windows = 0;
  const BatchLimits initial{32, 8192};
  auto controller = Make(initial, o);
  std::vector<Decision> decisions;
  auto s = RunOnline(runtime, *controller, 0,
                     [&](const Window&, const Decision& d) { decisions.push_back(d); });
  REQUIRE(s.ok());
  // Broken limits: a change every window, each refused, each to limits not tried before.
  REQUIRE(runtime.tried.size() >= 3);
  for (size_t i = 0; i < runtime.tried.size(); ++i) {
    CHECK_FALSE(runtime.tried[i] == initial);
    for (size_t j = 0; j < i; ++j) CHECK_FALSE(runtime.tried[i] == runtime.tried[j]);
  }
  CHECK(s->changes == 0);
  CHECK(s->rollbacks == static_cast<int64_t>(runtime.tried.size()));
  for (const Decision& d : decisions) {
    CHECK(d.limits == initial);
    if (d.action == Action::kHold) continue;
    CHECK(d.action == Action::kRollback);
    CHECK(d.reason.find("; rolled back, ") != std::string::npos);
    CHECK(d.reason.find(" failed to start: the replica on port 1 exited with status 1 before it "
                        "was healthy") != std::string::npos);
  }
  CHECK(controller->limits() == initial);
}

// A runtime that starts other limits than those asked for the first change (a canary test's
// injection), as broken as RefusingRuntime's windows otherwise.
class InjectingRuntime : public RefusingRuntime {
 public:
  using RefusingRuntime::RefusingRuntime;
  Result<ApplyOutcome> Apply(const BatchLimits& limits) override {
    tried.push_back(limits);
    return ApplyOutcome{true, "", tried.size() == 1 ? std::optional(kInjected) : std::nullopt};
  }
  static constexpr BatchLimits kInjected{1, 2048};
};

TEST_CASE("RunOnline: limits the runtime started instead of the choice are what is in force",
          "[online]") {
  InjectingRuntime runtime(MlperfSet(), 4);
  OnlineOptions o = Options();
  o.cooldown_windows = 0;
  auto controller = Make(BatchLimits{32, 8192}, o);
  std::vector<Decision> decisions;
  auto s = RunOnline(runtime, *controller, 0,
                     [&](const Window&, const Decision& d) { decisions.push_back(d); });
  REQUIRE(s.ok());
  REQUIRE(runtime.tried.size() >= 2);
  const auto first = std::find_if(decisions.begin(), decisions.end(),
                                  [](const Decision& d) { return d.action != Action::kHold; });
  REQUIRE(first != decisions.end());
  // The decision (and so the journal) records the injected limits, not the controller's choice,
  // and the next change starts from them.
  CHECK(first->limits == InjectingRuntime::kInjected);
  CHECK(first->reason.find("; the runtime started 1 seqs, 2048 tokens instead of ") !=
        std::string::npos);
  CHECK_FALSE(runtime.tried[1] == InjectingRuntime::kInjected);
}

TEST_CASE("RunOnline --advise: recommendations are reported, nothing is applied", "[online]") {
  const auto data = MlperfSet();
  traces::SynthSpec load;
  load.arrivals.schedule = {{600, 3.0}};
  load.lengths.kind = traces::LengthModel::kEmpirical;
  for (const auto& r : data) load.lengths.samples.emplace_back(r.input_tokens, r.output_tokens);
  load.requests = 1 << 30;
  auto reader = traces::Synthesize(load);
  REQUIRE(reader.ok());
  const BatchLimits initial{32, 8192};
  auto runtime =
      SimulatedRuntime::Create(sim::DeploymentConfig{}, initial,
                               sim::ReplaySource(std::move(*reader)), 60, Catalog(), Calibrated());
  REQUIRE(runtime.ok());
  auto controller =
      Controller::Create(sim::DeploymentConfig{}, initial, Options(), Catalog(), Calibrated());
  REQUIRE(controller.ok());
  int64_t advised = 0;
  auto s = RunOnline(
      **runtime, **controller, 0,
      [&](const Window&, const Decision& d) {
        if (d.action == Decision::Action::kApply) ++advised;
      },
      true);
  REQUIRE(s.ok());
  CHECK(advised >= 1);
  CHECK(s->changes == 0);
  CHECK(s->rollbacks == 0);
  CHECK((*controller)->limits() == initial);
}

}  // namespace fathom::tuner
