#include "tuner/online/vllm_metrics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "base/format.h"
#include "base/random.h"

namespace fathom::tuner {
namespace {

constexpr const char* kSuccess = "vllm:request_success_total";
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
Status CheckCounts(const Metrics& m, const std::string& series, const std::string& source) {
  auto it = m.find(series);
  if (it == m.end()) return Status::Ok();
  for (const MetricSample& s : it->second) {
    if (!(s.value >= 0 && s.value <= kMaxCount)) {
      return Status::InvalidArgument(source + ": " + series + " = " + StrFormat("%g", s.value) +
                                     ": must be a count in [0, 1e15]");
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

Status CheckVllmMetrics(const Metrics& m, const std::string& source) {
  if (!m.count(kSuccess) || !m.count(kVllmRunning)) {
    return Status::InvalidArgument(source + ": no " + kSuccess + " or " + kVllmRunning +
                                   " (is it a vLLM /metrics page?)");
  }
  if (!FindHistogram(m, kTtft)) {
    return Status::InvalidArgument(source + ": no " + kTtft +
                                   " histogram: the p99 TTFT limit cannot be judged");
  }
  if (!FindHistogram(m, kTpotNames[0]) && !FindHistogram(m, kTpotNames[1])) {
    return Status::InvalidArgument(source + ": no " + kTpotNames[0] + " (or " + kTpotNames[1] +
                                   ") histogram: the p99 TPOT limit cannot be judged");
  }
  for (const std::string name : {kSuccess, kVllmRunning, kVllmWaiting}) {
    FATHOM_RETURN_IF_ERROR(CheckCounts(m, name, source));
  }
  for (const std::string name :
       {kTtft, kTpotNames[0], kTpotNames[1], kPromptTokens, kGenerationTokens}) {
    FATHOM_RETURN_IF_ERROR(CheckCounts(m, name + "_bucket", source));
  }
  for (const std::string name : {kPromptTokens, kGenerationTokens}) {
    auto h = FindHistogram(m, name);
    for (const auto& [bound, count] : h ? h->buckets : std::vector<std::pair<double, double>>{}) {
      if (std::isfinite(bound) && !(bound >= 0 && bound <= kMaxTokens)) {
        return Status::InvalidArgument(source + ": " + name +
                                       "_bucket le = " + StrFormat("%g", bound) +
                                       ": must be a token count in [0, 1e9] or +Inf");
      }
    }
  }
  return Status::Ok();
}

Window VllmWindow(const Metrics& before, const Metrics& now, double start_s, double end_s,
                  int64_t max_sample, uint64_t seed) {
  auto aborted = [](const MetricSample& s) {
    auto it = s.labels.find("finished_reason");
    return it != s.labels.end() && it->second == "abort";
  };
  auto finished = [&](const MetricSample& s) { return !aborted(s); };
  auto in_system = [](const Metrics& m) { return Sum(m, kVllmRunning) + Sum(m, kVllmWaiting); };
  Window w;
  w.start_s = start_s;
  w.end_s = end_s;
  w.completed =
      std::llround(CounterDelta(Sum(now, kSuccess, finished), Sum(before, kSuccess, finished)));
  w.dropped =
      std::llround(CounterDelta(Sum(now, kSuccess, aborted), Sum(before, kSuccess, aborted)));
  w.waiting = std::llround(Sum(now, kVllmWaiting));
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
    return h ? Representatives(Delta(*h, FindHistogram(before, name)), max_sample)
             : std::vector<int64_t>{};
  };
  const std::vector<int64_t> inputs = lengths(kPromptTokens);
  std::vector<int64_t> outputs = lengths(kGenerationTokens);
  Rng rng(seed);
  for (size_t i = outputs.size(); i > 1; --i) std::swap(outputs[i - 1], outputs[rng.Below(i)]);
  for (size_t i = 0; i < std::min(inputs.size(), outputs.size()); ++i) {
    traces::Request r;
    r.id = static_cast<int64_t>(i);
    r.input_tokens = inputs[i];
    r.output_tokens = outputs[i];
    w.finished.push_back(r);
  }
  return w;
}

}  // namespace fathom::tuner
