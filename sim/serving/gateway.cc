#include "sim/serving/gateway.h"

#include <httplib.h>

#include <chrono>
#include <cmath>

#include "base/format.h"
#include "base/json_fields.h"
#include "sim/serving/http_reply.h"

namespace fathom::sim {
namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kStart = Clock::now();  // Now()'s zero

// The generated text a chunk or answer carries ("text" of a completion, the delta's or message's
// "content" of a chat), or null when it has none.
Json* GeneratedText(Json& j, bool chat) {
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return nullptr;
  Json& c = j["choices"][0];
  Json* text = nullptr;
  if (!chat && c.contains("text")) text = &c["text"];
  for (const char* key : {"delta", "message"}) {
    if (chat && c.contains(key) && c[key].is_object() && c[key].contains("content"))
      text = &c[key]["content"];
  }
  return text && text->is_string() ? text : nullptr;
}

void ReadUsage(const Json& j, GatewayRecord* r) {
  if (!j.contains("usage") || !j["usage"].is_object()) return;
  const Json& u = j["usage"];
  if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
    r->prompt_tokens = u["prompt_tokens"];
  if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
    r->completion_tokens = u["completion_tokens"];
  }
}

}  // namespace

// One client request on its way through the gateway.
struct Gateway::Exchange {
  std::string path, body, authorization;
  bool chat = false, stream = false;
  bool drop_usage = false;  // the gateway asked for the usage chunk; the client did not
  std::function<bool(const std::string&)>
      emit;  // writes to the client's stream; false once it left
  GatewayRecord record;
  bool waiting = true;  // no first token yet
  // The outcome: a whole answer's status and body, or a stream's end.
  int status = 0;
  std::string body_out;
  bool ok = false, client_left = false;
  std::string error, retry_cause;
};

Status GatewayOptions::Validate() const {
  if (port < 0 || port > 65535)
    return Status::InvalidArgument("--gateway-port = " + std::to_string(port) +
                                   ": must be 0 to 65535");
  if (host.empty()) return Status::InvalidArgument("--gateway-host: empty");
  if (max_body_bytes < 1) return Status::InvalidArgument("--max-body-bytes: must be >= 1");
  if (max_connections < 1 || max_connections > 100000) {
    return Status::InvalidArgument("--max-connections = " + std::to_string(max_connections) +
                                   ": must be 1 to 100000");
  }
  if (!(read_timeout_s > 0) || !std::isfinite(read_timeout_s) || !(upstream_timeout_s > 0) ||
      !std::isfinite(upstream_timeout_s) || !(replica_wait_s >= 0) ||
      !std::isfinite(replica_wait_s)) {
    return Status::InvalidArgument("gateway timeouts: must be > 0 and finite");
  }
  return Status::Ok();
}

std::optional<int> LeastOutstanding(const std::vector<ReplicaLoad>& loads) {
  std::optional<ReplicaLoad> best;
  for (const ReplicaLoad& l : loads) {
    if (!best || l.outstanding < best->outstanding ||
        (l.outstanding == best->outstanding && l.id < best->id))
      best = l;
  }
  if (!best) return std::nullopt;
  return best->id;
}

double Gateway::Now() const { return std::chrono::duration<double>(Clock::now() - kStart).count(); }

