#include "sim/deployment_config.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "base/files.h"

namespace fathom::sim {
namespace {

// A run with every field set.
RunRecord EveryRunField() {
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
  return run;
}

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
  d.fusions.gemm_allreduce = true;
  EngineConfig& e = d.engine;
  e.scheduler = SchedulerKind::kMixed;
  e.max_batch = 96;
  e.max_num_tokens = 3000;
  e.chunk_size = 512;
  e.block_tokens = 64;
  e.reserve_fraction = 0.15;
  e.kv_free_fraction = 0.9;
  e.preemption = PreemptionMode::kSwap;
  e.admission = AdmissionPolicy::kReserve;
  e.prefix_caching = true;
  e.mtp_depth = 3;
  e.acceptance = 0.7;
  e.draft_cost = 0.05;
  e.adp_balance = true;
  e.adp_batching_wait_iters = 7;
  e.adp_timeout_iters = 90;
  e.stream_interval = 4;
  e.cuda_graph_batch_sizes = {1, 8, 96};
  e.max_concurrency = 192;
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
  const RunRecord run = EveryRunField();
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

TEST_CASE("DeploymentConfig: the file keeps its fields in one order, defaults left out", "[sim]") {
  CHECK(
      ToJson(DeploymentConfig()).dump() ==
      R"({"model":"deepseek-r1","hardware":"b200","gpus":8,"tp":8,"pp":1,"ep":8,"attn_dp":8,"weig)"
      R"(hts":"fp4","kv":"fp8","runtime":"python","scheduler":"chunked","max_batch":256,"max_num_)"
      R"(tokens":8192,"chunk_size":0,"block_size":32,"reserve":0.1,"preemption":"recompute","admi)"
      R"(ssion":"greedy","prefix_caching":false,"mtp":0,"acceptance":0.0,"router":"least-outstand)"
      R"(ing"})");
  CHECK(
      ToJson(EveryField(), EveryRunField()).dump() ==
      R"({"model":"llama2-70b","hardware":"h200","gpus":16,"tp":4,"pp":2,"ep":2,"attn_dp":2,"weig)"
      R"(hts":"fp8","dense_weights":"bf16","kv":"bf16","runtime":"cpp","gemm_allreduce":true,"sch)"
      R"(eduler":"mixed","max_b)"
      R"(atch":96,"max_num_tokens":3000,"chunk_size":512,"block_size":64,"reserve":0.15,"kv_free_)"
      R"(fraction":0.9,"preemption":"swap","admission":"reserve","prefix_caching":true,"mtp":3,"acceptance":0.7,"draft_c)"
      R"(ost":0.05,"router":"prefix-aware","adp_balance":{"batching_wait_iters":7,"timeout_iters")"
      R"(:90},"stream_interval":4,"cuda_graph_batch_sizes":[1,8,96],"max_concurrency":192,)"
      R"("disaggregated":{"prefill":{"instances":2,"tp":4,"pp":1,"ep":2,"attn_dp":1},"decode)"
      R"(":{"instances":1,"tp":8,"pp":1,"ep":8,"attn_dp":8}},"decode_max_batch":512,"kv_link_gb_p)"
      R"(er_s":25.0,"run":{"scenario":"interactive","qps":13.143582031768943,"samples":26382,"see)"
      R"(d":7,"benchmark":"deepseek-r1","trace":"traces/data/x.jsonl","stack":"trtllm-1.2","ttft_)"
      R"(limit_ms":450.0,"tpot_limit_ms":60.0}})");
  CHECK(
      ToJson(DeploymentConfig(), RunRecord()).dump() ==
      R"({"model":"deepseek-r1","hardware":"b200","gpus":8,"tp":8,"pp":1,"ep":8,"attn_dp":8,"weig)"
      R"(hts":"fp4","kv":"fp8","runtime":"python","scheduler":"chunked","max_batch":256,"max_num_)"
      R"(tokens":8192,"chunk_size":0,"block_size":32,"reserve":0.1,"preemption":"recompute","admi)"
      R"(ssion":"greedy","prefix_caching":false,"mtp":0,"acceptance":0.0,"router":"least-outstand)"
      R"(ing","run":{"scenario":"offline","samples":0,"seed":1}})");
}

