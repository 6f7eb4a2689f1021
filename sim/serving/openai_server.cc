#include "sim/serving/openai_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <exception>

#include "base/check.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "sim/serving/http_reply.h"

namespace fathom::sim {
namespace {

using Clock = std::chrono::steady_clock;

struct Completion {
  int64_t input = 0, output = 16;  // OpenAI's default max_tokens
  bool stream = false, include_usage = false, chat = false;
  std::string model;
};

// Tokens in one prompt: a string, an array of token ids, or an array holding one of either.
Result<int64_t> PromptTokens(const Json& p) {
  if (p.is_string()) return TextTokens(p.get<std::string>());
  if (p.is_array() && !p.empty() && p.size() == 1 && (p[0].is_string() || p[0].is_array()))
    return PromptTokens(p[0]);
  if (p.is_array() && !p.empty()) {
    for (const Json& t : p) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0) {
        return Status::InvalidArgument(
            "prompt: an array must hold token ids (integers >= 0) or one string");
      }
    }
    return static_cast<int64_t>(p.size());
  }
  return Status::InvalidArgument("prompt: one non-empty string or token-id array per request");
}

// Tokens of a chat conversation: each message's text plus four for its template markup.
Result<int64_t> MessageTokens(const Json& messages) {
  if (!messages.is_array() || messages.empty())
    return Status::InvalidArgument("messages: a non-empty array");
  int64_t tokens = 0;
  for (const Json& m : messages) {
    if (!m.is_object() || !m.contains("content"))
      return Status::InvalidArgument("messages: objects with a content");
    const Json& c = m["content"];
    tokens += 4;
    if (c.is_string()) {
      tokens += TextTokens(c.get<std::string>());
    } else if (c.is_array()) {
      for (const Json& part : c) {
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
          tokens += TextTokens(part["text"].get<std::string>());
        }
      }
    } else if (!c.is_null()) {
      return Status::InvalidArgument("messages: content must be a string or an array of parts");
    }
  }
  return tokens;
}

Result<Completion> ParseCompletion(const std::string& body, bool chat, const ServeOptions& o) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ParseJson(body, "request body"));
  if (!j.is_object()) return Status::InvalidArgument("request body: a JSON object");
  Completion c;
  c.chat = chat;
  if (chat) {
    FATHOM_ASSIGN_OR_RETURN(c.input,
                            MessageTokens(j.contains("messages") ? j["messages"] : Json()));
  } else {
    FATHOM_ASSIGN_OR_RETURN(c.input, PromptTokens(j.contains("prompt") ? j["prompt"] : Json()));
  }
  c.input = std::max<int64_t>(c.input, 1);
  // OpenAI's n: fathom serve generates one choice a request; more is refused, not ignored.
  if (j.contains("n") && !j["n"].is_null() && j["n"] != 1) {
    return Status::InvalidArgument("n = " + j["n"].dump().substr(0, 40) +
                                   ": fathom serve generates one choice a request (n = 1)");
  }
  // Chat's max_completion_tokens, where given (null is not given), else max_tokens.
  const char* length_key =
      chat && j.contains("max_completion_tokens") && !j["max_completion_tokens"].is_null()
          ? "max_completion_tokens"
          : "max_tokens";
  if (j.contains(length_key) && !j[length_key].is_null()) {
    const Json& m = j[length_key];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > o.max_tokens_limit) {
      return Status::InvalidArgument(std::string(length_key) + " = " + m.dump().substr(0, 40) +
                                     ": must be an integer from 1 to " +
                                     std::to_string(o.max_tokens_limit));
    }
    c.output = m.get<int64_t>();
  } else if (o.max_model_len > c.input) {
    c.output = std::min(c.output, o.max_model_len - c.input);  // the default fits what is left
  }
  if (o.max_model_len > 0 && c.input + c.output > o.max_model_len) {  // vLLM's words and status
    return Status::InvalidArgument(
        "This model's maximum context length is " + std::to_string(o.max_model_len) +
        " tokens. However, you requested " + std::to_string(c.input + c.output) + " tokens (" +
        std::to_string(c.input) + " in the " + (chat ? "messages" : "prompt") + ", " +
        std::to_string(c.output) + " in the completion). Please reduce the length of the " +
        (chat ? "messages" : "prompt") + " or completion.");
  }
  auto flag = [&](const Json& obj, const char* key) -> Result<bool> {
    if (!obj.contains(key) || obj[key].is_null()) return false;
    if (!obj[key].is_boolean())
      return Status::InvalidArgument(std::string(key) + ": must be true or false");
    return obj[key].get<bool>();
  };
  FATHOM_ASSIGN_OR_RETURN(c.stream, flag(j, "stream"));
  FATHOM_ASSIGN_OR_RETURN(bool ignore_eos, flag(j, "ignore_eos"));
  (void)ignore_eos;  // a simulated engine has no end-of-sequence token: every request runs to
                     // max_tokens
  if (j.contains("stream_options") && j["stream_options"].is_object()) {
    FATHOM_ASSIGN_OR_RETURN(c.include_usage, flag(j["stream_options"], "include_usage"));
  }
  if (j.contains("model")) {
    if (!j["model"].is_string()) return Status::InvalidArgument("model: must be a string");
    c.model = j["model"].get<std::string>();
  }
  return c;
}

