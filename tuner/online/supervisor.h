// The supervisor behind `fathom online --supervise`: it starts the engine replicas itself as child
// processes, fronts them with fathom's gateway (in its process, or `fathom gateway` running in its
// own), reports each window from the gateway's own record of every request, the replicas'
// /metrics pages or a Prometheus server, and applies new batch limits by rolling replacement: a
// new replica with the new flags, healthy before it takes traffic, then the old one drained
// (SIGTERM). A new replica that exits or is not healthy in time is killed and the change rolled
// back: the replicas already replaced are replaced back, and the old ones serve on. A plan's
// switch (Switch) replaces the replicas the same way with another engine command and count. A
// replica that dies is taken out of routing at once (its requests are retried once on another) and
// restarted. Behind a gateway of its own, the replicas outlive a supervisor that dies (kill -9) and
// keep serving; the next supervisor started on that gateway replaces them with its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "base/status.h"
#include "sim/serving/gateway.h"
#include "sim/serving/gateway_control.h"
#include "tuner/online/engine_scraper.h"
#include "tuner/online/journal.h"
#include "tuner/online/online.h"
#include "tuner/online/prometheus_api.h"

namespace fathom::tuner {

// Where each window's measurements come from.
enum class MetricsSource {
  kGateway,     // the gateway's record of every request: exact arrivals, lengths and latencies
  kEngines,     // each replica's /metrics page, summed over the replicas
  kPrometheus,  // a Prometheus server that scrapes the replicas, through its HTTP API
};
// "gateway", "engines" or "prometheus" (--metrics-source).
Result<MetricsSource> ParseMetricsSource(const std::string& name);

struct SupervisorOptions {
  // The command that starts one replica, run by /bin/sh; {host}, {port}, {max_num_seqs} and
  // {max_num_batched_tokens} are replaced for each replica.
  std::string engine_cmd;
  int replicas = 2;
  // How each replica is started: a command put before the engine's, {node} and {gpus} filled in
  // (e.g. "srun --nodes=1 --ntasks=1 --nodelist={node}": a Slurm job step); empty: a child
  // process here.
  std::string launcher;
  // The hosts replicas run on, spread evenly: {node} and {host}, what a replica listens on and
  // the gateway reaches it by. Empty: this one, on loopback.
  std::vector<std::string> nodes;
  // GPU placement: each replica gets gpus_per_replica of these device ids on its node, its own
  // (CUDA_VISIBLE_DEVICES, and {gpus}), with room for one more replica (a rolling replacement
  // starts the new one before the old one leaves). Empty: no placement.
  std::vector<int> gpus;
  int gpus_per_replica = 0;
  double window_s = 60;           // an observation window, in the engines' time
  double time_scale = 1;          // engines' seconds per wall second (fathom serve --time-scale)
  double health_timeout_s = 120;  // wall seconds a new replica has to answer /health
  std::string engine_log;         // the replicas' output is appended here; empty: discarded
  sim::GatewayOptions gateway;    // the gateway run in this process
  // When set, `fathom gateway` at this address (http://HOST:PORT), reached with gateway.token,
  // fronts the replicas instead.
  std::string gateway_url;
  MetricsSource metrics_source = MetricsSource::kGateway;
  std::string prometheus_url;  // with kPrometheus: http://HOST:PORT of its HTTP API
  // When set, the replicas' addresses are written here whenever they change, as a Prometheus
  // file_sd_configs target file (JSON, replaced atomically).
  std::string prometheus_targets;
  // A test of the canary: the first change starts replicas with these limits instead of the chosen
  // ones (a bad configuration the canary must catch and roll back).
  std::optional<BatchLimits> inject_limits;
  // The canary: a change first runs on one new replica given this share of new requests (by its
  // routing weight), until it has finished canary_requests of them or three windows have passed,
  // and rolls out only when its p99 TTFT and TPOT keep the limits the other replicas keep over
  // the same time (and, where both break one, are within 20% of theirs); otherwise it is taken out
  // with its queue moved to the others. 0: every replica at once.
  double canary_share = 0.2;
  int64_t canary_requests = 20;
  double ttft_limit_ms = 0, tpot_limit_ms = 0;  // p99 limits in engine ms (0: not judged)
  Journal* journal = nullptr;                   // borrowed; may be null
  const std::atomic<bool>* stop = nullptr;  // borrowed; once true, Observe reports no more windows
  std::function<void(const std::string&)> log;  // a line per replica event (default: none)
  Status Validate() const;
};

// The command for one replica: `engine_cmd` with its placeholders filled in.
std::string EngineCommand(const std::string& engine_cmd, const BatchLimits& limits, int port,
                          const std::string& host = "127.0.0.1");

// The default engine command: fathom's own vLLM launch command for `deployment` (whose GPU
// `catalog` holds), run by the fathom binary at `fathom_path` (`fathom serve`), the limits and
// port left as placeholders, then `extra`.
std::string DefaultEngineCommand(const sim::DeploymentConfig& deployment,
                                 const models::HardwareCatalog& catalog,
                                 const std::string& fathom_path, const std::string& extra);

// What a plan's switch puts the replicas on: a deployment's engine command (EngineCommand's
// placeholders left in), its batch limits and its replica count.
struct ReplicaSet {
  std::string engine_cmd;
  BatchLimits limits;
  int replicas = 1;
  std::string label;  // for logs: "TP2 PP1 EP1 attnDP1 x1"
};

class Supervisor : public ServingRuntime {
 public:
  // Starts the gateway and the replicas with `initial`, and returns once every replica is healthy.
  static Result<std::unique_ptr<Supervisor>> Start(SupervisorOptions options, BatchLimits initial);
  // Drains and stops every replica, then the gateway.
  ~Supervisor() override;

