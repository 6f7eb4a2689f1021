// Where requests come from, with MLPerf LoadGen's issue semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/sim_time.h"
#include "base/status.h"
#include "traces/reader.h"
#include "traces/request.h"

namespace fathom::sim {

class RequestSource {
 public:
  virtual ~RequestSource() = default;
  // The next request and its scheduled issue time (non-decreasing); false when none is left.
  virtual Result<bool> Next(traces::Request* request, SimTime* issue) = 0;
  // How many requests it issues at once at t = 0 (Offline's one query), where known: the simulator
  // makes room for them in one allocation.
  virtual int64_t AtOnce() const { return 0; }
};

// Offline: `count` samples, all issued at t = 0. Server: `count` samples with Poisson gaps at
// `qps`. Samples cycle through the data set in a fresh seeded permutation per pass (equal issue:
// pick `count` as a multiple of the data set's size).
std::unique_ptr<RequestSource> OfflineSource(std::vector<traces::Request> dataset, int64_t count,
                                             uint64_t seed);
std::unique_ptr<RequestSource> PoissonSource(std::vector<traces::Request> dataset, int64_t count,
                                             double qps, uint64_t seed);
// A query's requests in the order given, each at its time (non-decreasing).
std::unique_ptr<RequestSource> ListSource(std::vector<std::pair<traces::Request, SimTime>> items);
// A trace's own timestamps, streamed (constant memory).
std::unique_ptr<RequestSource> ReplaySource(std::unique_ptr<traces::TraceReader> reader);
// Requests without times, for a closed loop: the simulator sets each issue time.
std::unique_ptr<RequestSource> CyclingSource(std::vector<traces::Request> dataset, int64_t count,
                                             uint64_t seed);

}  // namespace fathom::sim
