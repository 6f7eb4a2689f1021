#include "sim/live/loadgen.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "base/json_fields.h"
#include "base/stats.h"

namespace fathom::sim {
namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  bool ok = false;
  std::string error;
  double sent_s = 0, first_token_s = -1, done_s = 0;  // wall seconds from the run's start
  int64_t output = 0;
};

// One request's server-sent events: the first token's arrival and the usage chunk's count.
class EventStream {
 public:
  EventStream(Clock::time_point start, Outcome* out) : start_(start), out_(out) {}
  bool Feed(const char* data, size_t n) {
    buffer_.append(data, n);
    size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      const std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      if (!Event(event)) return false;
    }
    return true;
  }
  bool finished() const { return finished_; }

 private:
  bool Event(const std::string& event) {
    if (event.rfind("data: ", 0) != 0) return true;  // comments and other fields
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      finished_ = true;
      return true;
    }
    // Once the first token is in, only the usage and an error matter: the events between, one a
    // token, are not parsed (with a thousand streams, parsing them was most of the client's work).
    if (out_->first_token_s >= 0 && data.find("\"usage\"") == std::string::npos &&
        data.find("\"error\"") == std::string::npos) {
      return true;
    }
    Result<Json> j = ParseJson(data, "event");
    if (!j.ok() || !j->is_object()) {
      out_->error = "malformed event: " + data.substr(0, 200);
      return false;
    }
    if (j->contains("error")) {
      out_->error = (*j)["error"].dump().substr(0, 300);
      return false;
    }
    if (j->contains("usage") && (*j)["usage"].is_object() &&
        (*j)["usage"].contains("completion_tokens") &&
        (*j)["usage"]["completion_tokens"].is_number_integer()) {
      out_->output = (*j)["usage"]["completion_tokens"].get<int64_t>();
    }
    if (j->contains("choices") && (*j)["choices"].is_array() && !(*j)["choices"].empty()) {
      const Json& c = (*j)["choices"][0];
      std::string text;
      if (c.contains("text") && c["text"].is_string()) text = c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
          c["delta"]["content"].is_string()) {
        text = c["delta"]["content"].get<std::string>();
      }
      if (!text.empty() && out_->first_token_s < 0) out_->first_token_s = Seconds();
    }
    return true;
  }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  Clock::time_point start_;
  Outcome* out_;
  std::string buffer_;
  bool finished_ = false;
};

// httplib's error, in words a user can act on.
std::string Describe(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect (nothing listening there?)";
    case httplib::Error::Read:
      return "connection closed while reading the answer";
    case httplib::Error::Write:
      return "connection closed while sending the request";
    default:
      return httplib::to_string(e);
  }
}

std::string RequestBody(const LoadgenOptions& o, const std::string& model,
                        const traces::Request& r) {
  OrderedJson j;
  j["model"] = model;
  if (o.chat) {
    // A chat turn of about the request's length (the endpoint counts text, not ids).
    OrderedJson m;
    m["role"] = "user";
    m["content"] =
        std::string(static_cast<size_t>(std::max<int64_t>(1, r.input_tokens - 4)) * 4, 'a');
    j["messages"] = OrderedJson::array({m});
    j["max_completion_tokens"] = r.output_tokens;
  } else {
    j["prompt"] =
        std::vector<int64_t>(static_cast<size_t>(std::max<int64_t>(1, r.input_tokens)), 1000);
    j["max_tokens"] = r.output_tokens;
  }
  j["ignore_eos"] = true;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  return j.dump();
}

Result<std::string> FirstModel(httplib::Client& client, const LoadgenOptions& o) {
  httplib::Headers headers;
  if (!o.api_key.empty()) headers.emplace("Authorization", "Bearer " + o.api_key);
  auto res = client.Get("/v1/models", headers);
  if (!res) return Status::InvalidArgument("--url " + o.url + ": " + Describe(res.error()));
  if (res->status != 200) {
    return Status::InvalidArgument("--url " + o.url + "/v1/models: HTTP " +
                                   std::to_string(res->status) + ": " + res->body.substr(0, 300));
  }
  Result<Json> j = ParseJson(res->body, o.url + "/v1/models");
  if (!j.ok()) return j.status();
  if (!j->contains("data") || !(*j)["data"].is_array() || (*j)["data"].empty() ||
      !(*j)["data"][0].contains("id") || !(*j)["data"][0]["id"].is_string()) {
    return Status::InvalidArgument(o.url +
                                   "/v1/models: no model listed (name one with --served-model)");
  }
  return (*j)["data"][0]["id"].get<std::string>();
}

}  // namespace

Status LoadgenOptions::Validate() const {
  if (url.rfind("http://", 0) != 0)
    return Status::InvalidArgument("--url = " + url.substr(0, 200) + ": must start with http://");
  if (!(time_scale > 0) || !std::isfinite(time_scale))
    return Status::InvalidArgument("--time-scale: must be > 0 and finite");
  if (max_in_flight < 1 || max_in_flight > 100000) {
    return Status::InvalidArgument("--max-in-flight = " + std::to_string(max_in_flight) +
                                   ": must be 1 to 100000");
  }
  if (!(request_timeout_s > 0) || !std::isfinite(request_timeout_s)) {
    return Status::InvalidArgument("--request-timeout-s: must be > 0 and finite");
  }
  return Status::Ok();
}

