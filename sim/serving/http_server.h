// An HTTP/1.1 server on one thread: non-blocking sockets under epoll, each connection with its
// own input and output buffers. Limits hold before a request reaches its handler: connections
// (at the limit the longest-idle connection without a request under way makes room; with none,
// the newcomer gets 503), bytes held over all connections, header and body sizes, a request's
// head checked (Admit) before its body is read, and a read timeout for idle and slow clients.
// fathom serve's endpoint and the gateway run on it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "sim/serving/http_request.h"

namespace fathom::sim {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                                            // 0: any free port
  std::string host_flag = "--host", port_flag = "--port";  // what bind errors name
  int max_connections = 1100;
  int64_t max_body_bytes = 4 << 20;
  // Request bytes held over all connections; a read past it answers 503 and closes.
  int64_t max_buffered_bytes = int64_t{256} << 20;
  // A client slower than this to send its request (400), or to take what it is sent, is dropped;
  // an idle connection is closed after it.
  double read_timeout_s = 10;
};

// What a connection's handler keeps while it answers a request.
struct HttpAnswer {
  virtual ~HttpAnswer() = default;
};

struct HttpConnection {
  using Clock = std::chrono::steady_clock;
  int fd = -1;
  uint64_t id = 0;  // unique for the server's life (descriptors are reused)
  std::string in;   // received, not yet parsed
  std::string out;  // to send, from out_at on
  size_t out_at = 0;
  bool continue_sent = false;  // "100 Continue" for the request being read
  bool admitted = false;       // the request being read passed Admit
  bool close_after = false;    // close once `out` is sent
  bool writable_wait = false;  // EPOLLOUT requested
  bool dead = false;           // to be closed: the loop closes and erases it
  // Its last answer sent and our side shut: what the client still sends is read and dropped
  // until it closes or linger_until, so a refused body's bytes do not reset the connection
  // before the client reads its answer.
  bool lingering = false;
  Clock::time_point linger_until;
  Clock::time_point idle_since;        // no request under way since (the read timeout's start)
  Clock::time_point wrote_at;          // the last progress writing `out`
  std::unique_ptr<HttpAnswer> answer;  // a request under way
  bool pending() const { return out_at < out.size(); }
};

class HttpServer;

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // A request's head (method, path, headers; no body yet): a refusal (status, JSON body) answers
  // it before its body is read, and the connection closes.
  virtual std::optional<std::pair<int, std::string>> Admit(const HttpRequest& head) = 0;
  // A whole request: answered at once (HttpServer::Reply), or c.answer set and continued in
  // Advance until HttpServer::Finish or EndStream.
  virtual void Handle(HttpServer& server, HttpConnection& c, const HttpRequest& request) = 0;
  // c has an answer under way and the client has taken what it was sent: after a Wake (or a
  // Notify of c), or once a slow client caught up.
  virtual void Advance(HttpServer& server, HttpConnection& c) = 0;
  // c closes with its answer under way (the client left, or the server stops).
  virtual void Abort(HttpConnection& c) = 0;
};

struct HttpServerStats {
  int64_t open = 0;      // connections now
  int64_t refused = 0;   // answered 503 at the connection limit with none idle
  int64_t evicted = 0;   // idle ones closed to make room
  int64_t overflow = 0;  // answered 503 when the bytes held over all connections ran out
};

class HttpServer {
 public:
  // Borrows `handler`, which must outlive the server.
  HttpServer(HttpHandler* handler, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  // Binds the address (the error names it with the options' flags).
  Status Bind();
  int port() const { return port_; }
  // Serves until Stop (blocks); after Bind.
  void Serve();
  // Blocks until Serve accepts; false if Stop came first.
  bool WaitReady();
  // From any thread: Serve closes every connection and returns.
  void Stop();
  // From any thread: Advance every connection with an answer under way, or only connection `id`.
  void Wake();
  void Notify(uint64_t id);
  HttpServerStats Stats() const;

  // For handlers, on Serve's thread.
  void Reply(HttpConnection& c, int status, const std::string& body,
             const char* content_type = "application/json");
  void StartStream(HttpConnection& c, const char* content_type);  // 200, chunked
  void SendChunk(HttpConnection& c, const std::string& data);
  // `data`, then the last chunk, in one write: the answer ends.
  void EndStream(HttpConnection& c, const std::string& data = "");
  void Finish(HttpConnection& c);  // the answer (its Reply written) ends; the next request
                                   // is read

 private:
  using Connections = std::unordered_map<int, std::unique_ptr<HttpConnection>>;  // by socket
  void Accept();
  bool Evict();  // closes the longest-idle connection without a request under way
  Connections::iterator Close(Connections::iterator it);
  void Read(HttpConnection& c);
  void HandleRequests(HttpConnection& c);
  void AppendChunk(HttpConnection& c, const std::string& data);
  void Flush(HttpConnection& c);
  void CheckDeadlines();
  void SetAccepting(bool on);

  HttpHandler* handler_;
  HttpServerOptions options_;
  int port_ = 0;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  bool accepting_ = true;    // the listening socket is watched (off while out of descriptors)
  Connections connections_;  // Serve's thread
  std::unordered_map<uint64_t, int> fd_by_id_;
  uint64_t next_id_ = 1;
  int64_t buffered_ = 0;  // bytes in every connection's `in`
  std::atomic<int64_t> open_{0}, refused_{0}, evicted_{0}, overflow_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable ready_cv_;
  bool ready_ = false, stopped_ = false;
  bool wake_all_ = false;           // under mu_
  std::vector<uint64_t> notified_;  // under mu_
};

}  // namespace fathom::sim