std::string TokenText(int64_t count) {
  std::string s;
  for (int64_t k = 0; k < count; ++k) s += " tok";
  return s;
}

OrderedJson Usage(const Completion& c, int64_t completion_tokens) {
  OrderedJson u;
  u["prompt_tokens"] = c.input;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = c.input + completion_tokens;
  return u;
}

// One streamed chunk (or the whole answer when `whole`).
OrderedJson Chunk(const Completion& c, const std::string& id, int64_t created,
                  const std::string& model, const std::string& text, const char* finish_reason,
                  bool first, bool whole) {
  OrderedJson choice;
  choice["index"] = 0;
  if (c.chat) {
    OrderedJson message;
    if (first || whole) message["role"] = "assistant";
    message["content"] = text;
    choice[whole ? "message" : "delta"] = message;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? OrderedJson(finish_reason) : OrderedJson();
  OrderedJson j;
  j["id"] = id;
  j["object"] = c.chat ? (whole ? "chat.completion" : "chat.completion.chunk") : "text_completion";
  j["created"] = created;
  j["model"] = model;
  j["choices"] = OrderedJson::array({choice});
  return j;
}

void AppendHistogram(std::string* out, const std::string& name, const std::string& help,
                     const LiveHistogram& h, const std::string& labels) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    const std::string le = i < h.bounds.size() ? StrFormat("%g", h.bounds[i]) : "+Inf";
    *out += name + "_bucket{le=\"" + le + "\"," + labels + "} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_sum{" + labels + "} " + StrFormat("%.9g", h.sum) + "\n";
  *out += name + "_count{" + labels + "} " + std::to_string(h.count) + "\n";
}

void AppendScalar(std::string* out, const std::string& name, const char* type,
                  const std::string& help, double v, const std::string& labels) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  *out += name + "{" + labels + "} " + StrFormat("%.9g", v) + "\n";
}

// A completion being answered on a connection.
struct Answer {
  Completion c;
  std::shared_ptr<LiveStream> stream;
  std::string id;
  int64_t created = 0;
  int64_t sent = 0;  // tokens already sent (streamed)
};

}  // namespace

Status ServeOptions::Validate() const {
  if (port < 0 || port > 65535)
    return Status::InvalidArgument("--port = " + std::to_string(port) + ": must be 0 to 65535");
  if (max_connections < 1 || max_connections > 100000) {
    return Status::InvalidArgument("--max-connections = " + std::to_string(max_connections) +
                                   ": must be 1 to 100000");
  }
  if (!(read_timeout_s > 0) || !std::isfinite(read_timeout_s)) {
    return Status::InvalidArgument("read timeout: must be > 0 and finite");
  }
  if (host.empty()) return Status::InvalidArgument("--host: empty");
  if (max_model_len < 0) {
    return Status::InvalidArgument("--max-model-len = " + std::to_string(max_model_len) +
                                   ": must be >= 1");
  }
  return Status::Ok();
}

