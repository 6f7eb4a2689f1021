#include "tuner/search/adaptive.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "base/parallel.h"
#include "sim/simulator.h"

namespace fathom::tuner {
namespace {

// A plan's Offline run over the whole deployment; `free_switches`: no restart, no migration time.
Result<PlanOutcome> RunPlan(const sim::Plan& plan, bool free_switches, const TuneOptions& o,
                            const models::HardwareCatalog& catalog, int64_t samples) {
  FATHOM_ASSIGN_OR_RETURN(auto resolved, sim::Resolve(plan.start, catalog, o.make_time));
  FATHOM_ASSIGN_OR_RETURN(sim::ResolvedPlan switches, sim::ResolvePlan(plan, catalog, o.make_time));
  sim::ScenarioConfig sc;
  sc.scenario = sim::Scenario::kOffline;
  sc.min_duration_s = 0;
  sc.seed = o.seed;
  resolved->spec.scenario = sc;
  sim::Simulator simulator(std::move(resolved->spec),
                           sim::OfflineSource(o.dataset, samples, o.seed));
  for (sim::ConfigSwitch& sw : switches.switches) {
    if (free_switches) {
      sw.restart_s = 0;
      sw.migrate_bytes_per_s = std::numeric_limits<double>::infinity();
    }
  }
  FATHOM_RETURN_IF_ERROR(switches.ScheduleOn(&simulator));
  FATHOM_ASSIGN_OR_RETURN(sim::SimulationResult r, simulator.Run());
  PlanOutcome out;
  out.plan = plan;
  out.throughput_tokens_per_s = r.throughput_tokens_per_s;
  out.duration_s = r.duration_s;
  out.run_samples = samples;
  out.output_tokens = r.output_tokens;
  if (!r.switches.empty()) out.switched = r.switches.front();
  return out;
}

// The configurations tried for the tail: valid, aggregated, on no more GPUs than the start, half
// the fastest per user and half the fastest per GPU that the static search simulated.
std::vector<sim::DeploymentConfig> TailConfigs(const TuneResult& tuned,
                                               const sim::DeploymentConfig& start, int count) {
  std::vector<const CandidateResult*> pool;
  for (const CandidateResult& c : tuned.simulated) {
    if (c.valid && !c.config.disaggregated && c.config.TotalGpus() <= start.TotalGpus() &&
        !(c.config == start))
      pool.push_back(&c);
  }
  std::vector<sim::DeploymentConfig> chosen;
  auto take = [&](auto better, int n) {
    std::stable_sort(pool.begin(), pool.end(), better);
    for (const CandidateResult* c : pool) {
      if (n <= 0) break;
      if (std::find(chosen.begin(), chosen.end(), c->config) != chosen.end()) continue;
      chosen.push_back(c->config);
      --n;
    }
  };
  take([](const CandidateResult* a,
          const CandidateResult* b) { return a->tokens_per_s_per_user > b->tokens_per_s_per_user; },
       (count + 1) / 2);
  take(
      [](const CandidateResult* a, const CandidateResult* b) {
        return a->throughput_tokens_per_s > b->throughput_tokens_per_s;
      },
      count / 2);
  return chosen;
}

// Server and Interactive: the start and a rule per batch-limit variant of it (the search space's
// limits on its layout) and trigger: the variant while at least `hi` requests are in the system,
// the start again once at most 4/5 of that are. Each is scored by the tuner's QPS search, from
// the grid rate above the static best's.
Result<AdaptiveResult> QueueRules(const TuneOptions& o, const models::HardwareCatalog& catalog,
                                  const CandidateResult& best, double capacity,
                                  const AdaptiveOptions& a) {
  const sim::DeploymentConfig& start = best.config;
  std::vector<sim::DeploymentConfig> variants;
  for (int64_t batch : o.space.max_batch) {
    for (int64_t tokens : o.space.max_num_tokens) {
      sim::DeploymentConfig v = start;
      v.engine.max_batch = batch;
      v.engine.max_num_tokens = tokens;
      v.engine.cuda_graph_batch_sizes.clear();
      if (!(v == start)) variants.push_back(v);
    }
  }
  std::vector<double> triggers;
  for (double f : a.trigger_fractions) {
    const double n = std::max(2.0, std::floor(capacity * f));
    if (std::find(triggers.begin(), triggers.end(), n) == triggers.end()) triggers.push_back(n);
  }
  std::vector<sim::Plan> plans;
  for (double hi : triggers) {
    for (const sim::DeploymentConfig& v : variants) {
      sim::Plan rule{start, {}, std::nullopt};
      sim::PlanStep up, down;
      up.when = {sim::SwitchTrigger::Kind::kInSystemAtLeast, hi};
      up.to = v;
      down.when = {sim::SwitchTrigger::Kind::kInSystemAtMost, std::floor(0.8 * hi)};
      down.to = start;
      rule.steps = {up, down};
      rule.cycle = true;
      plans.push_back(rule);
    }
  }
  std::vector<Result<CandidateResult>> runs(plans.size(), Status::InvalidArgument("not run"));
  ParallelFor(plans.size(), o.jobs,
              [&](size_t i) { runs[i] = EvaluatePlan(plans[i], o, catalog, best.qps); });
  AdaptiveResult out;
  out.server = true;
  out.static_run.plan = sim::Plan{start, {}, std::nullopt};
  out.static_run.qps = best.qps;
  out.static_run.throughput_tokens_per_s = best.throughput_tokens_per_s;
  out.static_run.run_samples = best.run_samples;
  out.best = out.static_run;
  out.tail_configs = static_cast<int>(variants.size());
  out.triggers = static_cast<int>(triggers.size());
  out.plans = static_cast<int64_t>(plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    // A variant that does not fit, or a rule that breaks the limits above the static best, loses.
    if (!runs[i].ok()) {
      if (out.unusable++ == 0) out.unusable_example = runs[i].status().message();
      continue;
    }
    if (!runs[i]->valid) {
      ++out.broke;
      continue;
    }
    PlanOutcome p;
    p.plan = plans[i];
    p.qps = runs[i]->qps;
    p.throughput_tokens_per_s = runs[i]->throughput_tokens_per_s;
    p.run_samples = runs[i]->run_samples;
    if (!out.best_switch || p.qps > out.best_switch->qps) out.best_switch = p;
  }
  if (out.best_switch && out.best_switch->qps > best.qps) out.best = *out.best_switch;
  // In-place switches cost nothing: the free-switch bound over these rules is the best of them.
  out.oracle = out.best_switch;
  return out;
}

}  // namespace

OrderedJson PlanOutcome::ToJson(double static_objective, bool server) const {
  OrderedJson j;
  if (server) j["qps"] = qps;
  j["throughput_tokens_per_s"] = throughput_tokens_per_s;
  j["gain_pct"] = static_objective > 0 ? 100 * (Objective(server) / static_objective - 1) : 0.0;
  j["duration_s"] = duration_s;
  if (switched) {
    j["switch"] = {{"triggered_s", switched->triggered_s}, {"stopped_s", switched->stopped_s},
                   {"resumed_s", switched->resumed_s},     {"moved", switched->moved},
                   {"kv_bytes", switched->kv_bytes},       {"migrate_s", switched->migrate_s}};
    j["tail_s"] = duration_s - switched->triggered_s;
    j["tail_tokens_per_s"] = tail_tokens_per_s;
    j["static_tail_s"] = static_tail_s;
    j["static_tail_tokens_per_s"] = static_tail_tokens_per_s;
  }
  j["plan"] = sim::ToJson(plan);
  return j;
}

OrderedJson AdaptiveResult::ToJson() const {
  const double base = static_run.Objective(server);
  OrderedJson j;
  j["scenario"] = server ? "server-like" : "offline";
  j["static"] = static_run.ToJson(base, server);
  j["best"] = best.ToJson(base, server);
  j["adapted"] = adapted();
  if (best_switch && !adapted()) j["best_switch"] = best_switch->ToJson(base, server);
  if (oracle) j["oracle"] = oracle->ToJson(base, server);
  OrderedJson orders_json = OrderedJson::array();
  for (const PlanOutcome& o : orders) {
    OrderedJson oj = o.ToJson(base, server);
    oj["queue_order"] = sim::Name(o.plan.start.engine.queue_order);
    oj["prediction_sigma"] = o.plan.start.engine.prediction_sigma;
    oj.erase("plan");
    orders_json.push_back(std::move(oj));
  }
  j["queue_orders"] = std::move(orders_json);
  j["plans_simulated"] = plans;
  if (server) j["rules_broke_limits"] = broke;
  j["unusable"] = unusable;
  if (unusable > 0) j["unusable_example"] = unusable_example;
  j["tail_configs"] = tail_configs;
  j["triggers"] = triggers;
  j["wall_s"] = wall_s;
  j["gain"] = best.Objective(server) / base - 1;
  if (gain_sigma) j["gain_1sigma"] = *gain_sigma;
  return j;
}

Result<AdaptiveResult> SearchPlans(const TuneOptions& o, const models::HardwareCatalog& catalog,
                                   const TuneResult& tuned, const AdaptiveOptions& a) {
  const auto t0 = std::chrono::steady_clock::now();
  if (tuned.ranked.empty()) return Status::InvalidArgument("--adaptive: no valid static best");
  const CandidateResult& best = tuned.ranked.front();
  const sim::DeploymentConfig& start = best.config;
  if (start.disaggregated) {
    return Status::InvalidArgument(
        "--adaptive: the static best is disaggregated; plans switch aggregated deployments");
  }
  const int64_t samples = best.run_samples;

  // Triggers from the start's running capacity: sequences all its ranks may hold at once.
  FATHOM_ASSIGN_OR_RETURN(auto resolved, sim::Resolve(start, catalog, o.make_time));
  const double capacity = static_cast<double>(resolved->spec.pool.instances) *
                          resolved->spec.pool.ranks * start.engine.MaxRunning(resolved->layout.pp);
  if (ServerLike(o.space.scenario)) {
    FATHOM_ASSIGN_OR_RETURN(AdaptiveResult out, QueueRules(o, catalog, best, capacity, a));
    out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  std::vector<double> triggers;
  for (double f : a.trigger_fractions) {
    const double n = std::max(1.0, std::floor(capacity * f));
    if (std::find(triggers.begin(), triggers.end(), n) == triggers.end()) triggers.push_back(n);
  }
  const std::vector<sim::DeploymentConfig> tails = TailConfigs(tuned, start, a.tail_configs);

  // Every run at once: the static one, the static run's trigger times (an in-place switch to
  // itself changes nothing and records when it fired), and each plan with its cost and free.
  struct Job {
    sim::Plan plan;
    bool free = false;
  };
  std::vector<Job> jobs;
  jobs.push_back({sim::Plan{start, {}, std::nullopt}, false});
  for (double n : triggers) {
    sim::PlanStep noop;
    noop.when = {sim::SwitchTrigger::Kind::kInSystemAtMost, n};
    noop.to = start;
    jobs.push_back({sim::Plan{start, {noop}, std::nullopt}, false});
  }
  const size_t first_order = jobs.size();
  for (sim::QueueOrder order : {sim::QueueOrder::kLongestFirst, sim::QueueOrder::kShortestFirst}) {
    sim::Plan ordered{start, {}, std::nullopt};
    ordered.start.engine.queue_order = order;
    ordered.start.engine.prediction_sigma = a.prediction_sigma;
    jobs.push_back({ordered, false});
  }
  const size_t first_plan = jobs.size();
  for (double n : triggers) {
    for (const sim::DeploymentConfig& to : tails) {
      sim::PlanStep step;
      step.when = {sim::SwitchTrigger::Kind::kInSystemAtMost, n};
      step.to = to;
      step.kv = a.kv;
      step.restart_s = a.restart_s;
      const sim::Plan plan{start, {step}, std::nullopt};
      jobs.push_back({plan, false});
      jobs.push_back({plan, true});
    }
  }
  std::vector<Result<PlanOutcome>> runs(jobs.size(), Status::InvalidArgument("not run"));
  ParallelFor(jobs.size(), o.jobs, [&](size_t i) {
    runs[i] = RunPlan(jobs[i].plan, jobs[i].free, o, catalog, samples);
  });
  for (auto& r : runs) FATHOM_RETURN_IF_ERROR(r.status());

  AdaptiveResult out;
  out.static_run = *runs[0];
  out.best = out.static_run;
  out.tail_configs = static_cast<int>(tails.size());
  out.triggers = static_cast<int>(triggers.size());
  out.plans = static_cast<int64_t>(jobs.size());
  // The static run's own switch record at trigger `n` (the no-op runs), if it reached it.
  auto static_at = [&](double n) -> const sim::SwitchRecord* {
    for (size_t i = 1; i < first_order; ++i) {
      if (runs[i]->plan.steps[0].when.value == n && runs[i]->switched) return &*runs[i]->switched;
    }
    return nullptr;
  };
  auto tail_rate = [](int64_t tokens, int64_t before, double seconds) {
    return seconds > 0 ? static_cast<double>(tokens - before) / seconds : 0.0;
  };
  for (size_t i = first_plan; i < jobs.size(); ++i) {
    PlanOutcome& r = *runs[i];
    if (!r.switched) continue;  // the trigger never fired: the static run
    r.tail_tokens_per_s = tail_rate(r.output_tokens, r.switched->generated_before,
                                    r.duration_s - r.switched->triggered_s);
    if (const sim::SwitchRecord* s = static_at(r.plan.steps[0].when.value)) {
      r.static_tail_s = out.static_run.duration_s - s->triggered_s;
      r.static_tail_tokens_per_s =
          tail_rate(out.static_run.output_tokens, s->generated_before, r.static_tail_s);
    }
    if (jobs[i].free) {
      if (!out.oracle || r.throughput_tokens_per_s > out.oracle->throughput_tokens_per_s)
        out.oracle = r;
    } else if (!out.best_switch ||
               r.throughput_tokens_per_s > out.best_switch->throughput_tokens_per_s) {
      out.best_switch = r;
    }
  }
  for (size_t i = first_order; i < first_plan; ++i) {
    out.orders.push_back(*runs[i]);
    // An order is a policy from the start, no switch: the oracle takes it where it is better.
    if (!out.oracle || runs[i]->throughput_tokens_per_s > out.oracle->throughput_tokens_per_s)
      out.oracle = *runs[i];
  }
  for (const PlanOutcome* p :
       {out.best_switch ? &*out.best_switch : nullptr, &out.orders[0], &out.orders[1]}) {
    if (p && p->throughput_tokens_per_s > out.best.throughput_tokens_per_s) out.best = *p;
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

Result<double> GainSigma(const AdaptiveResult& result, const TuneOptions& options,
                         const models::HardwareCatalog& catalog,
                         const std::vector<std::array<sim::TimeModelFactory, 2>>& perturbed) {
  // A plan without switches given one (in place, to itself, never in the run), so that each runs
  // the whole deployment as a plan that switches does.
  auto whole = [](sim::Plan plan) {
    if (plan.steps.empty()) {
      sim::PlanStep never;
      never.when = {sim::SwitchTrigger::Kind::kAfter, 1e15};
      never.to = plan.start;
      plan.steps.push_back(never);
    }
    return plan;
  };
  const sim::Plan held = whole(result.static_run.plan), best = whole(result.best.plan);
  double variance = 0;
  for (const auto& pair : perturbed) {
    double gain[2] = {0, 0};
    for (int side = 0; side < 2; ++side) {
      TuneOptions o = options;
      o.make_time = pair[side];
      FATHOM_ASSIGN_OR_RETURN(CandidateResult s, EvaluatePlan(held, o, catalog));
      FATHOM_ASSIGN_OR_RETURN(CandidateResult b, EvaluatePlan(best, o, catalog));
      const double static_objective = result.server ? s.qps : s.throughput_tokens_per_s;
      const double plan_objective = result.server ? b.qps : b.throughput_tokens_per_s;
      if (!(static_objective > 0))
        return Status::Unavailable("error bars: the static best found no valid run");
      gain[side] = plan_objective / static_objective - 1;
    }
    variance += std::pow((gain[0] - gain[1]) / 2, 2);
  }
  return std::sqrt(variance);
}

}  // namespace fathom::tuner
