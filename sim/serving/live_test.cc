#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

#include "base/json_fields.h"
#include "base/prometheus.h"
#include "models/hardware.h"
#include "models/roofline.h"
#include "sim/deployment_config.h"
#include "sim/serving/gateway.h"
#include "sim/serving/gateway_control.h"
#include "sim/serving/http_request.h"
#include "sim/serving/http_response.h"
#include "sim/serving/live_engine.h"
#include "sim/serving/loadgen.h"
#include "sim/serving/openai_server.h"

namespace fathom::sim {
namespace {

// Llama 2 70B on 2 x H200 (TP2, FP8), priced by the roofline.
std::unique_ptr<ResolvedDeployment> Llama() {
  DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.gpus = d.tp = 2;
  d.ep = d.attn_dp = 1;
  d.weights = "fp8";
  d.kv = "fp8";
  d.engine.max_batch = 64;
  d.engine.max_num_tokens = 2048;
  auto catalog = models::HardwareCatalog::LoadBuiltin();
  REQUIRE(catalog.ok());
  auto factory = [](const models::ModelArch& m, const models::Hardware& hw,
                    const models::ParallelLayout& l, const models::Precision& p, models::Runtime,
                    models::Fusions) -> std::unique_ptr<models::ExecutionTimeModel> {
    return std::make_unique<models::RooflineModel>(m, hw, l, p);
  };
  auto r = Resolve(d, *catalog, factory);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return std::move(*r);
}

// A run of `n` requests at `qps` (simulated time), all 200 prompt tokens and 40 output tokens.
std::vector<traces::Request> Requests(int n) {
  std::vector<traces::Request> v;
  for (int i = 0; i < n; ++i) v.push_back({i, std::nullopt, 200, 40, {}});
  return v;
}

struct Served {
  LiveEngine engine;
  OpenAiServer server;
  std::thread thread;
  Served(double time_scale, ServeOptions o)
      : engine(Llama(), time_scale), server(&engine, WithPort0(std::move(o))) {
    REQUIRE(server.Bind().ok());
    thread = std::thread([this] { server.Serve(); });
    REQUIRE(server.WaitReady());
  }
  ~Served() {
    server.Stop();
    thread.join();
  }
  static ServeOptions WithPort0(ServeOptions o) {
    o.port = 0;
    if (o.served_model_name.empty()) o.served_model_name = "llama";
    return o;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server.port()); }
};

}  // namespace

TEST_CASE("a live engine produces every token in order and ends each request") {
  LiveEngine engine(Llama(), 20.0);
  std::vector<std::shared_ptr<LiveStream>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(engine.Submit(100 + 50 * i, 10 + i));
  for (auto& s : streams) {
    std::unique_lock<std::mutex> lock(s->mu);
    REQUIRE(s->cv.wait_for(lock, std::chrono::seconds(20), [&] { return s->done; }));
    CHECK_FALSE(s->aborted);
    CHECK(s->tokens == s->output);
    CHECK(s->first_token_s >= s->arrival_s);
    CHECK(s->done_s >= s->first_token_s);
  }
  const LiveMetrics m = engine.Metrics();
  CHECK(m.finished_length == 4);
  CHECK(m.generation_tokens == 10 + 11 + 12 + 13);
  CHECK(m.prompt_tokens == 100 + 150 + 200 + 250);
  CHECK(m.ttft_s.count == 4);
  CHECK(m.running == 0);
  CHECK(m.waiting == 0);
  engine.BeginDrain();
  CHECK(engine.Submit(10, 10) == nullptr);
}

TEST_CASE("stopping a live engine ends what is in flight as aborted") {
  LiveEngine engine(Llama(), 0.01);  // far slower than real time: nothing finishes
  auto s = engine.Submit(100, 1000);
  engine.Stop();
  {
    // Not held while calling the engine, which takes the stream's lock under its own.
    std::lock_guard<std::mutex> lock(s->mu);
    CHECK(s->done);
    CHECK(s->aborted);
  }
  CHECK(engine.Metrics().finished_abort == 1);
}

TEST_CASE("fathom loadgen against fathom serve reproduces the simulator's latencies") {
  const double scale = 4.0;
  Served served(scale, {});
  ScenarioConfig sc;
  sc.scenario = Scenario::kServer;
  sc.qps = 6;
  sc.min_duration_s = 1;
  const int n = 60;
  auto limits = MlperfLimits("llama2-70b", Scenario::kServer);
  LoadgenOptions o;
  o.url = served.url();
  o.time_scale = scale;
  auto source = PoissonSource(Requests(n), n, sc.qps, 7);
  auto report = RunLoad(*source, sc, limits, 2, o);
  REQUIRE(report.ok());
  CHECK(report->failed == 0);
  CHECK(report->model == "llama");
  CHECK(report->result.completed_requests == n);

  auto resolved = Llama();  // owns the time model the spec points into
  SimulationSpec spec = resolved->spec;
  spec.scenario = sc;
  spec.benchmark = "llama2-70b";
  Simulator simulator(spec, PoissonSource(Requests(n), n, sc.qps, 7));
  auto predicted = simulator.Run();
  REQUIRE(predicted.ok());
  // The HTTP path and the engine thread's wake-ups add a little to each token; within 10% (and
  // a few milliseconds of wall time, scaled to the endpoint's). A late wake-up only ever adds: the
  // p99 TTFT of 60 requests is their slowest but one, and on a loaded 2-core machine one or two
  // late wake-ups set it (20 ms of wall time once in a full test run, 33 ms once in CI's, with the
  // test running alone). So the median and the mean are the tight statements both ways, and the
  // p99 is tight from below (the endpoint is never faster than the model) with room above for
  // wake-ups of up to 60 ms of wall time.
  const auto& m = report->result;
  INFO("ttft p50 " << m.ttft_p50_ms << " vs " << predicted->ttft_p50_ms << ", ttft p99 "
                   << m.ttft_p99_ms << " vs " << predicted->ttft_p99_ms << ", ttft mean "
                   << m.ttft_mean_ms << " vs " << predicted->ttft_mean_ms << ", tpot p99 "
                   << m.tpot_p99_ms << " vs " << predicted->tpot_p99_ms << ", tpot mean "
                   << m.tpot_mean_ms << " vs " << predicted->tpot_mean_ms);
  auto close = [](double measured, double simulated, double slack_ms) {
    return std::abs(measured - simulated) <= 0.10 * simulated + slack_ms;
  };
  if (FATHOM_TIMED) {
    CHECK(close(m.ttft_p50_ms, predicted->ttft_p50_ms, 5 * scale));
    CHECK(close(m.ttft_mean_ms, predicted->ttft_mean_ms, 5 * scale));
    CHECK(m.ttft_p99_ms >= 0.90 * predicted->ttft_p99_ms - 5 * scale);
    CHECK(m.ttft_p99_ms <= 1.10 * predicted->ttft_p99_ms + 60 * scale);
    CHECK(close(m.tpot_p99_ms, predicted->tpot_p99_ms, 0.5 * scale));
    CHECK(close(m.tpot_mean_ms, predicted->tpot_mean_ms, 0.5 * scale));
  }
  CHECK(m.output_tokens == predicted->output_tokens);
}

