#include "sim/serving/gateway.h"

#include <httplib.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <system_error>

#include "base/format.h"
#include "base/json_fields.h"
#include "base/prometheus.h"
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

// One client request on its way through the gateway. The event loop sets what comes before
// `mu`; the forwarding thread owns the rest until `finished`.
struct Gateway::Exchange {
  std::string method = "POST", path, body, authorization;
  bool chat = false, stream = false;
  bool drop_usage = false;  // the gateway asked for the usage chunk; the client did not
  bool counted = true;      // a completion, in the windows and totals (/v1/models is not)
  uint64_t connection = 0;  // the client's, to notify
  // The forwarding thread's.
  GatewayRecord record;
  bool waiting = true;  // no first token yet (set under the gateway's mu)
  bool gone = false;    // the client left (seen by Emit)
  // The replica it is on and the client reaching it (under the gateway's mu): a requeue stops it.
  int replica = -1;
  std::shared_ptr<httplib::Client> upstream;
  bool requeued = false;
  std::string error, retry_cause;
  // The outcome, read by the event loop once `finished`: a whole answer's status and body
  // (status 0: no replica answered), or a stream's end.
  int status = 0;
  std::string body_out;
  bool ok = false;
  // Shared.
  std::mutex mu;
  std::string out;  // stream bytes for the client, not yet taken by the event loop
  bool finished = false, client_left = false;
};

struct Gateway::Answer : HttpAnswer {
  std::shared_ptr<Exchange> x;
  bool headers_sent = false;
};