  // The fleet's name, its gateway's address (host:port): the fathom_fleet label of its replicas in
  // the targets file, by which the Prometheus source reads only their series.
  std::string Fleet() const;
  int gateway_port() const;
  Result<std::optional<Window>> Observe() override;
  // A replacement that fails (a new replica exits or is not healthy within health_timeout_s) is
  // rolled back: not applied, for the reason the outcome gives.
  Result<ApplyOutcome> Apply(const BatchLimits& limits) override;
  // A plan's switch: every replica replaced, one at a time, by one running `to` (the new one
  // healthy and routed before the old leaves routing, handing over its requests that have no
  // first token yet and finishing the rest), then replicas started or retired to `to.replicas`. A
  // new replica that fails rolls the switch back, as Apply does.
  Result<ApplyOutcome> Switch(const ReplicaSet& to);
  // Wall seconds the last Apply or Switch took (start, health, shift, drain signal, and a
  // rollback's replacements back); nullopt before any.
  std::optional<double> last_replace_s() const { return last_replace_s_; }
  // Replicas restarted after they died, since the start.
  int64_t restarts() const { return restarts_; }
  // Counts a decision of the controller for /metrics: hold, apply, rollback or advise.
  void CountDecision(std::string_view action);
  // The supervisor's part of the gateway's /metrics (Prometheus text): windows, decisions,
  // replacements, restarts, replicas and the limits in force. Sent to the gateway at each change.
  std::string Metrics() const;

 private:
  // Where a replica runs: a node, and the GPUs it has there ("0,1"; empty: no placement).
  struct Slot {
    std::string node, gpus;
  };
  struct Replica {
    pid_t pid = 0;
    int slot = 0;
    std::string host;  // its node's address
    int port = 0;
    BatchLimits limits;
    std::string cmd;        // the engine command it was started with
    bool draining = false;  // out of routing, SIGTERM sent: its exit is expected
    bool canary = false;    // on trial: not restarted if it dies (the canary fails)
  };
  explicit Supervisor(SupervisorOptions options);
  double Now() const;  // wall seconds since the supervisor started
  // Starts a replica, waits until it is healthy, and routes traffic to it with `weight`; returns
  // its id. One that exits first or is not healthy in time is killed, and the error says which.
  Result<int> Launch(const BatchLimits& limits, double weight = 1, bool canary = false);
  // Routes replica `id` (ours) with `weight`.
  Status Route(int id, double weight);
  // Runs `limits` on one canary replica (options_.canary_share) and judges it against the
  // others; on a pass (nullopt) it has taken an old replica's place, else it is gone and the
  // outcome says why.
  Result<std::optional<ApplyOutcome>> Canary(const BatchLimits& limits);
  // The gateway's record since the last window, with what a canary took in between.
  Result<sim::GatewayWindow> TakeWindow();
  // Retires the replicas the gateway routes that are not this supervisor's (an earlier one's,
  // which died): out of routing, then SIGTERM to the pid it registered.
  void TakeOver(const std::vector<sim::GatewayReplica>& earlier);
  void PublishMetrics();  // Metrics() to the gateway; a failure is logged
  // Replaces every serving replica not running `limits` with the target command, one at a time
  // (with `requeue`, each old one hands over its requests without a first token), then starts or
  // retires replicas to the target count.
  Status ReplaceWith(const BatchLimits& limits, bool requeue = false);
  ReplicaAddresses Addresses() const;  // by id, draining replicas included
  // Reserves a slot for a new replica (until ReleaseSlot): a free one with placement, else the
  // node with the fewest.
  Result<int> ReserveSlot();
  void ReleaseSlot(int slot);
  bool Draining() const;  // a replica has left routing and not exited yet
  // Rewrites options_.prometheus_targets (if set) with the replicas now; mu_ held.
  Status WriteTargetsLocked() const;
  // Out of routing, then SIGTERM: it finishes what it has (with `requeue`, only what has started:
  // the rest goes to the other replicas).
  void Retire(int id, bool requeue = false);
  void Monitor();  // reaps exits; restarts a replica that died
  void Log(const std::string& line) const;

  SupervisorOptions options_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::unique_ptr<sim::Gateway> own_gateway_;  // when the gateway runs in this process
  std::unique_ptr<sim::GatewayControl> gateway_;
  std::string fleet_;
  std::optional<EngineScraper> engines_;     // with MetricsSource::kEngines
  std::optional<PrometheusApi> prometheus_;  // with MetricsSource::kPrometheus
  mutable std::mutex mu_;
  std::map<int, Replica> replicas_;
  std::vector<Slot> slots_;
  std::vector<int> starting_;  // slots of replicas being launched
  int next_id_ = 1;
  BatchLimits target_;      // what serving replicas run, and restarts use
  std::string target_cmd_;  // the engine command they run (a plan's switch changes it)
  int target_replicas_ = 0;
  bool injected_ = false;
  double elapsed_s_ = 0;  // engine time at the current window's start
  double window_start_wall_s_ = 0;
  double window_end_wall_s_ = 0;  // a window after an Apply ends no earlier (its canary)
  std::optional<double> last_replace_s_;
  std::atomic<int64_t> restarts_{0};
  // For /metrics; under mu_.
  std::map<std::string, int64_t, std::less<>> decisions_;
  int64_t windows_ = 0, replacements_ = 0, replacements_rolled_back_ = 0;
  int64_t canaries_passed_ = 0, canaries_failed_ = 0;
  std::optional<sim::GatewayWindow> taken_;  // by a canary, for the next window
  std::atomic<bool> stopping_{false};
  std::thread monitor_;
};

}  // namespace fathom::tuner
