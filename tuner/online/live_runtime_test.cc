#include "tuner/online/live_runtime.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/fault_injection_env.h"

namespace fathom::tuner {
namespace {

// A vLLM /metrics page: `done` requests finished (`aborted` more aborted), `running` and
// `waiting` now, TTFT observations in the (0, 0.5], (0.5, 1], (1, 2.5] s buckets, and prompt and
// generation lengths in the (0, 1000], (1000, 4000] token buckets.
std::string Page(int done, int aborted, int running, int waiting, std::array<int, 3> ttft,
                 std::array<int, 2> prompts, std::array<int, 2> outputs) {
  auto histogram = [](const std::string& name, const std::vector<std::string>& bounds,
                      const std::vector<int>& counts) {
    std::string s = "# TYPE " + name + " histogram\n";
    int cumulative = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      cumulative += counts[i];
      s += name + "_bucket{le=\"" + bounds[i] + "\",model_name=\"m\"} " +
           std::to_string(cumulative) + "\n";
    }
    s += name + "_bucket{le=\"+Inf\",model_name=\"m\"} " + std::to_string(cumulative) + "\n";
    s += name + "_count{model_name=\"m\"} " + std::to_string(cumulative) + "\n";
    return s;
  };
  std::string page =
      "# HELP vllm:num_requests_running Number of requests.\n# TYPE vllm:num_requests_running "
      "gauge\n";
  page += "vllm:num_requests_running{model_name=\"m\"} " + std::to_string(running) + "\n";
  page += "vllm:num_requests_waiting{model_name=\"m\"} " + std::to_string(waiting) + "\n";
  page += "vllm:request_success_total{finished_reason=\"stop\",model_name=\"m\"} " +
          std::to_string(done) + ".0\n";
  page += "vllm:request_success_total{finished_reason=\"abort\",model_name=\"m\"} " +
          std::to_string(aborted) + "\n";
  page += histogram("vllm:time_to_first_token_seconds", {"0.5", "1.0", "2.5"},
                    {ttft[0], ttft[1], ttft[2]});
  page += histogram("vllm:request_time_per_output_token_seconds", {"0.05", "0.1"}, {done, 0});
  page += histogram("vllm:request_prompt_tokens", {"1000.0", "4000.0"}, {prompts[0], prompts[1]});
  page +=
      histogram("vllm:request_generation_tokens", {"1000.0", "4000.0"}, {outputs[0], outputs[1]});
  return page;
}

}  // namespace

