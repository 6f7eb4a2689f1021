#include "sim/serving/openai_server.h"

#include <cmath>
#include <ctime>
#include <mutex>

#include "base/format.h"
#include "base/json_fields.h"
#include "base/prometheus.h"
#include "sim/serving/http_reply.h"

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
  if (!(stall_timeout_s > 0) || !std::isfinite(stall_timeout_s)) {
    return Status::InvalidArgument("--stall-timeout = " + StrFormat("%g", stall_timeout_s) +
                                   ": must be > 0 and finite");
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
  AppendMetric(&out, "vllm:num_requests_running", "gauge",
               "Number of requests in model execution batches.",
               {{labels, static_cast<double>(m.running)}});
  AppendMetric(&out, "vllm:num_requests_waiting", "gauge",
               "Number of requests waiting to be processed.",
               {{labels, static_cast<double>(m.waiting)}});
  AppendMetric(&out, "vllm:gpu_cache_usage_perc", "gauge",
               "KV-cache usage. 1 means 100 percent usage.", {{labels, m.kv_usage}});
  AppendMetric(&out, "vllm:kv_cache_usage_perc", "gauge",
               "KV-cache usage. 1 means 100 percent usage.", {{labels, m.kv_usage}});
  AppendMetric(&out, "vllm:num_preemptions_total", "counter", "Cumulative number of preemptions.",
               {{labels, static_cast<double>(m.preemptions)}});
  AppendMetric(&out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
               {{labels, static_cast<double>(m.prompt_tokens)}});
  AppendMetric(&out, "vllm:generation_tokens_total", "counter",
               "Number of generation tokens processed.",
               {{labels, static_cast<double>(m.generation_tokens)}});
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

namespace {

// The completion a connection is answering.
struct Answer : HttpAnswer {
  Completion c;
  std::shared_ptr<LiveStream> stream;
  std::string id;
  int64_t created = 0;
  int64_t sent = 0;  // tokens already sent (streamed)
};

HttpServerOptions ServeHttpOptions(const ServeOptions& o) {
  HttpServerOptions h;
  h.host = o.host;
  h.port = o.port;
  h.max_connections = o.max_connections;
  h.max_body_bytes = o.max_body_bytes;
  h.read_timeout_s = o.read_timeout_s;
  return h;
}

}  // namespace

OpenAiServer::OpenAiServer(LiveEngine* engine, ServeOptions options)
    : engine_(engine), options_(std::move(options)), server_(this, ServeHttpOptions(options_)) {}

OpenAiServer::~OpenAiServer() {
  if (bound_) engine_->set_on_progress(nullptr);
}

Status OpenAiServer::Bind() {
  FATHOM_RETURN_IF_ERROR(options_.Validate());
  FATHOM_RETURN_IF_ERROR(server_.Bind());
  engine_->set_on_progress([this] { server_.Wake(); });
  bound_ = true;
  return Status::Ok();
}

std::optional<std::pair<int, std::string>> OpenAiServer::Admit(const HttpRequest& head) {
  const std::string& path = head.path;
  if (!IsCompletionPath(path) && path != "/v1/models" && path != "/health" && path != "/metrics")
    return std::make_pair(404, ErrorBody("not found", "invalid_request_error"));
  // Checked from the head, so a client without the key costs no more than its headers.
  return RefuseOpenAiHead(head, options_.api_key);
}

void OpenAiServer::Handle(HttpServer& server, HttpConnection& c, const HttpRequest& req) {
  const std::string& path = req.path;
  if (path == "/health") {
    const LiveHealth health = engine_->Health(options_.stall_timeout_s);
    if (!health.ok) return server.Reply(c, 503, ErrorBody(health.why, "service_unavailable"));
    return server.Reply(c, 200, "", "text/plain");
  }
  if (path == "/metrics") {
    return server.Reply(c, 200, RenderMetrics(engine_->Metrics(), options_.served_model_name),
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
    return server.Reply(c, 200, DumpUtf8(j));
  }
  const bool chat = path == "/v1/chat/completions";
  Result<Completion> parsed = ParseCompletion(req.body, chat, options_);
  if (!parsed.ok())
    return server.Reply(c, 400, ErrorBody(parsed.status().message(), "invalid_request_error"));
  if (!parsed->model.empty() && parsed->model != options_.served_model_name) {
    return server.Reply(
        c, 404,
        ErrorBody("The model `" + parsed->model.substr(0, 200) + "` does not exist.",
                  "invalid_request_error", "model"));
  }
  std::shared_ptr<LiveStream> stream = engine_->Submit(parsed->input, parsed->output);
  if (!stream)
    return server.Reply(c, 503, ErrorBody("the server is shutting down", "service_unavailable"));
  auto a = std::make_unique<Answer>();
  a->c = *parsed;
  a->stream = std::move(stream);
  a->id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  a->created = static_cast<int64_t>(std::time(nullptr));
  if (a->c.stream) server.StartStream(c, "text/event-stream");
  c.answer = std::move(a);
  Advance(server, c);
}

void OpenAiServer::Abort(HttpConnection& c) {
  // A request its client left is aborted, as vLLM aborts it: nobody reads its tokens, and a long
  // one would hold the KV cache for nothing.
  engine_->Cancel(*static_cast<Answer&>(*c.answer).stream);
}

void OpenAiServer::Advance(HttpServer& server, HttpConnection& c) {
  if (c.pending()) return;  // the client has not taken the last event: the next one waits
  Answer& a = static_cast<Answer&>(*c.answer);
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
    if (aborted) {
      server.Reply(
          c, 503,
          ErrorBody("the engine stopped before the request finished", "service_unavailable"));
    } else {
      OrderedJson j = Chunk(comp, a.id, a.created, model, TokenText(tokens), "length", true, true);
      j["usage"] = Usage(comp, tokens);
      server.Reply(c, 200, DumpUtf8(j));
    }
    return server.Finish(c);
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
  if (done) return server.EndStream(c, events);
  server.SendChunk(c, events);
}

}  // namespace fathom::sim
