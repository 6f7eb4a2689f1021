// Streaming trace readers: constant memory, format auto-detection, and errors that name the
// file, line, column and value.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/env.h"
#include "base/status.h"
#include "traces/request.h"

namespace fathom::traces {

enum class TraceFormat {
  kAuto,
  kLengthsCsv,  // input_length,output_length[,timestamp] (the MLPerf DeepSeek-R1 set)
  kAzure,       // TIMESTAMP,ContextTokens,GeneratedTokens (Azure LLM inference 2023 / 2024)
  kMooncake,    // JSONL: timestamp (ms), input_length, output_length, hash_ids
  kBurstGpt,    // Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,...
  kJsonl,       // fathom's JSONL: arrival_s, input_tokens, output_tokens, prefix_blocks
};

std::string_view Name(TraceFormat f);
Result<TraceFormat> ParseTraceFormat(std::string_view text);

// The most tokens one request's input or output may hold: 2^30, past any model's context (the
// longest are millions), and small enough that sums over billions of requests fit in int64.
inline constexpr int64_t kMaxRequestTokens = int64_t{1} << 30;

struct ReadOptions {
  TraceFormat format = TraceFormat::kAuto;
  bool skip_bad_lines = false;        // count and skip bad lines instead of failing
  std::optional<int64_t> max_output;  // cap output tokens (MLPerf DeepSeek-R1: 20,000)
  std::string model_filter;           // BurstGPT: keep only this Model ("" keeps all)
  std::string log_type_filter;        // BurstGPT: keep only this Log Type ("" keeps all)
};

struct ReadCounters {
  int64_t lines = 0;             // lines read, header included
  int64_t requests = 0;          // requests returned
  int64_t skipped_bad = 0;       // bad lines skipped under skip_bad_lines
  int64_t filtered = 0;          // rows a filter left out (BurstGPT model / log type)
  int64_t failed_responses = 0;  // BurstGPT rows with zero response tokens (failures), left out
  int64_t capped = 0;            // requests whose output was cut to max_output
  std::string first_error;       // the first skipped line's error
};

class TraceReader {
 public:
  virtual ~TraceReader() = default;
  // Fills *out with the next request; false at the end of the trace.
  virtual Result<bool> Next(Request* out) = 0;
  virtual const ReadCounters& counters() const = 0;
  virtual TraceFormat format() const = 0;
};

// Opens `path` in `env` (borrowed; it must outlive the call only).
Result<std::unique_ptr<TraceReader>> OpenTrace(const std::string& path, const ReadOptions& options,
                                               Env* env = Env::Default());

// Reads from an open file; `name` stands for it in messages.
Result<std::unique_ptr<TraceReader>> OpenTraceStream(std::unique_ptr<SequentialFile> file,
                                                     const std::string& name,
                                                     const ReadOptions& options);

// The MLPerf DeepSeek-R1 per-sample lengths shipped with fathom (traces/data/).
std::string DefaultTracePath();

}  // namespace fathom::traces
