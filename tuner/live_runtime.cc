#include "tuner/live_runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>

#include "base/format.h"
#include "base/random.h"

namespace fathom::tuner {
namespace {

constexpr const char* kTtft = "vllm:time_to_first_token_seconds";
constexpr const char* kTpotNames[] = {"vllm:request_time_per_output_token_seconds",
                                      "vllm:time_per_output_token_seconds"};
constexpr const char* kPromptTokens = "vllm:request_prompt_tokens";
constexpr const char* kGenerationTokens = "vllm:request_generation_tokens";

// The largest count (of requests or observations) and token length a page may report: beyond any
// real server, and where a double still holds every integer.
constexpr double kMaxCount = 1e15;
constexpr double kMaxTokens = 1e9;

// Every sample of `series` is a count in [0, kMaxCount]: NaN, inf or 1e300 would otherwise
// become -9.2e18 requests when rounded.
Status CheckCounts(const Metrics& m, const std::string& series) {
  auto it = m.find(series);
  if (it == m.end()) return Status::Ok();
  for (const MetricSample& s : it->second) {
    if (!(s.value >= 0 && s.value <= kMaxCount)) {
      return Status::InvalidArgument("--metrics-cmd output: " + series + " = " +
                                     StrFormat("%g", s.value) + ": must be a count in [0, 1e15]");
    }
  }
  return Status::Ok();
}

// Sums the series of a counter or gauge, where `keep` accepts them (all, when not given).
double Sum(const Metrics& m, const std::string& name,
           const std::function<bool(const MetricSample&)>& keep = nullptr) {
  double total = 0;
  if (auto it = m.find(name); it != m.end()) {
    for (const MetricSample& s : it->second) {
      if (!keep || keep(s)) total += s.value;
    }
  }
  return total;
}

// A counter's change (a reset, as after a restart, counts from zero).
double CounterDelta(double now, double before) { return now >= before ? now - before : now; }

// Values standing for a histogram's observations: each bucket's midpoint (the largest finite
// bound for the +Inf bucket), `limit` values at most, in proportion.
std::vector<int64_t> Representatives(const Histogram& h, int64_t limit) {
  std::vector<int64_t> out;
  if (h.count <= 0) return out;
  const double scale = std::min(1.0, static_cast<double>(limit) / h.count);
  double lower = 0, previous = 0, largest_finite = 1;
  for (const auto& [bound, cumulative] : h.buckets) {
    if (std::isfinite(bound)) largest_finite = bound;
    const double mid = std::isfinite(bound) ? (lower + bound) / 2 : largest_finite;
    const auto n = static_cast<int64_t>(std::llround((cumulative - previous) * scale));
    for (int64_t k = 0; k < n; ++k) out.push_back(std::max<int64_t>(1, std::llround(mid)));
    previous = cumulative;
    if (std::isfinite(bound)) lower = bound;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<LiveRuntime>> LiveRuntime::Create(LiveRuntimeOptions options) {
  if (options.metrics_cmd.empty())
    return Status::InvalidArgument("--metrics-cmd: give the command that prints the metrics");
  if (options.apply_cmd.empty())
    return Status::InvalidArgument("--apply-cmd: give the command that applies new limits");
  if (!(options.window_s > 0) || !std::isfinite(options.window_s)) {
    return Status::InvalidArgument("--window-s = " + StrFormat("%g", options.window_s) +
                                   ": must be > 0 and finite");
  }
  if (!(options.command_timeout_s > 0) || !std::isfinite(options.command_timeout_s)) {
    return Status::InvalidArgument(
        "--command-timeout = " + StrFormat("%g", options.command_timeout_s) +
        ": must be > 0 and finite");
  }
  if (!options.wait) {
    options.wait = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
  }
  std::unique_ptr<LiveRuntime> r(new LiveRuntime(std::move(options)));
  FATHOM_ASSIGN_OR_RETURN(r->last_, r->Scrape());
  return r;
}

Result<Metrics> LiveRuntime::Scrape() const {
  FATHOM_ASSIGN_OR_RETURN(
      std::string text,
      options_.env->RunCommand(options_.metrics_cmd, "--metrics-cmd", options_.command_timeout_s));
  FATHOM_ASSIGN_OR_RETURN(Metrics m, ParsePrometheusText(text, "--metrics-cmd output"));
  if (!m.count("vllm:request_success_total") || !m.count("vllm:num_requests_running")) {
    return Status::InvalidArgument(
        "--metrics-cmd output: no vllm:request_success_total or vllm:num_requests_running "
        "(is it a vLLM /metrics page?)");
  }
  // Without its histogram a p99 would read as 0 ms: within any limit.
  if (!FindHistogram(m, kTtft)) {
    return Status::InvalidArgument(std::string("--metrics-cmd output: no ") + kTtft +
                                   " histogram: the p99 TTFT limit cannot be judged");
  }
  if (!FindHistogram(m, kTpotNames[0]) && !FindHistogram(m, kTpotNames[1])) {
    return Status::InvalidArgument(std::string("--metrics-cmd output: no ") + kTpotNames[0] +
                                   " (or " + kTpotNames[1] +
                                   ") histogram: the p99 TPOT limit cannot be judged");
  }
  for (const std::string name :
       {"vllm:request_success_total", "vllm:num_requests_running", "vllm:num_requests_waiting"}) {
    FATHOM_RETURN_IF_ERROR(CheckCounts(m, name));
  }
  for (const std::string name :
       {kTtft, kTpotNames[0], kTpotNames[1], kPromptTokens, kGenerationTokens}) {
    FATHOM_RETURN_IF_ERROR(CheckCounts(m, name + "_bucket"));
  }
  for (const std::string name : {kPromptTokens, kGenerationTokens}) {
    auto h = FindHistogram(m, name);
    for (const auto& [bound, count] : h ? h->buckets : std::vector<std::pair<double, double>>{}) {
      if (std::isfinite(bound) && !(bound >= 0 && bound <= kMaxTokens)) {
        return Status::InvalidArgument("--metrics-cmd output: " + name +
                                       "_bucket le = " + StrFormat("%g", bound) +
                                       ": must be a token count in [0, 1e9] or +Inf");
      }
    }
  }
  return m;
}

Result<std::optional<Window>> LiveRuntime::Observe() {
  options_.wait(options_.window_s);
  FATHOM_ASSIGN_OR_RETURN(Metrics now, Scrape());
  const Metrics& before = last_;
  auto aborted = [](const MetricSample& s) {
    auto it = s.labels.find("finished_reason");
    return it != s.labels.end() && it->second == "abort";
  };
  auto finished = [&](const MetricSample& s) { return !aborted(s); };
  auto in_system = [](const Metrics& m) {
    return Sum(m, "vllm:num_requests_running") + Sum(m, "vllm:num_requests_waiting");
  };
  Window w;
  w.start_s = elapsed_s_;
  w.end_s = elapsed_s_ + options_.window_s;
  w.completed = std::llround(CounterDelta(Sum(now, "vllm:request_success_total", finished),
                                          Sum(before, "vllm:request_success_total", finished)));
  w.dropped = std::llround(CounterDelta(Sum(now, "vllm:request_success_total", aborted),
                                        Sum(before, "vllm:request_success_total", aborted)));
  w.waiting = std::llround(Sum(now, "vllm:num_requests_waiting"));
  w.in_flight = std::llround(in_system(now));
  w.arrived =
      std::max<int64_t>(0, w.completed + w.dropped + w.in_flight - std::llround(in_system(before)));
  auto quantile = [&](std::initializer_list<const char*> names) -> double {
    for (const char* name : names) {
      if (auto h = FindHistogram(now, name))
        return 1e3 * Quantile(Delta(*h, FindHistogram(before, name)), 0.99);
    }
    return 0;
  };
  w.ttft_p99_ms = quantile({kTtft});
  w.tpot_p99_ms = quantile({kTpotNames[0], kTpotNames[1]});
  auto lengths = [&](const char* name) {
    auto h = FindHistogram(now, name);
    return h ? Representatives(Delta(*h, FindHistogram(before, name)), options_.max_sample)
             : std::vector<int64_t>{};
  };
  const std::vector<int64_t> inputs = lengths(kPromptTokens);
  std::vector<int64_t> outputs = lengths(kGenerationTokens);
  Rng rng(pairing_seed_++);
  for (size_t i = outputs.size(); i > 1; --i) std::swap(outputs[i - 1], outputs[rng.Below(i)]);
  for (size_t i = 0; i < std::min(inputs.size(), outputs.size()); ++i) {
    traces::Request r;
    r.id = static_cast<int64_t>(i);
    r.input_tokens = inputs[i];
    r.output_tokens = outputs[i];
    w.finished.push_back(r);
  }
  elapsed_s_ = w.end_s;
  last_ = std::move(now);
  return std::optional<Window>(std::move(w));
}

Status LiveRuntime::Apply(const BatchLimits& limits) {
  std::string command = options_.apply_cmd;
  auto replace = [&](const std::string& key, int64_t value) {
    for (size_t at = command.find(key); at != std::string::npos; at = command.find(key, at)) {
      command.replace(at, key.size(), std::to_string(value));
    }
  };
  replace("{max_batch}", limits.max_batch);
  replace("{max_num_tokens}", limits.max_num_tokens);
  return options_.env->RunCommand(command, "--apply-cmd", options_.command_timeout_s).status();
}

}  // namespace fathom::tuner