int64_t TextTokens(const std::string& text) { return static_cast<int64_t>((text.size() + 3) / 4); }

std::string RenderMetrics(const LiveMetrics& m, const std::string& model) {
  const std::string labels = "model_name=\"" + model + "\"";
  std::string out;
  AppendScalar(&out, "vllm:num_requests_running", "gauge",
               "Number of requests in model execution batches.", static_cast<double>(m.running),
               labels);
  AppendScalar(&out, "vllm:num_requests_waiting", "gauge",
               "Number of requests waiting to be processed.", static_cast<double>(m.waiting),
               labels);
  AppendScalar(&out, "vllm:gpu_cache_usage_perc", "gauge",
               "KV-cache usage. 1 means 100 percent usage.", m.kv_usage, labels);
  AppendScalar(&out, "vllm:kv_cache_usage_perc", "gauge",
               "KV-cache usage. 1 means 100 percent usage.", m.kv_usage, labels);
  AppendScalar(&out, "vllm:num_preemptions_total", "counter", "Cumulative number of preemptions.",
               static_cast<double>(m.preemptions), labels);
  AppendScalar(&out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
               static_cast<double>(m.prompt_tokens), labels);
  AppendScalar(&out, "vllm:generation_tokens_total", "counter",
               "Number of generation tokens processed.", static_cast<double>(m.generation_tokens),
               labels);
  out +=
      "# HELP vllm:request_success_total Count of successfully processed requests.\n"
      "# TYPE vllm:request_success_total counter\n";
  out += "vllm:request_success_total{finished_reason=\"length\"," + labels + "} " +
         std::to_string(m.finished_length) + "\n";
  out += "vllm:request_success_total{finished_reason=\"abort\"," + labels + "} " +
         std::to_string(m.finished_abort) + "\n";
  AppendHistogram(&out, "vllm:time_to_first_token_seconds",
                  "Histogram of time to first token in seconds.", m.ttft_s, labels);
  AppendHistogram(&out, "vllm:inter_token_latency_seconds",
                  "Histogram of inter-token latency in seconds.", m.itl_s, labels);
  AppendHistogram(&out, "vllm:time_per_output_token_seconds",
                  "Histogram of time per output token in seconds.", m.itl_s, labels);
  AppendHistogram(&out, "vllm:request_time_per_output_token_seconds",
                  "Histogram of time_per_output_token_seconds per request.", m.tpot_s, labels);
  AppendHistogram(&out, "vllm:e2e_request_latency_seconds",
                  "Histogram of end to end request latency in seconds.", m.e2e_s, labels);
  AppendHistogram(&out, "vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                  m.prompt_len, labels);
  AppendHistogram(&out, "vllm:request_generation_tokens", "Number of generation tokens processed.",
                  m.generation_len, labels);
  return out;
}

struct OpenAiServer::Connection {
  int fd = -1;
  std::string in;   // received, not yet parsed
  std::string out;  // to send, from out_at on
  size_t out_at = 0;
  bool continue_sent = false;    // "100 Continue" for the request being read
  bool close_after = false;      // close once `out` is sent
  bool writable_wait = false;    // EPOLLOUT requested
  bool dead = false;             // to be closed: the loop closes and erases it
  Clock::time_point idle_since;  // no request under way since (the read timeout's start)
  Clock::time_point wrote_at;    // the last progress writing `out`
  std::unique_ptr<Answer> answer;
  bool pending() const { return out_at < out.size(); }
};

OpenAiServer::OpenAiServer(LiveEngine* engine, ServeOptions options)
    : engine_(engine), options_(std::move(options)) {}

OpenAiServer::~OpenAiServer() {
  if (wake_fd_ >= 0) engine_->set_on_progress(nullptr);
  for (auto& [fd, c] : connections_) ::close(fd);
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

Status OpenAiServer::Bind() {
  FATHOM_RETURN_IF_ERROR(options_.Validate());
  const std::string where =
      options_.port == 0 ? "--host " + options_.host
                         : StrFormat("--host %s --port %d", options_.host.c_str(), options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options_.port);
  if (::getaddrinfo(options_.host.c_str(), service.c_str(), &hints, &found) != 0) {
    return Status::InvalidArgument(where + ": not an address of this machine");
  }
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return Status::InvalidArgument(
        where + (options_.port == 0 ? ": cannot listen on any port"
                                    : ": cannot listen there (in use, or not this machine's "
                                      "address)"));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return Status::Unavailable(std::string("cannot create the event loop: ") +
                               std::strerror(errno));
  }
  for (int fd : {listen_fd_, wake_fd_}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
  }
  engine_->set_on_progress([this] { Wake(); });
  return Status::Ok();
}

void OpenAiServer::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);  // full only when unread
}

