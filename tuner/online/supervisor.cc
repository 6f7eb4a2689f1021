#include "tuner/online/supervisor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "base/files.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "base/prometheus.h"
#include "base/stats.h"
#include "tuner/search/launch.h"

namespace fathom::tuner {
namespace {

void SleepS(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// A loopback port nothing listens on now (the replica binds it a moment later).
Result<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::IoError("supervisor: no socket for a replica's port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  if (!ok) return Status::IoError("supervisor: no free loopback port for a replica");
  return static_cast<int>(ntohs(a.sin_port));
}

void ReplaceAll(std::string* s, const std::string& key, const std::string& value) {
  for (size_t at = s->find(key); at != std::string::npos; at = s->find(key, at + value.size())) {
    s->replace(at, key.size(), value);
  }
}

// "--flag 123" in `s` becomes "--flag {placeholder}".
void Placeholder(std::string* s, const std::string& flag, const std::string& placeholder) {
  const size_t at = s->find(" " + flag + " ");
  if (at == std::string::npos) return;
  const size_t value = at + flag.size() + 2;
  s->replace(
      value,
      s->find(' ', value) == std::string::npos ? std::string::npos : s->find(' ', value) - value,
      placeholder);
}

std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Whether the process has exited (reaped, its status in `status`).
bool Exited(pid_t pid, int* status) { return waitpid(pid, status, WNOHANG) == pid; }

std::string ExitText(int status) {
  return WIFEXITED(status)
             ? "exited with status " + std::to_string(WEXITSTATUS(status))
             : "was killed by signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// The window from the gateway's record, its latencies scaled by `time_scale` to engine time.
Window FromGateway(const sim::GatewayWindow& g, double time_scale) {
  const double k = time_scale;
  Window w;
  // A request a replica refused as the client's fault (4xx) is no load to plan for (one that
  // arrived in the window before, answered in this one, counts there: at most one a client).
  w.arrived = std::max<int64_t>(0, g.arrived - g.client_errors);
  w.completed = static_cast<int64_t>(g.finished.size());
  w.dropped = g.failed;
  w.in_flight = g.in_flight;
  w.waiting = g.waiting;
  std::vector<double> ttft_ms, tpot_ms;
  for (size_t i = 0; i < g.finished.size(); ++i) {
    const sim::GatewayRecord& r = g.finished[i];
    traces::Request q;
    q.id = static_cast<int64_t>(i);
    q.input_tokens = std::max<int64_t>(1, r.prompt_tokens);
    q.output_tokens = std::max<int64_t>(1, r.completion_tokens);
    w.finished.push_back(q);
    if (!r.streamed) continue;  // a whole answer has no first-token time of its own
    ttft_ms.push_back((r.first_token_s - r.arrival_s) * k * 1e3);
    if (r.completion_tokens > 1) {
      tpot_ms.push_back((r.done_s - r.first_token_s) * k * 1e3 /
                        static_cast<double>(r.completion_tokens - 1));
    }
  }
  // A stream still waiting has a TTFT of at least its age: counted, a queue that serves few of its
  // requests cannot hide behind the few it finishes fast (or the ones a draining replica finishes).
  for (const double age_s : g.waiting_stream_ages_s) ttft_ms.push_back(age_s * k * 1e3);
  w.ttft_p99_ms = ttft_ms.empty() ? 0 : Percentile(ttft_ms, 0.99);
  w.tpot_p99_ms = tpot_ms.empty() ? 0 : Percentile(tpot_ms, 0.99);
  return w;
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Result<MetricsSource> ParseMetricsSource(const std::string& name) {
  if (name == "gateway") return MetricsSource::kGateway;
  if (name == "engines") return MetricsSource::kEngines;
  if (name == "prometheus") return MetricsSource::kPrometheus;
  return Status::InvalidArgument("--metrics-source = " + name.substr(0, 100) +
                                 ": must be gateway, engines or prometheus");
}

Status SupervisorOptions::Validate() const {
  if (engine_cmd.empty()) return Status::InvalidArgument("--engine-cmd: empty");
  if (engine_cmd.find("{port}") == std::string::npos) {
    return Status::InvalidArgument("--engine-cmd = " + engine_cmd.substr(0, 200) +
                                   ": must contain {port} (each replica listens on its own)");
  }
  if (replicas < 1 || replicas > 64) {
    return Status::InvalidArgument("--replicas = " + std::to_string(replicas) +
                                   ": must be 1 to 64");
  }
  for (const std::string& node : nodes) {
    if (node.empty() || node.find_first_of(" '\"$;&|`") != std::string::npos)
      return Status::InvalidArgument("--nodes: '" + node + "' is not a host name");
    if (node != "127.0.0.1" && engine_cmd.find("{host}") == std::string::npos) {
      return Status::InvalidArgument("--engine-cmd: must contain {host} to run on --nodes (" +
                                     node +
                                     "): a replica must listen where the gateway reaches it");
    }
  }
  if (gpus.empty() != (gpus_per_replica == 0) || gpus_per_replica < 0) {
    return Status::InvalidArgument(
        "--gpus: give the device ids of each node, with the deployment's GPUs a replica");
  }
  if (!gpus.empty()) {
    const int64_t slots = static_cast<int64_t>(gpus.size()) / gpus_per_replica *
                          static_cast<int64_t>(std::max<size_t>(1, nodes.size()));
    if (slots < replicas + 1) {
      return Status::InvalidArgument(
          StrFormat("--gpus: %d replicas of %d GPUs need room for %d (one more for a rolling "
                    "replacement), and %zu devices on %zu nodes hold %lld",
                    replicas, gpus_per_replica, replicas + 1, gpus.size(),
                    std::max<size_t>(1, nodes.size()), static_cast<long long>(slots)));
    }
  }
  auto positive = [](double v, const char* flag) -> Status {
    if (v > 0 && std::isfinite(v)) return Status::Ok();
    return Status::InvalidArgument(std::string(flag) + " = " + StrFormat("%g", v) +
                                   ": must be > 0 and finite");
  };
  FATHOM_RETURN_IF_ERROR(positive(window_s, "--window-s"));
  FATHOM_RETURN_IF_ERROR(positive(time_scale, "--time-scale"));
  FATHOM_RETURN_IF_ERROR(positive(health_timeout_s, "--health-timeout"));
  if (metrics_source == MetricsSource::kPrometheus) {
    if (prometheus_url.empty()) {
      return Status::InvalidArgument(
          "--metrics-source = prometheus: give --prometheus-url, the server's HTTP API");
    }
    FATHOM_RETURN_IF_ERROR(PrometheusApi::Create(prometheus_url).status());
  } else if (!prometheus_url.empty()) {
    return Status::InvalidArgument("--prometheus-url: only with --metrics-source prometheus");
  }
  if (!(canary_share >= 0 && canary_share < 1)) {
    return Status::InvalidArgument("--canary-share = " + StrFormat("%g", canary_share) +
                                   ": must be 0 (no canary) or more, and under 1");
  }
  if (canary_requests < 1) {
    return Status::InvalidArgument("--canary-requests = " + std::to_string(canary_requests) +
                                   ": must be >= 1");
  }
  if (!gateway_url.empty() && gateway.token.empty()) {
    return Status::InvalidArgument(
        "--gateway-url: give --token (or FATHOM_TOKEN), the gateway's control token");
  }
  return gateway.Validate();
}

std::string EngineCommand(const std::string& engine_cmd, const BatchLimits& limits, int port,
                          const std::string& host) {
  std::string s = engine_cmd;
  ReplaceAll(&s, "{host}", host);
  ReplaceAll(&s, "{port}", std::to_string(port));
  ReplaceAll(&s, "{max_num_seqs}", std::to_string(limits.max_batch));
  ReplaceAll(&s, "{max_num_batched_tokens}", std::to_string(limits.max_num_tokens));
  return s;
}

std::string DefaultEngineCommand(const sim::DeploymentConfig& deployment,
                                 const models::HardwareCatalog& catalog,
                                 const std::string& fathom_path, const std::string& extra) {
  std::string s = MakeLaunchCommands(deployment, catalog).vllm;
  s = s.substr(0, s.find("  #"));  // "# one per replica": each replica is one process here
  s.replace(0, std::string("vllm").size(), ShellQuote(fathom_path));
  Placeholder(&s, "--max-num-seqs", "{max_num_seqs}");
  Placeholder(&s, "--max-num-batched-tokens", "{max_num_batched_tokens}");
  s += " --hardware " + deployment.hardware + " --host {host} --port {port}";
  if (!extra.empty()) s += " " + extra;
  return s;
}

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

double Supervisor::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

Result<std::unique_ptr<Supervisor>> Supervisor::Start(SupervisorOptions options,
                                                      BatchLimits initial) {
  FATHOM_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<Supervisor> s(new Supervisor(std::move(options)));
  s->target_ = initial;
  s->target_cmd_ = s->options_.engine_cmd;
  s->target_replicas_ = s->options_.replicas;
  const std::vector<std::string> nodes =
      s->options_.nodes.empty() ? std::vector<std::string>{"127.0.0.1"} : s->options_.nodes;
  for (const std::string& node : nodes) {
    const int per_node = s->options_.gpus_per_replica;
    if (per_node == 0) {
      s->slots_.push_back({node, ""});
      continue;
    }
    for (size_t at = 0; at + per_node <= s->options_.gpus.size(); at += per_node) {
      std::string devices;
      for (int g = 0; g < per_node; ++g)
        devices += (g ? "," : "") + std::to_string(s->options_.gpus[at + g]);
      s->slots_.push_back({node, devices});
    }
  }
  std::vector<sim::GatewayReplica> earlier;
  if (s->options_.gateway_url.empty()) {
    s->own_gateway_ = std::make_unique<sim::Gateway>(s->options_.gateway);
    FATHOM_RETURN_IF_ERROR(s->own_gateway_->Start());
    s->gateway_ = sim::LocalGatewayControl(s->own_gateway_.get(), s->options_.gateway.host);
  } else {
    FATHOM_ASSIGN_OR_RETURN(
        s->gateway_, sim::ConnectGateway(s->options_.gateway_url, s->options_.gateway.token));
    FATHOM_ASSIGN_OR_RETURN(earlier, s->gateway_->Replicas());
    // Ids go on past an earlier supervisor's, whose replicas the gateway may still route.
    for (const sim::GatewayReplica& r : earlier) s->next_id_ = std::max(s->next_id_, r.id + 1);
  }
  s->fleet_ = s->gateway_->Address();
  {
    std::lock_guard<std::mutex> lock(s->mu_);
    FATHOM_RETURN_IF_ERROR(s->WriteTargetsLocked());
  }
  if (s->options_.metrics_source == MetricsSource::kPrometheus) {
    FATHOM_ASSIGN_OR_RETURN(s->prometheus_, PrometheusApi::Create(s->options_.prometheus_url));
    s->prometheus_->set_selector("fathom_fleet=\"" + s->Fleet() + "\"");
  }
  for (int i = 0; i < s->options_.replicas; ++i)
    FATHOM_RETURN_IF_ERROR(s->Launch(initial).status().WithContext("--engine-cmd"));
  s->TakeOver(earlier);
  if (s->options_.metrics_source == MetricsSource::kEngines) {
    s->engines_.emplace();
    FATHOM_RETURN_IF_ERROR(s->engines_->Start(s->Addresses()));
  }
  s->window_start_wall_s_ = s->Now();
  s->PublishMetrics();
  s->monitor_ = std::thread([raw = s.get()] { raw->Monitor(); });
  return s;
}

Supervisor::~Supervisor() {
  stopping_ = true;
  if (monitor_.joinable()) monitor_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, r] : replicas_) {
    if (Status removed = gateway_->RemoveReplica(id); !removed.ok()) Log(removed.message());
    kill(r.pid, SIGTERM);
  }
  // Each drains what it has (fathom serve: --shutdown-timeout); one still there after a minute is
  // killed.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (auto& [id, r] : replicas_) {
    int status = 0;
    while (!Exited(r.pid, &status) && std::chrono::steady_clock::now() < deadline) SleepS(0.02);
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(r.pid, SIGKILL);
      waitpid(r.pid, &status, 0);
    }
  }
  replicas_.clear();
  if (Status written = WriteTargetsLocked(); !written.ok()) Log(written.message());  // none left
  if (own_gateway_) own_gateway_->Stop();
}

std::string Supervisor::Fleet() const { return fleet_; }

int Supervisor::gateway_port() const { return std::stoi(fleet_.substr(fleet_.rfind(':') + 1)); }

void Supervisor::TakeOver(const std::vector<sim::GatewayReplica>& earlier) {
  for (const sim::GatewayReplica& r : earlier) {
    if (Status removed = gateway_->RemoveReplica(r.id); !removed.ok()) Log(removed.message());
    Result<Json> about = ParseJson(r.about, "about");
    const int64_t pid = r.host == "127.0.0.1" && about.ok() && about->contains("pid") &&
                                (*about)["pid"].is_number_integer()
                            ? (*about)["pid"].get<int64_t>()
                            : 0;
    // An earlier supervisor's replica: its process was this host's (the gateway routes to it on
    // loopback) and is ours to stop once it has drained.
    if (pid > 1) kill(static_cast<pid_t>(pid), SIGTERM);
    Log(StrFormat("replica %d (pid %lld, %s:%d) of an earlier supervisor out of routing, %s", r.id,
                  static_cast<long long>(pid), r.host.c_str(), r.port,
                  pid > 1 ? "draining" : "left running (no pid of this host registered)"));
  }
}

void Supervisor::PublishMetrics() {
  if (Status sent = gateway_->SetMoreMetrics(Metrics()); !sent.ok()) Log(sent.message());
}

void Supervisor::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Result<int> Supervisor::Launch(const BatchLimits& limits, double weight, bool canary) {
  FATHOM_ASSIGN_OR_RETURN(const int port, FreePort());
  // With every GPU held, one a draining replica holds is free once it exits (a rolling
  // replacement's old replica): waited for, as long as a new replica may take to start.
  Result<int> reserved = ReserveSlot();
  for (const double since = Now();
       !reserved.ok() && Draining() && Now() - since < options_.health_timeout_s && !stopping_;) {
    SleepS(0.05);
    reserved = ReserveSlot();
  }
  FATHOM_ASSIGN_OR_RETURN(const int slot, std::move(reserved));
  // Released once the replica holds it, or failed: a replica in replicas_ counts itself.
  struct Reservation {
    Supervisor* s;
    int slot;
    ~Reservation() { s->ReleaseSlot(slot); }
  } reservation{this, slot};
  const Slot& where = slots_[slot];
  std::string engine_cmd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    engine_cmd = target_cmd_;
  }
  std::string command = EngineCommand(engine_cmd, limits, port, where.node);
  if (!options_.launcher.empty()) {
    std::string launcher = options_.launcher;
    ReplaceAll(&launcher, "{node}", where.node);
    ReplaceAll(&launcher, "{gpus}", where.gpus);
    command = launcher + " " + command;
  }
  if (!where.gpus.empty()) command = "env CUDA_VISIBLE_DEVICES=" + where.gpus + " " + command;
  const int out =
      options_.engine_log.empty()
          ? open("/dev/null", O_WRONLY | O_CLOEXEC)
          : open(options_.engine_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0)
    return Status::IoError("--engine-log = " + options_.engine_log +
                           ": cannot open it for appending");
  const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    close(out);
    return Status::IoError("supervisor: cannot open /dev/null for a replica's input");
  }
  const std::string exec = "exec " + command;  // the shell becomes the engine: signals reach it
  const bool dies_with_us = own_gateway_ != nullptr;
  const pid_t pid = fork();
  if (pid < 0) {
    close(in);
    close(out);
    return Status::IoError("supervisor: cannot start a replica (fork failed)");
  }
  if (pid == 0) {
    // The child of a threaded process may call only async-signal-safe functions until it execs
    // (a lock another thread held at the fork, malloc's or a sanitizer's, stays held here; under
    // ThreadSanitizer replicas were seen never to answer, as a child stuck so would), so all it
    // needs is made before the fork. Behind a gateway in this process a replica never outlives
    // its supervisor (SIGTERM when the thread that started it ends, the main thread or the
    // monitor's, both as long-lived as the supervisor); behind `fathom gateway` it serves on.
    if (dies_with_us) prctl(PR_SET_PDEATHSIG, SIGTERM);
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    dup2(in, STDIN_FILENO);
    execl("/bin/sh", "sh", "-c", exec.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in);
  close(out);
  const double started = Now();
  httplib::Client client(where.node, port);
  client.set_connection_timeout(std::chrono::seconds(1));
  client.set_read_timeout(std::chrono::seconds(2));
  const std::string replica =
      "the replica on port " + std::to_string(port) + " (" + limits.Label() + ")";
  for (;;) {
    int status = 0;
    if (Exited(pid, &status)) {
      return Status::Unavailable(replica + " " + ExitText(status) +
                                 " before it was healthy (its output: --engine-log)");
    }
    if (auto r = client.Get("/health"); r && r->status == 200) break;
    if (Now() - started > options_.health_timeout_s || stopping_) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return Status::Unavailable(replica + " was not healthy within " +
                                 StrFormat("%g", options_.health_timeout_s) +
                                 " s (--health-timeout): killed");
    }
    SleepS(0.05);
  }
  int id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    replicas_[id] = Replica{pid, slot, where.node, port, limits, engine_cmd, false, canary};
    if (Status written = WriteTargetsLocked(); !written.ok()) Log(written.message());
  }
  if (Status routed = Route(id, weight); !routed.ok()) {
    // Not routed, so not ours: stopped, as one that failed to start.
    {
      std::lock_guard<std::mutex> lock(mu_);
      replicas_.erase(id);
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    return routed;
  }
  Log(StrFormat("replica %d (pid %d, port %d) healthy after %.2f s: %s", id, static_cast<int>(pid),
                port, Now() - started, limits.Label().c_str()));
  return id;
}

