#include "tuner/search/autoscale.h"

#include <algorithm>
#include <cmath>

#include "base/format.h"
#include "base/stats.h"
#include "sim/simulator.h"
#include "sim/workload.h"

namespace fathom::tuner {
namespace {

struct P99s {
  double ttft_ms = 0, tpot_ms = 0;
};

P99s Of(std::vector<double> ttft, std::vector<double> tpot) {
  return {Percentile(ttft, 0.99), Percentile(tpot, 0.99)};
}

class Scaler {
 public:
  Scaler(const sim::DeploymentConfig& replica, const AutoscaleOptions& o,
         const models::HardwareCatalog& catalog, const sim::TimeModelFactory& make_time)
      : replica_(replica), o_(o), catalog_(catalog), make_time_(make_time) {}

  int gpus_per_replica() const { return replica_.tp * replica_.pp; }
  int64_t simulations() const { return simulations_; }

  sim::DeploymentConfig With(int replicas) const {
    sim::DeploymentConfig d = replica_;
    d.gpus = replicas * gpus_per_replica();
    return d;
  }

  // Whether `replicas` keep both p99 limits over `requests` (times from the first), the run
  // stopped as soon as a limit is clearly broken.
  Result<bool> Keeps(int replicas, const std::vector<traces::Request>& requests) {
    FATHOM_ASSIGN_OR_RETURN(auto r, sim::Resolve(With(replicas), catalog_, make_time_));
    // Stopped once more requests break a limit than a p99 allows.
    r->spec.scenario = Scenario(static_cast<int64_t>(requests.size()) / 100 + 1);
    sim::Simulator s(std::move(r->spec), Source(requests));
    ++simulations_;
    FATHOM_ASSIGN_OR_RETURN(sim::SimulationResult res, s.Run());
    return res.latency_limits_met;
  }

  // The fewest replicas that keep the limits over `requests`; `what` names them in the error.
  Result<int> Fewest(const std::vector<traces::Request>& requests, const std::string& what) {
    FATHOM_ASSIGN_OR_RETURN(bool enough, Keeps(o_.max_replicas, requests));
    if (!enough) {
      return Status::InvalidArgument(what + ": " + std::to_string(o_.max_replicas) +
                                     " replicas (--max-replicas) do not keep the p99 limits");
    }
    int lo = 1, hi = o_.max_replicas;  // hi keeps them
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      FATHOM_ASSIGN_OR_RETURN(bool keeps, Keeps(mid, requests));
      if (keeps) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return hi;
  }

  // The plan run over the whole trace: each request's TTFT and TPOT by its index.
  Result<std::vector<std::pair<double, double>>> Latencies(
      const sim::Plan& plan, const std::vector<traces::Request>& requests) {
    FATHOM_ASSIGN_OR_RETURN(auto r, sim::Resolve(plan.start, catalog_, make_time_));
    FATHOM_ASSIGN_OR_RETURN(sim::ResolvedPlan resolved,
                            sim::ResolvePlan(plan, catalog_, make_time_));
    r->spec.scenario = Scenario(0);
    sim::Simulator s(std::move(r->spec), Source(requests));
    FATHOM_RETURN_IF_ERROR(resolved.ScheduleOn(&s));
    std::vector<std::pair<double, double>> out(requests.size());
    s.set_on_complete([&](const sim::RequestRecord& x) {
      const double ttft = (x.first_token_s - x.issue_s) * 1e3;
      const double tpot = x.output > 1 ? (x.done_s - x.first_token_s) * 1e3 / (x.output - 1) : 0;
      out[static_cast<size_t>(x.id)] = {ttft, tpot};
    });
    ++simulations_;
    FATHOM_RETURN_IF_ERROR(s.Run().status());
    return out;
  }

 private:
  // A replay within the p99 limits, stopped after `stop_after_violations` (0: run to the end).
  sim::ScenarioConfig Scenario(int64_t stop_after_violations) const {
    sim::ScenarioConfig sc;
    sc.scenario = sim::Scenario::kReplay;
    sc.min_duration_s = 0;
    sc.ttft_limit_ms = o_.ttft_limit_ms;
    sc.tpot_limit_ms = o_.tpot_limit_ms;
    sc.stop_after_violations = stop_after_violations;
    sc.stop_when_clearly_broken = stop_after_violations > 0;
    return sc;
  }

  // The requests at their times from the first one's, ids their indices.
  static std::unique_ptr<sim::RequestSource> Source(const std::vector<traces::Request>& requests) {
    std::vector<std::pair<traces::Request, SimTime>> items;
    const double t0 = requests.empty() ? 0 : requests.front().arrival_s.value_or(0);
    for (size_t i = 0; i < requests.size(); ++i) {
      traces::Request r = requests[i];
      r.id = static_cast<int64_t>(i);
      items.emplace_back(r, FromSeconds(r.arrival_s.value_or(0) - t0));
    }
    return sim::ListSource(std::move(items));
  }

