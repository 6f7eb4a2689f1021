#include "traces/reader.h"

#include <algorithm>
#include <vector>

#include "base/csv.h"
#include "base/files.h"
#include "base/line_reader.h"
#include "traces/internal/parse.h"

namespace fathom::traces {
namespace {

using internal::JsonValue;

// Column positions of a CSV trace; -1 where the format has no such column.
struct CsvColumns {
  int timestamp = -1, input = -1, output = -1, model = -1, log_type = -1;
  size_t count = 0;  // columns in every row: the header's, or a headerless file's first row's
  bool headerless = false;
  std::string timestamp_name, input_name, output_name;
  bool absolute_time = false;  // datetimes: arrivals count from the first row
};

int FindColumn(const std::vector<std::string_view>& header,
               std::initializer_list<std::string_view> names, std::string* found) {
  for (size_t i = 0; i < header.size(); ++i) {
    for (auto n : names) {
      if (header[i] == n) {
        *found = std::string(n);
        return static_cast<int>(i);
      }
    }
  }
  return -1;
}

// The latest arrival a trace may hold, in seconds from its start: a year. Later ones are a
// timestamp in the wrong unit (epoch seconds in a relative column, milliseconds as seconds).
constexpr double kMaxArrivalS = 366 * 86400.0;

bool LooksNumeric(std::string_view s) {
  double d;
  return ParseFiniteDouble(s, &d);
}

class TextTraceReader : public TraceReader {
 public:
  TextTraceReader(std::unique_ptr<LineReader> lines, std::string name, ReadOptions options)
      : lines_(std::move(lines)), name_(std::move(name)), options_(std::move(options)) {}

  // Reads the first line and settles the format and the columns.
  Status Init() {
    std::string_view first;
    while (lines_->Next(&first)) {
      ++counters_.lines;
      if (!first.empty()) break;
    }
    FATHOM_RETURN_IF_ERROR(lines_->status());
    if (first.empty()) {
      format_ = options_.format == TraceFormat::kAuto ? TraceFormat::kLengthsCsv : options_.format;
      return Status::Ok();  // an empty trace has no requests
    }
    const bool json = first.front() == '{';
    format_ = options_.format;
    if (json) {
      if (format_ == TraceFormat::kAuto) {
        format_ = first.find("\"input_length\"") != std::string_view::npos ? TraceFormat::kMooncake
                                                                           : TraceFormat::kJsonl;
      }
      if (format_ != TraceFormat::kMooncake && format_ != TraceFormat::kJsonl) {
        return Status::InvalidArgument(name_ + ":1: a JSON line, but --format " +
                                       std::string(Name(format_)) + " is a CSV format");
      }
      pending_ = std::string(first);
      pending_line_ = lines_->line_number();
      has_pending_ = true;
      return Status::Ok();
    }
    SplitCsv(first, &fields_);
    if (format_ == TraceFormat::kAuto) {
      if (first.find("ContextTokens") != std::string_view::npos) {
        format_ = TraceFormat::kAzure;
      } else if (first.find("Request tokens") != std::string_view::npos) {
        format_ = TraceFormat::kBurstGpt;
      } else {
        format_ = TraceFormat::kLengthsCsv;
      }
    }
    if (format_ == TraceFormat::kMooncake || format_ == TraceFormat::kJsonl) {
      return Status::InvalidArgument(name_ + ":1: expected a JSON object per line for --format " +
                                     std::string(Name(format_)));
    }
    const bool headerless =
        format_ == TraceFormat::kLengthsCsv && !fields_.empty() && LooksNumeric(fields_[0]);
    if (headerless) {
      cols_.input = 0;
      cols_.output = 1;
      cols_.timestamp = fields_.size() > 2 ? 2 : -1;
      cols_.count = fields_.size();
      cols_.headerless = true;
      cols_.input_name = "input_length";
      cols_.output_name = "output_length";
      cols_.timestamp_name = "timestamp";
      pending_ = std::string(first);
      pending_line_ = lines_->line_number();
      has_pending_ = true;
      return Status::Ok();
    }
    return ResolveHeader();
  }

