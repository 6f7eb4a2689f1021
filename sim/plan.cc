#include "sim/plan.h"

#include <cmath>
#include <set>

#include "base/format.h"

namespace fathom::sim {
namespace {

constexpr SwitchTrigger::Kind kTriggerKinds[] = {SwitchTrigger::Kind::kAfter,
                                                 SwitchTrigger::Kind::kInSystemAtMost,
                                                 SwitchTrigger::Kind::kInSystemAtLeast};

Result<PlanStep> StepFromJson(const Json& j, const std::string& source) {
  if (!j.is_object()) return Status::InvalidArgument(source + ": expected a JSON object");
  static const std::set<std::string> kKnown = {"when", "value", "kv", "restart_s", "to"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (kKnown.count(it.key()) == 0) {
      return Status::InvalidArgument(source + ": field '" + it.key() +
                                     "': unknown (known: kv, restart_s, to, value, when)");
    }
  }
  PlanStep step;
  JsonFields f(j, source);
  const std::string when = f.String("when");
  step.when.value = f.Double("value");
  const std::string kv = f.String("kv", "migrate");
  if (f.Has("restart_s")) step.restart_s = f.Double("restart_s");
  FATHOM_RETURN_IF_ERROR(f.status());
  bool known = false;
  for (SwitchTrigger::Kind k : kTriggerKinds) {
    if (when == Name(k)) step.when.kind = k, known = true;
  }
  if (!known) {
    return Status::InvalidArgument(source + ": field 'when' = \"" + when +
                                   "\": must be after_s, in_system_at_most or in_system_at_least");
  }
  if (!(step.when.value >= 0) || !std::isfinite(step.when.value)) {
    return Status::InvalidArgument(source +
                                   ": field 'value' = " + StrFormat("%g", step.when.value) +
                                   ": must be a finite number >= 0");
  }
  const std::optional<KvMove> move = ParseKvMove(kv);
  if (!move) {
    return Status::InvalidArgument(source + ": field 'kv' = \"" + kv +
                                   "\": must be migrate, recompute or drain");
  }
  step.kv = *move;
  if (step.restart_s && !(*step.restart_s >= 0 && std::isfinite(*step.restart_s))) {
    return Status::InvalidArgument(source +
                                   ": field 'restart_s' = " + StrFormat("%g", *step.restart_s) +
                                   ": must be a finite number >= 0");
  }
  if (!j.contains("to")) return Status::InvalidArgument(source + ": field 'to': missing");
  FATHOM_ASSIGN_OR_RETURN(step.to, DeploymentFromJson(j["to"], source + ": to"));
  return step;
}

}  // namespace

std::string_view Name(SwitchTrigger::Kind k) {
  switch (k) {
    case SwitchTrigger::Kind::kAfter:
      return "after_s";
    case SwitchTrigger::Kind::kInSystemAtMost:
      return "in_system_at_most";
    case SwitchTrigger::Kind::kInSystemAtLeast:
      return "in_system_at_least";
  }
  return "?";
}

std::string_view Name(KvMove m) {
  switch (m) {
    case KvMove::kMigrate:
      return "migrate";
    case KvMove::kRecompute:
      return "recompute";
    case KvMove::kDrain:
      return "drain";
  }
  return "?";
}

std::optional<KvMove> ParseKvMove(std::string_view name) {
  for (KvMove m : {KvMove::kMigrate, KvMove::kRecompute, KvMove::kDrain}) {
    if (name == Name(m)) return m;
  }
  return std::nullopt;
}

std::string Describe(const SwitchTrigger& t) {
  return std::string(Name(t.kind)) + " " + StrFormat("%g", t.value);
}

RestartEstimate EstimateRestart(const ResolvedDeployment& r) {
  RestartEstimate e;
  e.weights_s = r.plan.weights_bytes / r.spec.engine.swap_bytes_per_s;
  e.graphs_s = RestartEstimate::kGraphCaptureS *
               static_cast<double>(CudaGraphSizes(r.spec.engine, *r.time).size());
  return e;
}

double MigrateBytesPerS(const ResolvedDeployment& r) {
  return r.hardware.scale_up_bytes_per_s > 0 ? r.hardware.scale_up_bytes_per_s / 2
                                             : r.spec.engine.swap_bytes_per_s;
}

Result<Plan> PlanFromJson(const Json& j, const std::string& source) {
  if (!j.is_object()) return Status::InvalidArgument(source + ": expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "start" && it.key() != "switches" && it.key() != "cycle") {
      return Status::InvalidArgument(source + ": field '" + it.key() +
                                     "': unknown (known: cycle, start, switches)");
    }
  }
  if (!j.contains("start")) return Status::InvalidArgument(source + ": field 'start': missing");
  Plan plan;
  FATHOM_ASSIGN_OR_RETURN(DeploymentFile start,
                          DeploymentFileFromJson(j["start"], source + ": start"));
  plan.start = std::move(start.config);
  plan.run = std::move(start.run);
  if (j.contains("cycle")) {
    if (!j["cycle"].is_boolean())
      return Status::InvalidArgument(source + ": field 'cycle': expected true or false");
    plan.cycle = j["cycle"].get<bool>();
  }
  if (!j.contains("switches")) return plan;
  if (!j["switches"].is_array())
    return Status::InvalidArgument(source + ": field 'switches': expected a JSON array");
  for (size_t i = 0; i < j["switches"].size(); ++i) {
    FATHOM_ASSIGN_OR_RETURN(
        PlanStep step,
        StepFromJson(j["switches"][i], source + ": switches[" + std::to_string(i) + "]"));
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

Result<Plan> LoadPlanFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path));
  return PlanFromJson(j, path);
}

