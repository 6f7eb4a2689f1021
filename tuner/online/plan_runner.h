// Executes an adaptive plan (sim/plan.h) on a live runtime: each window, the next switch's trigger
// is checked against what the window saw, and when it holds the runtime is switched to that
// step's replicas (`fathom online --supervise --plan`).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "sim/simulator.h"
#include "tuner/online/online.h"

namespace fathom::tuner {

// Whether `when` holds at the end of window `w`. Times count from `first_arrival_s`, the start of
// the first window that saw a request (nullopt: none yet, so no trigger holds): the plan's
// t = 0, as the simulated run's first request is. `in_system_at_most` needs a request finished
// (the simulator checks it on completions), `in_system_at_least` one arrived.
bool TriggerHolds(const sim::SwitchTrigger& when, const Window& w,
                  std::optional<double> first_arrival_s, int64_t completed_so_far);

struct PlanRunSummary {
  int64_t windows = 0, switches = 0, failed_switches = 0;
  int64_t arrived = 0, completed = 0, dropped = 0;
  OrderedJson ToJson() const;
};

// Observes `runtime` window by window until it ends or `max_windows` (0: no cap) are done, and
// calls `switch_to(i)` when step i's trigger holds, steps in order (with `cycle`, round again).
// `on_window` sees each window and the step switched to at its end (nullopt: none) with the
// outcome. A failed switch (rolled back) is not tried again until the plan comes round to it.
Result<PlanRunSummary> RunPlan(
    ServingRuntime& runtime, const std::vector<sim::SwitchTrigger>& triggers, bool cycle,
    int64_t max_windows, const std::function<Result<ApplyOutcome>(size_t step)>& switch_to,
    const std::function<void(const Window&, std::optional<size_t> step,
                             const std::optional<ApplyOutcome>&)>& on_window);

}  // namespace fathom::tuner