TEST_CASE("LiveRuntime: windows from successive vLLM scrapes, and limits applied by the command",
          "[live]") {
  const auto dir = std::filesystem::temp_directory_path() / "fathom_live";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  // Scrape 0: 10 finished, 2 running. Scrape 1: 110 finished, 1 aborted, 30 running, 5 waiting.
  write("0", Page(10, 0, 2, 0, {10, 0, 0}, {10, 0}, {10, 0}));
  write("1", Page(110, 1, 30, 5, {60, 30, 20}, {70, 40}, {100, 10}));
  // Scrape 2: the runtime restarted (counters from zero): 7 finished since, 3 running.
  write("2", Page(7, 0, 3, 0, {7, 0, 0}, {7, 0}, {7, 0}));
  // Each run prints the next page (the counter file says which).
  const std::string metrics = "n=$(cat " + (dir / "n").string() + " 2>/dev/null || echo 0); cat " +
                              dir.string() + "/$n; echo $((n + 1)) > " + (dir / "n").string();
  LiveRuntimeOptions o;
  o.metrics_cmd = metrics;
  o.apply_cmd = "echo {max_batch} {max_num_tokens} >> " + (dir / "applied").string();
  o.window_s = 30;
  double waited = 0;
  o.wait = [&](double s) { waited += s; };
  auto runtime = LiveRuntime::Create(o);
  INFO(runtime.status().message());
  REQUIRE(runtime.ok());
  auto w = (*runtime)->Observe();
  REQUIRE(w.ok());
  REQUIRE(w->has_value());
  const Window& window = **w;
  CHECK(waited == 30);
  CHECK(window.end_s == 30);
  CHECK(window.completed == 100);
  CHECK(window.dropped == 1);
  CHECK(window.in_flight == 35);
  CHECK(window.waiting == 5);
  CHECK(window.arrived == 100 + 1 + 35 - 2);
  // TTFT: 100 new observations, 50 / 30 / 20 in the three buckets (the first scrape's 10 taken
  // off the first): the 99th is in (1, 2.5], the 19th of its 20.
  CHECK(window.ttft_p99_ms == Approx(1000 + 1500 * (0.99 * 100 - 80) / 20.0));
  CHECK(window.tpot_p99_ms == Approx(1000 * 0.05 * 0.99));
  // Lengths: the 100 new prompts (60 short, 40 long) paired with the 100 new outputs.
  REQUIRE(window.finished.size() == 100);
  int64_t long_prompts = 0, long_outputs = 0;
  for (const auto& r : window.finished) {
    long_prompts += r.input_tokens == 2500;
    long_outputs += r.output_tokens == 2500;
  }
  CHECK(long_prompts == 40);
  CHECK(long_outputs == 10);
  auto restarted = (*runtime)->Observe();
  REQUIRE(restarted.ok());
  CHECK((*restarted)->start_s == 30);
  CHECK((*restarted)->completed == 7);
  CHECK((*restarted)->dropped == 0);
  CHECK((*restarted)->finished.size() == 7);
  CHECK((*restarted)->ttft_p99_ms == Approx(495));  // all 7 in (0, 0.5 s]
  REQUIRE((*runtime)->Apply({64, 4096}).ok());
  std::ifstream applied(dir / "applied");
  std::string line;
  std::getline(applied, line);
  CHECK(line == "64 4096");
  // A failing command is an error naming the flag and the status; a foreign page, what is missing.
  o.apply_cmd = "exit 3";
  o.metrics_cmd = "cat " + (dir / "0").string();
  auto failing = LiveRuntime::Create(o);
  REQUIRE(failing.ok());
  CHECK((*failing)->Apply({64, 4096}).status().message() ==
        "--apply-cmd = \"exit 3\": exited with status 3");
  o.metrics_cmd = "echo 'up 1'";
  CHECK(LiveRuntime::Create(o).status().message().find("no vllm:request_success_total") !=
        std::string::npos);
  // A command that hangs is killed at --command-timeout, and the error names its flag.
  FaultInjectionEnv hanging;
  hanging.hang_commands = true;
  o.env = &hanging;
  o.metrics_cmd = "cat " + (dir / "0").string();
  o.command_timeout_s = 0.2;
  const std::string timed_out = LiveRuntime::Create(o).status().message();
  CHECK(timed_out.rfind("--metrics-cmd = ", 0) == 0);
  CHECK(timed_out.find("did not finish within 0.2 s (--command-timeout); killed") !=
        std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "LiveRuntime: NaN, infinite or huge counts and a page without a latency histogram are errors",
    "[live]") {
  const auto path = std::filesystem::temp_directory_path() / "fathom_live_bad_page";
  LiveRuntimeOptions o;
  o.metrics_cmd = "cat " + path.string();
  o.apply_cmd = "true";
  o.wait = [](double) {};
  auto first_scrape = [&](const std::string& page) {
    std::ofstream(path) << page;
    return LiveRuntime::Create(o).status().message();
  };
  const std::string good = Page(10, 0, 2, 0, {10, 0, 0}, {10, 0}, {10, 0});
  REQUIRE(first_scrape(good).empty());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string page = good;
    page.replace(page.find(from), from.size(), to);
    return page;
  };
  // Each would have rounded to -9.2e18 requests.
  CHECK(first_scrape(with("finished_reason=\"stop\",model_name=\"m\"} 10.0",
                          "finished_reason=\"stop\"} NaN")) ==
        "--metrics-cmd output: vllm:request_success_total = nan: must be a count in [0, 1e15]");
  CHECK(first_scrape(with("vllm:num_requests_running{model_name=\"m\"} 2",
                          "vllm:num_requests_running 1e300")) ==
        "--metrics-cmd output: vllm:num_requests_running = 1e+300: must be a count in [0, 1e15]");
  CHECK(first_scrape(with("vllm:num_requests_waiting{model_name=\"m\"} 0",
                          "vllm:num_requests_waiting +Inf")) ==
        "--metrics-cmd output: vllm:num_requests_waiting = inf: must be a count in [0, 1e15]");
  CHECK(first_scrape(
            with("vllm:request_prompt_tokens_bucket{le=\"1000.0\",model_name=\"m\"} 10",
                 "vllm:request_prompt_tokens_bucket{le=\"1000.0\",model_name=\"m\"} -Inf")) ==
        "--metrics-cmd output: vllm:request_prompt_tokens_bucket = -inf: must be a count in [0, "
        "1e15]");
  CHECK(first_scrape(with("vllm:request_generation_tokens_bucket{le=\"4000.0\"",
                          "vllm:request_generation_tokens_bucket{le=\"1e300\"")) ==
        "--metrics-cmd output: vllm:request_generation_tokens_bucket le = 1e+300: must be a token "
        "count in [0, 1e9] "
        "or +Inf");
  // Without the TTFT histogram its p99 read as 0 ms, within any limit.
  std::string no_ttft;
  std::istringstream lines(good);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("time_to_first_token") == std::string::npos) no_ttft += line + "\n";
  }
  CHECK(first_scrape(no_ttft) ==
        "--metrics-cmd output: no vllm:time_to_first_token_seconds histogram: the p99 TTFT limit "
        "cannot be judged");
  std::filesystem::remove(path);
}

}  // namespace fathom::tuner