Gateway::Gateway(GatewayOptions options)
    : options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  httplib::Server& s = *server_;
  const auto threads = static_cast<size_t>(options_.max_connections);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_tcp_nodelay(true);
  s.set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
  s.set_read_timeout(std::chrono::duration<double>(options_.read_timeout_s));
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/fathom/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (options_.token.empty()) {
      Reply(res, 403,
            ErrorBody("control endpoints are off: start the supervisor with --token",
                      "permission_error"));
    } else if (req.get_header_value("Authorization") != "Bearer " + options_.token) {
      Reply(res, 401,
            ErrorBody("a valid control token is required (Authorization: Bearer <token>)",
                      "authentication_error"));
    } else {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const char* what = res.status == 404   ? "not found"
                       : res.status == 413 ? "request body too large"
                                           : "bad request";
    Reply(res, res.status, ErrorBody(what, "invalid_request_error"));
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, r] : replicas_) {
      if (r.routed) return Reply(res, 200, "{}");
    }
    Reply(res, 503, ErrorBody("no replica is ready", "service_unavailable"));
  });
  s.Get("/fathom/replicas", [this](const httplib::Request&, httplib::Response& res) {
    Reply(res, 200, replicas_json_ ? replicas_json_() : "[]");
  });
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    auto pick = Pick(-1);
    if (!pick) return Reply(res, 503, ErrorBody("no replica is ready", "service_unavailable"));
    httplib::Client client("127.0.0.1", pick->second);
    httplib::Headers headers;
    if (req.has_header("Authorization"))
      headers.emplace("Authorization", req.get_header_value("Authorization"));
    auto answer = client.Get("/v1/models", headers);
    Release(pick->first);
    if (!answer)
      return Reply(res, 502, ErrorBody("the replica did not answer", "service_unavailable"));
    Reply(res, answer->status, answer->body);
  });
  auto complete = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      // Checked here, so a malformed request costs the replicas nothing.
      Result<Json> parsed = ParseJson(req.body, "request body");
      if (!parsed.ok())
        return Reply(res, 400, ErrorBody(parsed.status().message(), "invalid_request_error"));
      Json j = std::move(*parsed);
      if (!j.is_object())
        return Reply(res, 400, ErrorBody("request body: a JSON object", "invalid_request_error"));
      if (j.contains("stream") && !j["stream"].is_null() && !j["stream"].is_boolean()) {
        return Reply(res, 400, ErrorBody("stream: must be true or false", "invalid_request_error"));
      }
      auto x = std::make_shared<Exchange>();
      x->path = req.path;
      x->chat = chat;
      x->authorization = req.get_header_value("Authorization");
      x->stream = j.value("stream", false);
      if (x->stream) {
        // Every stream ends with its usage, which the gateway reads (and drops if not asked for).
        const bool asked = j.contains("stream_options") && j["stream_options"].is_object() &&
                           j["stream_options"].value("include_usage", false);
        x->drop_usage = !asked;
        j["stream_options"] = {{"include_usage", true}};
      }
      x->body = DumpUtf8(j);
      {
        std::lock_guard<std::mutex> lock(mu_);
        x->record.arrival_s = Now();
        ++window_.arrived;
        ++in_flight_;
        ++waiting_;
        if (x->stream) streams_waiting_since_.insert(x->record.arrival_s);
      }
      if (!x->stream) {
        Forward(*x);
        Finish(*x);
        if (x->status == 0) return Reply(res, 503, ErrorBody(x->error, "service_unavailable"));
        return Reply(res, x->status, x->body_out);
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream", [this, x](size_t, httplib::DataSink& sink) {
            x->emit = [&sink](const std::string& s) { return sink.write(s.data(), s.size()); };
            Forward(*x);
            if (!x->ok && !x->client_left) {
              const std::string out =
                  "data: " + ErrorBody(x->error, "service_unavailable") + "\n\ndata: [DONE]\n\n";
              sink.write(out.data(), out.size());
            }
            Finish(*x);
            sink.done();
            return true;
          });
    };
  };
  s.Post("/v1/completions", complete(false));
  s.Post("/v1/chat/completions", complete(true));
}

Gateway::~Gateway() { Stop(); }

Status Gateway::Start() {
  FATHOM_RETURN_IF_ERROR(options_.Validate());
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ <= 0)
      return Status::InvalidArgument("--gateway-host " + options_.host +
                                     ": cannot listen on any port");
  } else if (server_->bind_to_port(options_.host, options_.port)) {
    port_ = options_.port;
  } else {
    return Status::InvalidArgument(
        StrFormat("--gateway-host %s --gateway-port %d: cannot listen there (in use, or not "
                  "this machine's address)",
                  options_.host.c_str(), options_.port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return Status::Ok();
}

void Gateway::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  routed_cv_.notify_all();
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void Gateway::AddReplica(int id, int port) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    replicas_[id] = Replica{port, 0, true};
  }
  routed_cv_.notify_all();
}

void Gateway::RemoveReplica(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  if (it->second.outstanding == 0) {
    replicas_.erase(it);
  } else {
    it->second.routed = false;  // erased when its last request is released
  }
}

int64_t Gateway::Outstanding(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = replicas_.find(id);
  return it == replicas_.end() ? 0 : it->second.outstanding;
}

GatewayWindow Gateway::TakeWindow() {
  std::lock_guard<std::mutex> lock(mu_);
  GatewayWindow w = std::move(window_);
  window_ = GatewayWindow();
  w.in_flight = in_flight_;
  w.waiting = waiting_;
  const double now = Now();
  for (const double since : streams_waiting_since_) w.waiting_stream_ages_s.push_back(now - since);
  return w;
}

std::optional<std::pair<int, int>> Gateway::Pick(int exclude) {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<ReplicaLoad> loads;
  auto found = [&] {
    loads.clear();
    for (const auto& [id, r] : replicas_) {
      if (r.routed && id != exclude) loads.push_back({id, r.outstanding});
    }
    return !loads.empty() || stopping_;
  };
  routed_cv_.wait_for(lock, std::chrono::duration<double>(options_.replica_wait_s), found);
  const std::optional<int> id = LeastOutstanding(loads);
  if (!id) return std::nullopt;
  Replica& r = replicas_[*id];
  ++r.outstanding;
  return std::make_pair(*id, r.port);
}

void Gateway::Release(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  if (--it->second.outstanding == 0 && !it->second.routed) replicas_.erase(it);
}