  const sim::DeploymentConfig& replica_;
  const AutoscaleOptions& o_;
  const models::HardwareCatalog& catalog_;
  const sim::TimeModelFactory& make_time_;
  int64_t simulations_ = 0;
};

// The plan: the first phase's count, then a switch wherever the count changes, made early by the
// restart where it adds replicas (they serve from the boundary on) and at the boundary where it
// takes them away.
sim::Plan MakePlan(const Scaler& scaler, const std::vector<PhaseReplicas>& phases,
                   double restart_s) {
  sim::Plan plan;
  plan.start = scaler.With(phases.front().planned);
  double last_s = 0;
  for (size_t k = 1; k < phases.size(); ++k) {
    if (phases[k].planned == phases[k - 1].planned) continue;
    sim::PlanStep step;
    const bool up = phases[k].planned > phases[k - 1].planned;
    const double at =
        std::max(last_s, phases[k].start_s - phases.front().start_s - (up ? restart_s : 0));
    step.when = {sim::SwitchTrigger::Kind::kAfter, at};
    step.to = scaler.With(phases[k].planned);
    step.kv = sim::KvMove::kDrain;
    step.restart_s = restart_s;
    plan.steps.push_back(step);
    last_s = at;
  }
  return plan;
}

// GPU-hours of a plan from t = 0 to `end_s`: each count held from its switch on.
double PlanGpuHours(const sim::Plan& plan, double end_s) {
  double gpu_s = 0, from = 0;
  int gpus = plan.start.gpus;
  for (const sim::PlanStep& step : plan.steps) {
    gpu_s += gpus * (step.when.value - from);
    from = step.when.value;
    gpus = step.to.gpus;
  }
  gpu_s += gpus * std::max(0.0, end_s - from);
  return gpu_s / 3600;
}

}  // namespace

OrderedJson AutoscaleResult::ToJson() const {
  OrderedJson j;
  j["gpus_per_replica"] = gpus_per_replica;
  j["restart_s"] = restart_s;
  j["restart_modelled"] = restart_modelled;
  j["static_replicas"] = static_replicas;
  j["static_ttft_p99_ms"] = static_ttft_p99_ms;
  j["static_tpot_p99_ms"] = static_tpot_p99_ms;
  OrderedJson ph = OrderedJson::array();
  for (const PhaseReplicas& p : phases) {
    OrderedJson x;
    x["start_s"] = p.start_s;
    x["end_s"] = p.end_s;
    x["requests"] = p.requests;
    x["mean_input"] = p.mean_input;
    x["mean_output"] = p.mean_output;
    x["oracle_replicas"] = p.oracle;
    x["planned_replicas"] = p.planned;
    x["ttft_p99_ms"] = p.ttft_p99_ms;
    x["tpot_p99_ms"] = p.tpot_p99_ms;
    ph.push_back(x);
  }
  j["phases"] = ph;
  j["plan"] = sim::ToJson(plan);
  j["plan_within_limits"] = plan_within_limits;
  j["gpu_hours_static"] = gpu_hours_static;
  j["gpu_hours_plan"] = gpu_hours_plan;
  j["gpu_hours_oracle"] = gpu_hours_oracle;
  j["simulations"] = simulations;
  return j;
}

Result<AutoscaleResult> PlanReplicas(const sim::DeploymentConfig& replica,
                                     const std::vector<traces::Request>& trace,
                                     const AutoscaleOptions& o,
                                     const models::HardwareCatalog& catalog,
                                     const sim::TimeModelFactory& make_time) {
  if (!(o.phase_s > 0) || !std::isfinite(o.phase_s))
    return Status::InvalidArgument("--phase-s = " + StrFormat("%g", o.phase_s) + ": must be > 0");
  if (o.max_replicas < 1)
    return Status::InvalidArgument("--max-replicas = " + std::to_string(o.max_replicas) +
                                   ": must be >= 1");
  if (!(o.ttft_limit_ms > 0) || !(o.tpot_limit_ms > 0))
    return Status::InvalidArgument("autoscaling needs both p99 limits > 0 (--ttft-ms, --tpot-ms)");
  if (replica.disaggregated)
    return Status::InvalidArgument("autoscaling scales aggregated replicas; not disaggregated");
  if (trace.empty()) return Status::InvalidArgument("the trace has no requests");
  for (size_t i = 0; i < trace.size(); ++i) {
    if (!trace[i].arrival_s || (i > 0 && *trace[i].arrival_s < *trace[i - 1].arrival_s)) {
      return Status::InvalidArgument(
          "request " + std::to_string(trace[i].id) +
          ": autoscaling needs arrival times, in order (a trace with timestamps)");
    }
  }
  Scaler scaler(replica, o, catalog, make_time);
  AutoscaleResult out;
  out.gpus_per_replica = scaler.gpus_per_replica();
  if (o.restart_s) {
    out.restart_s = *o.restart_s;
    out.restart_modelled = false;
  } else {
    FATHOM_ASSIGN_OR_RETURN(auto r, sim::Resolve(scaler.With(1), catalog, make_time));
    out.restart_s = sim::EstimateRestart(*r).total();
  }

  // Phases from the first arrival: the requests arriving in each.
  const double t0 = *trace.front().arrival_s, end_s = *trace.back().arrival_s - t0;
  std::vector<std::vector<traces::Request>> by_phase;
  for (const traces::Request& r : trace) {
    const size_t k = static_cast<size_t>((*r.arrival_s - t0) / o.phase_s);
    if (by_phase.size() <= k) by_phase.resize(k + 1);
    by_phase[k].push_back(r);
  }
  for (size_t k = 0; k < by_phase.size(); ++k) {
    PhaseReplicas p;
    p.start_s = t0 + k * o.phase_s;
    p.end_s = t0 + std::min<double>((k + 1) * o.phase_s, std::max(end_s, k * o.phase_s));
    p.requests = static_cast<int64_t>(by_phase[k].size());
    for (const traces::Request& r : by_phase[k]) {
      p.mean_input += static_cast<double>(r.input_tokens);
      p.mean_output += static_cast<double>(r.output_tokens);
    }
    if (p.requests > 0) {
      p.mean_input /= p.requests;
      p.mean_output /= p.requests;
      FATHOM_ASSIGN_OR_RETURN(
          p.oracle, scaler.Fewest(by_phase[k],
                                  StrFormat("phase %zu (%.0f-%.0f s)", k + 1, p.start_s, p.end_s)));
    } else {
      p.oracle = 1;  // an idle phase keeps one replica up
    }
    p.planned = p.oracle;
    out.gpu_hours_oracle += p.oracle * out.gpus_per_replica * (p.end_s - p.start_s) / 3600;
    out.phases.push_back(p);
  }
  FATHOM_ASSIGN_OR_RETURN(out.static_replicas, scaler.Fewest(trace, "the whole trace"));
  out.gpu_hours_static = out.static_replicas * out.gpus_per_replica * end_s / 3600;
  {
    sim::Plan held;
    held.start = scaler.With(out.static_replicas);
    FATHOM_ASSIGN_OR_RETURN(auto lat, scaler.Latencies(held, trace));
    std::vector<double> ttft, tpot;
    for (const auto& [a, b] : lat) ttft.push_back(a), tpot.push_back(b);
    const P99s p = Of(std::move(ttft), std::move(tpot));
    out.static_ttft_p99_ms = p.ttft_ms;
    out.static_tpot_p99_ms = p.tpot_ms;
  }

  // The plan, checked on the whole trace: a replica more in each phase that breaks a limit.
  for (int round = 0; round < o.repair_rounds; ++round) {
    out.plan = MakePlan(scaler, out.phases, out.restart_s);
    FATHOM_ASSIGN_OR_RETURN(auto lat, scaler.Latencies(out.plan, trace));
    bool all_within = true;
    size_t i = 0;
    for (size_t k = 0; k < out.phases.size(); ++k) {
      std::vector<double> ttft, tpot;
      for (size_t n = 0; n < by_phase[k].size(); ++n, ++i) {
        ttft.push_back(lat[i].first);
        tpot.push_back(lat[i].second);
      }
      PhaseReplicas& p = out.phases[k];
      const P99s q = Of(std::move(ttft), std::move(tpot));
      p.ttft_p99_ms = q.ttft_ms;
      p.tpot_p99_ms = q.tpot_ms;
      if (q.ttft_ms > o.ttft_limit_ms || q.tpot_ms > o.tpot_limit_ms) {
        all_within = false;
        // The last round's plan is the one reported, with the counts it ran.
        if (round + 1 < o.repair_rounds) p.planned = std::min(o.max_replicas, p.planned + 1);
      }
    }
    out.plan_within_limits = all_within;
    if (all_within) break;
  }
  out.gpu_hours_plan = PlanGpuHours(out.plan, end_s);
  out.simulations = scaler.simulations();
  return out;
}

}  // namespace fathom::tuner
