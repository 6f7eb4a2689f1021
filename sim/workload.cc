#include "sim/workload.h"

#include <numeric>

#include "base/random.h"

namespace fathom::sim {
namespace {

// Cycles through the data set, a new seeded permutation for every pass.
class Shuffled {
 public:
  Shuffled(std::vector<traces::Request> dataset, uint64_t seed)
      : dataset_(std::move(dataset)), rng_(seed) {}
  const traces::Request& Next() {
    if (pos_ == order_.size()) {
      order_.resize(dataset_.size());
      std::iota(order_.begin(), order_.end(), 0);
      for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng_.Below(i)]);
      pos_ = 0;
    }
    return dataset_[order_[pos_++]];
  }
  Rng& rng() { return rng_; }
  bool empty() const { return dataset_.empty(); }

 private:
  std::vector<traces::Request> dataset_;
  Rng rng_;
  std::vector<size_t> order_;
  size_t pos_ = 0;
};

class DatasetSource : public RequestSource {
 public:
  DatasetSource(std::vector<traces::Request> dataset, int64_t count, double qps, uint64_t seed,
                bool at_once = false)
      : samples_(std::move(dataset), seed), count_(count), qps_(qps), at_once_(at_once) {}
  Result<bool> Next(traces::Request* r, SimTime* issue) override {
    if (issued_ >= count_ || samples_.empty()) return false;
    *r = samples_.Next();
    if (qps_ > 0) clock_s_ += samples_.rng().Exponential(qps_);
    r->id = issued_++;
    r->arrival_s = clock_s_;
    *issue = FromSeconds(clock_s_);
    return true;
  }
  int64_t AtOnce() const override { return at_once_ && !samples_.empty() ? count_ : 0; }

 private:
  Shuffled samples_;
  int64_t count_;
  double qps_;
  bool at_once_;
  int64_t issued_ = 0;
  double clock_s_ = 0;
};

class TraceSource : public RequestSource {
 public:
  explicit TraceSource(std::unique_ptr<traces::TraceReader> reader) : reader_(std::move(reader)) {}
  Result<bool> Next(traces::Request* r, SimTime* issue) override {
    FATHOM_ASSIGN_OR_RETURN(bool more, reader_->Next(r));
    if (!more) return false;
    if (!r->arrival_s) {
      return Status::InvalidArgument("request " + std::to_string(r->id) +
                                     ": the replay scenario needs arrival times in the trace");
    }
    *issue = FromSeconds(*r->arrival_s);
    return true;
  }

 private:
  std::unique_ptr<traces::TraceReader> reader_;
};

}  // namespace

std::unique_ptr<RequestSource> OfflineSource(std::vector<traces::Request> dataset, int64_t count,
                                             uint64_t seed) {
  return std::make_unique<DatasetSource>(std::move(dataset), count, 0.0, seed, true);
}

std::unique_ptr<RequestSource> PoissonSource(std::vector<traces::Request> dataset, int64_t count,
                                             double qps, uint64_t seed) {
  return std::make_unique<DatasetSource>(std::move(dataset), count, qps, seed);
}

namespace {

class ListRequests : public RequestSource {
 public:
  explicit ListRequests(std::vector<std::pair<traces::Request, SimTime>> items)
      : items_(std::move(items)) {}
  Result<bool> Next(traces::Request* request, SimTime* issue) override {
    if (next_ == items_.size()) return false;
    *request = std::move(items_[next_].first);
    *issue = items_[next_].second;
    ++next_;
    return true;
  }

 private:
  std::vector<std::pair<traces::Request, SimTime>> items_;
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<RequestSource> ListSource(std::vector<std::pair<traces::Request, SimTime>> items) {
  return std::make_unique<ListRequests>(std::move(items));
}

std::unique_ptr<RequestSource> ReplaySource(std::unique_ptr<traces::TraceReader> reader) {
  return std::make_unique<TraceSource>(std::move(reader));
}

std::unique_ptr<RequestSource> CyclingSource(std::vector<traces::Request> dataset, int64_t count,
                                             uint64_t seed) {
  return std::make_unique<DatasetSource>(std::move(dataset), count, 0.0, seed);
}

}  // namespace fathom::sim