TEST_CASE(
    "the OpenAI endpoint answers like vLLM, whole and streamed, and refuses bad requests clearly") {
  ServeOptions o;
  o.api_key = "secret";
  o.max_body_bytes = 4096;
  Served served(50.0, o);
  httplib::Client client(served.url());
  httplib::Headers auth = {{"Authorization", "Bearer secret"}};

  auto models = client.Get("/v1/models", auth);
  REQUIRE(models);
  CHECK(models->status == 200);
  CHECK_THAT(models->body, Catch::Matchers::Contains("\"id\":\"llama\""));

  auto whole =
      client.Post("/v1/completions", auth, R"({"model":"llama","prompt":[1,2,3,4],"max_tokens":5})",
                  "application/json");
  REQUIRE(whole);
  CHECK(whole->status == 200);
  CHECK_THAT(whole->body, Catch::Matchers::Contains("\"completion_tokens\":5"));
  CHECK_THAT(whole->body, Catch::Matchers::Contains("\"prompt_tokens\":4"));

  std::string events;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.headers = auth;
  req.body = R"({"messages":[{"role":"user","content":"hello there"}],"max_tokens":3,"stream":true,
                 "stream_options":{"include_usage":true}})";
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    events.append(d, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  REQUIRE(client.send(req, res, err));
  CHECK(res.status == 200);
  CHECK_THAT(events, Catch::Matchers::Contains("chat.completion.chunk"));
  CHECK_THAT(events, Catch::Matchers::Contains("\"finish_reason\":\"length\""));
  CHECK_THAT(events, Catch::Matchers::Contains("\"completion_tokens\":3"));
  CHECK_THAT(events, Catch::Matchers::EndsWith("data: [DONE]\n\n"));

  auto unauthorized = client.Post("/v1/completions", R"({"prompt":"x"})", "application/json");
  REQUIRE(unauthorized);
  CHECK(unauthorized->status == 401);
  auto malformed = client.Post("/v1/completions", auth, R"({"prompt": [1, 2)", "application/json");
  REQUIRE(malformed);
  CHECK(malformed->status == 400);
  CHECK_THAT(malformed->body, Catch::Matchers::Contains("malformed JSON"));
  auto bad_length =
      client.Post("/v1/completions", auth, R"({"prompt":"x","max_tokens":-3})", "application/json");
  REQUIRE(bad_length);
  CHECK(bad_length->status == 400);
  CHECK_THAT(bad_length->body, Catch::Matchers::Contains("max_tokens"));
  auto other_model =
      client.Post("/v1/completions", auth, R"({"model":"gpt","prompt":"x"})", "application/json");
  REQUIRE(other_model);
  CHECK(other_model->status == 404);
  auto deep = client.Post("/v1/completions", auth, std::string(3000, '['), "application/json");
  REQUIRE(deep);
  CHECK(deep->status == 400);
  auto huge = client.Post("/v1/completions", auth, std::string(10000, ' '), "application/json");
  REQUIRE(huge);
  CHECK(huge->status == 413);

  // Only the valid requests reached the engine.
  auto metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK_THAT(metrics->body,
             Catch::Matchers::Contains(
                 "vllm:request_success_total{finished_reason=\"length\",model_name=\"llama\"} 2"));
  CHECK_THAT(metrics->body,
             Catch::Matchers::Contains("vllm:time_to_first_token_seconds_bucket{le=\"0.001\""));
  CHECK_THAT(metrics->body,
             Catch::Matchers::Contains("vllm:generation_tokens_total{model_name=\"llama\"} 8"));
}

TEST_CASE(
    "fathom serve survives poison requests: invalid UTF-8, long non-ASCII names, prompts past the "
    "context, n > 1") {
  ServeOptions o;
  o.max_model_len = 1000;
  Served served(50.0, o);
  httplib::Client client(served.url());
  // Bytes that are not UTF-8 inside a JSON string: the parser's message quotes them.
  auto bad_utf8 = client.Post("/v1/completions", "{\"prompt\":\"hi \xff\xfe\",\"max_tokens\":2}",
                              "application/json");
  REQUIRE(bad_utf8);
  CHECK(bad_utf8->status == 400);
  CHECK_THAT(bad_utf8->body, Catch::Matchers::Contains("ill-formed UTF-8"));
  CHECK(ParseJson(bad_utf8->body, "answer").ok());  // the body is valid JSON
  // A model name cut inside a two-byte character by the error message's 200-byte limit.
  std::string name;
  for (int i = 0; i < 500; ++i) name += "\xc3\xa9";  // é
  auto long_name = client.Post("/v1/completions",
                               "{\"model\":\"" + name + "\",\"prompt\":\"x\",\"max_tokens\":2}",
                               "application/json");
  REQUIRE(long_name);
  CHECK(long_name->status == 404);
  CHECK(ParseJson(long_name->body, "answer").ok());
  // Prompt plus max_tokens past the context: refused with vLLM's words, never queued.
  auto too_long =
      client.Post("/v1/completions", R"({"prompt":"x","max_tokens":1000})", "application/json");
  REQUIRE(too_long);
  CHECK(too_long->status == 400);
  CHECK_THAT(too_long->body,
             Catch::Matchers::Contains("maximum context length is 1000 tokens. However, you "
                                       "requested 1001 tokens (1 in the prompt, 1000 in the "
                                       "completion)"));
  std::string prompt = "[";
  for (int i = 0; i < 1000; ++i) prompt += (i ? ",7" : "7");
  auto long_prompt =
      client.Post("/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":")" + std::string(8000, 'a') + "\"}]}",
                  "application/json");
  REQUIRE(long_prompt);
  CHECK(long_prompt->status == 400);
  CHECK_THAT(long_prompt->body, Catch::Matchers::Contains("in the messages"));
  // Without max_tokens the default (16) shrinks to what the context leaves.
  auto fits = client.Post("/v1/completions", "{\"prompt\":" + prompt.substr(0, 1990) + "]}",
                          "application/json");
  REQUIRE(fits);
  CHECK(fits->status == 200);
  CHECK_THAT(fits->body, Catch::Matchers::Contains("\"total_tokens\":1000"));
  // n > 1 is refused, not answered with one choice; n = 1 and null are fine.
  auto choices =
      client.Post("/v1/completions", R"({"prompt":"x","max_tokens":2,"n":3})", "application/json");
  REQUIRE(choices);
  CHECK(choices->status == 400);
  CHECK_THAT(choices->body, Catch::Matchers::Contains("n = 3: fathom serve generates one choice"));
  // A null max_completion_tokens leaves max_tokens in force, as OpenAI's SDKs send it.
  auto null_length = client.Post(
      "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":null,"max_tokens":3,"n":1})",
      "application/json");
  REQUIRE(null_length);
  CHECK(null_length->status == 200);
  CHECK_THAT(null_length->body, Catch::Matchers::Contains("\"completion_tokens\":3"));
  // The server still answers everyone else.
  auto fine =
      client.Post("/v1/completions", R"({"prompt":[1,2,3],"max_tokens":4})", "application/json");
  REQUIRE(fine);
  CHECK(fine->status == 200);
}

