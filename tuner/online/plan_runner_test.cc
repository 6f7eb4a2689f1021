#include "tuner/online/plan_runner.h"

#include <catch2/catch.hpp>
#include <deque>

namespace fathom::tuner {
namespace {

// Windows given in advance; Apply is not used by a plan.
class ScriptedRuntime : public ServingRuntime {
 public:
  explicit ScriptedRuntime(std::deque<Window> windows) : windows_(std::move(windows)) {}
  Result<std::optional<Window>> Observe() override {
    if (windows_.empty()) return std::optional<Window>();
    Window w = windows_.front();
    windows_.pop_front();
    return std::optional<Window>(w);
  }
  Result<ApplyOutcome> Apply(const BatchLimits&) override { return ApplyOutcome{}; }

 private:
  std::deque<Window> windows_;
};

// Ten-second windows: arrivals, completions and requests in the system at each end.
std::deque<Window> Windows(const std::vector<std::array<int64_t, 3>>& rows) {
  std::deque<Window> out;
  double t = 0;
  for (const auto& [arrived, completed, in_flight] : rows) {
    Window w;
    w.start_s = t;
    w.end_s = t += 10;
    w.arrived = arrived;
    w.completed = completed;
    w.in_flight = in_flight;
    out.push_back(w);
  }
  return out;
}

using Kind = sim::SwitchTrigger::Kind;

TEST_CASE("TriggerHolds: times from the first arrival, a tail only after a completion", "[plan]") {
  Window w;
  w.start_s = 30;
  w.end_s = 40;
  w.in_flight = 5;
  CHECK_FALSE(TriggerHolds({Kind::kAfter, 0}, w, std::nullopt, 0));  // nothing arrived yet
  CHECK(TriggerHolds({Kind::kAfter, 25}, w, 10.0, 0));
  CHECK_FALSE(TriggerHolds({Kind::kAfter, 31}, w, 10.0, 0));
  CHECK_FALSE(TriggerHolds({Kind::kInSystemAtMost, 8}, w, 10.0, 0));
  CHECK(TriggerHolds({Kind::kInSystemAtMost, 8}, w, 10.0, 3));
  CHECK_FALSE(TriggerHolds({Kind::kInSystemAtMost, 4}, w, 10.0, 3));
  CHECK(TriggerHolds({Kind::kInSystemAtLeast, 5}, w, 10.0, 0));
  CHECK_FALSE(TriggerHolds({Kind::kInSystemAtLeast, 6}, w, 10.0, 0));
}

TEST_CASE("RunPlan: switches in order as their triggers hold, round again with cycle", "[plan]") {
  // Idle, then a surge to 40 in the system, back down to 3, up to 50 again.
  const auto rows = std::vector<std::array<int64_t, 3>>{{0, 0, 0},   {20, 0, 20}, {30, 10, 40},
                                                        {0, 20, 20}, {0, 17, 3},  {47, 0, 50}};
  const std::vector<sim::SwitchTrigger> rule = {{Kind::kInSystemAtLeast, 32},
                                                {Kind::kInSystemAtMost, 4}};
  for (bool cycle : {false, true}) {
    ScriptedRuntime runtime(Windows(rows));
    std::vector<std::pair<int64_t, size_t>> fired;  // window, step
    int64_t window = 0;
    auto r = RunPlan(
        runtime, rule, cycle, 0, [](size_t) -> Result<ApplyOutcome> { return ApplyOutcome{}; },
        [&](const Window&, std::optional<size_t> step, const std::optional<ApplyOutcome>& o) {
          if (step) {
            REQUIRE(o);
            fired.emplace_back(window, *step);
          }
          ++window;
        });
    REQUIRE(r.ok());
    CHECK(r->windows == 6);
    CHECK(r->arrived == 97);
    CHECK(r->completed == 47);
    if (cycle) {
      CHECK(fired == std::vector<std::pair<int64_t, size_t>>{{2, 0}, {4, 1}, {5, 0}});
      CHECK(r->switches == 3);
    } else {
      CHECK(fired == std::vector<std::pair<int64_t, size_t>>{{2, 0}, {4, 1}});
      CHECK(r->switches == 2);
    }
  }
}

TEST_CASE("RunPlan: a switch that fails is counted and not retried; --windows caps the run",
          "[plan]") {
  ScriptedRuntime runtime(Windows({{5, 0, 5}, {5, 0, 10}, {0, 0, 10}, {0, 0, 10}}));
  int calls = 0;
  auto r = RunPlan(
      runtime, {{Kind::kAfter, 10}}, false, 3,
      [&](size_t) -> Result<ApplyOutcome> {
        ++calls;
        ApplyOutcome o;
        o.applied = false;
        o.why_not = "failed to start";
        return o;
      },
      nullptr);
  REQUIRE(r.ok());
  CHECK(calls == 1);
  CHECK(r->failed_switches == 1);
  CHECK(r->switches == 0);
  CHECK(r->windows == 3);
}

}  // namespace
}  // namespace fathom::tuner
