// The supervisor's windows from its replicas' own /metrics pages (vLLM's names), read over HTTP at
// each window's end: counters and histogram buckets summed across the replicas, each as its change
// since that replica's page a window earlier (a replica new since then counts from zero), as
// VllmWindow reads them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "base/prometheus.h"
#include "base/status.h"
#include "tuner/online/online.h"

namespace fathom::tuner {

// Where a replica listens.
struct ReplicaAddress {
  std::string host = "127.0.0.1";
  int port = 0;
};
using ReplicaAddresses = std::map<int, ReplicaAddress>;  // by replica id

class EngineScraper {
 public:
  // `timeout_s`: how long one page may take to arrive.
  explicit EngineScraper(double timeout_s = 5) : timeout_s_(timeout_s) {}

  // Reads the pages of `replicas` (by id) the next window is measured
  // from, and forgets replicas not among them; then reports the window `start_s` to `end_s`. A
  // replica that does not answer is left out (it died: its requests are retried elsewhere, and it
  // is restarted); a page that is not vLLM's is an error naming its URL.
  Result<Window> Next(const ReplicaAddresses& replicas, double start_s, double end_s);
  // The pages the first window is measured from (Next's reading without a window).
  Status Start(const ReplicaAddresses& replicas);

 private:
  // The page of the replica at `at`; nullopt when it does not answer.
  Result<std::optional<Metrics>> Scrape(const ReplicaAddress& at) const;
  // Pages of `replicas` now, and the readings before them (a replica new since: none).
  Status Read(const ReplicaAddresses& replicas, Metrics* now, Metrics* before);

  double timeout_s_;
  std::map<int, Metrics> last_;  // by replica id
  uint64_t pairing_seed_ = 1;
};

}  // namespace fathom::tuner
