// fathom's own gateway in front of engine replicas: routes each OpenAI request to the replica
// with the fewest outstanding requests (as the simulator's router does), streams the answer
// through, and records every request's arrival, first token, end and usage, which gives the
// online controller the exact recent trace. A request whose replica fails is retried once on
// another replica; a stream cut mid-way continues from the retry, past the text already sent.
// Clients are served by one event-loop thread (an HttpServer: idle and slow clients cost a
// socket, not a thread); each request on its way to a replica has a thread of its own. A
// stream's headers wait for its first event, so a request that fails before any is answered
// with its real status (the replica's 4xx, or 503), not 200 and an error event.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "sim/serving/http_server.h"

namespace httplib {
class Client;
}

namespace fathom::sim {

struct GatewayOptions {
  std::string host = "127.0.0.1";  // loopback unless the user opens it
  int port = 0;                    // 0: any free port (see Gateway::port)
  // Control endpoints (/fathom/*) need "Authorization: Bearer <token>"; empty: they answer 403.
  std::string token;
  // When set, /v1/* needs "Authorization: Bearer <key>", checked from a request's headers before
  // its body is read (replicas get the same header).
  std::string api_key;
  int64_t max_body_bytes = 1 << 20;  // larger bodies get 413 and never reach a replica
  double read_timeout_s = 10;        // a client slower than this to send its request is dropped
  // Concurrent client connections; at the limit the longest-idle one makes room.
  int max_connections = 20000;
  double upstream_timeout_s = 3600;  // a replica silent this long fails the attempt
  double replica_wait_s =
      30;  // a request that finds no replica waits this long for one (a restart)
  Status Validate() const;
};

// One request as the gateway saw it; times in seconds since the gateway started.
struct GatewayRecord {
  double arrival_s = 0, first_token_s = 0, done_s = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  bool streamed = false;  // only a streamed request has a first-token time of its own
  bool retried = false;
  int replica = -1;  // the replica that answered it
};

// What happened since the last TakeWindow.
struct GatewayWindow {
  int64_t arrived = 0;
  int64_t failed = 0;  // requests answered with an error after their retry
  // Requests a replica refused as the client's own fault (HTTP 4xx: a bad body, an unknown model,
  // a prompt past the context): answered as the replica answered, and no failure of the fleet.
  int64_t client_errors = 0;
  int64_t retried = 0;      // requests moved to another replica
  std::string retry_cause;  // why the last of them was
  int64_t in_flight = 0;    // at the window's end
  int64_t waiting = 0;      // of those, without a first token yet
  // Of those, each stream's seconds since it arrived: a lower bound on its TTFT to come; and the
  // replica it waits on (-1: none yet).
  std::vector<double> waiting_stream_ages_s;
  std::vector<int> waiting_stream_replicas;
  std::vector<GatewayRecord> finished;
};

// One window's record following another's: counts summed, finished requests in order, and the
// state at the end (in flight, waiting) the later one's.
GatewayWindow MergeWindows(GatewayWindow earlier, GatewayWindow later);

// GatewayWindow as JSON (what POST /fathom/window answers), and back; errors name `source`.
std::string WindowJson(const GatewayWindow& w);
Result<GatewayWindow> ParseWindowJson(std::string_view text, const std::string& source);

// A replica as the gateway routes it, with what its owner said of it (`about`: a JSON object,
// the supervisor's pid and limits, listed with it by GET /fathom/replicas).
struct GatewayReplica {
  int id = 0;
  std::string host = "127.0.0.1";
  int port = 0;
  bool routed = true;  // false: draining, no new requests
  int64_t outstanding = 0;
  std::string about = "{}";
  double weight = 1;  // its share of new requests, relative to the others' (a canary's < 1)
};
// The list as GET /fathom/replicas answers it (each replica's `about` fields, then id, host, port,
// draining and outstanding), and back.
std::string ReplicasJson(const std::vector<GatewayReplica>& replicas);
Result<std::vector<GatewayReplica>> ParseReplicasJson(std::string_view text,
                                                      const std::string& source);

// Routing: the replica with the fewest outstanding requests for its weight ((outstanding + 1) /
// weight: equal weights take the fewest outstanding), ties to the lowest id; none when `loads` is
// empty.
struct ReplicaLoad {
  int id = 0;
  int64_t outstanding = 0;
  double weight = 1;
};
std::optional<int> LeastOutstanding(const std::vector<ReplicaLoad>& loads);

class Gateway : private HttpHandler {
 public:
  explicit Gateway(GatewayOptions options);
  ~Gateway() override;
  // Binds (the error names the address) and serves on a thread of its own until Stop.
  Status Start();
  // Closes every client connection, then waits for the requests on their way to replicas.
  void Stop();
  int port() const { return server_.port(); }
  double Now() const;  // seconds since the gateway started
  // New completions are answered 503 from now on; those in flight go on.
  void BeginDrain();
  int64_t InFlight() const;  // completions on their way