Status Supervisor::Route(int id, double weight) {
  sim::GatewayReplica r;
  OrderedJson about;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto found = replicas_.find(id);
    if (found == replicas_.end())
      return Status::Unavailable("replica " + std::to_string(id) + " is gone");
    const Replica& ours = found->second;
    about["pid"] = static_cast<int64_t>(ours.pid);
    about["max_num_seqs"] = ours.limits.max_batch;
    about["max_num_batched_tokens"] = ours.limits.max_num_tokens;
    if (!slots_[ours.slot].gpus.empty()) about["gpus"] = slots_[ours.slot].gpus;
    r = {id, ours.host, ours.port, true, 0, DumpUtf8(about), weight};
  }
  return gateway_->AddReplica(r);
}

void Supervisor::Retire(int id, bool requeue) {
  if (Status removed = gateway_->RemoveReplica(id, requeue); !removed.ok()) Log(removed.message());
  int64_t outstanding = 0;
  if (auto listed = gateway_->Replicas(); listed.ok()) {
    for (const sim::GatewayReplica& r : *listed) {
      if (r.id == id) outstanding = r.outstanding;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  it->second.draining = true;
  kill(it->second.pid, SIGTERM);
  Log(StrFormat("replica %d (pid %d) out of routing, draining %lld requests", id,
                static_cast<int>(it->second.pid), static_cast<long long>(outstanding)));
}

void Supervisor::Monitor() {
  std::vector<std::pair<int, Replica>> died;  // replicas to restart (again, after a failed try)
  while (!stopping_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = replicas_.begin(); it != replicas_.end();) {
        int status = 0;
        if (!Exited(it->second.pid, &status)) {
          ++it;
          continue;
        }
        if (it->second.draining) {
          Log(StrFormat("replica %d (pid %d) drained and exited", it->first,
                        static_cast<int>(it->second.pid)));
        } else if (it->second.canary) {
          Log(StrFormat("canary replica %d (pid %d) died (%s): not restarted, its canary fails",
                        it->first, static_cast<int>(it->second.pid), ExitText(status).c_str()));
        } else {
          Log(StrFormat(
              "replica %d (pid %d) died (%s): out of routing, its requests retried elsewhere",
              it->first, static_cast<int>(it->second.pid), ExitText(status).c_str()));
          died.emplace_back(*it);
        }
        it = replicas_.erase(it);
        if (Status written = WriteTargetsLocked(); !written.ok()) Log(written.message());
      }
    }
    std::vector<std::pair<int, Replica>> failed;
    for (const auto& [id, r] : died) {
      if (Status removed = gateway_->RemoveReplica(id); !removed.ok()) Log(removed.message());
      BatchLimits limits;
      {
        std::lock_guard<std::mutex> lock(mu_);
        limits = target_;
      }
      if (options_.journal && r.pid != 0) {
        JournalEntry e;
        e.event = "replica_died";
        e.reason =
            StrFormat("replica %d (pid %d) exited unexpectedly", id, static_cast<int>(r.pid));
        e.before = r.limits;
        (void)options_.journal->Record(e);  // a journal error must not stop the restart
      }
      const double started = Now();
      Result<int> fresh = Launch(limits);
      if (!fresh.ok()) {
        Log("restart failed, trying again in 1 s: " + fresh.status().message());
        failed.emplace_back(id, Replica{});  // pid 0: its death is journaled already
        continue;
      }
      ++restarts_;
      if (options_.journal) {
        JournalEntry e;
        e.event = "replica_restarted";
        e.reason = StrFormat("replica %d replaces replica %d", *fresh, id);
        e.after = limits;
        e.replace_s = Now() - started;
        (void)options_.journal->Record(e);
      }
      PublishMetrics();
    }
    died = std::move(failed);
    SleepS(died.empty() ? 0.05 : 1.0);
  }
}