Status GatewayOptions::Validate() const {
  if (port < 0 || port > 65535)
    return Status::InvalidArgument("--gateway-port = " + std::to_string(port) +
                                   ": must be 0 to 65535");
  if (host.empty()) return Status::InvalidArgument("--gateway-host: empty");
  if (max_body_bytes < 1) return Status::InvalidArgument("--max-body-bytes: must be >= 1");
  if (max_connections < 1 || max_connections > 1000000) {
    return Status::InvalidArgument("--max-connections = " + std::to_string(max_connections) +
                                   ": must be 1 to 1000000");
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
  double best_load = 0;
  for (const ReplicaLoad& l : loads) {
    const double load = static_cast<double>(l.outstanding + 1) / l.weight;
    if (!best || load < best_load || (load == best_load && l.id < best->id)) {
      best = l;
      best_load = load;
    }
  }
  if (!best) return std::nullopt;
  return best->id;
}

GatewayWindow MergeWindows(GatewayWindow earlier, GatewayWindow later) {
  later.arrived += earlier.arrived;
  later.failed += earlier.failed;
  later.client_errors += earlier.client_errors;
  later.retried += earlier.retried;
  if (later.retry_cause.empty()) later.retry_cause = std::move(earlier.retry_cause);
  earlier.finished.insert(earlier.finished.end(), later.finished.begin(), later.finished.end());
  later.finished = std::move(earlier.finished);
  return later;
}

std::string WindowJson(const GatewayWindow& w) {
  OrderedJson j;
  j["arrived"] = w.arrived;
  j["failed"] = w.failed;
  j["client_errors"] = w.client_errors;
  j["retried"] = w.retried;
  j["retry_cause"] = w.retry_cause;
  j["in_flight"] = w.in_flight;
  j["waiting"] = w.waiting;
  j["waiting_stream_ages_s"] = w.waiting_stream_ages_s;
  j["waiting_stream_replicas"] = w.waiting_stream_replicas;
  OrderedJson finished = OrderedJson::array();
  for (const GatewayRecord& r : w.finished) {
    finished.push_back({{"arrival_s", r.arrival_s},
                        {"first_token_s", r.first_token_s},
                        {"done_s", r.done_s},
                        {"prompt_tokens", r.prompt_tokens},
                        {"completion_tokens", r.completion_tokens},
                        {"streamed", r.streamed},
                        {"retried", r.retried},
                        {"replica", r.replica}});
  }
  j["finished"] = std::move(finished);
  return DumpUtf8(j);
}

Result<GatewayWindow> ParseWindowJson(std::string_view text, const std::string& source) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ParseJson(text, source));
  if (!j.is_object()) return Status::InvalidArgument(source + ": a JSON object");
  JsonFields f(j, source);
  GatewayWindow w;
  w.arrived = f.Int("arrived");
  w.failed = f.Int("failed");
  w.client_errors = f.Int("client_errors");
  w.retried = f.Int("retried");
  w.retry_cause = f.String("retry_cause", "");
  w.in_flight = f.Int("in_flight");
  w.waiting = f.Int("waiting");
  FATHOM_RETURN_IF_ERROR(f.status());
  auto array = [&](const char* key) -> Result<const Json*> {
    if (!j.contains(key) || !j[key].is_array())
      return Status::InvalidArgument(source + ": " + key + " must be an array");
    return &j[key];
  };
  FATHOM_ASSIGN_OR_RETURN(const Json* ages, array("waiting_stream_ages_s"));
  for (const Json& a : *ages) {
    if (!a.is_number()) return Status::InvalidArgument(source + ": waiting_stream_ages_s: numbers");
    w.waiting_stream_ages_s.push_back(a.get<double>());
  }
  FATHOM_ASSIGN_OR_RETURN(const Json* on, array("waiting_stream_replicas"));
  for (const Json& r : *on) {
    if (!r.is_number_integer())
      return Status::InvalidArgument(source + ": waiting_stream_replicas: whole numbers");
    w.waiting_stream_replicas.push_back(r.get<int>());
  }
  if (w.waiting_stream_replicas.size() != w.waiting_stream_ages_s.size()) {
    return Status::InvalidArgument(source +
                                   ": waiting_stream_replicas: one a waiting stream, as its ages");
  }
  FATHOM_ASSIGN_OR_RETURN(const Json* finished, array("finished"));
  for (size_t i = 0; i < finished->size(); ++i) {
    const Json& e = (*finished)[i];
    const std::string where = source + ": finished[" + std::to_string(i) + "]";
    if (!e.is_object()) return Status::InvalidArgument(where + ": a JSON object");
    JsonFields r(e, where);
    GatewayRecord g;
    g.arrival_s = r.Double("arrival_s");
    g.first_token_s = r.Double("first_token_s");
    g.done_s = r.Double("done_s");
    g.prompt_tokens = r.Int("prompt_tokens");
    g.completion_tokens = r.Int("completion_tokens");
    g.streamed = r.Bool("streamed", false);
    g.retried = r.Bool("retried", false);
    g.replica = static_cast<int>(r.Int("replica", -1));
    FATHOM_RETURN_IF_ERROR(r.status());
    w.finished.push_back(g);
  }
  return w;
}

std::string ReplicasJson(const std::vector<GatewayReplica>& replicas) {
  OrderedJson list = OrderedJson::array();
  for (const GatewayReplica& r : replicas) {
    Result<Json> about = ParseJson(r.about, "about");
    OrderedJson j = OrderedJson::object();
    if (about.ok() && about->is_object()) {
      for (auto it = about->begin(); it != about->end(); ++it) j[it.key()] = it.value();
    }
    j["id"] = r.id;
    j["host"] = r.host;
    j["port"] = r.port;
    j["draining"] = !r.routed;
    j["outstanding"] = r.outstanding;
    j["weight"] = r.weight;
    list.push_back(std::move(j));
  }
  return DumpUtf8(list);
}

Result<std::vector<GatewayReplica>> ParseReplicasJson(std::string_view text,
                                                      const std::string& source) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ParseJson(text, source));
  if (!j.is_array()) return Status::InvalidArgument(source + ": a JSON array");
  std::vector<GatewayReplica> v;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string where = source + ": [" + std::to_string(i) + "]";
    if (!j[i].is_object()) return Status::InvalidArgument(where + ": a JSON object");
    JsonFields f(j[i], where);
    GatewayReplica r;
    r.id = static_cast<int>(f.Int("id"));
    r.host = f.String("host");
    r.port = static_cast<int>(f.Int("port"));
    r.routed = !f.Bool("draining", false);
    r.outstanding = f.Int("outstanding", 0);
    r.weight = f.Double("weight", 1);
    FATHOM_RETURN_IF_ERROR(f.status());
    Json about = j[i];
    for (const char* key : {"id", "host", "port", "draining", "outstanding", "weight"})
      about.erase(key);
    r.about = DumpUtf8(about);
    v.push_back(std::move(r));
  }
  return v;
}

