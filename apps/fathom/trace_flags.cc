#include "apps/fathom/trace_flags.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "models/deployment.h"
#include "traces/transforms.h"

namespace fathom::cli {

void AddTraceReadFlags(CLI::App* cmd, TraceReadFlags* f) {
  cmd->add_option("--format", f->format, "auto, csv, azure, mooncake, burstgpt or jsonl")
      ->capture_default_str();
  cmd->add_flag("--skip-bad-lines", f->skip_bad_lines,
                "Skip and count malformed lines instead of failing");
  cmd->add_option("--max-output", f->max_output, "Cap output tokens (MLPerf DeepSeek-R1: 20000)");
  cmd->add_option("--model-filter", f->model_filter, "BurstGPT: keep only this Model");
  cmd->add_option("--log-type", f->log_type_filter, "BurstGPT: keep only this Log Type");
}

Result<traces::ReadOptions> ToReadOptions(const TraceReadFlags& f) {
  traces::ReadOptions o;
  FATHOM_ASSIGN_OR_RETURN(o.format, traces::ParseTraceFormat(f.format));
  o.skip_bad_lines = f.skip_bad_lines;
  if (f.max_output && *f.max_output < 1) {
    return Status::InvalidArgument("--max-output = " + std::to_string(*f.max_output) +
                                   ": must be >= 1");
  }
  o.max_output = f.max_output;
  o.model_filter = f.model_filter;
  o.log_type_filter = f.log_type_filter;
  return o;
}

Result<std::unique_ptr<traces::TraceReader>> OpenTraceWithFlags(const std::string& path,
                                                                const TraceReadFlags& f) {
  FATHOM_ASSIGN_OR_RETURN(traces::ReadOptions o, ToReadOptions(f));
  return traces::OpenTrace(path, o);
}

Result<const traces::Benchmark*> ChooseBenchmark(const std::string& model,
                                                 const std::string& benchmark) {
  const auto& all = traces::MlperfBenchmarks();
  if (benchmark.empty()) return traces::FindBenchmark(all, model);
  if (const traces::Benchmark* b = traces::FindBenchmark(all, benchmark)) return b;
  std::string names;
  for (const auto& b : all) names += (names.empty() ? "" : ", ") + b.name;
  return Status::InvalidArgument("--benchmark = \"" + benchmark +
                                 "\": not an MLPerf benchmark fathom knows (" + names + ")");
}

Result<Workload> LoadWorkload(const std::string& model, const std::string& benchmark,
                              const std::string& path, const TraceReadFlags& flags) {
  FATHOM_RETURN_IF_ERROR(ToReadOptions(flags).status());
  Workload w;
  FATHOM_ASSIGN_OR_RETURN(w.benchmark, ChooseBenchmark(model, benchmark));
  if (!path.empty()) {
    FATHOM_ASSIGN_OR_RETURN(auto reader, OpenTraceWithFlags(path, flags));
    FATHOM_ASSIGN_OR_RETURN(w.requests, traces::ReadAll(*reader));
    ReportReadCounters(path, reader->counters());
    if (w.requests.empty()) return Status::InvalidArgument(path + ": no requests");
    w.name = path;
    w.note = "workload: " + path;
    if (w.benchmark != nullptr) w.note += " (p99 limits of MLPerf " + w.benchmark->name + ")";
    return w;
  }
  std::string why;
  if (w.benchmark == nullptr) {
    const std::string fallback(models::kDefaultModel);
    w.benchmark = traces::FindBenchmark(traces::MlperfBenchmarks(), fallback);
    if (w.benchmark == nullptr)
      return Status::NotFound(traces::DefaultBenchmarksPath() + ": no " + fallback + " benchmark");
    why = ", the default for " + model +
          ", which no MLPerf benchmark runs (--trace FILE or --benchmark NAME to choose)";
  }
  FATHOM_ASSIGN_OR_RETURN(w.requests, traces::BenchmarkDataset(*w.benchmark));
  if (flags.max_output) {
    for (auto& r : w.requests) r.output_tokens = std::min(r.output_tokens, *flags.max_output);
  }
  double out = 0;
  for (const auto& r : w.requests) out += static_cast<double>(r.output_tokens);
  w.name = "MLPerf " + w.benchmark->name;
  char mean[64];
  std::snprintf(mean, sizeof mean, "%.0f", out / static_cast<double>(w.requests.size()));
  w.note = "workload: MLPerf " + w.benchmark->name + " data set, " + w.benchmark->dataset + "; " +
           std::to_string(w.requests.size()) + " samples, " + mean + " output tokens a sample, " +
           w.benchmark->LengthsNote() + why;
  return w;
}

void ReportReadCounters(const std::string& path, const traces::ReadCounters& c) {
  if (c.skipped_bad > 0) {
    std::fprintf(stderr, "fathom: %s: skipped %lld bad lines (first: %s)\n", path.c_str(),
                 static_cast<long long>(c.skipped_bad), c.first_error.c_str());
  }
  if (c.filtered > 0 || c.failed_responses > 0) {
    std::fprintf(stderr, "fathom: %s: %lld rows filtered out, %lld failed responses left out\n",
                 path.c_str(), static_cast<long long>(c.filtered),
                 static_cast<long long>(c.failed_responses));
  }
}

Result<std::vector<std::vector<double>>> ParseMix(const std::string& flag,
                                                  const std::string& text) {
  std::vector<std::vector<double>> mix;
  std::stringstream segments(text);
  for (std::string segment; std::getline(segments, segment, ',');) {
    std::vector<double> weights;
    std::stringstream parts(segment);
    for (std::string w; std::getline(parts, w, '/');) {
      char* end = nullptr;
      const double v = std::strtod(w.c_str(), &end);
      if (w.empty() || *end != '\0') {
        return Status::InvalidArgument(flag + ": segment \"" + segment +
                                       "\" is not weights W/W/... (one per --from trace)");
      }
      weights.push_back(v);
    }
    mix.push_back(std::move(weights));
  }
  if (mix.empty()) return Status::InvalidArgument(flag + " = \"\": give a segment's weights");
  return mix;
}

Result<std::vector<traces::RateSegment>> ParseSchedule(const std::string& flag,
                                                       const std::string& text) {
  std::vector<traces::RateSegment> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t colon = item.find(':');
    traces::RateSegment seg;
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      seg.duration_s = std::stod(item.substr(0, colon));
      seg.rate_per_s = std::stod(item.substr(colon + 1));
    } catch (const std::exception&) {
      return Status::InvalidArgument(flag + ": segment \"" + item +
                                     "\" is not DURATION_S:RATE (e.g. 3600:2.5)");
    }
    if (!(seg.duration_s > 0) || !std::isfinite(seg.duration_s) || !(seg.rate_per_s >= 0) ||
        !std::isfinite(seg.rate_per_s)) {
      return Status::InvalidArgument(flag + ": segment \"" + item +
                                     "\": the duration must be > 0 and the rate >= 0, both finite");
    }
    out.push_back(seg);
  }
  if (out.empty())
    return Status::InvalidArgument(flag + " = \"" + text +
                                   "\": give at least one DURATION_S:RATE segment");
  return out;
}

}  // namespace fathom::cli
