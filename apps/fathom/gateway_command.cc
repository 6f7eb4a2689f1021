// fathom gateway: fathom's gateway in a process of its own, in front of OpenAI-compatible
// replicas given on the command line or registered by `fathom online --supervise --gateway-url`
// through its control endpoints. It outlives any supervisor: when one dies, the replicas it
// registered keep being routed.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "apps/fathom/commands.h"
#include "sim/serving/gateway.h"
#include "sim/serving/http_text.h"

namespace fathom::cli {
namespace {

struct GatewayFlags {
  sim::GatewayOptions gateway;
  std::vector<std::string> replicas;  // HOST:PORT
  double shutdown_timeout_s = 30;
};

Result<sim::GatewayReplica> ParseReplica(const std::string& text, int id) {
  const size_t colon = text.rfind(':');
  int port = 0;
  if (colon != std::string::npos && colon > 0) {
    try {
      size_t used = 0;
      port = std::stoi(text.substr(colon + 1), &used);
      if (used != text.size() - colon - 1) port = 0;
    } catch (const std::exception&) {
      port = 0;
    }
  }
  if (port < 1 || port > 65535) {
    return Status::InvalidArgument("--replica = " + text.substr(0, 200) +
                                   ": must be HOST:PORT, the port 1 to 65535");
  }
  return sim::GatewayReplica{id, text.substr(0, colon), port};
}

Status Run(const GatewayFlags& f) {
  std::vector<sim::GatewayReplica> replicas;
  for (size_t i = 0; i < f.replicas.size(); ++i) {
    FATHOM_ASSIGN_OR_RETURN(sim::GatewayReplica r,
                            ParseReplica(f.replicas[i], static_cast<int>(i)));
    replicas.push_back(std::move(r));
  }
  if (!(f.shutdown_timeout_s >= 0) || !std::isfinite(f.shutdown_timeout_s))
    return Status::InvalidArgument("--shutdown-timeout: must be >= 0 and finite");
  // SIGINT and SIGTERM are taken by this thread alone (blocked before any other thread starts).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  sim::Gateway gateway(f.gateway);
  FATHOM_RETURN_IF_ERROR(gateway.Start());
  for (const sim::GatewayReplica& r : replicas) gateway.AddReplica(r);
  std::fprintf(stderr, "fathom gateway: listening on http://%s:%d (%zu replicas given)\n",
               f.gateway.host.c_str(), gateway.port(), replicas.size());
  if (f.gateway.token.empty()) {
    std::fprintf(stderr,
                 "fathom gateway: no --token: the control endpoints (/fathom/*) are off, so no "
                 "supervisor can register replicas\n");
  }
  if (!sim::http::IsLoopbackHost(f.gateway.host) && f.gateway.api_key.empty()) {
    std::fprintf(stderr,
                 "fathom gateway: warning: %s is reachable from other hosts and no --api-key is "
                 "set: it passes anyone's requests to the replicas\n",
                 f.gateway.host.c_str());
  }
  int signal = 0;
  sigwait(&signals, &signal);
  // New requests are refused (503); those in flight finish, up to the timeout.
  gateway.BeginDrain();
  const int64_t draining = gateway.InFlight();
  std::fprintf(stderr, "fathom gateway: %s: draining %lld requests (at most %g s)\n",
               signal == SIGTERM ? "SIGTERM" : "SIGINT", static_cast<long long>(draining),
               f.shutdown_timeout_s);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(f.shutdown_timeout_s);
  while (gateway.InFlight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::fprintf(stderr, "fathom gateway: stopped; %lld requests cut\n",
               static_cast<long long>(gateway.InFlight()));
  gateway.Stop();
  return Status::Ok();
}

}  // namespace

void RegisterGateway(CLI::App& app, Status* result) {
  auto f = std::make_shared<GatewayFlags>();
  f->gateway.port = 8000;
  CLI::App* cmd = app.add_subcommand(
      "gateway",
      "Route OpenAI requests to replicas (fewest outstanding first, a failed one retried once "
      "elsewhere), in a process that outlives the supervisor registering them");
  cmd->add_option("--replica", f->replicas,
                  "A replica's HOST:PORT (repeat it); a supervisor registers its own through "
                  "the control endpoints");
  cmd->add_option("--host", f->gateway.host, "Address to listen on (loopback unless you open it)")
      ->capture_default_str();
  cmd->add_option("--port", f->gateway.port, "Port (0: any free one, printed on stderr)")
      ->capture_default_str();
  cmd->add_option("--token", f->gateway.token,
                  "Bearer token for the control endpoints (/fathom/*: the replicas, each "
                  "window's record, the supervisor's metrics)")
      ->envname("FATHOM_TOKEN");
  cmd->add_option("--api-key", f->gateway.api_key,
                  "Clients' key: /v1/* needs Authorization: Bearer KEY, checked from the headers "
                  "before the body is read (replicas get the same header)")
      ->envname("FATHOM_API_KEY");
  cmd->add_option("--max-connections", f->gateway.max_connections,
                  "Client connections held; at the limit the longest idle one makes room")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", f->gateway.max_body_bytes, "Larger request bodies get 413")
      ->capture_default_str();
  cmd->add_option("--replica-wait", f->gateway.replica_wait_s,
                  "Seconds a request that finds no replica waits for one (a restart)")
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", f->shutdown_timeout_s,
                  "Seconds SIGTERM waits for requests in flight")
      ->capture_default_str();
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
