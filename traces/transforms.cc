#include "traces/transforms.h"

#include <algorithm>
#include <cmath>

#include "base/format.h"
#include "base/random.h"

namespace fathom::traces {
namespace {

class TransformedReader : public TraceReader {
 public:
  TransformedReader(std::unique_ptr<TraceReader> inner, TransformOptions o)
      : inner_(std::move(inner)), o_(o), rng_(o.seed) {}

  Result<bool> Next(Request* out) override {
    while (true) {
      if (o_.head && emitted_ >= *o_.head) return false;
      Result<bool> more = inner_->Next(out);
      if (!more.ok() || !*more) return more;
      if ((o_.min_input && out->input_tokens < *o_.min_input) ||
          (o_.max_input && out->input_tokens > *o_.max_input) ||
          (o_.min_output && out->output_tokens < *o_.min_output) ||
          (o_.max_output && out->output_tokens > *o_.max_output) ||
          (o_.sample_fraction < 1.0 && rng_.Uniform() >= o_.sample_fraction)) {
        ++filtered_;
        continue;
      }
      if (o_.rate) {
        clock_s_ += rng_.Exponential(*o_.rate);
        out->arrival_s = clock_s_;
      } else if (out->arrival_s && o_.time_scale != 1.0) {
        out->arrival_s = *out->arrival_s * o_.time_scale;
      }
      out->id = emitted_++;
      return true;
    }
  }
  const ReadCounters& counters() const override {
    counters_ = inner_->counters();
    counters_.filtered += filtered_;
    counters_.requests = emitted_;
    return counters_;
  }
  TraceFormat format() const override { return inner_->format(); }

 private:
  std::unique_ptr<TraceReader> inner_;
  TransformOptions o_;
  Rng rng_;
  int64_t emitted_ = 0;
  int64_t filtered_ = 0;
  double clock_s_ = 0;
  mutable ReadCounters counters_;
};

class CombinedReader : public TraceReader {
 public:
  CombinedReader(std::vector<std::unique_ptr<TraceReader>> inputs, CombineMode mode)
      : inputs_(std::move(inputs)),
        mode_(mode),
        heads_(inputs_.size()),
        has_head_(inputs_.size(), false) {}

  Result<bool> Next(Request* out) override {
    if (mode_ == CombineMode::kConcat) {
      while (current_ < inputs_.size()) {
        Result<bool> more = inputs_[current_]->Next(out);
        if (!more.ok()) return more;
        if (*more) {
          if (out->arrival_s) {
            out->arrival_s = *out->arrival_s + offset_s_;
            last_s_ = *out->arrival_s;
          }
          out->id = emitted_++;
          return true;
        }
        ++current_;
        offset_s_ = last_s_;
      }
      return false;
    }
    // Mix: keep one pending request per input and emit the earliest (ties: lower input index).
    if (!primed_) {
      for (size_t i = 0; i < inputs_.size(); ++i) FATHOM_RETURN_IF_ERROR(Fill(i));
      primed_ = true;
    }
    size_t best = inputs_.size();
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (has_head_[i] &&
          (best == inputs_.size() || *heads_[i].arrival_s < *heads_[best].arrival_s))
        best = i;
    }
    if (best == inputs_.size()) return false;
    *out = std::move(heads_[best]);
    out->id = emitted_++;
    FATHOM_RETURN_IF_ERROR(Fill(best));
    return true;
  }
  const ReadCounters& counters() const override {
    counters_ = ReadCounters{};
    for (const auto& in : inputs_) {
      const ReadCounters& c = in->counters();
      counters_.lines += c.lines;
      counters_.skipped_bad += c.skipped_bad;
      counters_.filtered += c.filtered;
      counters_.failed_responses += c.failed_responses;
      counters_.capped += c.capped;
      if (counters_.first_error.empty()) counters_.first_error = c.first_error;
    }
    counters_.requests = emitted_;
    return counters_;
  }
  TraceFormat format() const override {
    return inputs_.empty() ? TraceFormat::kJsonl : inputs_[0]->format();
  }

 private:
  Status Fill(size_t i) {
    Result<bool> more = inputs_[i]->Next(&heads_[i]);
    if (!more.ok()) return more.status();
    has_head_[i] = *more;
    if (*more && !heads_[i].arrival_s) {
      return Status::InvalidArgument("mixing traces needs arrival times; input " +
                                     std::to_string(i + 1) + " has a request without one");
    }
    return Status::Ok();
  }

