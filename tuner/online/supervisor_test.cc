#include "tuner/online/supervisor.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "base/files.h"
#include "base/json_fields.h"
#include "sim/time_model.h"

namespace fathom::tuner {
namespace {

// Llama 2 70B (FP8) on 2 x H200, a replica a GPU.
sim::DeploymentConfig Llama() {
  sim::DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.gpus = 2;
  d.tp = d.ep = d.attn_dp = 1;
  d.weights = d.kv = "fp8";
  d.engine.max_batch = 256;
  d.engine.max_num_tokens = 8192;
  return d;
}

// Replicas are `fathom serve` 10x faster than real time, but `before` runs first in their shell
// (it may exit, or exec something else). They are programs of their own, checked by their own
// tests: in a ThreadSanitizer build they report races inside the uninstrumented cpp-httplib
// library, which would end them at once (the halt_on_error of the test's TSAN_OPTIONS).
SupervisorOptions ServeReplicas(const std::string& before) {
  SupervisorOptions o;
  const std::string serve =
      DefaultEngineCommand(Llama(), *models::HardwareCatalog::LoadBuiltin(), FATHOM_BINARY,
                           "--time-scale 10 --cost-model roofline");
  o.engine_cmd = "env TSAN_OPTIONS=halt_on_error=0 sh -c \"" + before + " exec " + serve + "\"";
  o.replicas = 2;
  o.window_s = 10;
  o.time_scale = 10;
  // Under sanitizers a replica takes seconds to start, more on a busy machine.
  o.health_timeout_s = FATHOM_TIMED ? 8 : 120;
  o.gateway.token = "secret";
  return o;
}

// Short completions sent one after another to the gateway until stopped, counting the answers.
class Client {
 public:
  explicit Client(int port) {
    thread_ = std::thread([this, port] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(std::chrono::seconds(30));
      while (!stop_) {
        auto r = c.Post("/v1/completions", R"({"prompt": "hello there", "max_tokens": 4})",
                        "application/json");
        ++(r && r->status == 200 ? answered_ : failed_);
      }
    });
  }
  // A failed check ends the test without Stop: the thread still ends.
  ~Client() {
    if (thread_.joinable()) Stop();
  }
  // Stops, and returns (answered, failed).
  std::pair<int64_t, int64_t> Stop() {
    stop_ = true;
    thread_.join();
    return {answered_.load(), failed_.load()};
  }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> answered_{0}, failed_{0};
};

// The limits of the replicas in routing, from the gateway's control endpoint (which may answer
// slowly under ThreadSanitizer on a busy machine).
std::vector<BatchLimits> RoutedLimits(int gateway_port) {
  httplib::Client c("127.0.0.1", gateway_port);
  c.set_connection_timeout(std::chrono::seconds(30));
  c.set_read_timeout(std::chrono::seconds(60));
  auto r = c.Get("/fathom/replicas", {{"Authorization", "Bearer secret"}});
  INFO("GET /fathom/replicas: " << httplib::to_string(r.error()));
  REQUIRE(r);
  auto j = ParseJson(r->body, "/fathom/replicas");
  REQUIRE(j.ok());
  std::vector<BatchLimits> limits;
  for (const Json& replica : *j) {
    if (!replica["draining"].get<bool>())
      limits.push_back({replica["max_num_seqs"].get<int64_t>(),
                        replica["max_num_batched_tokens"].get<int64_t>()});
  }
  return limits;
}

}  // namespace

TEST_CASE(
    "a replica's command: the deployment's vLLM launch run by fathom serve, limits and port filled "
    "in") {
  sim::DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.gpus = 2;
  d.tp = d.ep = d.attn_dp = 1;
  d.weights = d.kv = "fp8";
  d.engine.max_batch = 256;
  d.engine.max_num_tokens = 8192;
  const std::string cmd = DefaultEngineCommand(d, *models::HardwareCatalog::LoadBuiltin(),
                                               "/opt/fathom's/fathom", "--time-scale 10");
  CHECK(cmd.rfind("'/opt/fathom'\\''s/fathom' serve meta-llama/Llama-2-70b-chat-hf ", 0) == 0);
  CHECK(
      cmd.find("--max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_num_batched_tokens}") !=
      std::string::npos);
  CHECK(cmd.find("--hardware h200 --host {host} --port {port} --time-scale 10") !=
        std::string::npos);
  CHECK(cmd.find('#') == std::string::npos);  // "one per replica" is the supervisor's business
  const std::string one = EngineCommand(cmd, BatchLimits{64, 2048}, 8123);
  CHECK(one.find("--max-num-seqs 64 --max-num-batched-tokens 2048") != std::string::npos);
  CHECK(one.find("--port 8123 ") != std::string::npos);
  CHECK(EngineCommand("vllm serve m --port {port} --max-num-seqs {max_num_seqs} --x {port}",
                      {8, 16}, 9) == "vllm serve m --port 9 --max-num-seqs 8 --x 9");
}

