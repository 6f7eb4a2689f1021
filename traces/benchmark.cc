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

// Output lengths min(round(exp(mu + sigma z)), cap), at least 1.
int64_t Length(double mu, double sigma, double z, int64_t cap) {
  const double v = std::exp(std::min(mu + sigma * z, 40.0));
  return std::clamp<int64_t>(std::llround(v), 1, cap);
}

}  // namespace

std::string Benchmark::LengthsNote() const {
  if (!trace.empty()) return "per-sample lengths";
  std::string note = "lognormal from published statistics";
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
      b.output_sigma = lf.Double("output_sigma");
      b.max_input = lf.Int("max_input");
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
  // Independent lognormal input and output (the published figures say nothing of a correlation);
  // the output's mu is bisected until the capped draws' mean is the reference.
  Rng rng(1);
  std::vector<double> zin(b.samples), zout(b.samples);
  for (int64_t i = 0; i < b.samples; ++i) {
    zin[i] = rng.Normal();
    zout[i] = rng.Normal();
  }
  const double input_mu = std::log(b.input_mean) - b.input_sigma * b.input_sigma / 2;
  auto mean_output = [&](double mu) {
    double sum = 0;
    for (double z : zout) sum += static_cast<double>(Length(mu, b.output_sigma, z, b.max_output));
    return sum / static_cast<double>(b.samples);
  };
  double lo = 0, hi = std::log(static_cast<double>(b.max_output)) + 5 * b.output_sigma + 1;
  for (int step = 0; step < 60; ++step) {
    const double mid = (lo + hi) / 2;
    (mean_output(mid) < b.reference_output_tokens ? lo : hi) = mid;
  }
  std::vector<Request> out(b.samples);
  for (int64_t i = 0; i < b.samples; ++i) {
    out[i].id = i;
    out[i].input_tokens = Length(input_mu, b.input_sigma, zin[i], b.max_input);
    out[i].output_tokens = Length((lo + hi) / 2, b.output_sigma, zout[i], b.max_output);
  }
  return out;
}

}  // namespace fathom::traces