void Supervisor::CountDecision(std::string_view action) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = decisions_.find(action);
  if (it == decisions_.end()) it = decisions_.emplace(std::string(action), 0).first;
  ++it->second;
  lock.unlock();
  PublishMetrics();
}

std::string Supervisor::Metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto d = [](int64_t v) { return static_cast<double>(v); };
  std::string out;
  AppendMetric(&out, "fathom_supervisor_windows_total", "counter",
               "Windows the controller has judged.", {{"", d(windows_)}});
  std::vector<std::pair<std::string, double>> decisions;
  for (const char* action : {"hold", "apply", "rollback", "advise"}) {
    auto it = decisions_.find(action);
    decisions.emplace_back(StrFormat("action=\"%s\"", action),
                           it == decisions_.end() ? 0.0 : d(it->second));
  }
  AppendMetric(&out, "fathom_supervisor_decisions_total", "counter",
               "The controller's decisions, one a window.", decisions);
  AppendMetric(&out, "fathom_supervisor_replacements_total", "counter",
               "Rolling replacements: done, or rolled_back (a new replica failed to start).",
               {{"outcome=\"done\"", d(replacements_)},
                {"outcome=\"rolled_back\"", d(replacements_rolled_back_)}});
  AppendMetric(
      &out, "fathom_supervisor_canaries_total", "counter",
      "Changes tried on one canary replica first: passed (rolled out) or failed (taken "
      "out, its queue moved).",
      {{"outcome=\"passed\"", d(canaries_passed_)}, {"outcome=\"failed\"", d(canaries_failed_)}});
  AppendMetric(&out, "fathom_supervisor_replica_restarts_total", "counter",
               "Replicas restarted after they died.", {{"", d(restarts_.load())}});
  double serving = 0, draining = 0;
  for (const auto& [id, r] : replicas_) (r.draining ? draining : serving) += 1;
  AppendMetric(&out, "fathom_supervisor_replicas", "gauge",
               "Replica processes: serving, or draining after a replacement.",
               {{"state=\"serving\"", serving}, {"state=\"draining\"", draining}});
  AppendMetric(&out, "fathom_supervisor_max_num_seqs", "gauge",
               "The running-sequence limit serving replicas run (restarts use it).",
               {{"", d(target_.max_batch)}});
  AppendMetric(&out, "fathom_supervisor_max_num_batched_tokens", "gauge",
               "The batched-token limit serving replicas run (restarts use it).",
               {{"", d(target_.max_num_tokens)}});
  if (last_replace_s_) {
    AppendMetric(&out, "fathom_supervisor_last_replace_seconds", "gauge",
                 "Wall seconds the last rolling replacement took.", {{"", *last_replace_s_}});
  }
  return out;
}

