// An OpenAI-compatible HTTP front for a LiveEngine, shaped like vLLM's: /v1/completions and
// /v1/chat/completions (streamed as server-sent events, or whole), /v1/models, /health, and
// /metrics with vLLM's Prometheus names and bucket layouts.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "base/status.h"
#include "sim/serving/http_request.h"
#include "sim/serving/http_server.h"
#include "sim/serving/live_engine.h"

namespace fathom::sim {

struct ServeOptions {
  std::string host = "127.0.0.1";  // loopback unless the user opens it
  int port = 8000;                 // 0: any free port (see OpenAiServer::port)
  std::string served_model_name;   // the id /v1/models lists and requests name
  std::string api_key;             // when set, /v1/* needs "Authorization: Bearer <key>"
  // Concurrent connections; at the limit the longest-idle one makes room, or the newcomer is
  // answered 503 when every one has a request under way.
  int max_connections = 1100;
  int64_t max_body_bytes = 4 << 20;
  // A client slower than this to send its request (400), or to take what it is sent, is dropped.
  double read_timeout_s = 10;
  int64_t max_tokens_limit = 1 << 20;  // largest max_tokens accepted
  // /health answers 503 once the engine holds requests and has produced nothing for this many
  // wall seconds (wedged), as well as when it stopped on an error or drains.
  double stall_timeout_s = 60;
  // Prompt plus max_tokens a request may take, else 400 as vLLM answers (0: no limit). fathom
  // serve sets the model's context, or --max-model-len, at most what one rank's KV cache holds:
  // a longer request could never be scheduled and would wait forever.
  int64_t max_model_len = 0;
  Status Validate() const;
};

// Tokens a text counts for: one per four bytes (BPE tokenizers average about that on English);
// token-id arrays count exactly, which is what benchmark clients send.
int64_t TextTokens(const std::string& text);

// What /metrics shows for `m` (model_name label `model`).
std::string RenderMetrics(const LiveMetrics& m, const std::string& model);

// One thread (the one calling Serve) answers every connection (an HttpServer). The engine wakes
// it once per step that produced tokens, and it writes each stream's new tokens as one
// server-sent event; a stream whose client has not taken the previous event yet gets the tokens
// since in one later event, so a slow client holds at most one event in memory and delays no one
// else.
class OpenAiServer : private HttpHandler {
 public:
  // Borrows `engine`, which must outlive the server.
  OpenAiServer(LiveEngine* engine, ServeOptions options);
  ~OpenAiServer() override;
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;
  // Binds the address; the error names it.
  Status Bind();
  int port() const { return server_.port(); }
  // Serves until Stop (blocks); after Bind.
  void Serve() { server_.Serve(); }
  // Blocks until Serve accepts; false if Stop came first.
  bool WaitReady() { return server_.WaitReady(); }
  // From any thread: Serve closes every connection and returns.
  void Stop() { server_.Stop(); }

 private:
  std::optional<std::pair<int, std::string>> Admit(const HttpRequest& head) override;
  void Handle(HttpServer& server, HttpConnection& c, const HttpRequest& request) override;
  void Advance(HttpServer& server, HttpConnection& c) override;  // sends what is new
  void Abort(HttpConnection& c) override;

  LiveEngine* engine_;
  ServeOptions options_;
  HttpServer server_;
  bool bound_ = false;
  int64_t next_id_ = 0;  // of completions; Serve's thread
};

}  // namespace fathom::sim