  // New requests may go to the replica from now on (PUT /fathom/replicas/ID over HTTP).
  void AddReplica(GatewayReplica r);
  void AddReplica(int id, int port) { AddReplica(GatewayReplica{id, "127.0.0.1", port}); }
  // No new request goes to the replica; those in flight continue (a drain) or, when it died,
  // fail there and are retried elsewhere (DELETE /fathom/replicas/ID). With `requeue`, those
  // without a first token yet are taken off it and retried elsewhere at once (POST
  // /fathom/replicas/ID/requeue): a configuration rolled back leaves no queue behind.
  void RemoveReplica(int id, bool requeue = false);
  int64_t Outstanding(int id) const;
  std::vector<GatewayReplica> Replicas() const;  // GET /fathom/replicas
  GatewayWindow TakeWindow();                    // POST /fathom/window
  // GET /metrics ends with `text` (Prometheus text: the supervisor's), until the next call
  // (PUT /fathom/metrics).
  void SetMoreMetrics(std::string text);
  // What GET /metrics shows (Prometheus text).
  std::string Metrics() const;

 private:
  struct Exchange;
  struct Answer;
  std::optional<std::pair<int, std::string>> Admit(const HttpRequest& head) override;
  void Handle(HttpServer& server, HttpConnection& c, const HttpRequest& request) override;
  void Advance(HttpServer& server, HttpConnection& c) override;
  void Abort(HttpConnection& c) override;
  // Makes `x` c's answer and starts a thread that forwards it, notifying c as answers arrive.
  void Dispatch(HttpConnection& c, std::shared_ptr<Exchange> x);
  void StartForwarder(std::shared_ptr<Exchange> x);
  // The clients reaching replicas for requests in flight; under mu_.
  std::vector<std::shared_ptr<httplib::Client>> Upstreams() const;
  void Unroute(int id);  // under mu_: out of routing, erased once nothing is outstanding
  // Runs one request on a replica, and on another if that one fails before the answer is whole.
  void Forward(Exchange& x);
  // Passes stream bytes to the client's connection; false once the client left.
  bool Emit(Exchange& x, const std::string& bytes);
  void FirstToken(Exchange& x);
  void StopWaiting(Exchange& x);  // under mu_
  struct Pick {
    int id = 0, port = 0;
    std::string host;
  };
  // The replica to use for `x`, counted as outstanding; waits for one (replica_wait_s).
  std::optional<Pick> PickReplica(Exchange& x, int exclude);
  void Release(int id);
  void Finish(Exchange& x);

  // The control endpoints' answer to a whole request (/fathom/*, token checked).
  std::pair<int, std::string> Control(const HttpRequest& req);

  GatewayOptions options_;
  HttpServer server_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable routed_cv_;  // a replica was added, or the gateway stops
  std::condition_variable forwarders_cv_;
  bool stopping_ = false, draining_ = false;
  int64_t forwarders_ = 0;  // threads forwarding requests
  std::map<int, GatewayReplica> replicas_;
  std::string more_metrics_;
  GatewayWindow window_;
  // Since the start, for /metrics.
  struct Totals {
    int64_t arrived = 0, ok = 0, failed = 0, client_errors = 0, client_left = 0, retried = 0;
  } totals_;
  int64_t in_flight_ = 0, waiting_ = 0;
  std::set<Exchange*> exchanges_;        // on their way to a replica
  std::set<Exchange*> waiting_streams_;  // streams without a first token
};

}  // namespace fathom::sim
