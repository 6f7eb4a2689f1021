#include "apps/fathom/trace_flags.h"

#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace fathom::cli {

void AddTraceReadFlags(CLI::App* cmd, TraceReadFlags* f) {
  cmd->add_option("--format", f->format, "auto, csv, azure, mooncake, burstgpt or jsonl")->capture_default_str();
  cmd->add_flag("--skip-bad-lines", f->skip_bad_lines, "Skip and count malformed lines instead of failing");
  cmd->add_option("--max-output", f->max_output, "Cap output tokens (MLPerf DeepSeek-R1: 20000)");
  cmd->add_option("--model-filter", f->model_filter, "BurstGPT: keep only this Model");
  cmd->add_option("--log-type", f->log_type_filter, "BurstGPT: keep only this Log Type");
}

Result<traces::ReadOptions> ToReadOptions(const TraceReadFlags& f) {
  traces::ReadOptions o;
  FATHOM_ASSIGN_OR_RETURN(o.format, traces::ParseTraceFormat(f.format));
  o.skip_bad_lines = f.skip_bad_lines;
  if (f.max_output && *f.max_output < 1) {
    return Status::InvalidArgument("--max-output = " + std::to_string(*f.max_output) + ": must be >= 1");
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

Result<std::unique_ptr<traces::TraceReader>> OpenWorkload(const std::string& path, const TraceReadFlags& flags,
                                                          std::string* opened) {
  TraceReadFlags read = flags;
  *opened = path.empty() ? traces::DefaultTracePath() : path;
  if (path.empty() && !read.max_output) read.max_output = 20000;  // MLPerf DeepSeek-R1's cap
  return OpenTraceWithFlags(*opened, read);
}

void ReportReadCounters(const std::string& path, const traces::ReadCounters& c) {
  if (c.skipped_bad > 0) {
    std::fprintf(stderr, "fathom: %s: skipped %lld bad lines (first: %s)\n", path.c_str(),
                 static_cast<long long>(c.skipped_bad), c.first_error.c_str());
  }
  if (c.filtered > 0 || c.failed_responses > 0) {
    std::fprintf(stderr, "fathom: %s: %lld rows filtered out, %lld failed responses left out\n", path.c_str(),
                 static_cast<long long>(c.filtered), static_cast<long long>(c.failed_responses));
  }
}

Result<std::vector<traces::RateSegment>> ParseSchedule(const std::string& flag, const std::string& text) {
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
    out.push_back(seg);
  }
  return out;
}

}  // namespace fathom::cli
