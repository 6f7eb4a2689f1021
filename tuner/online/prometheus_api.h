// A Prometheus server's HTTP API (instant queries, /api/v1/query), and the supervisor's windows
// read through it: vLLM's series summed over the replicas the server scrapes (those of one fleet,
// by their labels), as their increase over the window.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/prometheus.h"
#include "base/status.h"
#include "tuner/online/online.h"

namespace fathom::tuner {

class PrometheusApi {
 public:
  // `url`: http://HOST:PORT, optionally with a path prefix (--prometheus-url); errors name it.
  // `timeout_s`: how long one query may take.
  static Result<PrometheusApi> Create(const std::string& url, double timeout_s = 10);

  // Reads only the series these PromQL label matchers select (`fathom_fleet="127.0.0.1:8000"`:
  // one fleet's replicas on a server that scrapes others too); empty: every series.
  void set_selector(std::string matchers) { selector_ = std::move(matchers); }

  // The series an instant query gives at `time_unix_s` (a "vector" result: labels and value).
  // Errors (no answer, an HTTP error, a reply that is not the API's JSON) name the URL and query.
  Result<std::vector<MetricSample>> Query(const std::string& promql, double time_unix_s) const;

  // The window of the `range_s` wall seconds to `time_unix_s`, reported as `start_s` to `end_s`:
  // vllm:request_success_total and the TTFT, TPOT and length histograms' buckets as their
  // increase() over the range, summed by finished_reason and by le; requests running and waiting
  // at `time_unix_s`. A TTFT, TPOT, success or running series the server does not have is an
  // error naming the query (a window is never judged without them).
  Result<Window> Next(double range_s, double time_unix_s, double start_s, double end_s);

 private:
  PrometheusApi(std::string url, std::string origin, std::string prefix, double timeout_s)
      : url_(std::move(url)),
        origin_(std::move(origin)),
        prefix_(std::move(prefix)),
        timeout_s_(timeout_s) {}
  // Adds the series of `promql` to `page` under `name`; an empty result is an error when
  // `required`, and reported as false.
  Result<bool> Add(const std::string& promql, const std::string& name, double time_unix_s,
                   bool required, Metrics* page) const;

  std::string url_;       // as given
  std::string origin_;    // http://host:port
  std::string prefix_;    // the path before /api/v1 ("" or "/prefix")
  std::string selector_;  // label matchers, without braces
  double timeout_s_;
  Metrics gauges_before_;  // running and waiting at the last window's end
  uint64_t pairing_seed_ = 1;
};

}  // namespace fathom::tuner