Result<std::optional<Window>> Supervisor::Observe() {
  // The window after an Apply runs a whole window past the replacement, so that the change is
  // judged on the new replicas serving, not on the old ones draining.
  const double end_wall =
      std::max(window_end_wall_s_, window_start_wall_s_ + options_.window_s / options_.time_scale);
  while (Now() < end_wall) {
    if (options_.stop && *options_.stop) return std::optional<Window>();
    SleepS(0.02);
  }
  const double now = Now();
  const double k = options_.time_scale;
  const double start_s = elapsed_s_, end_s = elapsed_s_ + (now - window_start_wall_s_) * k;
  // The gateway's record is taken whatever the source: it would grow without end otherwise.
  FATHOM_ASSIGN_OR_RETURN(sim::GatewayWindow g, TakeWindow());
  Window w;
  switch (options_.metrics_source) {
    case MetricsSource::kGateway:
      w = FromGateway(g, k);
      break;
    case MetricsSource::kEngines: {
      FATHOM_ASSIGN_OR_RETURN(w, engines_->Next(Addresses(), start_s, end_s));
      break;
    }
    case MetricsSource::kPrometheus: {
      FATHOM_ASSIGN_OR_RETURN(
          w, prometheus_->Next(now - window_start_wall_s_, UnixNow(), start_s, end_s));
      break;
    }
  }
  if (options_.metrics_source != MetricsSource::kGateway) {
    // The engines' histograms count wall seconds; the limits are in engine time, k times longer
    // (read as they were, a --time-scale 10 fleet over its TTFT limit looked 10x inside it).
    w.ttft_p99_ms *= k;
    w.tpot_p99_ms *= k;
  }
  w.start_s = start_s;
  w.end_s = end_s;
  elapsed_s_ = w.end_s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++windows_;
  }
  PublishMetrics();
  window_start_wall_s_ = now;
  if (g.retried > 0) {
    Log(StrFormat("%lld requests retried on another replica this window (the last: %s)",
                  static_cast<long long>(g.retried), g.retry_cause.c_str()));
  }
  return std::optional<Window>(std::move(w));
}

