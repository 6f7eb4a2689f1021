#include "tuner/search/autoscale.h"

#include <catch2/catch.hpp>

#include "sim/time_model.h"
#include "traces/synth.h"
#include "traces/transforms.h"
#include "tuner/search/test_deployments.h"

namespace fathom::tuner {
namespace {

// Chat-like requests at 1 a second for 10 minutes, then 40 a second, then 1 again.
std::vector<traces::Request> ThreePhases() {
  traces::SynthSpec spec;
  spec.arrivals.schedule = {{600, 1.0}, {600, 40.0}, {600, 1.0}};
  spec.lengths.input = {std::log(600.0), 0.5};
  spec.lengths.output = {std::log(200.0), 0.5};
  spec.requests = 100000;
  spec.seed = 5;
  auto reader = traces::Synthesize(spec);
  REQUIRE(reader.ok());
  auto all = traces::ReadAll(**reader);
  REQUIRE(all.ok());
  return *all;
}

AutoscaleOptions Options() {
  AutoscaleOptions o;
  o.phase_s = 600;
  o.max_replicas = 16;
  o.ttft_limit_ms = 2000;
  o.tpot_limit_ms = 100;
  o.restart_s = 30;
  return o;
}

Result<AutoscaleResult> Plan(const std::vector<traces::Request>& trace, const AutoscaleOptions& o) {
  auto catalog = models::HardwareCatalog::LoadBuiltin();
  REQUIRE(catalog.ok());
  return PlanReplicas(testing::Llama70bOnOneH200(), trace, o, *catalog, sim::RooflineFactory());
}

TEST_CASE("PlanReplicas: a surge gets more replicas only while it lasts", "[autoscale]") {
  const auto trace = ThreePhases();
  auto r = Plan(trace, Options());
  INFO(r.status().message());
  REQUIRE(r.ok());
  REQUIRE(r->phases.size() == 3);
  const auto& p = r->phases;
  CHECK(p[1].oracle > p[0].oracle);
  CHECK(p[1].oracle > p[2].oracle);
  // The static fleet serves the surge all along; the plan and the oracle only during it.
  CHECK(r->static_replicas >= p[1].oracle);
  CHECK(r->plan_within_limits);
  for (const auto& phase : p) {
    CHECK(phase.planned >= phase.oracle);
    CHECK(phase.ttft_p99_ms <= 2000);
    CHECK(phase.tpot_p99_ms <= 100);
  }
  CHECK(r->gpu_hours_oracle <= r->gpu_hours_plan + 1e-9);
  CHECK(r->gpu_hours_plan < 0.8 * r->gpu_hours_static);
  // Scaling up starts the restart early, so the new replicas serve from the boundary; scaling
  // down waits for it.
  REQUIRE(r->plan.steps.size() == 2);
  CHECK(r->plan.steps[0].when.value == Approx(600 - 30).margin(1e-6));
  CHECK(r->plan.steps[0].to.gpus == p[1].planned);
  CHECK(r->plan.steps[0].kv == sim::KvMove::kDrain);
  CHECK(r->plan.steps[1].when.value == Approx(1200).margin(1e-6));
  CHECK(r->plan.start.gpus == p[0].planned);
}

TEST_CASE("PlanReplicas: a phase no fleet can serve, and a trace without times, are named",
          "[autoscale]") {
  const auto trace = ThreePhases();
  AutoscaleOptions o = Options();
  o.max_replicas = 1;
  o.tpot_limit_ms = 10;
  auto r = Plan(trace, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("phase 1 (0-600 s): 1 replicas (--max-replicas) do not keep "
                                  "the p99 limits") != std::string::npos);
  auto untimed = trace;
  untimed[3].arrival_s.reset();
  r = Plan(untimed, Options());
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("needs arrival times") != std::string::npos);
  o = Options();
  o.phase_s = 0;
  CHECK(Plan(trace, o).status().message() == "--phase-s = 0: must be > 0");
}

}  // namespace
}  // namespace fathom::tuner