double Gateway::Now() const { return std::chrono::duration<double>(Clock::now() - kStart).count(); }

namespace {

HttpServerOptions GatewayHttpOptions(const GatewayOptions& o) {
  HttpServerOptions h;
  h.host = o.host;
  h.port = o.port;
  h.host_flag = "--gateway-host";
  h.port_flag = "--gateway-port";
  h.max_connections = o.max_connections;
  h.max_body_bytes = o.max_body_bytes;
  h.read_timeout_s = o.read_timeout_s;
  return h;
}

}  // namespace

Gateway::Gateway(GatewayOptions options)
    : options_(std::move(options)), server_(this, GatewayHttpOptions(options_)) {}

Gateway::~Gateway() { Stop(); }

Status Gateway::Start() {
  FATHOM_RETURN_IF_ERROR(options_.Validate());
  FATHOM_RETURN_IF_ERROR(server_.Bind());
  thread_ = std::thread([this] { server_.Serve(); });
  return Status::Ok();
}

void Gateway::BeginDrain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

int64_t Gateway::InFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void Gateway::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  routed_cv_.notify_all();
  server_.Stop();
  if (thread_.joinable()) thread_.join();  // every client's exchange is aborted by now
  // A request waiting on a replica for its whole answer would hold Stop up to the upstream
  // timeout: its connection is cut (and, stopping, not tried elsewhere), again until it ends,
  // as a cut that comes before the client has its socket is lost.
  std::unique_lock<std::mutex> lock(mu_);
  while (!forwarders_cv_.wait_for(lock, std::chrono::milliseconds(50),
                                  [this] { return forwarders_ == 0; })) {
    const std::vector<std::shared_ptr<httplib::Client>> upstreams = Upstreams();
    lock.unlock();
    for (const auto& client : upstreams) client->stop();
    lock.lock();
  }
}

std::optional<std::pair<int, std::string>> Gateway::Admit(const HttpRequest& head) {
  const std::string& path = head.path;
  if (path.rfind("/fathom/", 0) == 0) {
    if (options_.token.empty()) {
      return std::make_pair(403,
                            ErrorBody("control endpoints are off: start the gateway with --token",
                                      "permission_error"));
    }
    if (head.Header("authorization") != "Bearer " + options_.token) {
      return std::make_pair(
          401, ErrorBody("a valid control token is required (Authorization: Bearer <token>)",
                         "authentication_error"));
    }
    return std::nullopt;  // Control answers unknown routes and methods
  }
  if (!IsCompletionPath(path) && path != "/v1/models" && path != "/health" && path != "/metrics")
    return std::make_pair(404, ErrorBody("not found", "invalid_request_error"));
  // Checked from the head, so a client without the key costs no more than its headers.
  return RefuseOpenAiHead(head, options_.api_key);
}

