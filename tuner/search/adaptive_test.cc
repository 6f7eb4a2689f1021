#include "tuner/search/adaptive.h"

#include <catch2/catch.hpp>

#include "sim/time_model.h"
#include "tuner/search/test_deployments.h"

namespace fathom::tuner {
namespace {

// Llama 2 70B on one H200: plain decoding for a full batch, MTP for a thin tail. At 256 sequences
// a step is compute-bound, so three drafts a step cost more than the 1.5 extra tokens they bring;
// with a few long sequences left a step is bound by reading the weights, which drafts ride on.
sim::DeploymentConfig Start() { return testing::Llama70bOnOneH200(); }

sim::DeploymentConfig Tail() {
  sim::DeploymentConfig d = Start();
  d.engine.mtp_depth = 3;
  d.engine.acceptance = 0.7;
  return d;
}

struct Case {
  TuneOptions options;
  TuneResult tuned;
};

// 2,000 short answers and four long reasoning traces: the long ones run on alone at the end.
Case TwoPhases() {
  Case c;
  TuneOptions& o = c.options;
  o.space.scenario = sim::Scenario::kOffline;
  for (int i = 0; i < 2004; ++i) {
    traces::Request r;
    r.id = i;
    r.input_tokens = 200;
    r.output_tokens = i < 2000 ? 300 : 8000;
    o.dataset.push_back(r);
  }
  o.jobs = 2;
  o.make_time = sim::RooflineFactory();
  CandidateResult start, tail;
  start.config = Start();
  start.valid = true;
  start.run_samples = 2004;
  start.throughput_tokens_per_s = 2;  // the static search's order: start best per GPU,
  start.tokens_per_s_per_user = 1;    // tail fastest per user
  tail.config = Tail();
  tail.valid = true;
  tail.run_samples = 2004;
  tail.throughput_tokens_per_s = 1;
  tail.tokens_per_s_per_user = 2;
  c.tuned.ranked = {start};
  c.tuned.simulated = {start, tail};
  return c;
}

}  // namespace

TEST_CASE("SearchPlans: free switches recover the oracle; a dear switch leaves the plan static",
          "[tuner][adaptive]") {
  const models::HardwareCatalog catalog = *models::HardwareCatalog::LoadBuiltin();
  const Case c = TwoPhases();
  AdaptiveOptions a;
  a.restart_s = 0;
  auto free = SearchPlans(c.options, catalog, c.tuned, a);
  REQUIRE(free.ok());
  REQUIRE(free->adapted());
  REQUIRE(free->oracle);
  const double base = free->static_run.throughput_tokens_per_s;
  CHECK(free->best.plan.steps[0].to == Tail());
  CHECK(free->best.throughput_tokens_per_s > 1.15 * base);
  // Only the KV migration separates the plan from the oracle: well under a second.
  CHECK(free->best.throughput_tokens_per_s ==
        Approx(free->oracle->throughput_tokens_per_s).epsilon(0.005));
  CHECK(free->best.switched->resumed_s - free->best.switched->stopped_s < 1);
  CHECK(free->best.static_tail_s > free->best.duration_s - free->best.switched->triggered_s);

  // A restart longer than the whole static run gains nothing: no plan switches.
  a.restart_s = 2 * free->static_run.duration_s;
  auto dear = SearchPlans(c.options, catalog, c.tuned, a);
  REQUIRE(dear.ok());
  CHECK(dear->best.plan.steps.empty());
  REQUIRE(dear->best_switch);
  CHECK(dear->best_switch->throughput_tokens_per_s < base);
  REQUIRE(dear->oracle);
  CHECK(dear->oracle->throughput_tokens_per_s == Approx(free->oracle->throughput_tokens_per_s));
  // Taking the longest predicted outputs first starts the four long traces at once (LPT): a gain
  // without a switch. Shortest-first leaves them for last, no better than arrival order.
  REQUIRE(dear->orders.size() == 2);
  CHECK(dear->orders[0].plan.start.engine.queue_order == sim::QueueOrder::kLongestFirst);
  CHECK(dear->orders[0].throughput_tokens_per_s > 1.05 * base);
  CHECK(dear->orders[1].throughput_tokens_per_s < 1.01 * base);
  CHECK(dear->best.throughput_tokens_per_s == dear->orders[0].throughput_tokens_per_s);
  CHECK(dear->adapted());
}

TEST_CASE(
    "SearchPlans: Server rules are scored by the QPS search; a rule that changes nothing "
    "scores the static best's QPS",
    "[tuner][adaptive]") {
  const models::HardwareCatalog catalog = *models::HardwareCatalog::LoadBuiltin();
  Case c = TwoPhases();
  TuneOptions& o = c.options;
  o.space.scenario = sim::Scenario::kServer;
  o.dataset.resize(400);  // short answers only
  o.probe_duration_s = 60;
  o.probe_min_samples = 200;
  o.qps_steps = 5;
  o.ttft_limit_ms = 2000;
  o.tpot_limit_ms = 80;
  o.space.max_batch = {64, 256};
  o.space.max_num_tokens = {8192};
  auto static_best = Evaluate(Start(), o, catalog);
  REQUIRE(static_best.ok());
  REQUIRE(static_best->valid);
  REQUIRE(static_best->qps > 0);

  sim::Plan same{Start(), {}, std::nullopt};
  sim::PlanStep up, down;
  up.when = {sim::SwitchTrigger::Kind::kInSystemAtLeast, 20};
  up.to = Start();
  down.when = {sim::SwitchTrigger::Kind::kInSystemAtMost, 16};
  down.to = Start();
  same.steps = {up, down};
  same.cycle = true;
  auto rule = EvaluatePlan(same, o, catalog);
  REQUIRE(rule.ok());
  CHECK(rule->qps == static_best->qps);

  TuneResult tuned;
  tuned.ranked = {*static_best};
  AdaptiveOptions a;
  auto plans = SearchPlans(o, catalog, tuned, a);
  REQUIRE(plans.ok());
  CHECK(plans->server);
  CHECK(plans->static_run.qps == static_best->qps);
  CHECK(plans->plans == 4);  // one variant (batch 64) x four triggers
  CHECK(plans->broke + plans->unusable + (plans->best_switch ? 1 : 0) >= 1);
  if (plans->adapted()) CHECK(plans->best.qps > static_best->qps);
}

}  // namespace fathom::tuner