TEST_CASE(
    "Supervisor: a configuration whose replica exits or never answers is rolled back, and no "
    "request fails meanwhile",
    "[supervisor]") {
  // Replicas with 1 sequence exit at once; with 2, they never answer.
  auto s = Supervisor::Start(
      ServeReplicas(
          "test {max_num_seqs} != 1 || exit 1; test {max_num_seqs} != 2 || exec sleep 60;"),
      {8, 2048});
  INFO(s.status().message());
  REQUIRE(s.ok());
  Supervisor& supervisor = **s;
  Client client(supervisor.gateway_port());
  auto exits = supervisor.Apply({1, 2048});
  REQUIRE(exits.ok());
  CHECK_FALSE(exits->applied);
  CHECK(exits->why_not.find("(1 seqs, 2048 tokens) exited with status 1 before it was healthy") !=
        std::string::npos);
  CHECK(RoutedLimits(supervisor.gateway_port()) == std::vector<BatchLimits>{{8, 2048}, {8, 2048}});
  // Not healthy in time: a timing, checked where timings hold (the wait is the whole timeout).
  if (FATHOM_TIMED) {
    auto silent = supervisor.Apply({2, 2048});
    REQUIRE(silent.ok());
    CHECK_FALSE(silent->applied);
    CHECK(silent->why_not.find(
              "(2 seqs, 2048 tokens) was not healthy within 8 s (--health-timeout): killed") !=
          std::string::npos);
    CHECK(RoutedLimits(supervisor.gateway_port()) ==
          std::vector<BatchLimits>{{8, 2048}, {8, 2048}});
  }
  // A good configuration still goes through afterwards.
  auto good = supervisor.Apply({16, 2048});
  REQUIRE(good.ok());
  INFO(good->why_not);
  CHECK(good->applied);
  CHECK(RoutedLimits(supervisor.gateway_port()) ==
        std::vector<BatchLimits>{{16, 2048}, {16, 2048}});
  const auto [answered, failed] = client.Stop();
  CHECK(answered > 0);
  CHECK(failed == 0);
}

TEST_CASE(
    "Supervisor: a client whose every request is its own fault (4xx) makes the controller neither "
    "apply nor roll back",
    "[supervisor]") {
  auto s = Supervisor::Start(ServeReplicas(""), {8, 2048});
  INFO(s.status().message());
  REQUIRE(s.ok());
  Supervisor& supervisor = **s;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> refused{0};
  std::thread typo([&] {
    httplib::Client c("127.0.0.1", supervisor.gateway_port());
    while (!stop) {
      auto r = c.Post("/v1/completions", R"({"model": "lama", "prompt": "x"})", "application/json");
      if (r && r->status == 404) ++refused;
    }
  });
  OnlineOptions o;
  o.max_batch = {1, 8, 64};
  o.max_num_tokens = {2048};
  o.ttft_limit_ms = 2000;
  o.tpot_limit_ms = 100;
  o.confirm_windows = 1;
  o.cooldown_windows = 0;
  auto controller = Controller::Create(
      Llama(), {8, 2048}, o, *models::HardwareCatalog::LoadBuiltin(), sim::RooflineFactory());
  REQUIRE(controller.ok());
  std::vector<Window> windows;
  auto summary = RunOnline(supervisor, **controller, 4,
                           [&](const Window& w, const Decision&) { windows.push_back(w); });
  stop = true;
  typo.join();
  REQUIRE(summary.ok());
  CHECK(refused > 20);
  CHECK(summary->changes == 0);
  CHECK(summary->rollbacks == 0);
  REQUIRE(windows.size() == 4);
  for (const Window& w : windows) {
    CHECK(w.arrived <= 1);  // the request under way at the window's edge
    CHECK(w.dropped == 0);
  }
}