void Gateway::Handle(HttpServer& server, HttpConnection& c, const HttpRequest& req) {
  if (req.path == "/health") {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, r] : replicas_) {
      if (r.routed) return server.Reply(c, 200, "{}");
    }
    return server.Reply(c, 503, ErrorBody("no replica is ready", "service_unavailable"));
  }
  if (req.path == "/metrics") return server.Reply(c, 200, Metrics(), "text/plain; version=0.0.4");
  if (req.path.rfind("/fathom/", 0) == 0) {
    const auto [status, body] = Control(req);
    return server.Reply(c, status, body);
  }
  auto x = std::make_shared<Exchange>();
  x->path = req.path;
  x->authorization = std::string(req.Header("authorization"));
  if (req.path == "/v1/models") {
    x->method = "GET";
    x->counted = false;
    return Dispatch(c, std::move(x));
  }
  // Checked here, so a malformed request costs the replicas nothing.
  Result<Json> parsed = ParseJson(req.body, "request body");
  if (!parsed.ok())
    return server.Reply(c, 400, ErrorBody(parsed.status().message(), "invalid_request_error"));
  Json j = std::move(*parsed);
  if (!j.is_object())
    return server.Reply(c, 400, ErrorBody("request body: a JSON object", "invalid_request_error"));
  if (j.contains("stream") && !j["stream"].is_null() && !j["stream"].is_boolean()) {
    return server.Reply(c, 400,
                        ErrorBody("stream: must be true or false", "invalid_request_error"));
  }
  x->chat = req.path == "/v1/chat/completions";
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
    if (draining_) {
      return server.Reply(c, 503, ErrorBody("the gateway is shutting down", "service_unavailable"));
    }
    x->record.arrival_s = Now();
    ++window_.arrived;
    ++totals_.arrived;
    ++in_flight_;
    ++waiting_;
    if (x->stream) waiting_streams_.insert(x.get());
  }
  Dispatch(c, std::move(x));
}

std::pair<int, std::string> Gateway::Control(const HttpRequest& req) {
  const std::string& path = req.path;
  const std::string prefix = "/fathom/replicas/";
  auto bad = [](const std::string& why) {
    return std::make_pair(400, ErrorBody(why, "invalid_request_error"));
  };
  if (path == "/fathom/replicas" && req.method == "GET") return {200, ReplicasJson(Replicas())};
  if (path == "/fathom/window" && req.method == "POST") return {200, WindowJson(TakeWindow())};
  if (path == "/fathom/metrics" && req.method == "PUT") {
    Status checked = ParsePrometheusText(req.body, "PUT /fathom/metrics").status();
    if (!checked.ok()) return bad(checked.message());
    SetMoreMetrics(req.body);
    return {200, "{}"};
  }
  const std::string requeue = "/requeue";
  const bool requeuing = req.method == "POST" && path.size() > requeue.size() &&
                         path.compare(path.size() - requeue.size(), requeue.size(), requeue) == 0;
  if (path.rfind(prefix, 0) == 0 && (req.method == "PUT" || req.method == "DELETE" || requeuing)) {
    const std::string id_text =
        path.substr(prefix.size(), path.size() - prefix.size() - (requeuing ? requeue.size() : 0));
    int id = 0;
    const auto [end, error] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (error != std::errc() || end != id_text.data() + id_text.size() || id < 0)
      return bad(path + ": the replica's id must be a whole number >= 0");
    if (req.method != "PUT") {
      RemoveReplica(id, requeuing);
      return {200, "{}"};
    }
    const std::string source = "PUT " + path;
    Result<Json> parsed = ParseJson(req.body, source);
    if (!parsed.ok()) return bad(parsed.status().message());
    if (!parsed->is_object()) return bad(source + ": a JSON object");
    JsonFields f(*parsed, source);
    GatewayReplica r;
    r.id = id;
    r.host = f.String("host", "127.0.0.1");
    r.port = static_cast<int>(f.Int("port"));
    r.weight = f.Double("weight", 1);
    if (f.status().ok() && !(r.weight > 0 && r.weight <= 1e6))
      f.Fail("weight", StrFormat("%g", r.weight), "must be > 0 and at most 1e6");
    if (f.status().ok() && (r.port < 1 || r.port > 65535))
      f.Fail("port", std::to_string(r.port), "must be 1 to 65535");
    if (f.status().ok() && r.host.empty()) f.Fail("host", "\"\"", "must not be empty");
    if (f.status().ok() && parsed->contains("about") && !(*parsed)["about"].is_object())
      f.Fail("about", DumpUtf8((*parsed)["about"]), "must be a JSON object");
    if (!f.status().ok()) return bad(f.status().message());
    if (parsed->contains("about")) r.about = DumpUtf8((*parsed)["about"]);
    AddReplica(std::move(r));
    return {200, "{}"};
  }
  return {404, ErrorBody(req.method + " " + path +
                             ": no such control endpoint (GET /fathom/replicas, PUT or DELETE "
                             "/fathom/replicas/ID, POST /fathom/replicas/ID/requeue, POST "
                             "/fathom/window, PUT /fathom/metrics)",
                         "invalid_request_error")};
}

