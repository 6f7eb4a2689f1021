#include "tuner/online/plan_runner.h"

namespace fathom::tuner {

bool TriggerHolds(const sim::SwitchTrigger& when, const Window& w,
                  std::optional<double> first_arrival_s, int64_t completed_so_far) {
  if (!first_arrival_s) return false;
  const double n = static_cast<double>(w.in_flight);
  switch (when.kind) {
    case sim::SwitchTrigger::Kind::kAfter:
      return w.end_s - *first_arrival_s >= when.value;
    case sim::SwitchTrigger::Kind::kInSystemAtMost:
      return completed_so_far > 0 && n <= when.value;
    case sim::SwitchTrigger::Kind::kInSystemAtLeast:
      return n >= when.value;
  }
  return false;
}

OrderedJson PlanRunSummary::ToJson() const {
  OrderedJson j;
  j["windows"] = windows;
  j["switches"] = switches;
  j["failed_switches"] = failed_switches;
  j["arrived"] = arrived;
  j["completed"] = completed;
  j["dropped"] = dropped;
  return j;
}

Result<PlanRunSummary> RunPlan(
    ServingRuntime& runtime, const std::vector<sim::SwitchTrigger>& triggers, bool cycle,
    int64_t max_windows, const std::function<Result<ApplyOutcome>(size_t step)>& switch_to,
    const std::function<void(const Window&, std::optional<size_t> step,
                             const std::optional<ApplyOutcome>&)>& on_window) {
  PlanRunSummary s;
  std::optional<double> first_arrival_s;
  size_t next = 0;
  while (max_windows <= 0 || s.windows < max_windows) {
    FATHOM_ASSIGN_OR_RETURN(std::optional<Window> w, runtime.Observe());
    if (!w) break;
    ++s.windows;
    s.arrived += w->arrived;
    s.completed += w->completed;
    s.dropped += w->dropped;
    if (!first_arrival_s && w->arrived > 0) first_arrival_s = w->start_s;
    std::optional<size_t> fired;
    std::optional<ApplyOutcome> outcome;
    if (next < triggers.size() && TriggerHolds(triggers[next], *w, first_arrival_s, s.completed)) {
      fired = next;
      FATHOM_ASSIGN_OR_RETURN(outcome, switch_to(next));
      ++(outcome->applied ? s.switches : s.failed_switches);
      if (++next == triggers.size() && cycle) next = 0;
    }
    if (on_window) on_window(*w, fired, outcome);
  }
  return s;
}

}  // namespace fathom::tuner