Status Supervisor::ReplaceWith(const BatchLimits& limits, bool requeue) {
  // One replica at a time: the new one healthy and routed before the old one leaves routing.
  for (;;) {
    std::optional<int> old;
    int serving = 0, current = 0, target = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      target = target_replicas_;
      for (const auto& [id, r] : replicas_) {
        if (r.draining) continue;
        ++serving;
        if (r.limits == limits && r.cmd == target_cmd_) {
          ++current;
        } else if (!old) {
          old = id;
        }
      }
    }
    if (old && serving > target && current > 0) {
      Retire(*old, requeue);  // fewer replicas: a new one already serves in its place
    } else if (old) {
      FATHOM_RETURN_IF_ERROR(Launch(limits).status());
      Retire(*old, requeue);
    } else if (serving < target) {
      FATHOM_RETURN_IF_ERROR(Launch(limits).status());
    } else if (serving > target) {
      int last = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [id, r] : replicas_) {
          if (!r.draining) last = id;
        }
      }
      Retire(last, requeue);
    } else {
      return Status::Ok();
    }
  }
}

Result<ApplyOutcome> Supervisor::Switch(const ReplicaSet& to) {
  const double started = Now();
  std::string before_cmd;
  BatchLimits before_limits;
  int before_replicas = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    before_cmd = std::exchange(target_cmd_, to.engine_cmd);
    before_limits = std::exchange(target_, to.limits);
    before_replicas = std::exchange(target_replicas_, to.replicas);
  }
  ApplyOutcome outcome;
  if (Status replaced = ReplaceWith(to.limits, /*requeue=*/true); !replaced.ok()) {
    Log("switch to " + to.label + " failed, rolling back: " + replaced.message());
    {
      std::lock_guard<std::mutex> lock(mu_);
      target_cmd_ = before_cmd;
      target_ = before_limits;
      target_replicas_ = before_replicas;
    }
    FATHOM_RETURN_IF_ERROR(ReplaceWith(before_limits, /*requeue=*/true)
                               .WithContext("rolling back after " + replaced.message()));
    outcome.applied = false;
    outcome.why_not = "failed to start: " + replaced.message();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++(outcome.applied ? replacements_ : replacements_rolled_back_);
    last_replace_s_ = Now() - started;
  }
  PublishMetrics();
  Log(StrFormat("switch to %s (%d replicas, %s) %s in %.2f s", to.label.c_str(), to.replicas,
                to.limits.Label().c_str(), outcome.applied ? "done" : "rolled back",
                *last_replace_s_));
  return outcome;
}

