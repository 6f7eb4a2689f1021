#include "tuner/live_runtime.h"

#include <sys/wait.h>

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

bool NameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool NameChar(char c) { return NameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

Result<double> ParseValue(std::string_view s) {
  if (s == "+Inf" || s == "Inf") return std::numeric_limits<double>::infinity();
  if (s == "-Inf") return -std::numeric_limits<double>::infinity();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  const std::string text(s);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return Status::InvalidArgument("expected a number, got '" + text + "'");
  return v;
}

// One sample line: name{labels} value [timestamp].
Result<std::pair<std::string, MetricSample>> ParseLine(std::string_view line) {
  size_t i = 0;
  auto skip_space = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  };
  if (!NameStart(line[i])) return Status::InvalidArgument("expected a metric name");
  const size_t name_start = i;
  while (i < line.size() && NameChar(line[i])) ++i;
  std::string name(line.substr(name_start, i - name_start));
  MetricSample sample;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      skip_space();
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t key_start = i;
      while (i < line.size() && NameChar(line[i])) ++i;
      if (i == key_start) return Status::InvalidArgument("expected a label name or '}'");
      std::string key(line.substr(key_start, i - key_start));
      if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        return Status::InvalidArgument("label " + key + ": expected =\"value\"");
      }
      i += 2;
      std::string value;
      for (;; ++i) {
        if (i >= line.size()) return Status::InvalidArgument("label " + key + ": unterminated value");
        if (line[i] == '"') break;
        if (line[i] == '\\' && i + 1 < line.size()) {
          ++i;
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
      }
      ++i;
      sample.labels[key] = value;
      skip_space();
      if (i < line.size() && line[i] == ',') ++i;
    }
  }
  skip_space();
  size_t value_end = i;
  while (value_end < line.size() && line[value_end] != ' ' && line[value_end] != '\t') ++value_end;
  if (value_end == i) return Status::InvalidArgument("metric " + name + ": expected a value");
  FATHOM_ASSIGN_OR_RETURN(sample.value, ParseValue(line.substr(i, value_end - i)));
  return std::make_pair(std::move(name), std::move(sample));
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

Result<Metrics> ParsePrometheusText(std::string_view text, const std::string& source) {
  Metrics m;
  size_t start = 0;
  for (int64_t line_no = 1; start < text.size(); ++line_no) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    auto parsed = ParseLine(line.substr(first));
    if (!parsed.ok()) {
      return Status::InvalidArgument(source + " line " + std::to_string(line_no) + ": " + parsed.status().message());
    }
    m[parsed->first].push_back(std::move(parsed->second));
  }
  return m;
}

std::optional<Histogram> FindHistogram(const Metrics& m, const std::string& name) {
  auto it = m.find(name + "_bucket");
  if (it == m.end()) return std::nullopt;
  std::map<double, double> by_bound;  // summed over series
  for (const MetricSample& s : it->second) {
    auto le = s.labels.find("le");
    if (le == s.labels.end()) continue;
    auto bound = ParseValue(le->second);
    if (bound.ok()) by_bound[*bound] += s.value;
  }
  Histogram h;
  h.buckets.assign(by_bound.begin(), by_bound.end());
  if (!h.buckets.empty()) h.count = h.buckets.back().second;
  return h;
}

Histogram Delta(const Histogram& now, const std::optional<Histogram>& before) {
  if (!before || before->count > now.count || before->buckets.size() != now.buckets.size()) return now;
  Histogram d = now;
  for (size_t i = 0; i < d.buckets.size(); ++i) d.buckets[i].second -= before->buckets[i].second;
  d.count = now.count - before->count;
  return d;
}

double Quantile(const Histogram& h, double q) {
  if (h.count <= 0 || h.buckets.empty()) return 0;
  const double rank = q * h.count;
  double lower = 0, previous = 0;
  for (const auto& [bound, cumulative] : h.buckets) {
    if (cumulative >= rank && cumulative > previous) {
      if (!std::isfinite(bound)) return lower;
      return lower + (bound - lower) * (rank - previous) / (cumulative - previous);
    }
    previous = cumulative;
    if (std::isfinite(bound)) lower = bound;
  }
  return lower;
}

Result<std::string> RunCommand(const std::string& command, const std::string& flag) {
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return Status::IoError(flag + " = \"" + command + "\": could not start it");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  if (status != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : status;
    const std::string tail = out.size() > 400 ? out.substr(out.size() - 400) : out;
    return Status::Unavailable(flag + " = \"" + command + "\": exited with status " + std::to_string(code) +
                               (tail.empty() ? "" : ": " + tail));
  }
  return out;
}

Result<std::unique_ptr<LiveRuntime>> LiveRuntime::Create(LiveRuntimeOptions options) {
  if (options.metrics_cmd.empty()) return Status::InvalidArgument("--metrics-cmd: give the command that prints the metrics");
  if (options.apply_cmd.empty()) return Status::InvalidArgument("--apply-cmd: give the command that applies new limits");
  if (!(options.window_s > 0)) {
    return Status::InvalidArgument("--window-s = " + StrFormat("%g", options.window_s) + ": must be > 0");
  }
  if (!options.wait) {
    options.wait = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
  }
  std::unique_ptr<LiveRuntime> r(new LiveRuntime(std::move(options)));
  FATHOM_ASSIGN_OR_RETURN(r->last_, r->Scrape());
  return r;
}

Result<Metrics> LiveRuntime::Scrape() const {
  FATHOM_ASSIGN_OR_RETURN(std::string text, RunCommand(options_.metrics_cmd, "--metrics-cmd"));
  FATHOM_ASSIGN_OR_RETURN(Metrics m, ParsePrometheusText(text, "--metrics-cmd output"));
  if (!m.count("vllm:request_success_total") || !m.count("vllm:num_requests_running")) {
    return Status::InvalidArgument("--metrics-cmd output: no vllm:request_success_total or vllm:num_requests_running "
                                   "(is it a vLLM /metrics page?)");
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
  w.arrived = std::max<int64_t>(0, w.completed + w.dropped + w.in_flight - std::llround(in_system(before)));
  auto quantile = [&](std::initializer_list<const char*> names) -> double {
    for (const char* name : names) {
      if (auto h = FindHistogram(now, name)) return 1e3 * Quantile(Delta(*h, FindHistogram(before, name)), 0.99);
    }
    return 0;
  };
  w.ttft_p99_ms = quantile({"vllm:time_to_first_token_seconds"});
  w.tpot_p99_ms = quantile({"vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"});
  auto lengths = [&](const char* name) {
    auto h = FindHistogram(now, name);
    return h ? Representatives(Delta(*h, FindHistogram(before, name)), options_.max_sample) : std::vector<int64_t>{};
  };
  const std::vector<int64_t> inputs = lengths("vllm:request_prompt_tokens");
  std::vector<int64_t> outputs = lengths("vllm:request_generation_tokens");
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
  return RunCommand(command, "--apply-cmd").status();
}

}  // namespace fathom::tuner