void Gateway::StopWaiting(const Exchange& x) {
  --waiting_;
  if (x.stream) streams_waiting_since_.erase(streams_waiting_since_.find(x.record.arrival_s));
}

void Gateway::FirstToken(Exchange& x) {
  if (!x.waiting) return;
  x.waiting = false;
  std::lock_guard<std::mutex> lock(mu_);
  x.record.first_token_s = Now();
  StopWaiting(x);
}

void Gateway::Finish(const Exchange& x) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  if (x.waiting) StopWaiting(x);
  if (x.record.retried) {
    ++window_.retried;
    window_.retry_cause = x.retry_cause;
  }
  if (x.client_left) return;
  if (!x.ok) {
    ++(x.status >= 400 && x.status < 500 ? window_.client_errors : window_.failed);
    return;
  }
  GatewayRecord r = x.record;
  r.done_s = Now();
  if (!r.streamed) r.first_token_s = r.done_s;
  window_.finished.push_back(r);
}

void Gateway::Forward(Exchange& x) {
  x.record.streamed = x.stream;
  size_t text_sent = 0;  // bytes of generated text the client has: a retry skips them
  int exclude = -1;
  for (int attempt = 0; attempt < 2 && !x.ok && !x.client_left; ++attempt) {
    auto pick = Pick(exclude);
    if (!pick) {
      if (x.error.empty()) x.error = "no replica is ready";
      break;
    }
    exclude = pick->first;
    if (attempt > 0) {
      x.record.retried = true;
      x.retry_cause = x.error;
    }
    httplib::Client client("127.0.0.1", pick->second);
    client.set_tcp_nodelay(true);
    client.set_connection_timeout(std::chrono::seconds(5));
    client.set_read_timeout(std::chrono::duration<double>(options_.upstream_timeout_s));
    httplib::Request req;
    req.method = "POST";
    req.path = x.path;
    req.body = x.body;
    req.set_header("Content-Type", "application/json");
    if (!x.authorization.empty()) req.set_header("Authorization", x.authorization);
    int status = 0;
    std::string raw, buffer;
    size_t skip = text_sent;
    bool done = false, failed_mid_way = false;
    // One server-sent event of a stream: read, trimmed past the text already sent, forwarded.
    auto event = [&](std::string e) -> bool {
      const std::string prefix = "data: ";
      if (e.rfind(prefix, 0) != 0) return true;
      const std::string payload = e.substr(prefix.size());
      if (payload == "[DONE]") {
        done = true;
        return x.emit(e + "\n\n") || (x.client_left = true, false);
      }
      Result<Json> parsed = ParseJson(payload, "the replica's stream");
      if (!parsed.ok()) return true;
      Json j = std::move(*parsed);
      if (j.contains("error")) {  // the engine stopped mid-way: retried
        failed_mid_way = true;
        x.error = "the replica failed the request: " + payload.substr(0, 300);
        return false;
      }
      ReadUsage(j, &x.record);
      if (x.drop_usage && j.contains("usage") && j["usage"].is_object() && j["choices"].empty())
        return true;
      if (Json* text = GeneratedText(j, x.chat);
          text && !text->get_ref<const std::string&>().empty()) {
        std::string t = text->get<std::string>();
        if (skip >= t.size()) {
          skip -= t.size();
          return true;
        }
        if (skip > 0) {
          *text = t.substr(skip);
          e = prefix + DumpUtf8(j);
          t = t.substr(skip);
          skip = 0;
        }
        FirstToken(x);
        text_sent += t.size();
      }
      return x.emit(e + "\n\n") || (x.client_left = true, false);
    };
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (!x.stream || status != 200) {
        raw.append(data, n);
        return true;
      }
      buffer.append(data, n);
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
        std::string e = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (!event(std::move(e))) return false;
      }
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool sent = client.send(req, res, err);
    Release(pick->first);
    const std::string replica = "replica " + std::to_string(pick->first);
    // The replica's own answer is passed on, except 503 (it is shutting down), which is retried.
    if (status != 0 && status != 200 && status != 503 && !failed_mid_way) {
      x.status = status;
      x.body_out = raw;
      x.error = replica + " answered HTTP " + std::to_string(status) + ": " + raw.substr(0, 300);
      return;
    }
    if (!x.stream && sent && status == 200) {
      Result<Json> answer = ParseJson(raw, "the replica's answer");
      if (answer.ok()) ReadUsage(*answer, &x.record);
      x.status = 200;
      x.body_out = std::move(raw);
      x.ok = true;
      return;
    }
    if (x.stream && done) {
      x.ok = true;
      return;
    }
    if (status == 503) {
      x.error = replica + " answered HTTP 503: " + raw.substr(0, 300);
    } else if (!failed_mid_way) {
      x.error = replica + ": " + (sent ? "stream ended before [DONE]" : httplib::to_string(err));
    }
  }
}

}  // namespace fathom::sim
