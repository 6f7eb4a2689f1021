#include "traces/benchmark.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/files.h"
#include "base/json_fields.h"
#include "base/random.h"
#include "traces/reader.h"
#include "traces/transforms.h"

namespace fathom::traces {
namespace {

Result<std::vector<std::string>> Strings(const Json& obj, const char* key,
                                         const std::string& where) {
  std::vector<std::string> out;
  if (!obj.contains(key)) return out;
  const Json& a = obj[key];
  if (!a.is_array())
    return Status::InvalidArgument(where + ": field '" + key + "': must be an array of strings");
  for (const Json& s : a) {
    if (!s.is_string())
      return Status::InvalidArgument(where + ": field '" + key + "': must be an array of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

Result<std::optional<LatencyLimits>> Limits(const Json& obj, const char* key,
                                            const std::string& where) {
  if (!obj.contains(key)) return std::optional<LatencyLimits>{};
  JsonFields f(obj[key], where + "." + key);
  LatencyLimits l{f.Double("ttft_ms"), f.Double("tpot_ms")};
  FATHOM_RETURN_IF_ERROR(f.status());
  if (!(l.ttft_ms > 0) || !(l.tpot_ms > 0) || !std::isfinite(l.ttft_ms) ||
      !std::isfinite(l.tpot_ms)) {
    return Status::InvalidArgument(where + "." + key +
                                   ": ttft_ms and tpot_ms must be finite and > 0");
  }
  return std::optional<LatencyLimits>(l);
}

// A length exp(log_length) rounded, at least 1 and at most `cap`.
int64_t Capped(double log_length, int64_t cap) {
  return std::clamp<int64_t>(std::llround(std::exp(std::min(log_length, 40.0))), 1, cap);
}

// The quantile function of a table of (probability, value) points, linear between them.
double Quantile(const std::vector<std::pair<double, double>>& table, double u) {
  auto hi = std::lower_bound(table.begin(), table.end(), u,
                             [](const auto& point, double p) { return point.first < p; });
  if (hi == table.begin()) return hi->second;
  if (hi == table.end()) return table.back().second;
  const auto& [p0, q0] = *(hi - 1);
  return q0 + (hi->second - q0) * (u - p0) / (hi->first - p0);
}

Result<std::vector<std::pair<double, double>>> OutputQuantiles(const Json& lengths,
                                                               const std::string& where) {
  const std::string rule = where + ": field 'output_quantiles': must be [probability, multiple " +
                           "of the mean] pairs, probabilities rising from 0 to 1, values " +
                           "positive and not falling";
  const Json& a = lengths["output_quantiles"];
  if (!a.is_array() || a.size() < 2) return Status::InvalidArgument(rule);
  std::vector<std::pair<double, double>> table;
  for (const Json& point : a) {
    if (!point.is_array() || point.size() != 2 || !point[0].is_number() || !point[1].is_number())
      return Status::InvalidArgument(rule);
    const double p = point[0].get<double>(), q = point[1].get<double>();
    const bool ok = std::isfinite(q) && q > 0 &&
                    (table.empty() ? p == 0 : p > table.back().first && q >= table.back().second);
    if (!ok) return Status::InvalidArgument(rule);
    table.emplace_back(p, q);
  }
  if (table.back().first != 1) return Status::InvalidArgument(rule);
  return table;
}

// The log of a lognormal length of mean `mean` (log-space sigma) at the standard normal draw z.
double LognormalLog(double mean, double sigma, double z) {
  return std::log(mean) - sigma * sigma / 2 + sigma * z;
}

}  // namespace

std::string Benchmark::LengthsNote() const {
  if (!trace.empty()) return "per-sample lengths";
  std::string note = output_quantiles.empty()
                         ? "lognormal from published statistics"
                         : "outputs from published latency percentiles, lognormal inputs";
  if (!assumed.empty()) {
    note += " (assumed:";
    for (const auto& a : assumed) note += " " + a;
    note += ")";
  }
  return note;
}

std::string DefaultBenchmarksPath() { return DataDir() + "/traces/data/mlperf_benchmarks.json"; }

Result<std::vector<Benchmark>> LoadBenchmarks(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path));
  if (!j.is_object() || !j.contains("benchmarks") || !j["benchmarks"].is_array()) {
    return Status::InvalidArgument(path + ": field 'benchmarks': missing (required array)");
  }
  std::vector<Benchmark> out;
  for (size_t i = 0; i < j["benchmarks"].size(); ++i) {
    const Json& e = j["benchmarks"][i];
    const std::string where = path + ": benchmarks[" + std::to_string(i) + "]";
    if (!e.is_object()) return Status::InvalidArgument(where + ": must be an object");
    JsonFields f(e, where);
    Benchmark b;
    b.name = f.String("name");
    b.dataset = f.String("dataset");
    b.source = f.String("source", "");
    b.samples = f.Int("samples");
    b.reference_output_tokens = f.Double("reference_output_tokens");
    b.server_min_query_count = f.Int("server_min_query_count", 0);
    b.offline_run_s = f.Double("offline_run_s", 0);
    FATHOM_RETURN_IF_ERROR(f.status());
    FATHOM_ASSIGN_OR_RETURN(b.models, Strings(e, "models", where));
    if (b.samples < 1) return Status::InvalidArgument(where + ": field 'samples': must be >= 1");
    if (!(b.reference_output_tokens >= 1) || !std::isfinite(b.reference_output_tokens)) {
      return Status::InvalidArgument(where +
                                     ": field 'reference_output_tokens': must be finite and >= 1");
    }
    if (b.server_min_query_count < 0)
      return Status::InvalidArgument(where + ": field 'server_min_query_count': must be >= 0");
    if (!(b.offline_run_s >= 0 && b.offline_run_s <= 1e6)) {
      return Status::InvalidArgument(where +
                                     ": field 'offline_run_s': must be in [0, 1e6] seconds");
    }
    FATHOM_ASSIGN_OR_RETURN(b.server, Limits(e, "server", where));
    FATHOM_ASSIGN_OR_RETURN(b.interactive, Limits(e, "interactive", where));
    if (!e.contains("lengths") || !e["lengths"].is_object()) {
      return Status::InvalidArgument(where + ": field 'lengths': missing (required object)");
    }
    const Json& l = e["lengths"];
    JsonFields lf(l, where + ".lengths");
    b.max_output = lf.Int("max_output");
    if (lf.Has("trace")) {
      b.trace = lf.String("trace");
    } else {
      b.input_mean = lf.Double("input_mean");
      b.input_sigma = lf.Double("input_sigma");
      b.max_input = lf.Int("max_input");
      if (lf.Has("output_quantiles")) {
        FATHOM_ASSIGN_OR_RETURN(b.output_quantiles, OutputQuantiles(l, where + ".lengths"));
      } else {
        b.output_sigma = lf.Double("output_sigma");
      }
    }
    FATHOM_RETURN_IF_ERROR(lf.status());
    FATHOM_ASSIGN_OR_RETURN(b.assumed, Strings(l, "assumed", where + ".lengths"));
    if (b.max_output < 1)
      return Status::InvalidArgument(where + ".lengths: field 'max_output': must be >= 1");
    if (b.trace.empty()) {
      const bool ok = b.input_mean >= 1 && std::isfinite(b.input_mean) && b.input_sigma >= 0 &&
                      b.input_sigma <= 5 && b.output_sigma >= 0 && b.output_sigma <= 5 &&
                      b.max_input >= 1 &&
                      b.reference_output_tokens < static_cast<double>(b.max_output) &&
                      b.input_mean < static_cast<double>(b.max_input);
      if (!ok) {
        return Status::InvalidArgument(
            where + ".lengths: input_mean >= 1 and below max_input, sigmas in [0, 5], " +
            "reference_output_tokens below max_output");
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

const std::vector<Benchmark>& MlperfBenchmarks() {
  static const std::vector<Benchmark> benchmarks = [] {
    auto loaded = LoadBenchmarks(DefaultBenchmarksPath());
    if (!loaded.ok()) {
      std::fprintf(stderr, "fathom: %s\n", loaded.status().message().c_str());
      return std::vector<Benchmark>{};
    }
    return *loaded;
  }();
  return benchmarks;
}

const Benchmark* FindBenchmark(const std::vector<Benchmark>& benchmarks, const std::string& model) {
  for (const Benchmark& b : benchmarks) {
    if (b.name == model || std::find(b.models.begin(), b.models.end(), model) != b.models.end())
      return &b;
  }
  return nullptr;
}

Result<std::vector<Request>> BenchmarkDataset(const Benchmark& b) {
  if (!b.trace.empty()) {
    ReadOptions o;
    o.max_output = b.max_output;
    FATHOM_ASSIGN_OR_RETURN(auto reader, OpenTrace(DataDir() + "/" + b.trace, o));
    return ReadAll(*reader);
  }
  // Independent input and output (the published figures say nothing of a correlation); a shift of
  // the outputs' log lengths is bisected until the capped draws' mean is the reference.
  Rng rng(1);
  std::vector<double> zin(b.samples), zout(b.samples);
  for (int64_t i = 0; i < b.samples; ++i) {
    zin[i] = rng.Normal();
    zout[i] = rng.Normal();
  }
  // A draw's output is exp(mu + its base): the base the log of its length at the reference mean
  // (the quantile table at the normal draw's probability, or the lognormal), mu the correction for
  // the cap.
  const double mean = b.reference_output_tokens;
  std::vector<double> base(b.samples);
  for (int64_t i = 0; i < b.samples; ++i) {
    base[i] = b.output_quantiles.empty()
                  ? LognormalLog(mean, b.output_sigma, zout[i])
                  : std::log(mean * Quantile(b.output_quantiles,
                                             0.5 * std::erfc(-zout[i] / std::sqrt(2.0))));
  }
  auto output = [&](double mu, int64_t i) { return Capped(mu + base[i], b.max_output); };
  auto mean_output = [&](double mu) {
    double sum = 0;
    for (int64_t i = 0; i < b.samples; ++i) sum += static_cast<double>(output(mu, i));
    return sum / static_cast<double>(b.samples);
  };
  double lo = -10, hi = 10;
  for (int step = 0; step < 60; ++step) {
    const double mid = (lo + hi) / 2;
    (mean_output(mid) < b.reference_output_tokens ? lo : hi) = mid;
  }
  std::vector<Request> out(b.samples);
  for (int64_t i = 0; i < b.samples; ++i) {
    out[i].id = i;
    out[i].input_tokens = Capped(LognormalLog(b.input_mean, b.input_sigma, zin[i]), b.max_input);
    out[i].output_tokens = output((lo + hi) / 2, i);
  }
  return out;
}

}  // namespace fathom::traces