Result<LoadgenReport> RunLoad(RequestSource& source, const ScenarioConfig& scenario,
                              const std::optional<LatencyLimits>& limits, int total_gpus,
                              const LoadgenOptions& o) {
  FATHOM_RETURN_IF_ERROR(o.Validate());
  LoadgenReport report;
  {
    httplib::Client probe(o.url);
    probe.set_connection_timeout(std::chrono::seconds(10));
    if (o.model.empty()) {
      FATHOM_ASSIGN_OR_RETURN(report.model, FirstModel(probe, o));
    } else {
      report.model = o.model;
    }
  }
  // The whole schedule first (sources are cheap), so issuing never waits on them.
  std::vector<traces::Request> requests;
  std::vector<double> due_s;
  for (;;) {
    traces::Request r;
    SimTime at;
    FATHOM_ASSIGN_OR_RETURN(bool more, source.Next(&r, &at));
    if (!more) break;
    requests.push_back(std::move(r));
    due_s.push_back(ToSeconds(at) / o.time_scale);
  }
  std::vector<Outcome> outcomes(requests.size());

  // Each idle worker claims the next request, builds its body, and sleeps until its scheduled time
  // itself: a timed wake-up is far more punctual than a hand-off from a dispatcher thread.
  std::atomic<size_t> next{0};
  std::mutex start_mu;
  Clock::time_point start;  // set once every worker exists
  auto worker = [&] {
    httplib::Client client(o.url);
    client.set_keep_alive(true);
    client.set_tcp_nodelay(true);
    client.set_connection_timeout(std::chrono::seconds(10));
    client.set_read_timeout(std::chrono::duration<double>(o.request_timeout_s));
    Clock::time_point t0;
    {
      std::lock_guard<std::mutex> lock(start_mu);
      t0 = start;
    }
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= requests.size()) return;
      Outcome& out = outcomes[i];
      httplib::Request req;
      req.method = "POST";
      req.path = o.chat ? "/v1/chat/completions" : "/v1/completions";
      req.body = RequestBody(o, report.model, requests[i]);
      req.set_header("Content-Type", "application/json");
      if (!o.api_key.empty()) req.set_header("Authorization", "Bearer " + o.api_key);
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(due_s[i])));
      out.sent_s = std::chrono::duration<double>(Clock::now() - t0).count();
      EventStream events(t0, &out);
      std::string error_body;
      int status = 0;
      req.response_handler = [&](const httplib::Response& r) {
        status = r.status;
        return true;
      };
      req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (status != 200) {
          error_body.append(data, std::min<size_t>(n, 300));
          return true;
        }
        return events.Feed(data, n);
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      const bool sent = client.send(req, res, err);
      out.done_s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (status != 200) {
        out.error = sent ? "HTTP " + std::to_string(status) + ": " + error_body : Describe(err);
      } else if (out.error.empty() && !events.finished()) {
        out.error = sent ? "stream ended before [DONE]" : Describe(err);
      }
      out.ok = out.error.empty() && out.first_token_s >= 0;
      if (out.ok && out.output == 0) out.output = requests[i].output_tokens;
    }
  };
  std::vector<std::thread> workers;
  const size_t threads =
      std::min<size_t>(static_cast<size_t>(o.max_in_flight), std::max<size_t>(1, requests.size()));
  {
    std::lock_guard<std::mutex> lock(start_mu);
    for (size_t t = 0; t < threads; ++t) workers.emplace_back(worker);
    start = Clock::now();
  }
  for (std::thread& t : workers) t.join();

  // Score in the endpoint's time, as LoadGen does: from each sample's scheduled issue.
  RunScore score;
  std::vector<double> lateness_ms;
  for (size_t i = 0; i < requests.size(); ++i) {
    score.Issued(due_s[i] * o.time_scale);
    lateness_ms.push_back(1e3 * (outcomes[i].sent_s - due_s[i]));
  }
  std::vector<size_t> by_end(requests.size());
  for (size_t i = 0; i < by_end.size(); ++i) by_end[i] = i;
  std::sort(by_end.begin(), by_end.end(),
            [&](size_t a, size_t b) { return outcomes[a].done_s < outcomes[b].done_s; });
  for (size_t i : by_end) {
    const Outcome& out = outcomes[i];
    if (!out.ok) {
      ++report.failed;
      if (report.errors.size() < 5)
        report.errors.push_back(out.error.empty() ? "no token streamed" : out.error);
      continue;
    }
    const double k = o.time_scale * 1e3;
    score.Completed(static_cast<int64_t>(i), k * (out.first_token_s - due_s[i]),
                    k * (out.done_s - due_s[i]), out.done_s * o.time_scale,
                    requests[i].input_tokens, out.output);
    report.answered.push_back({requests[i].id, requests[i].input_tokens, out.output,
                               due_s[i] * o.time_scale, out.first_token_s * o.time_scale,
                               out.done_s * o.time_scale});
  }
  score.Fill(scenario, limits, total_gpus, false, &report.result);
  report.schedule_error_p99_ms = Percentile(lateness_ms, 0.99);
  return report;
}

}  // namespace fathom::sim