OrderedJson ToJson(const Plan& plan) {
  OrderedJson j;
  j["start"] = plan.run ? ToJson(plan.start, *plan.run) : ToJson(plan.start);
  if (plan.cycle) j["cycle"] = true;
  OrderedJson steps = OrderedJson::array();
  for (const PlanStep& s : plan.steps) {
    OrderedJson sj;
    sj["when"] = Name(s.when.kind);
    sj["value"] = s.when.value;
    sj["kv"] = Name(s.kv);
    if (s.restart_s) sj["restart_s"] = *s.restart_s;
    sj["to"] = ToJson(s.to);
    steps.push_back(std::move(sj));
  }
  j["switches"] = std::move(steps);
  return j;
}

bool InPlace(const DeploymentConfig& a, const DeploymentConfig& b) {
  DeploymentConfig limits_only = b;
  limits_only.engine.max_batch = a.engine.max_batch;
  limits_only.engine.max_num_tokens = a.engine.max_num_tokens;
  return limits_only == a;
}

bool ScaleOnly(const DeploymentConfig& a, const DeploymentConfig& b) {
  DeploymentConfig same_count = b;
  same_count.gpus = a.gpus;
  return a.gpus != b.gpus && !a.disaggregated && same_count == a;
}

Status ResolvedPlan::ScheduleOn(Simulator* simulator) const {
  simulator->set_cycle_switches(cycle);
  for (const ConfigSwitch& sw : switches) FATHOM_RETURN_IF_ERROR(simulator->ScheduleSwitch(sw));
  return Status::Ok();
}

Result<ResolvedPlan> ResolvePlan(const Plan& plan, const models::HardwareCatalog& catalog,
                                 const TimeModelFactory& make_time) {
  ResolvedPlan out;
  out.cycle = plan.cycle;
  const DeploymentConfig* before = &plan.start;
  if (!plan.steps.empty() && plan.start.disaggregated)
    return Status::InvalidArgument("plan: start: a plan's switches need aggregated deployments");
  if (plan.cycle && (plan.steps.empty() || !(plan.steps.back().to == plan.start))) {
    return Status::InvalidArgument(
        "plan: cycle: the last switch must go back to the start's deployment to round again");
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    const std::string where = "plan: switches[" + std::to_string(i) + "]: to: ";
    if (step.to.disaggregated)
      return Status::InvalidArgument(where + "disaggregated: a plan switches aggregated ones");
    if (step.to.model != plan.start.model || step.to.hardware != plan.start.hardware) {
      return Status::InvalidArgument(where + step.to.model + " on " + step.to.hardware +
                                     ": a plan keeps the start's model and GPU (" +
                                     plan.start.model + " on " + plan.start.hardware + ")");
    }
    FATHOM_ASSIGN_OR_RETURN(auto r, Resolve(step.to, catalog, make_time));
    ConfigSwitch sw;
    sw.when = step.when;
    sw.in_place = InPlace(*before, step.to);
    sw.scale_only = step.kv == KvMove::kDrain && ScaleOnly(*before, step.to);
    sw.pool = r->spec.pool;
    sw.engine = r->spec.engine;
    sw.total_gpus = r->spec.total_gpus;
    sw.kv = step.kv;
    const RestartEstimate estimate = EstimateRestart(*r);
    sw.restart_s = step.restart_s.value_or(estimate.total());
    sw.migrate_bytes_per_s = MigrateBytesPerS(*r);
    out.switches.push_back(sw);
    out.restarts.push_back(estimate);
    out.deployments.push_back(std::move(r));
    before = &step.to;
  }
  return out;
}

}  // namespace fathom::sim
