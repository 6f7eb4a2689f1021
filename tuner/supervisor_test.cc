#include "tuner/supervisor.h"

#include <catch2/catch.hpp>

namespace fathom::tuner {

TEST_CASE(
    "a replica's command: the deployment's vLLM launch run by fathom serve, limits and port filled "
    "in") {
  sim::DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.gpus = 2;
  d.tp = 1;
  d.weights = d.kv = "fp8";
  d.engine.max_batch = 256;
  d.engine.max_num_tokens = 8192;
  const std::string cmd = DefaultEngineCommand(d, "/opt/fathom's/fathom", "--time-scale 10");
  CHECK(cmd.rfind("'/opt/fathom'\\''s/fathom' serve meta-llama/Llama-2-70b-chat-hf ", 0) == 0);
  CHECK(
      cmd.find("--max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_num_batched_tokens}") !=
      std::string::npos);
  CHECK(cmd.find("--hardware h200 --port {port} --time-scale 10") != std::string::npos);
  CHECK(cmd.find('#') == std::string::npos);  // "one per replica" is the supervisor's business
  const std::string one = EngineCommand(cmd, BatchLimits{64, 2048}, 8123);
  CHECK(one.find("--max-num-seqs 64 --max-num-batched-tokens 2048") != std::string::npos);
  CHECK(one.find("--port 8123 ") != std::string::npos);
  CHECK(EngineCommand("vllm serve m --port {port} --max-num-seqs {max_num_seqs} --x {port}",
                      {8, 16}, 9) == "vllm serve m --port 9 --max-num-seqs 8 --x 9");
}

TEST_CASE("supervisor options: bad values name the flag and the rule") {
  SupervisorOptions o;
  o.engine_cmd = "vllm serve m";
  CHECK(o.Validate().message() ==
        "--engine-cmd = vllm serve m: must contain {port} (each replica listens on its own)");
  o.engine_cmd = "vllm serve m --port {port}";
  CHECK(o.Validate().ok());
  o.replicas = 0;
  CHECK(o.Validate().message() == "--replicas = 0: must be 1 to 64");
  o.replicas = 2;
  o.time_scale = 0;
  CHECK(o.Validate().message() == "--time-scale = 0: must be > 0 and finite");
  o.time_scale = 1;
  o.gateway.port = 70000;
  CHECK(o.Validate().message() == "--gateway-port = 70000: must be 0 to 65535");
}

}  // namespace fathom::tuner
