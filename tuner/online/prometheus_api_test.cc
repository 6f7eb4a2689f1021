#include "tuner/online/prometheus_api.h"

#include <httplib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fathom::tuner {
namespace {

// An in-process stand-in for Prometheus's HTTP API on 127.0.0.1: `answer` gives each query's
// HTTP status and body; every query asked is kept.
class FakePrometheus {
 public:
  using Answer = std::function<std::pair<int, std::string>(const std::string& query)>;
  explicit FakePrometheus(Answer answer) : answer_(std::move(answer)) {
    server_.Get("/api/v1/query", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string query = req.get_param_value("query");
      std::pair<int, std::string> a;
      {
        std::lock_guard<std::mutex> lock(mu_);
        queries_.push_back(query);
        times_.push_back(req.get_param_value("time"));
        a = answer_(query);
      }
      res.status = a.first;
      res.set_content(a.second, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the server runs would not stop it.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakePrometheus() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void set_answer(Answer a) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = std::move(a);
  }
  std::vector<std::string> queries() {
    std::lock_guard<std::mutex> lock(mu_);
    return queries_;
  }
  std::vector<std::string> times() {
    std::lock_guard<std::mutex> lock(mu_);
    return times_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  Answer answer_;
  std::vector<std::string> queries_, times_;
};

// A successful instant query's reply: one series per (labels JSON, value).
std::string Vector(const std::vector<std::pair<std::string, std::string>>& series) {
  std::string result;
  for (const auto& [labels, value] : series) {
    if (!result.empty()) result += ",";
    result += "{\"metric\":" + labels + ",\"value\":[1700000000.5,\"" + value + "\"]}";
  }
  return "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[" + result +
         "]}}";
}

// Buckets by le (cumulative increases), for a `sum by (le)` reply.
std::string Buckets(const std::vector<std::pair<std::string, std::string>>& by_le) {
  std::vector<std::pair<std::string, std::string>> series;
  for (const auto& [le, v] : by_le) series.emplace_back("{\"le\":\"" + le + "\"}", v);
  return Vector(series);
}

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A server running vLLM with: 100 requests finished in the window and 2 aborted, 6 running and 3
// waiting at its end; TTFT 50 in (0, 0.5], 30 in (0.5, 1], 20 in (1, 2.5] s; TPOT all under 50 ms;
// prompts 60 under 1000 tokens and 40 in (1000, 4000], outputs all under 1000.
std::pair<int, std::string> Vllm(const std::string& q) {
  if (Has(q, "vllm:request_success_total"))
    return {200, Vector({{"{\"finished_reason\":\"length\"}", "100"},
                         {"{\"finished_reason\":\"abort\"}", "2"}})};
  if (Has(q, "vllm:time_to_first_token_seconds_bucket"))
    return {200, Buckets({{"0.5", "50"}, {"1", "80"}, {"2.5", "100"}, {"+Inf", "100"}})};
  if (Has(q, "vllm:request_time_per_output_token_seconds_bucket"))
    return {200, Buckets({{"0.05", "100"}, {"0.1", "100"}, {"+Inf", "100"}})};
  if (Has(q, "vllm:request_prompt_tokens_bucket"))
    return {200, Buckets({{"1000", "60"}, {"4000", "100"}, {"+Inf", "100"}})};
  if (Has(q, "vllm:request_generation_tokens_bucket"))
    return {200, Buckets({{"1000", "100"}, {"4000", "100"}, {"+Inf", "100"}})};
  if (Has(q, "vllm:num_requests_running")) return {200, Vector({{"{}", "6"}})};
  if (Has(q, "vllm:num_requests_waiting")) return {200, Vector({{"{}", "3"}})};
  return {200, Vector({})};
}

}  // namespace

TEST_CASE("PrometheusApi: a window from increase() queries over it, summed by le and reason",
          "[prometheus]") {
  FakePrometheus fake(Vllm);
  auto api = PrometheusApi::Create(fake.url() + "/");
  REQUIRE(api.ok());
  auto w = api->Next(60, 1700000000.5, 120, 180);
  INFO(w.status().message());
  REQUIRE(w.ok());
  CHECK(w->start_s == 120);
  CHECK(w->end_s == 180);
  CHECK(w->completed == 100);
  CHECK(w->dropped == 2);
  CHECK(w->in_flight == 9);
  CHECK(w->waiting == 3);
  CHECK(w->arrived == 100 + 2 + 9);  // nothing was in the system before the first window
  // The 99th of 100 TTFTs is the 19th of 20 in (1, 2.5] s.
  CHECK(w->ttft_p99_ms == Approx(1000 + 1500 * (99 - 80) / 20.0));
  CHECK(w->tpot_p99_ms == Approx(50 * 0.99));
  REQUIRE(w->finished.size() == 100);
  int64_t long_prompts = 0;
  for (const auto& r : w->finished) long_prompts += r.input_tokens == 2500;
  CHECK(long_prompts == 40);
  const std::vector<std::string> queries = fake.queries();
  CHECK(std::find(queries.begin(), queries.end(),
                  "sum by (le) (increase(vllm:time_to_first_token_seconds_bucket[60000ms]))") !=
        queries.end());
  CHECK(std::find(queries.begin(), queries.end(),
                  "sum by (finished_reason) (increase(vllm:request_success_total[60000ms]))") !=
        queries.end());
  CHECK(std::find(queries.begin(), queries.end(), "sum(vllm:num_requests_running)") !=
        queries.end());
  CHECK(fake.times().front() == "1700000000.500");
  // The next window's arrivals count from the 9 in the system at this one's end.
  auto next = api->Next(60, 1700000060.5, 180, 240);
  REQUIRE(next.ok());
  CHECK(next->arrived == 100 + 2 + 9 - 9);
}

TEST_CASE("PrometheusApi: a selector reads one fleet's series only", "[prometheus]") {
  FakePrometheus fake(Vllm);
  auto api = PrometheusApi::Create(fake.url());
  REQUIRE(api.ok());
  api->set_selector("fathom_fleet=\"127.0.0.1:8000\"");
  auto w = api->Next(10, 1700000000.5, 0, 100);
  INFO(w.status().message());
  REQUIRE(w.ok());
  const std::vector<std::string> queries = fake.queries();
  CHECK(std::find(queries.begin(), queries.end(),
                  "sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{fathom_fleet="
                  "\"127.0.0.1:8000\"}[10000ms]))") != queries.end());
  CHECK(std::find(queries.begin(), queries.end(),
                  "sum(vllm:num_requests_running{fathom_fleet=\"127.0.0.1:8000\"})") !=
        queries.end());
  for (const std::string& q : queries) CHECK(Has(q, "{fathom_fleet=\"127.0.0.1:8000\"}"));
}

TEST_CASE("PrometheusApi: the older TPOT histogram when the newer is absent", "[prometheus]") {
  FakePrometheus fake([](const std::string& q) -> std::pair<int, std::string> {
    if (Has(q, "vllm:request_time_per_output_token_seconds_bucket")) return {200, Vector({})};
    if (Has(q, "vllm:time_per_output_token_seconds_bucket"))
      return {200, Buckets({{"0.1", "0"}, {"0.2", "100"}, {"+Inf", "100"}})};
    return Vllm(q);
  });
  auto api = PrometheusApi::Create(fake.url());
  REQUIRE(api.ok());
  auto w = api->Next(10, 1700000000, 0, 10);
  REQUIRE(w.ok());
  CHECK(w->tpot_p99_ms == Approx(100 + 100 * 0.99));
}

TEST_CASE("PrometheusApi: bad replies are errors naming the URL and the query, never a window",
          "[prometheus]") {
  FakePrometheus fake(Vllm);
  const std::string ttft =
      "sum by (le) (increase(vllm:time_to_first_token_seconds_bucket[10000ms]))";
  const std::string where = "Prometheus at " + fake.url() + ", query " + ttft + ": ";
  auto api = PrometheusApi::Create(fake.url());
  REQUIRE(api.ok());
  auto fail_ttft = [&](int status, std::string body) {
    fake.set_answer([=](const std::string& q) -> std::pair<int, std::string> {
      if (Has(q, "time_to_first_token")) return {status, body};
      return Vllm(q);
    });
    auto w = api->Next(10, 1700000000, 0, 10);
    REQUIRE_FALSE(w.ok());
    return w.status().message();
  };
  CHECK(fail_ttft(500, "oops") == where + "HTTP 500");
  CHECK(fail_ttft(400,
                  "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"parse error\"}") ==
        where + "HTTP 400: parse error");
  CHECK(Has(fail_ttft(200, "{\"status\":\"success\",\"data\":"), where));
  CHECK(fail_ttft(200, "[1, 2]") == where + "the reply is not a JSON object");
  CHECK(fail_ttft(200, "{\"status\":\"error\",\"error\":\"too busy\"}") ==
        where + "status \"error\": too busy");
  CHECK(fail_ttft(200,
                  "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":[]}}") ==
        where + "data.resultType = \"matrix\": must be \"vector\" (an instant query of series)");
  CHECK(fail_ttft(200,
                  "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[{"
                  "\"metric\":{},\"value\":[1,2]}]}}") ==
        where + "data.result[0]: must be {\"metric\": {labels}, \"value\": [time, \"value\"]}");
  CHECK(fail_ttft(200, Buckets({{"1", "many"}})) ==
        where + "data.result[0]: value \"many\": must be a number");
  // No TTFT series: the p99 TTFT limit cannot be judged, so there is no window.
  CHECK(Has(fail_ttft(200, Vector({})), where + "no series (does it scrape the replicas"));
  // A count that is no count.
  CHECK(fail_ttft(200, Buckets({{"1", "NaN"}, {"+Inf", "NaN"}})) ==
        "Prometheus at " + fake.url() +
            ": vllm:time_to_first_token_seconds_bucket = nan: must be a count in [0, 1e15]");
  // Neither TPOT histogram.
  fake.set_answer([](const std::string& q) -> std::pair<int, std::string> {
    if (Has(q, "per_output_token")) return {200, Vector({})};
    return Vllm(q);
  });
  auto no_tpot = api->Next(10, 1700000000, 0, 10);
  REQUIRE_FALSE(no_tpot.ok());
  CHECK(Has(no_tpot.status().message(),
            "query sum by (le) (increase(vllm:time_per_output_token_seconds_bucket[10000ms])): "
            "no series"));
}

TEST_CASE("PrometheusApi: a server that does not answer, and bad URLs", "[prometheus]") {
  int closed_port = 0;
  {
    FakePrometheus gone(Vllm);
    closed_port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port);
  auto api = PrometheusApi::Create(url, 1);
  REQUIRE(api.ok());
  auto q = api->Query("up", 1700000000);
  REQUIRE_FALSE(q.ok());
  CHECK(Has(q.status().message(), "Prometheus at " + url + ", query up: no answer ("));
  for (const std::string bad : {"127.0.0.1:9090", "https://p:9090", "http://", "http:///x"}) {
    CHECK(PrometheusApi::Create(bad).status().message() ==
          "--prometheus-url = " + bad +
              ": must be http://HOST:PORT[/PREFIX] (e.g. http://127.0.0.1:9090)");
  }
}

}  // namespace fathom::tuner