  Result<bool> Next(Request* out) override {
    while (true) {
      std::string_view line;
      int64_t line_no = 0;
      if (has_pending_) {
        line = pending_;
        line_no = pending_line_;
        has_pending_ = false;
      } else {
        if (!lines_->Next(&line)) {
          FATHOM_RETURN_IF_ERROR(lines_->status());
          return false;
        }
        ++counters_.lines;
        line_no = lines_->line_number();
      }
      if (line.empty()) continue;
      bool keep = true;
      Status s = Parse(line, line_no, out, &keep);
      if (!s.ok()) {
        if (!options_.skip_bad_lines) return s;
        if (counters_.skipped_bad == 0) counters_.first_error = s.message();
        ++counters_.skipped_bad;
        continue;
      }
      if (!keep) continue;
      if (options_.max_output && out->output_tokens > *options_.max_output) {
        out->output_tokens = *options_.max_output;
        ++counters_.capped;
      }
      out->id = counters_.requests++;
      return true;
    }
  }

  const ReadCounters& counters() const override { return counters_; }
  TraceFormat format() const override { return format_; }

 private:
  Status ResolveHeader() {
    std::string ignored;
    cols_.count = fields_.size();
    switch (format_) {
      case TraceFormat::kLengthsCsv:
        cols_.input = FindColumn(fields_, {"input_length", "input_tokens", "prompt_tokens"},
                                 &cols_.input_name);
        cols_.output = FindColumn(fields_, {"output_length", "output_tokens", "completion_tokens"},
                                  &cols_.output_name);
        cols_.timestamp =
            FindColumn(fields_, {"timestamp", "arrival_s", "arrival_time"}, &cols_.timestamp_name);
        if (cols_.input < 0 || cols_.output < 0) {
          return Status::InvalidArgument(name_ +
                                         ":1: header needs input_length and output_length "
                                         "columns (or input_tokens, output_tokens)");
        }
        break;
      case TraceFormat::kAzure:
        cols_.timestamp = FindColumn(fields_, {"TIMESTAMP"}, &cols_.timestamp_name);
        cols_.input = FindColumn(fields_, {"ContextTokens"}, &cols_.input_name);
        cols_.output = FindColumn(fields_, {"GeneratedTokens"}, &cols_.output_name);
        cols_.absolute_time = true;
        if (cols_.timestamp < 0 || cols_.input < 0 || cols_.output < 0) {
          return Status::InvalidArgument(name_ +
                                         ":1: an Azure trace needs the columns TIMESTAMP, "
                                         "ContextTokens, GeneratedTokens");
        }
        break;
      case TraceFormat::kBurstGpt:
        cols_.timestamp = FindColumn(fields_, {"Timestamp"}, &cols_.timestamp_name);
        cols_.input = FindColumn(fields_, {"Request tokens"}, &cols_.input_name);
        cols_.output = FindColumn(fields_, {"Response tokens"}, &cols_.output_name);
        cols_.model = FindColumn(fields_, {"Model"}, &ignored);
        cols_.log_type = FindColumn(fields_, {"Log Type"}, &ignored);
        if (cols_.timestamp < 0 || cols_.input < 0 || cols_.output < 0 || cols_.model < 0 ||
            cols_.log_type < 0) {
          return Status::InvalidArgument(name_ +
                                         ":1: a BurstGPT trace needs the columns Timestamp, "
                                         "Model, Request tokens, Response tokens, Log Type");
        }
        break;
      default:
        FATHOM_CHECK(false);
    }
    return Status::Ok();
  }

  Status Bad(int64_t line_no, const std::string& column, std::string_view value,
             const std::string& rule) const {
    return Status::InvalidArgument(name_ + ":" + std::to_string(line_no) + ": column " + column +
                                   ": \"" + std::string(value.substr(0, 64)) + "\" " + rule);
  }

