#include "tuner/online/engine_scraper.h"

#include <httplib.h>

#include <chrono>

#include "tuner/online/vllm_metrics.h"

namespace fathom::tuner {
namespace {

// `from`'s series appended to `into`'s: FindHistogram and the sums add them up.
void Append(const Metrics& from, Metrics* into) {
  for (const auto& [name, samples] : from) {
    std::vector<MetricSample>& to = (*into)[name];
    to.insert(to.end(), samples.begin(), samples.end());
  }
}

}  // namespace

Result<std::optional<Metrics>> EngineScraper::Scrape(const ReplicaAddress& at) const {
  const std::string url = "http://" + at.host + ":" + std::to_string(at.port) + "/metrics";
  httplib::Client client(at.host, at.port);
  client.set_connection_timeout(std::chrono::duration<double>(timeout_s_));
  client.set_read_timeout(std::chrono::duration<double>(timeout_s_));
  auto r = client.Get("/metrics");
  if (!r) return std::optional<Metrics>();
  if (r->status != 200) {
    return Status::Unavailable(url + ": HTTP " + std::to_string(r->status) +
                               " (a vLLM /metrics page expected)");
  }
  FATHOM_ASSIGN_OR_RETURN(Metrics m, ParsePrometheusText(r->body, url));
  FATHOM_RETURN_IF_ERROR(CheckVllmMetrics(m, url));
  return std::optional<Metrics>(std::move(m));
}

Status EngineScraper::Read(const ReplicaAddresses& replicas, Metrics* now, Metrics* before) {
  std::map<int, Metrics> pages;
  for (const auto& [id, at] : replicas) {
    FATHOM_ASSIGN_OR_RETURN(std::optional<Metrics> page, Scrape(at));
    if (!page) {
      // Kept for when it answers again; a replica restarted after dying has a new id.
      if (auto it = last_.find(id); it != last_.end()) pages[id] = std::move(it->second);
      continue;
    }
    Append(*page, now);
    if (auto it = last_.find(id); it != last_.end()) Append(it->second, before);
    pages[id] = std::move(*page);
  }
  last_ = std::move(pages);
  return Status::Ok();
}

Status EngineScraper::Start(const ReplicaAddresses& replicas) {
  Metrics now, before;
  return Read(replicas, &now, &before);
}

Result<Window> EngineScraper::Next(const ReplicaAddresses& replicas, double start_s, double end_s) {
  Metrics now, before;
  FATHOM_RETURN_IF_ERROR(Read(replicas, &now, &before));
  return VllmWindow(before, now, start_s, end_s, kVllmMaxSample, pairing_seed_++);
}

}  // namespace fathom::tuner