void OpenAiServer::Serve() {
  FATHOM_CHECK(epoll_fd_ >= 0);  // Bind first
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    ready_ = true;
    ready_cv_.notify_all();
  }
  constexpr int kEvents = 256;
  epoll_event events[kEvents];
  Clock::time_point checked = Clock::now();
  while (!stop_.load()) {
    // Deadlines are checked every 100 ms, as the wait returns at least that often.
    const int n = ::epoll_wait(epoll_fd_, events, kEvents, 100);
    bool progress = false;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        Accept();
        continue;
      }
      if (fd == wake_fd_) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof count);
        progress = true;
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      Connection& c = *it->second;
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) Read(c);
      if (!c.dead && (events[i].events & EPOLLOUT)) {
        Flush(c);
        if (!c.dead && !c.pending() && c.answer) Advance(c);  // what waited for the client
      }
      if (c.dead) Close(it);
    }
    if (progress) {
      for (auto& [fd, c] : connections_) {
        if (c->answer && !c->dead) Advance(*c);
      }
    }
    if (Clock::now() - checked >= std::chrono::milliseconds(100)) {
      CheckDeadlines();
      checked = Clock::now();
    }
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->second->dead)
        it = Close(it);
      else
        ++it;
    }
  }
  for (auto& [fd, c] : connections_) ::close(fd);
  connections_.clear();
}

OpenAiServer::Connections::iterator OpenAiServer::Close(Connections::iterator it) {
  // A request its client left is aborted, as vLLM aborts it: nobody reads its tokens, and a long
  // one would hold the KV cache for nothing.
  if (it->second->answer) engine_->Cancel(*it->second->answer->stream);
  ::close(it->first);
  return connections_.erase(it);
}

void OpenAiServer::Accept() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // none left (or out of descriptors: retried on the next wake-up)
    if (connections_.size() >= static_cast<size_t>(options_.max_connections)) {
      const std::string body = ErrorBody("too many connections", "service_unavailable");
      const std::string reply =
          StrFormat(
              "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
              "Content-Length: %zu\r\nConnection: close\r\n\r\n",
              body.size()) +
          body;
      [[maybe_unused]] ssize_t n = ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(fd);
      continue;
    }
    const int on = 1;
    // Each token's event leaves at once (no Nagle wait on the client's delayed ACK).
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    // A fixed send buffer: a client that stops reading holds this much of the kernel's memory
    // (doubled by it) and its tokens wait for it in the engine; autotuned, it would grow to MiBs.
    const int send_buffer_bytes = 64 << 10;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send_buffer_bytes, sizeof send_buffer_bytes);
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0) {
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->idle_since = Clock::now();
    connections_[fd] = std::move(c);
  }
}

void OpenAiServer::Read(Connection& c) {
  char buffer[16 << 10];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      c.in.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.dead = true;  // the client left (or the connection broke): its request is aborted
    return;
  }
  // Bytes of a next request wait while one is answered (or a refusal is sent); beyond what a
  // request may take, with its headers and chunk framing, they are abuse.
  if (c.in.size() > 2 * static_cast<size_t>(options_.max_body_bytes) + (128 << 10)) {
    c.dead = true;
    return;
  }
  HandleRequests(c);
}