  Status CheckTime(int64_t line_no, const std::string& column, std::string_view raw, double t,
                   Request* out) {
    if (cols_.absolute_time) {
      if (!origin_) origin_ = t;
      t -= *origin_;
    }
    if (t > kMaxArrivalS) {
      return Bad(line_no, column, raw,
                 "is more than a year into the trace (arrivals count from its start" +
                     std::string(cols_.absolute_time ? "" : ", in seconds") + ")");
    }
    if (last_arrival_ && t < *last_arrival_) {
      return Bad(line_no, column, raw,
                 "is earlier than the previous request (arrivals must not decrease)");
    }
    last_arrival_ = t;
    out->arrival_s = t;
    return Status::Ok();
  }

  Status Parse(std::string_view line, int64_t line_no, Request* out, bool* keep) {
    out->prefix_blocks.clear();
    out->arrival_s.reset();
    if (format_ == TraceFormat::kMooncake || format_ == TraceFormat::kJsonl)
      return ParseJson(line, line_no, out);
    SplitCsv(line, &fields_);
    const int needed =
        std::max({cols_.timestamp, cols_.input, cols_.output, cols_.model, cols_.log_type});
    if (static_cast<int>(fields_.size()) <= needed) {
      return Status::InvalidArgument(name_ + ":" + std::to_string(line_no) + ": " +
                                     std::to_string(fields_.size()) +
                                     " columns, expected at least " + std::to_string(needed + 1));
    }
    if (fields_.size() > cols_.count) {
      return Status::InvalidArgument(name_ + ":" + std::to_string(line_no) + ": " +
                                     std::to_string(fields_.size()) + " columns, more than the " +
                                     std::to_string(cols_.count) + " of " +
                                     (cols_.headerless ? "the first row" : "the header"));
    }
    if (format_ == TraceFormat::kBurstGpt) {
      if ((!options_.model_filter.empty() && fields_[cols_.model] != options_.model_filter) ||
          (!options_.log_type_filter.empty() &&
           fields_[cols_.log_type] != options_.log_type_filter)) {
        ++counters_.filtered;
        *keep = false;
        return Status::Ok();
      }
    }
    FATHOM_RETURN_IF_ERROR(
        Count(line_no, cols_.input_name, fields_[cols_.input], &out->input_tokens));
    std::string_view raw_out = fields_[cols_.output];
    if (int64_t output = -1;
        format_ == TraceFormat::kBurstGpt && ParseNonNegativeInt(raw_out, &output) && output == 0) {
      ++counters_.failed_responses;  // BurstGPT logs failed requests with no response tokens
      *keep = false;
      return Status::Ok();
    }
    FATHOM_RETURN_IF_ERROR(Count(line_no, cols_.output_name, raw_out, &out->output_tokens));
    if (cols_.timestamp >= 0) {
      double t = 0;
      std::string_view raw = fields_[cols_.timestamp];
      if (!internal::ParseTimestamp(raw, &t) || t < 0) {
        return Bad(line_no, cols_.timestamp_name, raw,
                   cols_.absolute_time ? "is not a timestamp (YYYY-MM-DD hh:mm:ss[.fff])"
                                       : "is not a non-negative number of seconds");
      }
      FATHOM_RETURN_IF_ERROR(CheckTime(line_no, cols_.timestamp_name, raw, t, out));
    }
    return Status::Ok();
  }

  Status Count(int64_t line_no, const std::string& column, std::string_view raw, int64_t* v) const {
    if (!ParseNonNegativeInt(raw, v))
      return Bad(line_no, column, raw, "is not a non-negative integer");
    if (*v < 1) return Bad(line_no, column, raw, "must be >= 1");
    if (*v > kMaxRequestTokens)
      return Bad(line_no, column, raw, "must be <= " + std::to_string(kMaxRequestTokens));
    return Status::Ok();
  }