  std::vector<std::unique_ptr<TraceReader>> inputs_;
  CombineMode mode_;
  size_t current_ = 0;
  double offset_s_ = 0, last_s_ = 0;
  std::vector<Request> heads_;
  std::vector<bool> has_head_;
  bool primed_ = false;
  int64_t emitted_ = 0;
  mutable ReadCounters counters_;
};

class RepeatReader : public TraceReader {
 public:
  RepeatReader(std::vector<Request> dataset, int64_t total)
      : dataset_(std::move(dataset)), total_(total) {}
  Result<bool> Next(Request* out) override {
    if (dataset_.empty() || counters_.requests >= total_) return false;
    *out = dataset_[counters_.requests % static_cast<int64_t>(dataset_.size())];
    out->arrival_s.reset();
    out->id = counters_.requests++;
    return true;
  }
  const ReadCounters& counters() const override { return counters_; }
  TraceFormat format() const override { return TraceFormat::kJsonl; }

 private:
  std::vector<Request> dataset_;
  int64_t total_;
  ReadCounters counters_;
};

}  // namespace

Status TransformOptions::Validate() const {
  // Written so that NaN fails every rule.
  auto bad = [](const char* flag, double v, const char* rule) {
    return Status::InvalidArgument(std::string(flag) + " = " + StrFormat("%g", v) + ": " + rule);
  };
  if (!(sample_fraction > 0 && sample_fraction <= 1))
    return bad("--sample-fraction", sample_fraction, "must be in (0, 1]");
  if (!(time_scale > 0 && std::isfinite(time_scale)))
    return bad("--time-scale", time_scale, "must be > 0 and finite");
  if (rate && !(*rate > 0 && *rate <= kMaxArrivalRate))
    return bad("--rate", *rate, "must be > 0 and at most 1e6 requests a second");
  if (head && *head < 0) return bad("--head", static_cast<double>(*head), "must be >= 0");
  for (const auto& [flag, bound] : {std::pair{"--min-input", min_input},
                                    {"--max-input", max_input},
                                    {"--min-output", min_output},
                                    {"--max-output-filter", max_output}}) {
    if (bound && *bound < 0) return bad(flag, static_cast<double>(*bound), "must be >= 0");
  }
  return Status::Ok();
}

std::unique_ptr<TraceReader> Transform(std::unique_ptr<TraceReader> inner,
                                       const TransformOptions& options) {
  return std::make_unique<TransformedReader>(std::move(inner), options);
}

std::unique_ptr<TraceReader> Combine(std::vector<std::unique_ptr<TraceReader>> inputs,
                                     CombineMode mode) {
  return std::make_unique<CombinedReader>(std::move(inputs), mode);
}

std::unique_ptr<TraceReader> Repeat(std::vector<Request> dataset, int64_t total) {
  return std::make_unique<RepeatReader>(std::move(dataset), total);
}

int64_t EqualIssueCount(int64_t dataset_size, int64_t min_count) {
  if (dataset_size <= 0) return 0;
  const int64_t copies = std::max<int64_t>(1, (min_count + dataset_size - 1) / dataset_size);
  return copies * dataset_size;
}

Result<std::vector<Request>> ReadAll(TraceReader& reader) {
  std::vector<Request> out;
  Request r;
  while (true) {
    FATHOM_ASSIGN_OR_RETURN(bool more, reader.Next(&r));
    if (!more) break;
    out.push_back(r);
  }
  return out;
}

Result<std::vector<Request>> SampleWithoutReplacement(TraceReader& reader, int64_t n,
                                                      uint64_t seed) {
  Rng rng(seed);
  std::vector<Request> reservoir;
  Request r;
  int64_t seen = 0;
  while (true) {
    FATHOM_ASSIGN_OR_RETURN(bool more, reader.Next(&r));
    if (!more) break;
    if (static_cast<int64_t>(reservoir.size()) < n) {
      reservoir.push_back(r);
    } else {
      const uint64_t j = rng.Below(static_cast<uint64_t>(seen + 1));
      if (static_cast<int64_t>(j) < n) reservoir[j] = r;
    }
    ++seen;
  }
  std::sort(reservoir.begin(), reservoir.end(),
            [](const Request& a, const Request& b) { return a.id < b.id; });
  for (size_t i = 0; i < reservoir.size(); ++i) reservoir[i].id = static_cast<int64_t>(i);
  return reservoir;
}

}  // namespace fathom::traces
