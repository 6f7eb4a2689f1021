// An OpenAI-compatible HTTP front for a LiveEngine, shaped like vLLM's: /v1/completions and
// /v1/chat/completions (streamed as server-sent events, or whole), /v1/models, /health, and
// /metrics with vLLM's Prometheus names and bucket layouts.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "sim/live/live_engine.h"

namespace httplib {
class Server;
}

namespace fathom::sim {

struct ServeOptions {
  std::string host = "127.0.0.1";  // loopback unless the user opens it
  int port = 8000;                 // 0: any free port (see OpenAiServer::port)
  std::string served_model_name;   // the id /v1/models lists and requests name
  std::string api_key;             // when set, /v1/* needs "Authorization: Bearer <key>"
  int max_connections = 1100;      // concurrent connections (one thread each)
  int64_t max_body_bytes = 4 << 20;
  double read_timeout_s = 10;          // a client slower than this to send its request is dropped
  int64_t max_tokens_limit = 1 << 20;  // largest max_tokens accepted
  Status Validate() const;
};

// Tokens a text counts for: one per four bytes (BPE tokenizers average about that on English);
// token-id arrays count exactly, which is what benchmark clients send.
int64_t TextTokens(const std::string& text);

// What /metrics shows for `m` (model_name label `model`).
std::string RenderMetrics(const LiveMetrics& m, const std::string& model);

class OpenAiServer {
 public:
  OpenAiServer(LiveEngine* engine, ServeOptions options);
  ~OpenAiServer();
  // Binds the address; the error names it.
  Status Bind();
  int port() const { return port_; }
  // Serves until Stop (blocks).
  void Serve();
  // Blocks until Serve has its connection threads and accepts; false if Stop came first.
  bool WaitReady();
  void Stop();

 private:
  LiveEngine* engine_;
  ServeOptions options_;
  std::unique_ptr<httplib::Server> server_;
  Status RaiseBacklog();

  int port_ = 0;
  int listen_socket_ = -1;
  std::mutex mu_;
  std::condition_variable ready_cv_;
  bool ready_ = false, stopped_ = false;
};

}  // namespace fathom::sim