void Gateway::Dispatch(HttpConnection& c, std::shared_ptr<Exchange> x) {
  x->connection = c.id;
  auto a = std::make_unique<Answer>();
  a->x = x;
  c.answer = std::move(a);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++forwarders_;
    exchanges_.insert(x.get());
  }
  try {
    StartForwarder(x);
  } catch (const std::system_error&) {
    // No thread (a process or thread limit): undone, and answered 500 with the reason by the
    // server (one request's fault is its own).
    {
      std::lock_guard<std::mutex> lock(mu_);
      exchanges_.erase(x.get());
      --forwarders_;
    }
    if (x->counted) {
      x->error = "the gateway cannot start a thread for the request";
      Finish(*x);
    }
    c.answer.reset();
    throw;
  }
}

void Gateway::StartForwarder(std::shared_ptr<Exchange> x) {
  std::thread([this, x = std::move(x)] {
    Forward(*x);
    {
      std::lock_guard<std::mutex> lock(mu_);
      exchanges_.erase(x.get());
    }
    if (x->counted) Finish(*x);
    {
      std::lock_guard<std::mutex> lock(x->mu);
      x->finished = true;
    }
    server_.Notify(x->connection);
    std::lock_guard<std::mutex> lock(mu_);
    if (--forwarders_ == 0) forwarders_cv_.notify_all();
  }).detach();
}

void Gateway::Advance(HttpServer& server, HttpConnection& c) {
  Answer& a = static_cast<Answer&>(*c.answer);
  Exchange& x = *a.x;
  std::string out;
  bool finished;
  {
    std::lock_guard<std::mutex> lock(x.mu);
    out.swap(x.out);
    finished = x.finished;
  }
  if (!x.stream || (!a.headers_sent && out.empty())) {
    if (!finished) return;
    // A whole answer, or a stream that failed before its first event: the real status.
    if (x.ok || x.status != 0) {
      server.Reply(c, x.status, x.body_out);
    } else {
      server.Reply(c, 503, ErrorBody(x.error, "service_unavailable"));
    }
    return server.Finish(c);
  }
  if (!a.headers_sent) {
    server.StartStream(c, "text/event-stream");
    a.headers_sent = true;
  }
  if (!finished) return server.SendChunk(c, out);
  // Cut mid-way past the retry: the client learns it from the stream itself.
  if (!x.ok) out += "data: " + ErrorBody(x.error, "service_unavailable") + "\n\ndata: [DONE]\n\n";
  server.EndStream(c, out);
}

void Gateway::Abort(HttpConnection& c) {
  Exchange& x = *static_cast<Answer&>(*c.answer).x;
  std::lock_guard<std::mutex> lock(x.mu);
  x.client_left = true;
}

bool Gateway::Emit(Exchange& x, const std::string& bytes) {
  {
    std::lock_guard<std::mutex> lock(x.mu);
    if (x.client_left) return false;
    x.out += bytes;
  }
  server_.Notify(x.connection);
  return true;
}