// Each routed replica's GPUs (from the gateway's list) and what its process was started with.
std::vector<std::string> RoutedGpus(int gateway_port) {
  httplib::Client c("127.0.0.1", gateway_port);
  c.set_read_timeout(std::chrono::seconds(60));
  auto r = c.Get("/fathom/replicas", {{"Authorization", "Bearer secret"}});
  REQUIRE(r);
  auto j = ParseJson(r->body, "/fathom/replicas");
  REQUIRE(j.ok());
  std::vector<std::string> gpus;
  for (const Json& replica : *j) {
    if (replica["draining"].get<bool>()) continue;
    const std::string placed = replica["gpus"].get<std::string>();
    // The launcher wrote its {gpus} into the replica's environment, as srun would pass them on.
    std::ifstream environ("/proc/" + std::to_string(replica["pid"].get<int64_t>()) + "/environ");
    std::string env((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    CHECK(env.find(std::string("LAUNCHED_ON=") + '\0') == std::string::npos);
    CHECK(env.find("LAUNCHED_ON=127.0.0.1:" + placed + '\0') != std::string::npos);
    CHECK(env.find("CUDA_VISIBLE_DEVICES=" + placed + '\0') != std::string::npos);
    gpus.push_back(placed);
  }
  std::sort(gpus.begin(), gpus.end());
  return gpus;
}

TEST_CASE(
    "Supervisor: replicas placed on GPUs of their own through a launcher, across canaries and "
    "rolling replacements",
    "[supervisor]") {
  SupervisorOptions o = ServeReplicas("");
  o.launcher = "env LAUNCHED_ON={node}:{gpus}";
  o.gpus = {4, 5, 6};
  o.gpus_per_replica = 1;
  o.canary_requests = 3;
  auto s = Supervisor::Start(o, {8, 2048});
  INFO(s.status().message());
  REQUIRE(s.ok());
  Supervisor& supervisor = **s;
  CHECK(RoutedGpus(supervisor.gateway_port()) == std::vector<std::string>{"4", "5"});
  Client client(supervisor.gateway_port());
  for (const BatchLimits limits : {BatchLimits{16, 2048}, BatchLimits{8, 2048}}) {
    // The canary takes the spare GPU; each old replica gives its GPU back as it exits.
    auto applied = supervisor.Apply(limits);
    INFO(applied.status().message());
    REQUIRE(applied.ok());
    INFO(applied->why_not);
    CHECK(applied->applied);
    const std::vector<std::string> gpus = RoutedGpus(supervisor.gateway_port());
    REQUIRE(gpus.size() == 2);
    CHECK(gpus[0] != gpus[1]);
  }
  const auto [answered, failed] = client.Stop();
  CHECK(answered > 0);
  CHECK(failed == 0);
  o.gpus = {4, 5};
  CHECK(o.Validate().message() ==
        "--gpus: 2 replicas of 1 GPUs need room for 3 (one more for a rolling replacement), and 2 "
        "devices on 1 nodes hold 2");
}

TEST_CASE(
    "Supervisor: when the second new replica fails, the first is replaced back; the targets file "
    "follows the replicas",
    "[supervisor]") {
  const auto dir = std::filesystem::temp_directory_path() / "fathom_supervisor_partial";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string first = (dir / "first").string();
  // The first replica with 32 sequences starts; the next one exits.
  SupervisorOptions o =
      ServeReplicas("test {max_num_seqs} != 32 || ! test -e " + first +
                    " || exit 3; test {max_num_seqs} != 32 || touch " + first + ";");
  o.prometheus_targets = (dir / "targets.json").string();
  auto s = Supervisor::Start(o, {8, 2048});
  INFO(s.status().message());
  REQUIRE(s.ok());
  Supervisor& supervisor = **s;
  // file_sd_configs: one group a replica, its address and id.
  auto targets = [&] {
    auto text = ReadFile(o.prometheus_targets);
    REQUIRE(text.ok());
    auto j = ParseJson(*text, o.prometheus_targets);
    REQUIRE(j.ok());
    std::vector<std::string> addresses;
    for (const Json& group : *j) {
      REQUIRE(group["targets"].size() == 1);
      CHECK(!group["labels"]["fathom_replica"].get<std::string>().empty());
      CHECK(group["labels"]["fathom_fleet"] == supervisor.Fleet());
      addresses.push_back(group["targets"][0].get<std::string>());
    }
    return addresses;
  };
  const std::vector<std::string> started = targets();
  REQUIRE(started.size() == 2);
  CHECK(started[0].rfind("127.0.0.1:", 0) == 0);
  Client client(supervisor.gateway_port());
  auto partial = supervisor.Apply({32, 2048});
  REQUIRE(partial.ok());
  CHECK_FALSE(partial->applied);
  CHECK(partial->why_not.find("exited with status 3 before it was healthy") != std::string::npos);
  CHECK(std::filesystem::exists(first));  // the first did start
  CHECK(RoutedLimits(supervisor.gateway_port()) == std::vector<BatchLimits>{{8, 2048}, {8, 2048}});
  const auto [answered, failed] = client.Stop();
  CHECK(answered > 0);
  CHECK(failed == 0);
  // Once the replaced replicas have drained and exited, the file lists the replicas serving.
  for (int i = 0; i < 200 && targets().size() > 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::vector<std::string> now = targets();
  CHECK(now.size() == 2);
  CHECK(now != started);
  CHECK(supervisor.Fleet() == "127.0.0.1:" + std::to_string(supervisor.gateway_port()));
  s->reset();  // the supervisor exits: Prometheus is left no replica to scrape
  CHECK(targets().empty());
}

TEST_CASE("Supervisor: the engines' own metrics are read in engine time under --time-scale",
          "[supervisor]") {
  SupervisorOptions o = ServeReplicas("");
  o.metrics_source = MetricsSource::kEngines;
  auto s = Supervisor::Start(o, {8, 2048});
  INFO(s.status().message());
  REQUIRE(s.ok());
  Supervisor& supervisor = **s;
  Client client(supervisor.gateway_port());
  // The first window with answers (under sanitizers the first may have none).
  Result<std::optional<Window>> w = std::optional<Window>();
  for (int i = 0; i < 60 && (!w.ok() || !w->has_value() || (*w)->completed == 0); ++i) {
    w = supervisor.Observe();
    INFO(w.status().message());
    REQUIRE(w.ok());
    REQUIRE(w->has_value());
  }
  CHECK((*w)->completed > 0);
  // A 3-token prompt on one H200 takes one pass over Llama 2 70B's 70 GB of FP8 weights, at least
  // 14.6 ms of engine time (4.8 TB/s): 1.5 ms of wall time at 10x, a reading of at most 5 ms
  // (vLLM's TTFT bucket) had the wall seconds been taken for engine seconds.
  CHECK((*w)->ttft_p99_ms > 10);
  const auto [answered, failed] = client.Stop();
  CHECK(answered > 0);
  CHECK(failed == 0);
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
  o.gateway.port = 0;
  o.metrics_source = MetricsSource::kPrometheus;
  CHECK(o.Validate().message() ==
        "--metrics-source = prometheus: give --prometheus-url, the server's HTTP API");
  o.prometheus_url = "localhost:9090";
  CHECK(o.Validate().message() ==
        "--prometheus-url = localhost:9090: must be http://HOST:PORT[/PREFIX] (e.g. "
        "http://127.0.0.1:9090)");
  o.prometheus_url = "http://localhost:9090";
  CHECK(o.Validate().ok());
  o.metrics_source = MetricsSource::kEngines;
  CHECK(o.Validate().message() == "--prometheus-url: only with --metrics-source prometheus");
  CHECK(ParseMetricsSource("engines").ok());
  CHECK(ParseMetricsSource("statsd").status().message() ==
        "--metrics-source = statsd: must be gateway, engines or prometheus");
  o.prometheus_url.clear();
  o.canary_share = 1;
  CHECK(o.Validate().message() == "--canary-share = 1: must be 0 (no canary) or more, and under 1");
  o.canary_share = 0.2;
  o.canary_requests = 0;
  CHECK(o.Validate().message() == "--canary-requests = 0: must be >= 1");
  o.canary_requests = 20;
  o.nodes = {"node7"};
  CHECK(o.Validate().message().rfind("--engine-cmd: must contain {host} to run on --nodes (node7)",
                                     0) == 0);
  o.nodes = {"a b"};
  CHECK(o.Validate().message() == "--nodes: 'a b' is not a host name");
  o.nodes.clear();
  o.gateway_url = "http://127.0.0.1:1";
  o.gateway.token.clear();
  CHECK(o.Validate().message() ==
        "--gateway-url: give --token (or FATHOM_TOKEN), the gateway's control token");
}

}  // namespace fathom::tuner