Result<sim::GatewayWindow> Supervisor::TakeWindow() {
  FATHOM_ASSIGN_OR_RETURN(sim::GatewayWindow now, gateway_->TakeWindow());
  if (!taken_) return now;
  sim::GatewayWindow w = MergeWindows(std::move(*taken_), std::move(now));
  taken_.reset();
  return w;
}

namespace {

// p99s in engine ms of the requests in `w` that one replica answered (`on` true) or the others
// did, streams still waiting counted at their age; NaN where there are none.
struct ReplicaP99 {
  double ttft_ms = NAN, tpot_ms = NAN;
  int64_t finished = 0;
};
ReplicaP99 P99On(const sim::GatewayWindow& w, int replica, bool on, double k) {
  std::vector<double> ttft, tpot;
  ReplicaP99 p;
  for (const sim::GatewayRecord& r : w.finished) {
    if ((r.replica == replica) != on) continue;
    ++p.finished;
    if (!r.streamed) continue;
    ttft.push_back((r.first_token_s - r.arrival_s) * k * 1e3);
    if (r.completion_tokens > 1) {
      tpot.push_back((r.done_s - r.first_token_s) * k * 1e3 /
                     static_cast<double>(r.completion_tokens - 1));
    }
  }
  for (size_t i = 0; i < w.waiting_stream_ages_s.size(); ++i) {
    if ((w.waiting_stream_replicas[i] == replica) == on)
      ttft.push_back(w.waiting_stream_ages_s[i] * k * 1e3);
  }
  if (!ttft.empty()) p.ttft_ms = Percentile(ttft, 0.99);
  if (!tpot.empty()) p.tpot_ms = Percentile(tpot, 0.99);
  return p;
}

}  // namespace

