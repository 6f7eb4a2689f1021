#include "sim/serving/loadgen.h"

#include <fcntl.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "base/json_fields.h"
#include "base/stats.h"
#include "sim/serving/http_response.h"

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

// The host and port of an http:// URL.
struct Endpoint {
  std::string host, port, host_header;
};

Endpoint ParseEndpoint(const std::string& url) {
  std::string rest = url.substr(7);  // after http://
  rest = rest.substr(0, rest.find('/'));
  Endpoint e;
  e.host_header = rest;
  size_t colon = rest.rfind(':');
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    e.host = rest.substr(1, close == std::string::npos ? std::string::npos : close - 1);
    colon = close != std::string::npos && close + 1 < rest.size() ? close + 1 : std::string::npos;
  } else {
    e.host = rest.substr(0, colon);
  }
  e.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  return e;
}

// A blocking TCP connection to `e`, made within 10 s; -1 when none could be.
int Connect(const Endpoint& e) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(e.host.c_str(), e.port.c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t length = sizeof error;
      r = ::poll(&p, 1, 10000) == 1 &&
                  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0
              ? 0
              : -1;
    }
    if (r != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const int on = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  }
  return fd;
}

// Whether a kept-alive connection is still open: nothing to read on it, not even its end.
bool StillOpen(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

bool SendAll(int fd, const std::string& data) {
  for (size_t at = 0; at < data.size();) {
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// One answer being received.
struct Receipt {
  int fd = -1;
  EventStream* events = nullptr;
  HttpResponseReader reader;
  std::string error_body;  // the start of an answer other than 200
  std::string error;       // how the connection failed, if it did
  bool stopped = false;    // the stream carried an error event
  Clock::time_point deadline;
  bool finished = false;  // guarded by the receiver's mutex
  std::condition_variable cv;
};

// Receives every answer on one thread. The workers only send, then sleep until their answer is
// in: a thousand streams wake one thread per engine step, not a thousand, which on a busy
// two-core machine is most of what the client costs.
class Receiver {
 public:
  Receiver() : epoll_(::epoll_create1(EPOLL_CLOEXEC)), thread_([this] { Loop(); }) {}
  ~Receiver() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    thread_.join();
    ::close(epoll_);
  }
  // Blocks until `r`'s answer is whole, failed, or past its deadline.
  void Receive(Receipt* r) {
    std::unique_lock<std::mutex> lock(mu_);
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.ptr = r;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, r->fd, &e) != 0) {
      r->error = "cannot watch the connection";
      return;
    }
    active_.insert(r);
    r->cv.wait(lock, [r] { return r->finished; });
  }

 private:
  void Loop() {
    epoll_event events[256];
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
      }
      const int n = ::epoll_wait(epoll_, events, 256, 50);  // deadlines every 50 ms
      for (int i = 0; i < n; ++i) Read(static_cast<Receipt*>(events[i].data.ptr));
      std::vector<Receipt*> late;
      {
        std::lock_guard<std::mutex> lock(mu_);
        const auto now = Clock::now();
        for (Receipt* r : active_) {
          if (now > r->deadline) late.push_back(r);
        }
      }
      for (Receipt* r : late) Finish(r, "no complete answer within the request timeout");
    }
  }

  void Read(Receipt* r) {
    char buffer[16 << 10];
    for (;;) {
      const ssize_t n = ::recv(r->fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) {
        const bool ok = r->reader.Feed(
            std::string_view(buffer, static_cast<size_t>(n)), [r](std::string_view body) {
              if (r->reader.status() != 200) {
                r->error_body.append(
                    body.substr(0, 300 - std::min<size_t>(300, r->error_body.size())));
              } else if (!r->stopped && !r->events->Feed(body.data(), body.size())) {
                r->stopped = true;
              }
            });
        if (!ok) return Finish(r, "malformed answer: " + r->reader.error());
        if (r->reader.done() || r->stopped) return Finish(r, "");
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      return Finish(r, r->reader.End() ? "" : "connection closed while reading the answer");
    }
  }

  void Finish(Receipt* r, const std::string& error) {
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, r->fd, nullptr);
    std::lock_guard<std::mutex> lock(mu_);
    r->error = error;
    r->finished = true;
    active_.erase(r);
    r->cv.notify_one();  // under the lock: the worker may end `r` as soon as it wakes
  }

  const int epoll_;
  std::mutex mu_;
  std::set<Receipt*> active_;
  bool stop_ = false;
  std::thread thread_;
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
  const Endpoint endpoint = ParseEndpoint(o.url);
  Receiver receiver;
  auto worker = [&] {
    int fd = -1;  // kept alive from one request to the next
    Clock::time_point t0;
    {
      std::lock_guard<std::mutex> lock(start_mu);
      t0 = start;
    }
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= requests.size()) break;
      Outcome& out = outcomes[i];
      const std::string body = RequestBody(o, report.model, requests[i]);
      const std::string request =
          std::string("POST ") + (o.chat ? "/v1/chat/completions" : "/v1/completions") +
          " HTTP/1.1\r\nHost: " + endpoint.host_header +
          "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n" +
          (o.api_key.empty() ? "" : "Authorization: Bearer " + o.api_key + "\r\n") +
          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(due_s[i])));
      out.sent_s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (fd >= 0 && !StillOpen(fd)) {
        ::close(fd);
        fd = -1;
      }
      if (fd < 0) fd = Connect(endpoint);
      EventStream events(t0, &out);
      Receipt r;
      r.fd = fd;
      r.events = &events;
      r.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o.request_timeout_s));
      if (fd < 0) {
        r.error = "cannot connect (nothing listening there?)";
      } else if (!SendAll(fd, request)) {
        r.error = "connection closed while sending the request";
      } else {
        receiver.Receive(&r);
      }
      out.done_s = std::chrono::duration<double>(Clock::now() - t0).count();
      const int status = r.reader.status();
      if (status == 0) {
        out.error = r.error.empty() ? "no answer" : r.error;
      } else if (status != 200) {
        out.error = "HTTP " + std::to_string(status) + ": " + r.error_body;
      } else if (out.error.empty() && !events.finished()) {
        out.error = r.error.empty() ? "stream ended before [DONE]" : r.error;
      }
      out.ok = out.error.empty() && out.first_token_s >= 0;
      if (out.ok && out.output == 0) out.output = requests[i].output_tokens;
      if (fd >= 0 && !(r.reader.done() && r.error.empty() && r.reader.keep_alive())) {
        ::close(fd);
        fd = -1;
      }
    }
    if (fd >= 0) ::close(fd);
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
