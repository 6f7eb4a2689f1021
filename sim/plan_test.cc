#include "sim/plan.h"

#include <catch2/catch.hpp>

#include "models/hardware.h"
#include "sim/time_model.h"

namespace fathom::sim {
namespace {

Plan TailPlan() {
  Plan plan;
  plan.start.attn_dp = 8;
  plan.start.engine.max_batch = 512;
  PlanStep step;
  step.when = {SwitchTrigger::Kind::kInSystemAtMost, 256};
  step.to = plan.start;
  step.to.attn_dp = 1;
  step.kv = KvMove::kRecompute;
  step.restart_s = 42;
  plan.steps.push_back(step);
  RunRecord run;
  run.samples = 4388;
  run.benchmark = "deepseek-r1";
  plan.run = run;
  return plan;
}

std::string ErrorOf(const Json& j) {
  auto p = PlanFromJson(j, "plan.json");
  REQUIRE_FALSE(p.ok());
  return p.status().message();
}

}  // namespace

TEST_CASE("Plan: the file reads back what was written", "[plan]") {
  const Plan plan = TailPlan();
  const Json j = Json::parse(ToJson(plan).dump());
  auto back = PlanFromJson(j, "plan.json");
  REQUIRE(back.ok());
  CHECK(*back == plan);
  CHECK(Describe(plan.steps[0].when) == "in_system_at_most 256");
  Plan rule = plan;
  rule.steps.push_back(plan.steps[0]);
  rule.steps[1].to = plan.start;
  rule.cycle = true;
  auto again = PlanFromJson(Json::parse(ToJson(rule).dump()), "plan.json");
  REQUIRE(again.ok());
  CHECK(*again == rule);
  for (KvMove m : {KvMove::kMigrate, KvMove::kRecompute, KvMove::kDrain}) {
    Plan moved = plan;
    moved.steps[0].kv = m;
    auto read = PlanFromJson(Json::parse(ToJson(moved).dump()), "plan.json");
    REQUIRE(read.ok());
    CHECK(read->steps[0].kv == m);
    CHECK(ParseKvMove(Name(m)) == m);
  }
}

TEST_CASE("Plan: a bad switch is named by file, index and field", "[plan]") {
  Json j = Json::parse(ToJson(TailPlan()).dump());
  Json bad = j;
  bad["switches"][0]["when"] = "sometimes";
  CHECK(ErrorOf(bad).find("plan.json: switches[0]: field 'when' = \"sometimes\"") !=
        std::string::npos);
  bad = j;
  bad["switches"][0]["kv"] = "teleport";
  CHECK(ErrorOf(bad).find("field 'kv' = \"teleport\": must be migrate, recompute or drain") !=
        std::string::npos);
  bad = j;
  bad["switches"][0]["value"] = -1;
  CHECK(ErrorOf(bad).find("field 'value' = -1") != std::string::npos);
  bad = j;
  bad["switches"][0].erase("to");
  CHECK(ErrorOf(bad).find("switches[0]: field 'to': missing") != std::string::npos);
  bad = j;
  bad["switches"][0]["to"]["max_bach"] = 3;
  CHECK(ErrorOf(bad).find("switches[0]: to: field 'max_bach': unknown") != std::string::npos);
  bad = j;
  bad["switches"][0]["restart"] = 3;
  CHECK(ErrorOf(bad).find("field 'restart': unknown") != std::string::npos);
  bad = j;
  bad["phases"] = Json::array();
  CHECK(ErrorOf(bad).find("field 'phases': unknown (known: cycle, start, switches)") !=
        std::string::npos);
  bad = j;
  bad.erase("start");
  CHECK(ErrorOf(bad).find("field 'start': missing") != std::string::npos);
}

TEST_CASE("Plan: batch limits switch in place, anything else restarts", "[plan]") {
  DeploymentConfig a;
  DeploymentConfig b = a;
  b.engine.max_batch = a.engine.max_batch * 2;
  b.engine.max_num_tokens = 1024;
  CHECK(InPlace(a, b));
  b.engine.mtp_depth = 1;
  CHECK_FALSE(InPlace(a, b));
  DeploymentConfig c = a;
  c.attn_dp = 1;
  CHECK_FALSE(InPlace(a, c));
}

TEST_CASE("Plan: resolving checks each step against the start and prices its restart", "[plan]") {
  const models::HardwareCatalog catalog = *models::HardwareCatalog::LoadBuiltin();
  Plan plan = TailPlan();
  plan.steps[0].restart_s.reset();
  plan.steps[0].to.engine.cuda_graph_batch_sizes = {1, 2, 4, 8, 512};
  auto resolved = ResolvePlan(plan, catalog, RooflineFactory());
  REQUIRE(resolved.ok());
  REQUIRE(resolved->switches.size() == 1);
  const ConfigSwitch& sw = resolved->switches[0];
  CHECK_FALSE(sw.in_place);
  CHECK(sw.pool.ranks == 1);
  // DeepSeek-R1 in FP4 over 8 GPUs: some 50 GB a GPU, 1 s over a 50 GB/s host link; a capture
  // per batch size.
  const RestartEstimate& r = resolved->restarts[0];
  CHECK(r.weights_s > 0.5);
  CHECK(r.weights_s < 2);
  CHECK(r.graphs_s == Approx(5 * RestartEstimate::kGraphCaptureS));
  CHECK(sw.restart_s == Approx(r.total()));
  CHECK(sw.migrate_bytes_per_s > 0);

  Plan other = TailPlan();
  other.steps[0].to.model = "llama2-70b";
  auto wrong = ResolvePlan(other, catalog, RooflineFactory());
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().message().find("keeps the start's model and GPU") != std::string::npos);
  other = TailPlan();
  other.cycle = true;
  CHECK(ResolvePlan(other, catalog, RooflineFactory())
            .status()
            .message()
            .find("go back to the start") != std::string::npos);
  other = TailPlan();
  other.steps[0].to.disaggregated = true;
  CHECK(ResolvePlan(other, catalog, RooflineFactory()).status().message().find("aggregated") !=
        std::string::npos);
}

}  // namespace fathom::sim