Result<std::optional<ApplyOutcome>> Supervisor::Canary(const BatchLimits& limits) {
  int serving = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, r] : replicas_) serving += r.draining ? 0 : 1;
  }
  // Its share s of new requests among n others of weight 1: weight s n / (1 - s).
  const double share = options_.canary_share;
  const double weight = share * std::max(1, serving) / (1 - share);
  Result<int> canary = Launch(limits, weight, /*canary=*/true);
  if (!canary.ok())
    return std::optional<ApplyOutcome>(
        {false, "failed to start: " + canary.status().message(), std::nullopt, false});
  const int id = *canary;
  Log(StrFormat("canary: replica %d runs %s for %.0f%% of new requests", id, limits.Label().c_str(),
                100 * share));
  // Until it has finished enough of its own, or three windows have passed; what the gateway
  // recorded meanwhile is kept for the next window.
  const double wall_window = options_.window_s / options_.time_scale;
  const double deadline = Now() + 3 * wall_window;
  sim::GatewayWindow seen;
  for (;;) {
    SleepS(std::min(0.1, wall_window / 4));
    FATHOM_ASSIGN_OR_RETURN(sim::GatewayWindow g, gateway_->TakeWindow());
    seen = MergeWindows(std::move(seen), g);
    taken_ = taken_ ? MergeWindows(std::move(*taken_), std::move(g)) : std::move(g);
    bool alive;
    {
      std::lock_guard<std::mutex> lock(mu_);
      alive = replicas_.count(id) > 0;
    }
    if (!alive) {
      std::lock_guard<std::mutex> lock(mu_);
      ++canaries_failed_;
      return std::optional<ApplyOutcome>(
          {false, StrFormat("its canary (replica %d) exited before it was judged", id),
           std::nullopt, true});
    }
    if (P99On(seen, id, true, 1).finished >= options_.canary_requests || Now() >= deadline ||
        stopping_ || (options_.stop && *options_.stop))
      break;
  }
  const double k = options_.time_scale;
  const ReplicaP99 mine = P99On(seen, id, true, k), others = P99On(seen, id, false, k);
  std::string broke;
  auto judge = [&](const char* name, double limit, double canary_ms, double others_ms) {
    if (!broke.empty() || !(limit > 0) || std::isnan(canary_ms) || canary_ms <= limit) return;
    const bool others_keep = std::isnan(others_ms) || others_ms <= limit;
    if (!others_keep && canary_ms <= 1.2 * others_ms) return;  // as bad as the rest: the load's
    broke = StrFormat("p99 %s %.0f ms, over the %.0f ms limit, where the other replicas %s %.0f ms",
                      name, canary_ms, limit, others_keep ? "kept" : "had", others_ms);
  };
  judge("TTFT", options_.ttft_limit_ms, mine.ttft_ms, others.ttft_ms);
  judge("TPOT", options_.tpot_limit_ms, mine.tpot_ms, others.tpot_ms);
  const int64_t took = mine.finished + std::count(seen.waiting_stream_replicas.begin(),
                                                  seen.waiting_stream_replicas.end(), id);
  const std::string what = StrFormat(
      "its canary (replica %d, weighted for %.0f%% of new requests, took %lld of the %lld "
      "that arrived, %lld finished)",
      id, 100 * share, static_cast<long long>(took), static_cast<long long>(seen.arrived),
      static_cast<long long>(mine.finished));
  if (!broke.empty()) {
    Retire(id, /*requeue=*/true);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++canaries_failed_;
    }
    Log("canary failed: " + what + " " + broke + "; taken out, its queue moved to the others");
    return std::optional<ApplyOutcome>({false, what + " " + broke, std::nullopt, true});
  }
  // It takes an old replica's place: full weight, and one old replica drains.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = replicas_.find(id); it != replicas_.end()) it->second.canary = false;
  }
  if (Status routed = Route(id, 1); !routed.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++canaries_failed_;
    return std::optional<ApplyOutcome>(
        {false, what + " passed, then: " + routed.message(), std::nullopt, true});
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++canaries_passed_;
  }
  Log(StrFormat("canary passed: %s: p99 TTFT %.0f ms, TPOT %.0f ms (the others %.0f, %.0f)",
                what.c_str(), mine.ttft_ms, mine.tpot_ms, others.ttft_ms, others.tpot_ms));
  std::optional<int> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [other, r] : replicas_) {
      if (!r.draining && other != id && !(r.limits == limits)) old = other;
    }
  }
  if (old) Retire(*old);
  return std::optional<ApplyOutcome>();
}

