#include "sim/deployment_config.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "base/files.h"

namespace fathom::sim {
namespace {

// A deployment with every field the file holds away from its default.
DeploymentConfig EveryField() {
  DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.gpus = 16;
  d.tp = 4;
  d.pp = 2;
  d.ep = 2;
  d.attn_dp = 2;
  d.weights = "fp8";
  d.dense_weights = "bf16";
  d.kv = "bf16";
  d.runtime = models::Runtime::kCpp;
  EngineConfig& e = d.engine;
  e.scheduler = SchedulerKind::kMixed;
  e.max_batch = 96;
  e.max_num_tokens = 3000;
  e.chunk_size = 512;
  e.block_tokens = 64;
  e.reserve_fraction = 0.15;
  e.preemption = PreemptionMode::kSwap;
  e.admission = AdmissionPolicy::kReserve;
  e.prefix_caching = true;
  e.mtp_depth = 3;
  e.acceptance = 0.7;
  e.draft_cost = 0.05;
  e.adp_balance = true;
  e.adp_batching_wait_iters = 7;
  e.adp_timeout_iters = 90;
  d.router = RouterKind::kPrefixAware;
  d.disaggregated = true;
  d.prefill = {2, 4, 1, 2, 1};
  d.decode = {1, 8, 1, 8, 8};
  d.decode_max_batch = 512;
  d.kv_link_gb_per_s = 25;
  return d;
}

}  // namespace

TEST_CASE("DeploymentConfig: written and read back, every field is equal", "[sim]") {
  for (const DeploymentConfig& d : {DeploymentConfig(), EveryField()}) {
    auto back = DeploymentFromJson(Json::parse(ToJson(d).dump()), "round trip");
    INFO(back.status().message());
    REQUIRE(back.ok());
    CHECK(*back == d);
  }
}

TEST_CASE("RunRecord: a deployment file written and read back has the same deployment and run",
          "[sim]") {
  RunRecord run;
  run.scenario = Scenario::kInteractive;
  run.qps = 13.143582031768943;
  run.samples = 26382;
  run.seed = 7;
  run.benchmark = "deepseek-r1";
  run.trace = "traces/data/x.jsonl";
  run.stack = "trtllm-1.2";
  run.ttft_limit_ms = 450;
  run.tpot_limit_ms = 60;
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_run_round_trip.json").string();
  REQUIRE(WriteFileAtomic(path, ToJson(EveryField(), run).dump(2)).ok());
  auto file = LoadDeploymentFile(path);
  INFO(file.status().message());
  REQUIRE(file.ok());
  CHECK(file->config == EveryField());
  CHECK(file->run == run);
  std::filesystem::remove(path);
}

}  // namespace fathom::sim