TEST_CASE("LoadDeploymentFile: a bad field names the file, the field, the value and the rule",
          "[sim]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_bad_deployment.json").string();
  const std::pair<std::string, std::string> cases[] = {
      {R"({"gpus": 0})", ": field 'gpus' = 0: must be in [1, 65536]"},
      {R"({"mtp": 17})", ": field 'mtp' = 17: must be in [0, 16]"},
      {R"({"scheduler_steps": 0})", ": field 'scheduler_steps' = 0: must be in [1, 64]"},
      {R"({"gate_steps": -1})", ": field 'gate_steps' = -1: must be in [0, 1000]"},
      {R"({"runtime": "java"})", ": runtime = \"java\": unknown (one of python, cpp)"},
      {R"({"scheduler": "fifo"})",
       ": scheduler = \"fifo\": unknown (one of static, prefill-first, chunked, mixed, "
       "decode-first)"},
      {R"({"router": "random-ish"})",
       ": router = \"random-ish\": unknown (one of round-robin, least-outstanding, least-kv, "
       "prefix-aware)"},
      {R"({"preemption": "drop"})", ": field 'preemption' = \"drop\": must be recompute or swap"},
      {R"({"admission": "lazy"})", ": field 'admission' = \"lazy\": must be greedy or reserve"},
      {R"({"typo": 1})",
       ": field 'typo': unknown (known: acceptance, admission, adp_balance, async_scheduling, "
       "attn_dp, block_size, "
       "chunk_size, cuda_graph_batch_sizes, decode_max_batch, dense_weights, disaggregated, "
       "draft_cost, ep, gate_min_running, gate_steps, gemm_allreduce, gpus, "
       "hardware, kv, kv_free_fraction, kv_link_gb_per_s, max_batch, max_concurrency, "
       "max_num_tokens, model, mtp, "
       "pp, prediction_sigma, preemption, "
       "prefix_caching, queue_order, reserve, router, run, runtime, scheduler, scheduler_steps, "
       "stream_interval, "
       "tp, "
       "weights)"},
      {R"({"queue_order": "random"})",
       ": queue_order = \"random\": unknown (one of fifo, longest-first, shortest-first, "
       "longest-input-first, shortest-input-first)"},
      {R"({"queue_order": "longest-first", "prediction_sigma": -1})",
       ": prediction_sigma = -1: must be in [0, 10]"},
      {R"({"max_batch": "a"})", ": field 'max_batch' = \"a\": must be an integer"},
      {R"({"max_batch": 0})", ": max_batch = 0: must be >= 1"},
      {R"({"kv_free_fraction": 1.5})",
       ": kv_free_fraction = 1.5: must be in [0, 1] (0: use reserve)"},
      {R"({"cuda_graph_batch_sizes": 8})",
       ": field 'cuda_graph_batch_sizes' = 8: expected an array of integers"},
      {R"({"cuda_graph_batch_sizes": [1, "2"]})",
       ": field 'cuda_graph_batch_sizes' = \"2\": entries must be integers"},
      {R"({"cuda_graph_batch_sizes": [4, 2]})", ": cuda_graph_batch_sizes = 2: must be ascending"},
      {R"({"max_concurrency": -1})", ": max_concurrency = -1: must be >= 0"},
      {R"({"gate_min_running": -1})", ": gate_min_running = -1: must be >= 0"},
      {R"({"cuda_graph_batch_sizes": [0]})",
       ": cuda_graph_batch_sizes = 0: must be in [1, 1048576]"},
      {R"({"adp_balance": {"wait": 3}})",
       ": adp_balance: field 'wait': unknown (known: batching_wait_iters, timeout_iters)"},
      {R"({"adp_balance": 5})", ": field 'adp_balance': expected a JSON object"},
      {R"({"adp_balance": {"timeout_iters": "x"}})",
       ": adp_balance: field 'timeout_iters' = \"x\": must be an integer"},
      {R"({"disaggregated": {"prefill": {"tp": 2}}})",
       ": field 'disaggregated': needs 'prefill' and 'decode' pools"},
      {R"({"disaggregated": {"prefill": {"tp": 2}, "decode": {}}})",
       ": disaggregated.decode: field 'tp': missing (required integer)"},
      {R"({"disaggregated": {"prefill": {"tp": 2, "instances": 65536}, "decode": {"tp": 1}}})",
       ": disaggregated.prefill: field 'instances' = 65536: instances x tp x pp = 131072 GPUs: "
       "must be <= 65536"},
      {R"({"disaggregated": {"prefill": {"tp": 2, "x": 1}, "decode": {"tp": 1}}})",
       ": disaggregated.prefill: field 'x': unknown (known: attn_dp, ep, instances, pp, tp)"},
      {R"({"disaggregated": {"prefill": {"tp": 2}, "decode": {"tp": 1}, "mixed": {}}})",
       ": disaggregated: field 'mixed': unknown (known: decode, prefill)"},
      {R"({"run": {"samples": 1}})", ": run: field 'scenario': missing (required string)"},
      {R"({"run": {"scenario": "server", "samples": 5}})",
       ": run: field 'qps' = 0: must be > 0 and finite"},
      {R"({"run": {"scenario": "offline", "samples": 0}})",
       ": run: field 'samples' = 0: must be >= 1"},
      {R"({"run": {"scenario": "bogus", "samples": 1}})",
       ": run: scenario = \"bogus\": unknown (one of offline, server, interactive, replay, "
       "closed-loop)"},
      {R"({"run": {"scenario": "offline", "samples": 1, "ttft_limit_ms": -1}})",
       ": run: field 'ttft_limit_ms' = -1: must be > 0 and finite"},
      {R"({"run": {"scenario": "offline", "samples": 1, "seed": "s"}})",
       ": run: field 'seed' = \"s\": must be an integer"},
      {R"({"run": {"scenario": "offline", "samples": 1, "x": 1}})",
       ": run: field 'x': unknown (known: benchmark, qps, samples, scenario, seed, stack, "
       "tpot_limit_ms, trace, ttft_limit_ms)"},
      {R"({"run": 5})", ": run: expected a JSON object"},
  };
  for (const auto& [text, message] : cases) {
    INFO(text);
    REQUIRE(WriteFileAtomic(path, text).ok());
    auto file = LoadDeploymentFile(path);
    REQUIRE_FALSE(file.ok());
    CHECK(file.status().message() == path + message);
  }
  std::filesystem::remove(path);
}

}  // namespace fathom::sim
