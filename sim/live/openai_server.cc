#include "sim/live/openai_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <ctime>

#include "base/format.h"
#include "base/json_fields.h"
#include "sim/live/http_reply.h"

namespace fathom::sim {
namespace {

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
  const char* length_key =
      chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (j.contains(length_key) && !j[length_key].is_null()) {
    const Json& m = j[length_key];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > o.max_tokens_limit) {
      return Status::InvalidArgument(std::string(length_key) + " = " + m.dump().substr(0, 40) +
                                     ": must be an integer from 1 to " +
                                     std::to_string(o.max_tokens_limit));
    }
    c.output = m.get<int64_t>();
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

OpenAiServer::OpenAiServer(LiveEngine* engine, ServeOptions options)
    : engine_(engine), options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  httplib::Server& s = *server_;
  const int threads = options_.max_connections;
  s.new_task_queue = [this, threads] {
    auto* pool = new httplib::ThreadPool(static_cast<size_t>(threads));
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
    ready_cv_.notify_all();
    return pool;
  };
  s.set_tcp_nodelay(
      true);  // each token's event leaves at once (no Nagle wait on the client's delayed ACK)
  // Remember the listening socket: Bind raises its backlog past httplib's built-in 5, which would
  // drop connection attempts beyond the fifth and leave their clients waiting a second to retry.
  s.set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_socket_ = sock;
  });
  s.set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
  s.set_read_timeout(std::chrono::duration<double>(options_.read_timeout_s));
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path.rfind("/v1/", 0) != 0)
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + options_.api_key) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    Reply(res, 401,
          ErrorBody("a valid API key is required (Authorization: Bearer <key>)",
                    "authentication_error"));
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const char* what = res.status == 404   ? "not found"
                       : res.status == 413 ? "request body too large"
                                           : "bad request";
    Reply(res, res.status, ErrorBody(what, "invalid_request_error"));
  });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderMetrics(engine_->Metrics(), options_.served_model_name),
                    "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    OrderedJson m;
    m["id"] = options_.served_model_name;
    m["object"] = "model";
    m["created"] = static_cast<int64_t>(std::time(nullptr));
    m["owned_by"] = "fathom";
    OrderedJson j;
    j["object"] = "list";
    j["data"] = OrderedJson::array({m});
    Reply(res, 200, j.dump());
  });
  auto complete = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      Result<Completion> parsed = ParseCompletion(req.body, chat, options_);
      if (!parsed.ok())
        return Reply(res, 400, ErrorBody(parsed.status().message(), "invalid_request_error"));
      const Completion c = *parsed;
      if (!c.model.empty() && c.model != options_.served_model_name) {
        return Reply(res, 404,
                     ErrorBody("The model `" + c.model.substr(0, 200) + "` does not exist.",
                               "invalid_request_error", "model"));
      }
      std::shared_ptr<LiveStream> stream = engine_->Submit(c.input, c.output);
      if (!stream)
        return Reply(res, 503, ErrorBody("the server is shutting down", "service_unavailable"));
      static std::atomic<int64_t> next_id{0};
      const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
      const int64_t created = static_cast<int64_t>(std::time(nullptr));
      const std::string model = options_.served_model_name;
      if (!c.stream) {
        std::unique_lock<std::mutex> lock(stream->mu);
        stream->cv.wait(lock, [&] { return stream->done; });
        if (stream->aborted)
          return Reply(
              res, 503,
              ErrorBody("the engine stopped before the request finished", "service_unavailable"));
        OrderedJson j =
            Chunk(c, id, created, model, TokenText(stream->tokens), "length", true, true);
        j["usage"] = Usage(c, stream->tokens);
        return Reply(res, 200, j.dump());
      }
      auto sent = std::make_shared<int64_t>(0);
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", [=](size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> lock(stream->mu);
        while (stream->tokens == *sent && !stream->done) {
          if (!sink.is_writable())
            return false;  // the client left; the engine finishes the request
          stream->cv.wait_for(lock, std::chrono::milliseconds(500));
        }
        const int64_t tokens = stream->tokens, before = *sent;
        const bool done = stream->done, aborted = stream->aborted;
        lock.unlock();
        std::string out;
        if (tokens > before) {
          // The last token ends the request whether or not the engine has marked it done yet.
          const bool last = !aborted && tokens == c.output;
          out += "data: " +
                 Chunk(c, id, created, model, TokenText(tokens - before), last ? "length" : nullptr,
                       before == 0, false)
                     .dump() +
                 "\n\n";
          *sent = tokens;
        }
        if (done) {
          if (aborted) {
            out +=
                "data: " +
                ErrorBody("the engine stopped before the request finished", "service_unavailable") +
                "\n\n";
          } else if (c.include_usage) {
            OrderedJson u = Chunk(c, id, created, model, "", nullptr, false, false);
            u["choices"] = OrderedJson::array();
            u["usage"] = Usage(c, tokens);
            out += "data: " + u.dump() + "\n\n";
          }
          out += "data: [DONE]\n\n";
        }
        if (!sink.write(out.data(), out.size())) return false;
        if (done) sink.done();
        return true;
      });
    };
  };
  s.Post("/v1/completions", complete(false));
  s.Post("/v1/chat/completions", complete(true));
}

OpenAiServer::~OpenAiServer() = default;

Status OpenAiServer::Bind() {
  FATHOM_RETURN_IF_ERROR(options_.Validate());
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ <= 0)
      return Status::InvalidArgument("--host " + options_.host + ": cannot listen on any port");
    return RaiseBacklog();
  }
  if (!server_->bind_to_port(options_.host, options_.port)) {
    return Status::InvalidArgument(
        StrFormat("--host %s --port %d: cannot listen there (in use, or not this machine's "
                  "address)",
                  options_.host.c_str(), options_.port));
  }
  port_ = options_.port;
  return RaiseBacklog();
}

Status OpenAiServer::RaiseBacklog() {
  if (listen_socket_ < 0 || ::listen(listen_socket_, SOMAXCONN) != 0) {
    return Status::InvalidArgument(StrFormat("--port %d: cannot set the listen backlog", port_));
  }
  return Status::Ok();
}

void OpenAiServer::Serve() { server_->listen_after_bind(); }

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
  server_->stop();
}

}  // namespace fathom::sim