  Status ParseJson(std::string_view line, int64_t line_no, Request* out) {
    const bool mooncake = format_ == TraceFormat::kMooncake;
    static const std::vector<std::string_view> kMooncakeKeys = {"timestamp", "input_length",
                                                                "output_length"};
    static const std::vector<std::string_view> kJsonlKeys = {"arrival_s", "input_tokens",
                                                             "output_tokens"};
    const auto& keys = mooncake ? kMooncakeKeys : kJsonlKeys;
    const std::string_view array_key = mooncake ? "hash_ids" : "prefix_blocks";
    const std::string err =
        internal::ParseJsonLine(line, keys, &json_values_, array_key, &out->prefix_blocks);
    if (!err.empty()) {
      return Status::InvalidArgument(name_ + ":" + std::to_string(line_no) +
                                     ": malformed JSON line: " + err);
    }
    for (int k = 1; k <= 2; ++k) {
      const JsonValue& v = json_values_[k];
      if (v.kind == JsonValue::kMissing) {
        return Status::InvalidArgument(name_ + ":" + std::to_string(line_no) + ": field " +
                                       std::string(keys[k]) + ": missing (required integer)");
      }
      FATHOM_RETURN_IF_ERROR(Count(line_no, std::string(keys[k]), v.text,
                                   k == 1 ? &out->input_tokens : &out->output_tokens));
    }
    const JsonValue& ts = json_values_[0];
    if (ts.kind != JsonValue::kMissing) {
      double t = 0;
      if (ts.kind != JsonValue::kNumber || !ParseFiniteDouble(ts.text, &t) || t < 0) {
        return Bad(line_no, std::string(keys[0]), ts.text, "is not a non-negative number");
      }
      FATHOM_RETURN_IF_ERROR(
          CheckTime(line_no, std::string(keys[0]), ts.text, mooncake ? t / 1000.0 : t, out));
    } else if (mooncake) {
      return Status::InvalidArgument(name_ + ":" + std::to_string(line_no) +
                                     ": field timestamp: missing (required, milliseconds)");
    }
    return Status::Ok();
  }

  std::unique_ptr<LineReader> lines_;
  std::string name_;
  ReadOptions options_;
  TraceFormat format_ = TraceFormat::kAuto;
  CsvColumns cols_;
  ReadCounters counters_;
  std::vector<std::string_view> fields_;
  std::vector<JsonValue> json_values_;
  std::string pending_;
  int64_t pending_line_ = 0;
  bool has_pending_ = false;
  std::optional<double> origin_;
  std::optional<double> last_arrival_;
};

}  // namespace

std::string_view Name(TraceFormat f) {
  switch (f) {
    case TraceFormat::kAuto:
      return "auto";
    case TraceFormat::kLengthsCsv:
      return "csv";
    case TraceFormat::kAzure:
      return "azure";
    case TraceFormat::kMooncake:
      return "mooncake";
    case TraceFormat::kBurstGpt:
      return "burstgpt";
    case TraceFormat::kJsonl:
      return "jsonl";
  }
  return "";
}

Result<TraceFormat> ParseTraceFormat(std::string_view text) {
  for (TraceFormat f : {TraceFormat::kAuto, TraceFormat::kLengthsCsv, TraceFormat::kAzure,
                        TraceFormat::kMooncake, TraceFormat::kBurstGpt, TraceFormat::kJsonl}) {
    if (Name(f) == text) return f;
  }
  return Status::InvalidArgument(
      "--format = \"" + std::string(text) +
      "\": unknown trace format (auto, csv, azure, mooncake, burstgpt, jsonl)");
}

Result<std::unique_ptr<TraceReader>> OpenTraceStream(std::unique_ptr<SequentialFile> file,
                                                     const std::string& name,
                                                     const ReadOptions& options) {
  auto reader = std::make_unique<TextTraceReader>(
      std::make_unique<LineReader>(std::move(file), name), name, options);
  FATHOM_RETURN_IF_ERROR(reader->Init());
  return std::unique_ptr<TraceReader>(std::move(reader));
}

Result<std::unique_ptr<TraceReader>> OpenTrace(const std::string& path, const ReadOptions& options,
                                               Env* env) {
  Result<std::unique_ptr<SequentialFile>> file = env->NewSequentialFile(path);
  if (!file.ok()) return Status::NotFound(path + ": cannot open trace");
  return OpenTraceStream(std::move(*file), path, options);
}

std::string DefaultTracePath() {
  return DataDir() + "/traces/data/mlperf_deepseek_r1/deepseek-r1.csv";
}

}  // namespace fathom::traces