void OpenAiServer::HandleRequests(Connection& c) {
  while (!c.answer && !c.close_after && !c.in.empty()) {
    HttpRequest request;
    const HttpParse p = ParseHttpRequest(c.in, options_.max_body_bytes, &request);
    if (p.state == HttpParse::kIncomplete) {
      if (p.expects_continue && !c.continue_sent) {
        c.out += "HTTP/1.1 100 Continue\r\n\r\n";
        c.continue_sent = true;
      }
      break;
    }
    if (p.state == HttpParse::kBad) {
      c.close_after = true;
      Reply(c, p.status, ErrorBody(p.error, "invalid_request_error"));
      break;
    }
    c.in.erase(0, p.consumed);
    c.continue_sent = false;
    if (!request.keep_alive) c.close_after = true;
    try {
      Handle(c, request);
    } catch (const std::exception& e) {  // one request's fault is its own: answer it, serve on
      c.answer.reset();
      c.close_after = true;
      Reply(c, 500, ErrorBody(std::string("internal error: ") + e.what(), "internal_error"));
    }
  }
  Flush(c);
}

void OpenAiServer::Reply(Connection& c, int status, const std::string& body,
                         const char* content_type) {
  const char* reason = status == 200   ? "OK"
                       : status == 400 ? "Bad Request"
                       : status == 401 ? "Unauthorized"
                       : status == 404 ? "Not Found"
                       : status == 405 ? "Method Not Allowed"
                       : status == 413 ? "Payload Too Large"
                       : status == 431 ? "Request Header Fields Too Large"
                       : status == 500 ? "Internal Server Error"
                                       : "Service Unavailable";
  c.out +=
      StrFormat("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", status,
                reason, content_type, body.size(), c.close_after ? "Connection: close\r\n" : "");
  c.out += body;
  c.idle_since = Clock::now();
  if (c.out_at == 0) c.wrote_at = c.idle_since;  // the write timeout starts with the reply
}

void OpenAiServer::Handle(Connection& c, const HttpRequest& req) {
  const std::string& path = req.path;
  const bool post = path == "/v1/completions" || path == "/v1/chat/completions";
  const bool known = post || path == "/v1/models" || path == "/health" || path == "/metrics";
  if (!known) return Reply(c, 404, ErrorBody("not found", "invalid_request_error"));
  if (!options_.api_key.empty() && path.rfind("/v1/", 0) == 0 &&
      req.Header("authorization") != "Bearer " + options_.api_key) {
    return Reply(c, 401,
                 ErrorBody("a valid API key is required (Authorization: Bearer <key>)",
                           "authentication_error"));
  }
  if (req.method != (post ? "POST" : "GET")) {
    return Reply(c, 405,
                 ErrorBody(path + " takes " + (post ? "POST" : "GET"), "invalid_request_error"));
  }
  if (path == "/health") return Reply(c, 200, "", "text/plain");
  if (path == "/metrics") {
    return Reply(c, 200, RenderMetrics(engine_->Metrics(), options_.served_model_name),
                 "text/plain; version=0.0.4");
  }
  if (path == "/v1/models") {
    OrderedJson m;
    m["id"] = options_.served_model_name;
    m["object"] = "model";
    m["created"] = static_cast<int64_t>(std::time(nullptr));
    m["owned_by"] = "fathom";
    OrderedJson j;
    j["object"] = "list";
    j["data"] = OrderedJson::array({m});
    return Reply(c, 200, DumpUtf8(j));
  }
  const bool chat = path == "/v1/chat/completions";
  Result<Completion> parsed = ParseCompletion(req.body, chat, options_);
  if (!parsed.ok())
    return Reply(c, 400, ErrorBody(parsed.status().message(), "invalid_request_error"));
  if (!parsed->model.empty() && parsed->model != options_.served_model_name) {
    return Reply(c, 404,
                 ErrorBody("The model `" + parsed->model.substr(0, 200) + "` does not exist.",
                           "invalid_request_error", "model"));
  }
  std::shared_ptr<LiveStream> stream = engine_->Submit(parsed->input, parsed->output);
  if (!stream)
    return Reply(c, 503, ErrorBody("the server is shutting down", "service_unavailable"));
  auto a = std::make_unique<Answer>();
  a->c = *parsed;
  a->stream = std::move(stream);
  a->id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  a->created = static_cast<int64_t>(std::time(nullptr));
  if (a->c.stream) {
    c.out += StrFormat(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "Transfer-Encoding: chunked\r\n%s\r\n",
        c.close_after ? "Connection: close\r\n" : "");
  }
  c.answer = std::move(a);
  Advance(c);
}