std::string Gateway::Metrics() const {
  const HttpServerStats connections = server_.Stats();
  auto d = [](int64_t v) { return static_cast<double>(v); };
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  AppendMetric(&out, "fathom_gateway_requests_total", "counter",
               "Completions by outcome: ok, failed (after the retry), client_error (a replica's "
               "4xx), client_left.",
               {{"outcome=\"ok\"", d(totals_.ok)},
                {"outcome=\"failed\"", d(totals_.failed)},
                {"outcome=\"client_error\"", d(totals_.client_errors)},
                {"outcome=\"client_left\"", d(totals_.client_left)}});
  AppendMetric(&out, "fathom_gateway_retries_total", "counter",
               "Completions moved to another replica after theirs failed.",
               {{"", d(totals_.retried)}});
  AppendMetric(&out, "fathom_gateway_requests_in_flight", "gauge",
               "Completions on their way through the gateway.", {{"", d(in_flight_)}});
  AppendMetric(&out, "fathom_gateway_requests_waiting", "gauge",
               "Completions in flight without a first token yet.", {{"", d(waiting_)}});
  AppendMetric(&out, "fathom_gateway_connections", "gauge", "Client connections open.",
               {{"", d(connections.open)}});
  AppendMetric(&out, "fathom_gateway_connections_closed_total", "counter",
               "Client connections the gateway closed for its limits: evicted (the longest idle, "
               "to make room), refused (at the limit, none idle), overflow (the bytes held over "
               "all connections ran out).",
               {{"reason=\"evicted\"", d(connections.evicted)},
                {"reason=\"refused\"", d(connections.refused)},
                {"reason=\"overflow\"", d(connections.overflow)}});
  std::vector<std::pair<std::string, double>> outstanding;
  double routed = 0, draining = 0;
  for (const auto& [id, r] : replicas_) {
    (r.routed ? routed : draining) += 1;
    outstanding.emplace_back(
        StrFormat("replica=\"%d\",address=\"%s:%d\"", id, r.host.c_str(), r.port),
        static_cast<double>(r.outstanding));
  }
  AppendMetric(&out, "fathom_gateway_replicas", "gauge",
               "Replicas behind the gateway: routed, or draining (no new requests).",
               {{"state=\"routed\"", routed}, {"state=\"draining\"", draining}});
  AppendMetric(&out, "fathom_gateway_replica_outstanding", "gauge",
               "Requests each replica has from the gateway.", outstanding);
  out += more_metrics_;
  return out;
}

void Gateway::AddReplica(GatewayReplica r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    r.routed = true;
    auto it = replicas_.find(r.id);
    r.outstanding = it == replicas_.end() ? 0 : it->second.outstanding;  // re-added in use
    replicas_[r.id] = std::move(r);
  }
  routed_cv_.notify_all();
}

std::vector<GatewayReplica> Gateway::Replicas() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GatewayReplica> v;
  for (const auto& [id, r] : replicas_) v.push_back(r);
  return v;
}

void Gateway::SetMoreMetrics(std::string text) {
  std::lock_guard<std::mutex> lock(mu_);
  more_metrics_ = std::move(text);
}

std::vector<std::shared_ptr<httplib::Client>> Gateway::Upstreams() const {
  std::vector<std::shared_ptr<httplib::Client>> v;
  for (const Exchange* x : exchanges_) {
    if (x->upstream) v.push_back(x->upstream);
  }
  return v;
}

void Gateway::RemoveReplica(int id, bool requeue) {
  std::vector<std::shared_ptr<httplib::Client>> cut;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (requeue) {
      for (Exchange* x : exchanges_) {
        if (x->replica != id || !x->waiting) continue;
        x->requeued = true;
        if (x->upstream) cut.push_back(x->upstream);
      }
    }
    Unroute(id);
  }
  // Outside the lock (a cut may wait on the client's connect): each send returns, and Forward
  // tries elsewhere.
  for (const auto& client : cut) client->stop();
}

void Gateway::Unroute(int id) {
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
  for (const Exchange* x : waiting_streams_) {
    w.waiting_stream_ages_s.push_back(now - x->record.arrival_s);
    w.waiting_stream_replicas.push_back(x->replica);
  }
  return w;
}

std::optional<Gateway::Pick> Gateway::PickReplica(Exchange& x, int exclude) {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<ReplicaLoad> loads;
  auto found = [&] {
    loads.clear();
    for (const auto& [id, r] : replicas_) {
      if (r.routed && id != exclude) loads.push_back({id, r.outstanding, r.weight});
    }
    return !loads.empty() || stopping_;
  };
  routed_cv_.wait_for(lock, std::chrono::duration<double>(options_.replica_wait_s), found);
  const std::optional<int> id = LeastOutstanding(loads);
  if (!id) return std::nullopt;
  GatewayReplica& r = replicas_[*id];
  ++r.outstanding;
  x.replica = *id;
  x.requeued = false;  // a requeue of the replica it was on before is past
  return Pick{*id, r.port, r.host};
}