TEST_CASE("an HTTP request is read whole from its bytes as they arrive, and bad ones are refused") {
  HttpRequest r;
  const std::string post =
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
      "Content-Length: 5\r\n\r\nhello";
  for (size_t cut = 0; cut < post.size(); ++cut)
    CHECK(ParseHttpRequest(post.substr(0, cut), 100, &r).state == HttpParse::kIncomplete);
  HttpParse p = ParseHttpRequest(post + "GET /health HTTP/1.1\r\n\r\n", 100, &r);
  REQUIRE(p.state == HttpParse::kComplete);
  CHECK(p.consumed == post.size());  // the next request stays
  CHECK(r.method == "POST");
  CHECK(r.path == "/v1/completions");
  CHECK(r.body == "hello");
  CHECK(r.Header("content-type") == "application/json");
  CHECK(r.keep_alive);

  const std::string chunked =
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
      "3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nTrailer: t\r\n\r\n";
  CHECK(ParseHttpRequest(chunked.substr(0, chunked.size() - 1), 100, &r).state ==
        HttpParse::kIncomplete);
  p = ParseHttpRequest(chunked, 100, &r);
  REQUIRE(p.state == HttpParse::kComplete);
  CHECK(p.consumed == chunked.size());
  CHECK(r.body == "abc0123456789");
  CHECK_FALSE(r.keep_alive);
  CHECK(ParseHttpRequest(chunked, 12, &r).status == 413);

  REQUIRE(ParseHttpRequest("GET / HTTP/1.0\r\n\r\n", 100, &r).state == HttpParse::kComplete);
  CHECK_FALSE(r.keep_alive);
  // Refused from the declared length alone; a client that asks is told to go on.
  CHECK(ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 100, &r).status == 413);
  CHECK(ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 9\r\nExpect: 100-continue\r\n\r\n",
                         100, &r)
            .expects_continue);
  for (const char* bad :
       {"GET\r\n\r\n", "GET / SPDY/3\r\n\r\n", "GET x HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nno colon\r\n\r\n", "GET / HTTP/1.1\r\n folded: x\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
    INFO(bad);
    p = ParseHttpRequest(bad, 100, &r);
    CHECK(p.state == HttpParse::kBad);
    CHECK(p.status == 400);
  }
  CHECK(ParseHttpRequest(std::string(70000, 'a'), 100, &r).status == 431);
  // Every read parses the body again: a body of more chunks than that is refused.
  std::string many = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4097; ++i) many += "1\r\nx\r\n";
  p = ParseHttpRequest(many + "0\r\n\r\n", 1 << 20, &r);
  CHECK(p.status == 400);
  CHECK(p.error == "chunked body in more than 4096 chunks");
}

TEST_CASE("an HTTP response is read as it arrives: chunked, sized, or up to the connection's end") {
  // Cut at every byte: the body comes out the same, without its framing.
  const std::string chunked =
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\ndata:\r\n3;x\r\n ok\r\n0\r\nTrailer: t\r\n\r\n";
  for (size_t cut = 0; cut <= chunked.size(); ++cut) {
    HttpResponseReader reader;
    std::string body;
    auto take = [&](std::string_view b) { body += b; };
    REQUIRE(reader.Feed(std::string_view(chunked).substr(0, cut), take));
    CHECK(reader.done() == (cut == chunked.size()));
    REQUIRE(reader.Feed(std::string_view(chunked).substr(cut), take));
    CHECK(reader.done());
    CHECK(reader.status() == 200);
    CHECK(reader.keep_alive());
    CHECK(body == "data: ok");
  }
  HttpResponseReader sized;
  std::string body;
  REQUIRE(
      sized.Feed("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close"
                 "\r\n\r\nbusy",
                 [&](std::string_view b) { body += b; }));
  CHECK(sized.done());
  CHECK(sized.status() == 503);
  CHECK_FALSE(sized.keep_alive());
  CHECK(body == "busy");

  HttpResponseReader to_end;
  body.clear();
  REQUIRE(to_end.Feed("HTTP/1.0 200 OK\r\n\r\nall", [&](std::string_view b) { body += b; }));
  CHECK_FALSE(to_end.done());
  CHECK(to_end.End());
  CHECK(body == "all");
  HttpResponseReader cut;
  REQUIRE(cut.Feed("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", [](std::string_view) {}));
  CHECK_FALSE(cut.End());  // the connection ended before the body did

  for (const char* bad : {"HTTP/2 200\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\n"}) {
    HttpResponseReader reader;
    INFO(bad);
    CHECK_FALSE(reader.Feed(bad, [](std::string_view) {}));
    CHECK_FALSE(reader.error().empty());
  }
}

