#include "tuner/online/prometheus_api.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "base/format.h"
#include "base/json_fields.h"
#include "tuner/online/vllm_metrics.h"

namespace fathom::tuner {
namespace {

// A sample's value as the API writes it: a string, "NaN" and "+Inf" included.
bool ParseSampleValue(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

}  // namespace

Result<PrometheusApi> PrometheusApi::Create(const std::string& url, double timeout_s) {
  const std::string scheme = "http://";
  const size_t host = scheme.size();
  const size_t path = url.find('/', host);
  const std::string origin = url.substr(0, path);
  if (url.rfind(scheme, 0) != 0 || origin.size() == host ||
      origin.find_first_of("?#@ ") != std::string::npos) {
    return Status::InvalidArgument("--prometheus-url = " + url +
                                   ": must be http://HOST:PORT[/PREFIX] (e.g. "
                                   "http://127.0.0.1:9090)");
  }
  std::string prefix = path == std::string::npos ? "" : url.substr(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return PrometheusApi(url, origin, prefix, timeout_s);
}

Result<std::vector<MetricSample>> PrometheusApi::Query(const std::string& promql,
                                                       double time_unix_s) const {
  const std::string where = "Prometheus at " + url_ + ", query " + promql;
  httplib::Client client(origin_);
  client.set_connection_timeout(std::chrono::duration<double>(timeout_s_));
  client.set_read_timeout(std::chrono::duration<double>(timeout_s_));
  const httplib::Params params = {{"query", promql}, {"time", StrFormat("%.3f", time_unix_s)}};
  auto r = client.Get(prefix_ + "/api/v1/query", params, httplib::Headers{});
  if (!r) return Status::Unavailable(where + ": no answer (" + httplib::to_string(r.error()) + ")");
  Result<Json> reply = ParseJson(r->body, where);
  // The API answers errors with a JSON body that says why (400 for a bad query, 503 when it is
  // overloaded); anything else is not Prometheus.
  if (r->status != 200) {
    std::string why;
    if (reply.ok() && reply->is_object() && reply->contains("error") &&
        (*reply)["error"].is_string()) {
      why = ": " + (*reply)["error"].get<std::string>().substr(0, 300);
    }
    return Status::Unavailable(where + ": HTTP " + std::to_string(r->status) + why);
  }
  FATHOM_RETURN_IF_ERROR(reply.status());
  if (!reply->is_object())
    return Status::InvalidArgument(where + ": the reply is not a JSON object");
  JsonFields fields(*reply, where);
  const std::string status = fields.String("status");
  FATHOM_RETURN_IF_ERROR(fields.status());
  if (status != "success") {
    return Status::Unavailable(where + ": status \"" + status.substr(0, 50) +
                               "\": " + fields.String("error", "no error given").substr(0, 300));
  }
  const Json* data = reply->contains("data") ? &(*reply)["data"] : nullptr;
  if (!data || !data->is_object())
    return Status::InvalidArgument(where + ": field data: must be an object");
  JsonFields data_fields(*data, where + ": data");
  const std::string type = data_fields.String("resultType");
  FATHOM_RETURN_IF_ERROR(data_fields.status());
  if (type != "vector") {
    return Status::InvalidArgument(where + ": data.resultType = \"" + type.substr(0, 50) +
                                   "\": must be \"vector\" (an instant query of series)");
  }
  const Json* result = data->contains("result") ? &(*data)["result"] : nullptr;
  if (!result || !result->is_array())
    return Status::InvalidArgument(where + ": field data.result: must be an array");
  std::vector<MetricSample> samples;
  for (size_t i = 0; i < result->size(); ++i) {
    const Json& series = (*result)[i];
    const std::string at = where + ": data.result[" + std::to_string(i) + "]";
    if (!series.is_object() || !series.contains("metric") || !series["metric"].is_object() ||
        !series.contains("value") || !series["value"].is_array() || series["value"].size() != 2 ||
        !series["value"][1].is_string()) {
      return Status::InvalidArgument(
          at + ": must be {\"metric\": {labels}, \"value\": [time, \"value\"]}");
    }
    MetricSample s;
    for (const auto& [key, value] : series["metric"].items()) {
      if (!value.is_string())
        return Status::InvalidArgument(at + ": label " + key + ": must be a string");
      s.labels[key] = value.get<std::string>();
    }
    const std::string value = series["value"][1].get<std::string>();
    if (!ParseSampleValue(value, &s.value)) {
      return Status::InvalidArgument(at + ": value \"" + value.substr(0, 50) +
                                     "\": must be a number");
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

Result<bool> PrometheusApi::Add(const std::string& promql, const std::string& name,
                                double time_unix_s, bool required, Metrics* page) const {
  FATHOM_ASSIGN_OR_RETURN(std::vector<MetricSample> samples, Query(promql, time_unix_s));
  if (samples.empty() && required) {
    return Status::Unavailable("Prometheus at " + url_ + ", query " + promql +
                               ": no series (does it scrape the replicas, at an interval well "
                               "under the window? see docs/serving.md)");
  }
  if (samples.empty()) return false;
  std::vector<MetricSample>& series = (*page)[name];
  series.insert(series.end(), samples.begin(), samples.end());
  return true;
}

Result<Window> PrometheusApi::Next(double range_s, double time_unix_s, double start_s,
                                   double end_s) {
  const std::string range =
      "[" + std::to_string(std::max<int64_t>(1, std::llround(range_s * 1e3))) + "ms]";
  const std::string selected = selector_.empty() ? "" : "{" + selector_ + "}";
  Metrics page;
  auto increase = [&](const std::string& series, const std::string& by, bool required) {
    return Add("sum by (" + by + ") (increase(" + series + selected + range + "))", series,
               time_unix_s, required, &page);
  };
  auto histogram = [&](const std::string& name, bool required) {
    return increase(name + "_bucket", "le", required);
  };
  FATHOM_RETURN_IF_ERROR(increase("vllm:request_success_total", "finished_reason", true).status());
  FATHOM_RETURN_IF_ERROR(histogram("vllm:time_to_first_token_seconds", true).status());
  FATHOM_ASSIGN_OR_RETURN(const bool tpot,
                          histogram("vllm:request_time_per_output_token_seconds", false));
  if (!tpot) {
    FATHOM_RETURN_IF_ERROR(histogram("vllm:time_per_output_token_seconds", true).status());
  }
  FATHOM_RETURN_IF_ERROR(histogram("vllm:request_prompt_tokens", false).status());
  FATHOM_RETURN_IF_ERROR(histogram("vllm:request_generation_tokens", false).status());
  FATHOM_RETURN_IF_ERROR(Add(std::string("sum(") + kVllmRunning + selected + ")", kVllmRunning,
                             time_unix_s, true, &page)
                             .status());
  FATHOM_RETURN_IF_ERROR(Add(std::string("sum(") + kVllmWaiting + selected + ")", kVllmWaiting,
                             time_unix_s, false, &page)
                             .status());
  FATHOM_RETURN_IF_ERROR(CheckVllmMetrics(page, "Prometheus at " + url_));
  // The page holds the increases: the reading before them is zero but for the gauges.
  Window w = VllmWindow(gauges_before_, page, start_s, end_s, kVllmMaxSample, pairing_seed_++);
  gauges_before_.clear();
  for (const char* gauge : {kVllmRunning, kVllmWaiting}) {
    if (auto it = page.find(gauge); it != page.end()) gauges_before_[gauge] = it->second;
  }
  return w;
}

}  // namespace fathom::tuner