Result<ApplyOutcome> Supervisor::Apply(const BatchLimits& limits) {
  const double started = Now();
  BatchLimits launch = limits;
  if (options_.inject_limits && !injected_) {
    injected_ = true;
    launch = *options_.inject_limits;
    Log("injected bad configuration (canary test): starting " + launch.Label() + " instead of " +
        limits.Label());
  }
  BatchLimits before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    before = target_;
  }
  ApplyOutcome outcome;
  if (!(launch == limits)) outcome.started_instead = launch;
  // While the canary runs, a replica that dies is restarted with the limits in force.
  std::optional<ApplyOutcome> refused;
  if (options_.canary_share > 0) {
    FATHOM_ASSIGN_OR_RETURN(refused, Canary(launch));
  }
  if (!refused) {
    std::lock_guard<std::mutex> lock(mu_);
    target_ = launch;
  }
  if (refused) {
    outcome.applied = false;
    outcome.why_not = refused->why_not;
    outcome.canary_failed = refused->canary_failed;
  } else if (Status replaced = ReplaceWith(launch); !replaced.ok()) {
    // The failed replica is gone (Launch killed it) and the old ones still serve; those already
    // replaced are replaced back. Failing that too leaves no known state: an error.
    Log("rolling replacement to " + launch.Label() + " failed, rolling back to " + before.Label() +
        ": " + replaced.message());
    {
      std::lock_guard<std::mutex> lock(mu_);
      target_ = before;
    }
    FATHOM_RETURN_IF_ERROR(ReplaceWith(before).WithContext("rolling back to " + before.Label() +
                                                           " after " + replaced.message()));
    outcome.applied = false;
    outcome.why_not = "failed to start: " + replaced.message();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);  // /metrics reads them
    ++(outcome.applied ? replacements_ : replacements_rolled_back_);
    last_replace_s_ = Now() - started;
  }
  PublishMetrics();
  window_end_wall_s_ = Now() + options_.window_s / options_.time_scale;
  Log(StrFormat("rolling replacement to %s %s in %.2f s", launch.Label().c_str(),
                outcome.applied ? "done" : "rolled back", *last_replace_s_));
  return outcome;
}

ReplicaAddresses Supervisor::Addresses() const {
  std::lock_guard<std::mutex> lock(mu_);
  ReplicaAddresses addresses;
  for (const auto& [id, r] : replicas_) addresses[id] = {r.host, r.port};
  return addresses;
}

Result<int> Supervisor::ReserveSlot() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> users(slots_.size(), 0);
  for (const auto& [id, r] : replicas_) ++users[r.slot];
  for (const int slot : starting_) ++users[slot];
  const int best = static_cast<int>(std::min_element(users.begin(), users.end()) - users.begin());
  if (options_.gpus_per_replica > 0 && users[best] > 0) {
    return Status::Unavailable(StrFormat(
        "no free GPUs for a new replica: all %zu places of %d GPUs hold a replica (one may still "
        "be draining)",
        slots_.size(), options_.gpus_per_replica));
  }
  starting_.push_back(best);
  return best;
}

bool Supervisor::Draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(replicas_.begin(), replicas_.end(),
                     [](const auto& r) { return r.second.draining; });
}

void Supervisor::ReleaseSlot(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  starting_.erase(std::find(starting_.begin(), starting_.end(), slot));
}

Status Supervisor::WriteTargetsLocked() const {
  if (options_.prometheus_targets.empty()) return Status::Ok();
  OrderedJson groups = OrderedJson::array();
  for (const auto& [id, r] : replicas_) {
    OrderedJson g;
    g["targets"] = OrderedJson::array({r.host + ":" + std::to_string(r.port)});
    g["labels"]["fathom_replica"] = std::to_string(id);
    g["labels"]["fathom_fleet"] = Fleet();
    groups.push_back(g);
  }
  // Prometheus watches the file: renamed into place, it is never read half-written.
  return WriteFileAtomic(options_.prometheus_targets, groups.dump(2) + "\n")
      .WithContext("--prometheus-targets");
}

}  // namespace fathom::tuner