void Gateway::Release(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  if (--it->second.outstanding == 0 && !it->second.routed) replicas_.erase(it);
}

void Gateway::StopWaiting(Exchange& x) {
  x.waiting = false;
  --waiting_;
  waiting_streams_.erase(&x);
}

void Gateway::FirstToken(Exchange& x) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!x.waiting) return;
  x.record.first_token_s = Now();
  StopWaiting(x);
}

void Gateway::Finish(Exchange& x) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  if (x.waiting) StopWaiting(x);
  if (x.record.retried) {
    ++window_.retried;
    ++totals_.retried;
    window_.retry_cause = x.retry_cause;
  }
  if (x.gone) {
    ++totals_.client_left;
    return;
  }
  if (!x.ok) {
    const bool client = x.status >= 400 && x.status < 500;
    ++(client ? window_.client_errors : window_.failed);
    ++(client ? totals_.client_errors : totals_.failed);
    return;
  }
  ++totals_.ok;
  GatewayRecord r = x.record;
  r.done_s = Now();
  if (!r.streamed) r.first_token_s = r.done_s;
  window_.finished.push_back(r);
}

void Gateway::Forward(Exchange& x) {
  x.record.streamed = x.stream;
  size_t text_sent = 0;  // bytes of generated text the client has: a retry skips them
  int exclude = -1;
  // Two tries; a request taken off a rolled-back replica (requeued) does not use one up.
  for (int failures = 0, attempt = 0; failures < 2 && !x.ok && !x.gone; ++attempt) {
    auto pick = PickReplica(x, exclude);
    if (!pick) {
      if (x.error.empty()) x.error = "no replica is ready";
      break;
    }
    exclude = pick->id;
    x.record.replica = pick->id;
    if (attempt > 0) {
      x.record.retried = true;
      x.retry_cause = x.error;
    }
    auto upstream = std::make_shared<httplib::Client>(pick->host, pick->port);
    httplib::Client& client = *upstream;
    client.set_tcp_nodelay(true);
    client.set_connection_timeout(std::chrono::seconds(5));
    client.set_read_timeout(std::chrono::duration<double>(options_.upstream_timeout_s));
    httplib::Request req;
    req.method = x.method;
    req.path = x.path;
    if (x.method == "POST") {
      req.body = x.body;
      req.set_header("Content-Type", "application/json");
    }
    if (!x.authorization.empty()) req.set_header("Authorization", x.authorization);
    int status = 0;
    std::string raw, buffer;
    size_t skip = text_sent;
    bool done = false, failed_mid_way = false;
    auto emit = [&](const std::string& bytes) { return Emit(x, bytes) || (x.gone = true, false); };
    // One server-sent event of a stream: read, trimmed past the text already sent, forwarded.
    auto event = [&](std::string e) -> bool {
      const std::string prefix = "data: ";
      if (e.rfind(prefix, 0) != 0) return true;
      const std::string payload = e.substr(prefix.size());
      if (payload == "[DONE]") {
        done = true;
        return emit(e + "\n\n");
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
      return emit(e + "\n\n");
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
    bool requeued;
    {
      std::lock_guard<std::mutex> lock(mu_);
      x.upstream = upstream;
      requeued = x.requeued || stopping_;  // either way, not sent (Stop cuts what was)
    }
    const bool sent = !requeued && client.send(req, res, err);
    // A cut that came after the answer was whole changes nothing.
    const bool whole = sent && (x.stream ? done : status == 200);
    {
      std::lock_guard<std::mutex> lock(mu_);
      x.upstream.reset();
      requeued = x.requeued && x.waiting && !whole;
      x.requeued = false;
    }
    Release(pick->id);
    const std::string replica = "replica " + std::to_string(pick->id);
    if (requeued && !x.gone) {
      x.error = replica + " was rolled back before the request's first token: moved";
      continue;
    }
    ++failures;
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