TEST_CASE(
    "the gateway routes to the replica with the fewest outstanding requests, ties to the lowest "
    "id") {
  CHECK_FALSE(LeastOutstanding({}).has_value());
  CHECK(LeastOutstanding({{3, 2}, {1, 5}, {2, 2}}) == 2);
  CHECK(LeastOutstanding({{4, 0}}) == 4);
  CHECK(LeastOutstanding({{2, 1}, {1, 1}}) == 1);
  // Weighted: (outstanding + 1) / weight, so a canary at a quarter's weight takes a request only
  // once the others have three more outstanding than it.
  CHECK(LeastOutstanding({{1, 0, 1}, {2, 0, 0.25}}) == 1);
  CHECK(LeastOutstanding({{1, 3, 1}, {2, 0, 0.25}}) == 1);  // a tie: the lowest id
  CHECK(LeastOutstanding({{1, 4, 1}, {2, 0, 0.25}}) == 2);
}

namespace {

// Streams one completion of `max_tokens` through `url`; returns the events received.
std::string Stream(const std::string& url, int max_tokens, bool include_usage) {
  httplib::Client client(url);
  client.set_read_timeout(std::chrono::seconds(60));
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = std::string(R"({"prompt":[1,2,3,4,5,6,7,8],"stream":true,"max_tokens":)") +
             std::to_string(max_tokens) +
             (include_usage ? R"(,"stream_options":{"include_usage":true}})" : "}");
  req.set_header("Content-Type", "application/json");
  std::string events;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    events.append(d, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  client.send(req, res, err);
  return events;
}

int64_t Count(const std::string& s, const std::string& what) {
  int64_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

namespace {

// A client socket connected to 127.0.0.1:`port`, with a receive buffer of about `rcvbuf` bytes
// when > 0.
int Connect(int port, int rcvbuf = 0) {
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return sock;
}

void SendAll(int sock, const std::string& data) {
  REQUIRE(send(sock, data.data(), data.size(), 0) == static_cast<ssize_t>(data.size()));
}

// What `sock` receives until `until` has come `times` times or the connection ends.
std::string ReadUntil(int sock, const std::string& until, int times = 1) {
  std::string got;
  char buffer[4096];
  auto count = [&] {
    int n = 0;
    for (size_t at = got.find(until); at != std::string::npos; at = got.find(until, at + 1)) ++n;
    return n;
  };
  for (ssize_t n; count() < times && (n = recv(sock, buffer, sizeof buffer, 0)) > 0;)
    got.append(buffer, static_cast<size_t>(n));
  return got;
}

std::string StreamRequest(int max_tokens, const std::string& headers = "") {
  const std::string body =
      R"({"prompt":[1,2,3,4],"stream":true,"max_tokens":)" + std::to_string(max_tokens) + "}";
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace

TEST_CASE(
    "fathom serve keeps connections alive, holds a slow reader's tokens back without delaying "
    "others, and drops clients that stall") {
  Served served(50.0, {});
  const int port = served.server.port();

  // Two requests in one write: both answered, in order, on the same connection.
  int sock = Connect(port);
  SendAll(sock, "GET /health HTTP/1.1\r\n\r\nGET /nowhere HTTP/1.1\r\n\r\n");
  std::string answer = ReadUntil(sock, "HTTP/1.1 ", 2);
  CHECK(answer.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK_THAT(answer, Catch::Matchers::Contains("HTTP/1.1 404 Not Found"));
  SendAll(sock, "GET /v1/completions HTTP/1.1\r\n\r\n");
  CHECK(ReadUntil(sock, "\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
  // A chunked body, and one sent after the server's "100 Continue".
  SendAll(sock,
          "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
          "a\r\n{\"prompt\":\r\n15\r\n[1,2],\"max_tokens\":3}\r\n0\r\n\r\n");
  answer = ReadUntil(sock, "}}");
  CHECK(answer.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK_THAT(answer, Catch::Matchers::Contains("\"completion_tokens\":3"));
  const std::string body = R"({"prompt":[1],"max_tokens":2})";
  SendAll(sock, "POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n");
  CHECK(ReadUntil(sock, "\r\n\r\n") == "HTTP/1.1 100 Continue\r\n\r\n");
  SendAll(sock, body);
  CHECK_THAT(ReadUntil(sock, "}}"), Catch::Matchers::Contains("\"completion_tokens\":2"));
  close(sock);

  // A client that stops reading: once the socket's buffers are full its tokens wait in the engine,
  // not in the server, while another stream runs to its end; when it reads again it gets them in
  // a few large events (one event a token would be 8000).
  const int tokens = 8000;
  const int slow = Connect(port, 2048);
  SendAll(slow, StreamRequest(tokens));
  while (served.engine.Metrics().generation_tokens < tokens * 7 / 8)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(Count(Stream(served.url(), 50, false), " tok") == 50);
  answer = ReadUntil(slow, "data: [DONE]");
  close(slow);
  CHECK(Count(answer, " tok") == tokens);
  CHECK(Count(answer, "data: ") < tokens / 2);
  CHECK_THAT(answer, Catch::Matchers::EndsWith("data: [DONE]\n\n\r\n0\r\n\r\n"));

  // A request not sent whole within the read timeout gets 400 and never reaches the engine.
  ServeOptions o;
  o.read_timeout_s = 0.3;
  Served strict(50.0, o);
  sock = Connect(strict.server.port());
  SendAll(sock, "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\"");
  const auto t0 = std::chrono::steady_clock::now();
  answer = ReadUntil(sock, "}");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(answer.rfind("HTTP/1.1 400", 0) == 0);
  CHECK_THAT(answer, Catch::Matchers::Contains("read timeout"));
  close(sock);
  CHECK(strict.engine.Metrics().prompt_tokens == 0);
  // A client that takes nothing of its stream for that long is dropped, its request aborted.
  sock = Connect(strict.server.port(), 2048);
  SendAll(sock, StreamRequest(tokens));
  while (strict.engine.Metrics().finished_abort == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(strict.engine.Metrics().finished_length == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  answer = ReadUntil(sock, "data: [DONE]");  // what the buffers held, then the end
  close(sock);
  CHECK(Count(answer, " tok") < tokens);
  CHECK(Count(answer, "[DONE]") == 0);
}

TEST_CASE("a request whose client leaves is aborted and frees its place, as vLLM aborts it") {
  ServeOptions o;
  Served served(5.0, o);
  const int sock = Connect(served.server.port());
  const std::string body = R"({"prompt":[1,2,3],"max_tokens":100000,"stream":true})";
  SendAll(sock, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body);
  ReadUntil(sock, "data: ", 3);  // a few tokens, then the client goes
  close(sock);
  const auto t0 = std::chrono::steady_clock::now();
  while (served.engine.in_flight() > 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(served.engine.in_flight() == 0);  // 100,000 tokens would take minutes
  const LiveMetrics m = served.engine.Metrics();
  CHECK(m.finished_abort == 1);
  CHECK(m.finished_length == 0);
  CHECK(m.generation_tokens < 1000);
  httplib::Client client(served.url());
  auto next =
      client.Post("/v1/completions", R"({"prompt":[1],"max_tokens":3})", "application/json");
  REQUIRE(next);
  CHECK(next->status == 200);
}

TEST_CASE(
    "at its connection limit fathom serve closes the longest-idle connection to make room, and "
    "answers 503 when every one is answering") {
  ServeOptions o;
  o.max_connections = 2;
  Served served(50.0, o);
  const int port = served.server.port();
  // Of an idle connection and one half through its request, the idle one makes room.
  const int half = Connect(port), older = Connect(port);
  SendAll(half, "GET /hea");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int third = Connect(port);
  SendAll(third, "GET /health HTTP/1.1\r\n\r\n");
  CHECK(ReadUntil(third, "\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
  CHECK(ReadUntil(older, "\r\n\r\n").empty());  // closed
  SendAll(half, "lth HTTP/1.1\r\n\r\n");
  CHECK(ReadUntil(half, "\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
  for (int sock : {half, older, third}) close(sock);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the server sees them go

  const int idle = Connect(port), used = Connect(port);
  SendAll(used, "GET /health HTTP/1.1\r\n\r\n");
  CHECK(ReadUntil(used, "\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);  // both are accepted by now
  // A newcomer takes the idle one's place: the oldest without a request under way.
  const int newcomer = Connect(port);
  SendAll(newcomer, "GET /health HTTP/1.1\r\n\r\n");
  CHECK(ReadUntil(newcomer, "\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
  CHECK(ReadUntil(idle, "\r\n\r\n").empty());  // closed
  close(idle);
  // Both connections stream: nobody can make room.
  for (int sock : {used, newcomer}) {
    SendAll(sock, StreamRequest(100000));
    ReadUntil(sock, "data: ");
  }
  const int refused_sock = Connect(port);
  const std::string refused = ReadUntil(refused_sock, "}");
  CHECK(refused.rfind("HTTP/1.1 503", 0) == 0);
  CHECK_THAT(refused, Catch::Matchers::Contains("too many connections"));
  for (int sock : {used, newcomer, refused_sock}) close(sock);
}

TEST_CASE("fathom serve refuses a request from its head: a body without the key is never read") {
  ServeOptions o;
  o.api_key = "key";
  Served served(50.0, o);
  const int sock = Connect(served.server.port());
  SendAll(sock, "POST /v1/completions HTTP/1.1\r\nContent-Length: 4000000\r\n\r\n{");
  const std::string answer = ReadUntil(sock, "}");
  CHECK(answer.rfind("HTTP/1.1 401", 0) == 0);
  CHECK_THAT(answer, Catch::Matchers::Contains("Connection: close"));
  close(sock);
  // A body sent whole before the refusal is read is drained, not reset: the client reads its 401.
  const int eager = Connect(served.server.port());
  const std::string body(3 << 20, 'x');
  std::thread sender([&] {
    const std::string request =
        "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    for (size_t at = 0; at < request.size();) {
      const ssize_t n = send(eager, request.data() + at, request.size() - at, MSG_NOSIGNAL);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
  });
  const std::string eager_answer = ReadUntil(eager, "}");
  sender.join();
  close(eager);
  CHECK(eager_answer.rfind("HTTP/1.1 401", 0) == 0);
  // With the key, the same connection serves on after a refusal whose request came whole.
  const int keyed = Connect(served.server.port());
  SendAll(keyed, "GET /nowhere HTTP/1.1\r\n\r\nGET /health HTTP/1.1\r\n\r\n");
  const std::string both = ReadUntil(keyed, "HTTP/1.1 ", 2);
  CHECK(both.rfind("HTTP/1.1 404", 0) == 0);
  CHECK_THAT(both, Catch::Matchers::Contains("HTTP/1.1 200 OK"));
  close(keyed);
}

TEST_CASE(
    "the gateway spreads streams over replicas, records each request, and refuses bad ones "
    "itself") {
  Served a(5.0, {}), b(5.0, {});
  GatewayOptions o;
  o.token = "control";
  o.max_body_bytes = 2048;
  Gateway gateway(o);
  REQUIRE(gateway.Start().ok());
  gateway.AddReplica(1, a.server.port());
  gateway.AddReplica(2, b.server.port());
  const std::string url = "http://127.0.0.1:" + std::to_string(gateway.port());

  std::vector<std::string> events(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&, i] { events[i] = Stream(url, 200, i % 2 == 0); });
  for (auto& t : clients) t.join();
  for (int i = 0; i < 4; ++i) {
    CHECK(Count(events[i], " tok") == 200);
    CHECK(Count(events[i], "\"usage\"") == (i % 2 == 0 ? 1 : 0));  // dropped where not asked for
    CHECK_THAT(events[i], Catch::Matchers::EndsWith("data: [DONE]\n\n"));
  }
  CHECK(a.engine.Metrics().finished_length == 2);
  CHECK(b.engine.Metrics().finished_length == 2);
  GatewayWindow w = gateway.TakeWindow();
  CHECK(w.arrived == 4);
  CHECK(w.failed == 0);
  CHECK(w.in_flight == 0);
  REQUIRE(w.finished.size() == 4);
  for (const GatewayRecord& r : w.finished) {
    CHECK(r.prompt_tokens == 8);
    CHECK(r.completion_tokens == 200);
    CHECK(r.streamed);
    CHECK(r.arrival_s < r.first_token_s);
    CHECK(r.first_token_s < r.done_s);
  }

  httplib::Client client(url);
  auto malformed = client.Post("/v1/completions", R"({"prompt": [1, 2)", "application/json");
  REQUIRE(malformed);
  CHECK(malformed->status == 400);
  CHECK_THAT(malformed->body, Catch::Matchers::Contains("malformed JSON"));
  auto huge = client.Post("/v1/completions", std::string(4096, ' '), "application/json");
  REQUIRE(huge);
  CHECK(huge->status == 413);
  CHECK(a.engine.Metrics().finished_length + b.engine.Metrics().finished_length ==
        4);  // neither reached them
  CHECK(gateway.TakeWindow().arrived == 0);

  // What a replica refuses as the client's fault is passed on and is no failure of the fleet.
  for (int i = 0; i < 3; ++i) {
    auto unknown =
        client.Post("/v1/completions", R"({"model":"gpt","prompt":"x"})", "application/json");
    REQUIRE(unknown);
    CHECK(unknown->status == 404);
  }
  const GatewayWindow refused = gateway.TakeWindow();
  CHECK(refused.arrived == 3);
  CHECK(refused.client_errors == 3);
  CHECK(refused.failed == 0);

  // A client that never finishes its request is dropped after the read timeout.
  o.read_timeout_s = 0.3;
  Gateway strict(o);
  REQUIRE(strict.Start().ok());
  strict.AddReplica(1, a.server.port());
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(strict.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string partial =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"";
  REQUIRE(send(sock, partial.data(), partial.size(), 0) == static_cast<ssize_t>(partial.size()));
  const auto t0 = std::chrono::steady_clock::now();
  std::string answer;
  char buffer[512];
  for (ssize_t n; answer.find("\r\n\r\n") == std::string::npos &&
                  (n = recv(sock, buffer, sizeof buffer, 0)) > 0;) {
    answer.append(buffer, static_cast<size_t>(n));
  }
  CHECK(std::chrono::steady_clock::now() - t0 <
        std::chrono::seconds(5));  // the default would be 10 s
  INFO(answer);
  CHECK(answer.rfind("HTTP/1.1 400", 0) == 0);
  close(sock);
  CHECK(strict.TakeWindow().arrived == 0);
  strict.Stop();

  auto anonymous = client.Get("/fathom/replicas");
  REQUIRE(anonymous);
  CHECK(anonymous->status == 401);
  auto listed = client.Get("/fathom/replicas", {{"Authorization", "Bearer control"}});
  REQUIRE(listed);
  CHECK(listed->status == 200);
  gateway.Stop();
}

TEST_CASE(
    "the gateway retries a request once on another replica, a cut stream past the text already "
    "sent") {
  Served slow(2.0, {}), other(20.0, {});
  int dead_port = 0;
  {
    Served gone(1.0, {});
    dead_port = gone.server.port();
  }
  Gateway gateway(GatewayOptions{});
  REQUIRE(gateway.Start().ok());
  const std::string url = "http://127.0.0.1:" + std::to_string(gateway.port());

  // No replica yet: the request waits for one.
  std::string waited;
  std::thread early([&] { waited = Stream(url, 5, false); });
  GatewayWindow w;
  while (w.waiting == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    w = gateway.TakeWindow();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  w = gateway.TakeWindow();  // it waits for its first token, as old as it is
  CHECK(w.waiting == 1);
  REQUIRE(w.waiting_stream_ages_s.size() == 1);
  CHECK(w.waiting_stream_ages_s[0] >= 0.19);
  gateway.AddReplica(9, other.server.port());
  early.join();
  CHECK(Count(waited, " tok") == 5);
  gateway.RemoveReplica(9);
  w = gateway.TakeWindow();
  CHECK(w.finished.size() == 1);
  CHECK(w.waiting_stream_ages_s.empty());

  // Nothing listens on replica 1's port: the request goes to replica 2.
  gateway.AddReplica(1, dead_port);
  gateway.AddReplica(2, other.server.port());
  CHECK(Count(Stream(url, 20, false), " tok") == 20);
  w = gateway.TakeWindow();
  CHECK(w.retried == 1);
  CHECK(w.failed == 0);
  gateway.RemoveReplica(1);
  gateway.RemoveReplica(2);

  // The engine of replica 3 stops mid-stream: the rest comes from replica 4, each token once.
  gateway.AddReplica(3, slow.server.port());
  std::string events;
  std::thread client([&] { events = Stream(url, 300, true); });
  while (slow.engine.Metrics().generation_tokens < 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  gateway.AddReplica(4, other.server.port());
  slow.engine.Stop();
  client.join();
  CHECK(Count(events, " tok") == 300);
  CHECK(Count(events, "\"completion_tokens\":300") == 1);
  CHECK_THAT(events, Catch::Matchers::EndsWith("data: [DONE]\n\n"));
  w = gateway.TakeWindow();
  CHECK(w.retried == 1);
  CHECK(w.failed == 0);
  REQUIRE(w.finished.size() == 1);
  CHECK(w.finished[0].completion_tokens == 300);
  gateway.Stop();
}

TEST_CASE(
    "hostile clients leave the gateway serving others: thousands of idle connections, slow "
    "headers, bodies without the key or too large, invalid UTF-8") {
  Served replica(20.0, {});
  GatewayOptions o;
  o.api_key = "key";
  o.max_connections = 2000;
  o.read_timeout_s = 2;
  Gateway gateway(o);
  REQUIRE(gateway.Start().ok());
  gateway.AddReplica(1, replica.server.port());
  const int port = gateway.port();
  const std::string key = "Authorization: Bearer key\r\n";

  // 5,000 connections that send nothing (beyond the limit, the longest idle make room), and one
  // sending its headers a few bytes at a time.
  std::vector<int> idle;
  for (int i = 0; i < 5000; ++i) idle.push_back(Connect(port));
  const int slow = Connect(port);
  SendAll(slow, "POST /v1/comp");
  // A body without the key is refused from its head, before it is sent; one past the limit is
  // refused from its length, key or not.
  const int anonymous = Connect(port);
  SendAll(anonymous, "POST /v1/completions HTTP/1.1\r\nContent-Length: 900000\r\n\r\n{");
  const int huge = Connect(port);
  SendAll(huge, "POST /v1/completions HTTP/1.1\r\n" + key + "Content-Length: 10000000\r\n\r\n");
  const int bad_bytes = Connect(port);
  const std::string body = "{\"prompt\":\"\xff\xfe\xc3\",\"model\":\"\xe2\x82\"}";
  SendAll(bad_bytes, "POST /v1/completions HTTP/1.1\r\n" + key +
                         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);

  // A client with the key meanwhile gets its whole stream.
  const int client = Connect(port);
  SendAll(client, StreamRequest(50, key));
  const std::string streamed = ReadUntil(client, "data: [DONE]");
  CHECK(streamed.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(Count(streamed, " tok") == 50);
  close(client);
  const std::string refused = ReadUntil(anonymous, "}");
  CHECK(refused.rfind("HTTP/1.1 401", 0) == 0);
  CHECK(ReadUntil(huge, "}").rfind("HTTP/1.1 413", 0) == 0);
  const std::string invalid = ReadUntil(bad_bytes, "}");
  CHECK(invalid.rfind("HTTP/1.1 400", 0) == 0);
  const size_t json_at = invalid.find("\r\n\r\n");
  REQUIRE(json_at != std::string::npos);
  CHECK(ParseJson(invalid.substr(json_at + 4), "the answer").ok());  // valid JSON, valid UTF-8
  // The slow client is answered 400 once its read timeout passes.
  CHECK(ReadUntil(slow, "}").rfind("HTTP/1.1 400", 0) == 0);
  for (int sock : {slow, anonymous, huge, bad_bytes}) close(sock);
  for (int sock : idle) close(sock);

  const std::string metrics = gateway.Metrics();
  CHECK_THAT(metrics,
             Catch::Matchers::Contains("fathom_gateway_requests_total{outcome=\"ok\"} 1\n"));
  CHECK_THAT(metrics,
             Catch::Matchers::Contains("fathom_gateway_requests_total{outcome=\"failed\"} 0\n"));
  CHECK_THAT(metrics, Catch::Matchers::Contains(
                          "fathom_gateway_connections_closed_total{reason=\"refused\"} 0\n"));
  CHECK_THAT(metrics, Catch::Matchers::Contains(
                          "fathom_gateway_replica_outstanding{replica=\"1\",address=\"127.0.0.1:" +
                          std::to_string(replica.server.port()) + "\"} 0\n"));
  Result<fathom::Metrics> parsed = ParsePrometheusText(metrics, "the gateway's /metrics");
  INFO(parsed.status().message());
  REQUIRE(parsed.ok());
  const std::vector<MetricSample>& closed = parsed->at("fathom_gateway_connections_closed_total");
  double evicted = 0;
  for (const MetricSample& m : closed) {
    if (m.labels.at("reason") == "evicted") evicted = m.value;
  }
  // Beyond the limit each newcomer evicts one; under sanitizers opening 5,000 connections may take
  // past the read timeout, which then closes the oldest instead.
  CHECK(evicted >= (FATHOM_TIMED ? 3000 : 1));
  CHECK(replica.engine.Metrics().finished_length == 1);  // only the good client's request
}

TEST_CASE(
    "a stream the gateway cannot start is answered with its real status, not 200 and an error "
    "event") {
  Served replica(20.0, {});
  GatewayOptions o;
  o.replica_wait_s = 0.2;
  Gateway gateway(o);
  REQUIRE(gateway.Start().ok());
  const int port = gateway.port();
  // No replica within replica_wait_s: 503.
  int sock = Connect(port);
  SendAll(sock, StreamRequest(5));
  std::string answer = ReadUntil(sock, "}");
  close(sock);
  CHECK(answer.rfind("HTTP/1.1 503", 0) == 0);
  CHECK_THAT(answer, Catch::Matchers::Contains("no replica is ready"));
  // The replica's own refusal keeps its status and body.
  gateway.AddReplica(1, replica.server.port());
  sock = Connect(port);
  const std::string body = R"({"model":"gpt","prompt":"x","stream":true})";
  SendAll(sock, "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\n\r\n" + body);
  answer = ReadUntil(sock, "}}");
  close(sock);
  CHECK(answer.rfind("HTTP/1.1 404", 0) == 0);
  CHECK_THAT(answer, Catch::Matchers::Contains("does not exist"));
  GatewayWindow w = gateway.TakeWindow();
  CHECK(w.failed == 1);
  CHECK(w.client_errors == 1);
  // /v1/models is passed through, on the loop's terms too.
  httplib::Client client("127.0.0.1", port);
  auto models = client.Get("/v1/models");
  REQUIRE(models);
  CHECK(models->status == 200);
  CHECK_THAT(models->body, Catch::Matchers::Contains("\"llama\""));
  CHECK(gateway.TakeWindow().arrived == 0);
}

TEST_CASE(
    "fathom serve's /health says 503 while its engine holds requests and produces nothing, and "
    "while it drains") {
  ServeOptions o;
  o.stall_timeout_s = 0.05;
  Served served(0.002, o);  // 500x slower than real time: a first token takes seconds
  httplib::Client client(served.url());
  auto health = [&] {
    auto r = client.Get("/health");
    REQUIRE(r);
    return std::make_pair(r->status, r->body);
  };
  CHECK(health().first == 200);  // idle is healthy
  const int sock = Connect(served.server.port());
  SendAll(sock, StreamRequest(3));
  auto t0 = std::chrono::steady_clock::now();
  auto seen = health();
  while (seen.first == 200 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = health();
  }
  CHECK(seen.first == 503);
  CHECK_THAT(seen.second, Catch::Matchers::Contains("requests in flight"));
  close(sock);  // aborted: the engine holds nothing once the token under way is done
  t0 = std::chrono::steady_clock::now();
  while (served.engine.in_flight() > 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(health().first == 200);
  served.engine.BeginDrain();
  seen = health();
  CHECK(seen.first == 503);
  CHECK_THAT(seen.second, Catch::Matchers::Contains("draining"));
}

TEST_CASE(
    "the gateway's control endpoints: replicas registered and drained over HTTP, windows and "
    "metrics taken, bad calls refused") {
  Served replica(20.0, {});
  GatewayOptions o;
  o.token = "control";
  Gateway gateway(o);
  REQUIRE(gateway.Start().ok());
  const std::string url = "http://127.0.0.1:" + std::to_string(gateway.port());

  CHECK(ConnectGateway("127.0.0.1:1", "control").status().message() ==
        "--gateway-url = 127.0.0.1:1: must be http://HOST:PORT (fathom gateway's address)");
  CHECK_THAT(ConnectGateway(url, "wrong").status().message(),
             Catch::Matchers::Contains("the gateway answered HTTP 401"));
  auto control = ConnectGateway(url + "/", "control");
  INFO(control.status().message());
  REQUIRE(control.ok());
  CHECK((*control)->Address() == "127.0.0.1:" + std::to_string(gateway.port()));
  REQUIRE((*control)
              ->AddReplica({7, "127.0.0.1", replica.server.port(), true, 0, R"({"pid":42})"})
              .ok());
  auto listed = (*control)->Replicas();
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].id == 7);
  CHECK((*listed)[0].port == replica.server.port());
  CHECK((*listed)[0].routed);
  CHECK((*listed)[0].about == R"({"pid":42})");

  CHECK(Count(Stream(url, 20, true), " tok") == 20);
  auto window = (*control)->TakeWindow();
  REQUIRE(window.ok());
  CHECK(window->arrived == 1);
  REQUIRE(window->finished.size() == 1);
  CHECK(window->finished[0].completion_tokens == 20);
  CHECK(window->finished[0].streamed);
  CHECK(window->finished[0].first_token_s > window->finished[0].arrival_s);
  CHECK((*control)->TakeWindow()->arrived == 0);  // taken once

  REQUIRE((*control)
              ->SetMoreMetrics("# TYPE fathom_supervisor_windows_total counter\n"
                               "fathom_supervisor_windows_total 3\n")
              .ok());
  CHECK_THAT(gateway.Metrics(), Catch::Matchers::EndsWith("fathom_supervisor_windows_total 3\n"));
  CHECK_THAT((*control)->SetMoreMetrics("not metrics {").message(),
             Catch::Matchers::Contains("HTTP 400"));

  httplib::Client client("127.0.0.1", gateway.port());
  client.set_bearer_token_auth("control");
  for (const auto& [body, why] : std::vector<std::pair<std::string, std::string>>{
           {R"({"port": 0})", "port"},
           {R"({"host": ""})", "port"},
           {"[1]", "a JSON object"},
           {R"({"port": 80, "about": 3})", "about"},
           {R"({"port": 80, "weight": 0})", "weight"}}) {
    auto r = client.Put("/fathom/replicas/3", body, "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK_THAT(r->body, Catch::Matchers::Contains(why));
  }
  auto bad_id = client.Delete("/fathom/replicas/x");
  REQUIRE(bad_id);
  CHECK(bad_id->status == 400);
  auto unknown = client.Get("/fathom/elsewhere");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  CHECK(gateway.Replicas().size() == 1);

  REQUIRE((*control)->RemoveReplica(7).ok());
  CHECK(gateway.Replicas().empty());
  gateway.BeginDrain();
  auto refused =
      httplib::Client(url).Post("/v1/completions", R"({"prompt":"x"})", "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 503);
  CHECK(gateway.InFlight() == 0);
}

TEST_CASE("a gateway window survives its trip as JSON") {
  GatewayWindow w;
  w.arrived = 5;
  w.failed = 1;
  w.client_errors = 2;
  w.retried = 1;
  w.retry_cause = "replica 3: \"closed\"";
  w.in_flight = 4;
  w.waiting = 2;
  w.waiting_stream_ages_s = {0.5, 1.25};
  w.waiting_stream_replicas = {2, -1};
  w.finished.push_back({1.5, 2.25, 9.75, 300, 40, true, true, 3});
  auto back = ParseWindowJson(WindowJson(w), "window");
  REQUIRE(back.ok());
  CHECK(WindowJson(*back) == WindowJson(w));
  CHECK(ParseWindowJson(R"({"arrived": 1})", "w").status().message() ==
        "w: field 'failed': missing (required integer)");
}

TEST_CASE(
    "a replica taken out with requeue leaves no queue behind: its requests without a first token "
    "go elsewhere at once") {
  Served slow(0.002, {}), fast(20.0, {});  // the slow one's first token takes seconds
  Gateway gateway(GatewayOptions{});
  REQUIRE(gateway.Start().ok());
  const std::string url = "http://127.0.0.1:" + std::to_string(gateway.port());
  gateway.AddReplica(1, slow.server.port());
  std::vector<std::string> events(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) clients.emplace_back([&, i] { events[i] = Stream(url, 10, true); });
  GatewayWindow w;
  const auto t0 = std::chrono::steady_clock::now();
  // Waiting, and on replica 1: a stream the gateway has taken but not yet sent reads -1.
  const std::vector<int> on_slow{1, 1, 1, 1};
  while (w.waiting_stream_replicas != on_slow &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    w = gateway.TakeWindow();
  }
  REQUIRE(w.waiting == 4);
  REQUIRE(w.waiting_stream_replicas == on_slow);
  gateway.AddReplica(2, fast.server.port());
  const auto moved = std::chrono::steady_clock::now();
  gateway.RemoveReplica(1, /*requeue=*/true);
  for (auto& t : clients) t.join();
  if (FATHOM_TIMED) CHECK(std::chrono::steady_clock::now() - moved < std::chrono::seconds(2));
  for (const std::string& e : events) {
    CHECK(Count(e, " tok") == 10);
    CHECK(Count(e, "\"completion_tokens\":10") == 1);
  }
  w = gateway.TakeWindow();
  CHECK(w.failed == 0);
  CHECK(w.retried == 4);
  REQUIRE(w.finished.size() == 4);
  for (const GatewayRecord& r : w.finished) CHECK(r.replica == 2);
  CHECK(fast.engine.Metrics().finished_length == 4);
  CHECK(slow.engine.Metrics().finished_length == 0);
}

TEST_CASE("the gateway stops at once, cutting a request that waits on a silent replica") {
  // A replica that takes connections and never answers.
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(silent, 16) == 0);
  socklen_t length = sizeof addr;
  getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &length);
  Gateway gateway(GatewayOptions{});  // upstream timeout: an hour
  REQUIRE(gateway.Start().ok());
  gateway.AddReplica(1, ntohs(addr.sin_port));
  std::thread client([&] {
    httplib::Client c("127.0.0.1", gateway.port());
    c.set_read_timeout(std::chrono::seconds(60));
    c.Post("/v1/completions", R"({"prompt":"x"})", "application/json");
  });
  const auto t0 = std::chrono::steady_clock::now();
  while (gateway.InFlight() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(gateway.InFlight() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // sent, waiting for the answer
  const auto stopping = std::chrono::steady_clock::now();
  gateway.Stop();
  CHECK(std::chrono::steady_clock::now() - stopping < std::chrono::seconds(5));
  client.join();
  close(silent);
}

}  // namespace fathom::sim
