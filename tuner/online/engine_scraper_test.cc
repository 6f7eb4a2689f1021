#include "tuner/online/engine_scraper.h"

#include <httplib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "sim/serving/openai_server.h"

namespace fathom::tuner {
namespace {

// A replica's /metrics on 127.0.0.1, rendered as `fathom serve` renders it from `metrics`, which
// the test changes between scrapes; or `page` instead, when set.
class FakeReplica {
 public:
  FakeReplica() {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      res.set_content(page_.empty() ? sim::RenderMetrics(metrics_, "m") : page_,
                      "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the server runs would not stop it.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeReplica() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  // `n` requests finish: each `ttft_s` to its first token, `tpot_s` a token after, `input` and
  // `output` tokens long.
  void Finish(int n, double ttft_s, double tpot_s, int64_t input, int64_t output) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < n; ++i) {
      metrics_.ttft_s.Observe(ttft_s);
      metrics_.tpot_s.Observe(tpot_s);
      metrics_.prompt_len.Observe(static_cast<double>(input));
      metrics_.generation_len.Observe(static_cast<double>(output));
      ++metrics_.finished_length;
    }
  }
  void SetInSystem(int64_t running, int64_t waiting) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.running = running;
    metrics_.waiting = waiting;
  }
  void SetPage(std::string page) {
    std::lock_guard<std::mutex> lock(mu_);
    page_ = std::move(page);
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  sim::LiveMetrics metrics_;
  std::string page_;
};

}  // namespace

TEST_CASE("EngineScraper: fathom serve pages summed over the replicas, as changes since the last",
          "[engines]") {
  FakeReplica a, b, c;
  a.Finish(10, 0.05, 0.01, 100, 50);  // before the first reading: not in the window
  b.Finish(5, 0.05, 0.01, 100, 50);
  a.SetInSystem(2, 0);
  EngineScraper scraper;
  REQUIRE(scraper.Start({{1, {"127.0.0.1", a.port()}}, {2, {"127.0.0.1", b.port()}}}).ok());
  // In the window: a finishes 60 fast requests, b 39 fast and one slow (TTFT 3 s, TPOT 0.2 s);
  // b then leaves (replaced) and c joins, its 20 requests counted from zero.
  a.Finish(60, 0.05, 0.01, 100, 50);
  b.Finish(39, 0.05, 0.01, 3000, 500);
  b.Finish(1, 3, 0.2, 3000, 500);
  c.Finish(20, 0.05, 0.01, 100, 50);
  a.SetInSystem(4, 1);
  c.SetInSystem(3, 2);
  auto w = scraper.Next(
      {{1, {"127.0.0.1", a.port()}}, {2, {"127.0.0.1", b.port()}}, {3, {"127.0.0.1", c.port()}}}, 0,
      30);
  INFO(w.status().message());
  REQUIRE(w.ok());
  CHECK(w->completed == 120);
  CHECK(w->dropped == 0);
  CHECK(w->in_flight == 10);
  CHECK(w->waiting == 3);
  CHECK(w->arrived == 120 + 10 - 2);
  // 119 of 120 TTFTs at 50 ms, the 99th among them (bucket (0.04, 0.06]); one in (2.5, 5] s.
  CHECK(w->ttft_p99_ms > 40);
  CHECK(w->ttft_p99_ms <= 60);
  REQUIRE(w->finished.size() == 120);
  int64_t long_prompts = 0;
  for (const auto& r : w->finished) long_prompts += r.input_tokens > 1000;
  CHECK(long_prompts == 40);
  // The next window: b is gone; a alone finishes 2 slow requests of 3.
  a.Finish(2, 4, 0.3, 100, 50);
  a.Finish(1, 0.05, 0.01, 100, 50);
  auto next = scraper.Next({{1, {"127.0.0.1", a.port()}}, {3, {"127.0.0.1", c.port()}}}, 30, 60);
  REQUIRE(next.ok());
  CHECK(next->completed == 3);
  CHECK(next->start_s == 30);
  CHECK(next->ttft_p99_ms > 2500);
  CHECK(next->tpot_p99_ms > 250);
}

TEST_CASE("EngineScraper: a replica that does not answer is left out; a foreign page is an error",
          "[engines]") {
  FakeReplica a;
  int gone_port = 0;
  {
    FakeReplica gone;
    gone_port = gone.port();
  }
  EngineScraper scraper(1);
  REQUIRE(scraper.Start({{1, {"127.0.0.1", a.port()}}, {2, {"127.0.0.1", gone_port}}}).ok());
  a.Finish(7, 0.05, 0.01, 100, 50);
  auto w = scraper.Next({{1, {"127.0.0.1", a.port()}}, {2, {"127.0.0.1", gone_port}}}, 0, 10);
  REQUIRE(w.ok());
  CHECK(w->completed == 7);
  const std::string url = "http://127.0.0.1:" + std::to_string(a.port()) + "/metrics";
  a.SetPage("up 1\n");
  CHECK(scraper.Next({{1, {"127.0.0.1", a.port()}}}, 10, 20).status().message() ==
        url +
            ": no vllm:request_success_total or vllm:num_requests_running (is it a vLLM /metrics "
            "page?)");
  // Without its TTFT histogram a window would read p99 TTFT as 0 ms: an error, not a window.
  std::string no_ttft;
  {
    sim::LiveMetrics m;
    const std::string page = sim::RenderMetrics(m, "m");
    for (size_t at = 0; at < page.size();) {
      const size_t end = page.find('\n', at);
      const std::string line = page.substr(at, end - at + 1);
      if (line.find("time_to_first_token") == std::string::npos) no_ttft += line;
      at = end + 1;
    }
  }
  a.SetPage(no_ttft);
  CHECK(scraper.Next({{1, {"127.0.0.1", a.port()}}}, 10, 20).status().message() ==
        url +
            ": no vllm:time_to_first_token_seconds histogram: the p99 TTFT limit cannot be "
            "judged");
  a.SetPage("vllm:num_requests_running{\n");
  CHECK(scraper.Next({{1, {"127.0.0.1", a.port()}}}, 10, 20)
            .status()
            .message()
            .rfind(url + " line 1: ", 0) == 0);
}

}  // namespace fathom::tuner