void OpenAiServer::Advance(Connection& c) {
  if (c.pending()) return;  // the client has not taken the last event: the next one waits
  Answer& a = *c.answer;
  int64_t tokens;
  bool done, aborted;
  {
    std::lock_guard<std::mutex> lock(a.stream->mu);
    tokens = a.stream->tokens;
    done = a.stream->done;
    aborted = a.stream->aborted;
  }
  const Completion& comp = a.c;
  const std::string& model = options_.served_model_name;
  if (!comp.stream) {
    if (!done) return;
    std::unique_ptr<Answer> finished = std::move(c.answer);
    if (aborted) {
      Reply(c, 503,
            ErrorBody("the engine stopped before the request finished", "service_unavailable"));
    } else {
      OrderedJson j = Chunk(comp, a.id, a.created, model, TokenText(tokens), "length", true, true);
      j["usage"] = Usage(comp, tokens);
      Reply(c, 200, DumpUtf8(j));
    }
    return HandleRequests(c);
  }
  if (tokens == a.sent && !done) return;
  std::string events;
  if (tokens > a.sent) {
    // The last token ends the request whether or not the engine has marked it done yet.
    const bool last = !aborted && tokens == comp.output;
    events += "data: " +
              DumpUtf8(Chunk(comp, a.id, a.created, model, TokenText(tokens - a.sent),
                             last ? "length" : nullptr, a.sent == 0, false)) +
              "\n\n";
    a.sent = tokens;
  }
  if (done) {
    if (aborted) {
      events += "data: " +
                ErrorBody("the engine stopped before the request finished", "service_unavailable") +
                "\n\n";
    } else if (comp.include_usage) {
      OrderedJson u = Chunk(comp, a.id, a.created, model, "", nullptr, false, false);
      u["choices"] = OrderedJson::array();
      u["usage"] = Usage(comp, tokens);
      events += "data: " + DumpUtf8(u) + "\n\n";
    }
    events += "data: [DONE]\n\n";
  }
  c.out += StrFormat("%zx\r\n", events.size());
  c.out += events;
  c.out += "\r\n";
  c.wrote_at = Clock::now();
  if (done) {
    c.out += "0\r\n\r\n";
    c.answer.reset();
    c.idle_since = c.wrote_at;
    return HandleRequests(c);
  }
  Flush(c);
}

void OpenAiServer::Flush(Connection& c) {
  while (c.pending()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_at += static_cast<size_t>(n);
      c.wrote_at = Clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.dead = true;
    return;
  }
  if (!c.pending()) {
    c.out.clear();
    c.out_at = 0;
    if (c.close_after && !c.answer) {
      c.dead = true;
      return;
    }
  }
  if (c.pending() != c.writable_wait) {
    c.writable_wait = c.pending();
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP | (c.writable_wait ? EPOLLOUT : 0u);
    e.data.fd = c.fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &e);
  }
}

void OpenAiServer::CheckDeadlines() {
  const auto now = Clock::now();
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.read_timeout_s));
  for (auto& [fd, c] : connections_) {
    if (c->dead) continue;
    if (c->pending()) {
      if (now - c->wrote_at > timeout) c->dead = true;  // the client stopped reading
    } else if (!c->answer && now - c->idle_since > timeout) {
      if (c->in.empty()) {
        c->dead = true;  // idle between requests
      } else {
        c->close_after = true;
        Reply(*c, 400,
              ErrorBody("the request was not received within the read timeout",
                        "invalid_request_error"));
        Flush(*c);
      }
    }
  }
}

bool OpenAiServer::WaitReady() {
  std::unique_lock<std::mutex> lock(mu_);
  ready_cv_.wait(lock, [this] { return ready_ || stopped_; });
  return ready_ && !stopped_;
}

void OpenAiServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    ready_cv_.notify_all();
  }
  stop_ = true;
  if (wake_fd_ >= 0) Wake();
}

}  // namespace fathom::sim
