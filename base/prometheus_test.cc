#include "base/prometheus.h"

#include <catch2/catch.hpp>
#include <cmath>

namespace fathom {

TEST_CASE(
    "ParsePrometheusText: labels, escapes, special values and timestamps; errors name the line",
    "[live]") {
  auto m = ParsePrometheusText(
      "# HELP x y\n\nvllm:a{k=\"v \\\"q\\\"\",le=\"+Inf\"} 3 1700000000000\nb NaN\nc -Inf\r\nd{} "
      "1e3\n",
      "page");
  REQUIRE(m.ok());
  CHECK(m->at("vllm:a")[0].labels.at("k") == "v \"q\"");
  CHECK(m->at("vllm:a")[0].value == 3);
  CHECK(std::isnan(m->at("b")[0].value));
  CHECK(m->at("c")[0].value == -INFINITY);
  CHECK(m->at("d")[0].value == 1000);
  CHECK(ParsePrometheusText("a 1\nb{k=\"v} 2\n", "page").status().message() ==
        "page line 2: label k: unterminated value");
  CHECK(ParsePrometheusText("a 1\n\n9x 2\n", "page").status().message() ==
        "page line 3: expected a metric name");
  CHECK(ParsePrometheusText("a{k=v} 1\n", "page").status().message() ==
        "page line 1: label k: expected =\"value\"");
  CHECK(ParsePrometheusText("a one\n", "page").status().message() ==
        "page line 1: expected a number, got 'one'");
  CHECK(ParsePrometheusText("a{k=\"v\"}\n", "page").status().message() ==
        "page line 1: metric a: expected a value");
}

TEST_CASE("Quantile: Prometheus's histogram_quantile, linear within the bucket", "[live]") {
  Histogram h;
  h.buckets = {{0.5, 50}, {1.0, 90}, {2.5, 100}, {INFINITY, 100}};
  h.count = 100;
  CHECK(Quantile(h, 0.25) == Approx(0.25));  // 25 of the first 50 in (0, 0.5]
  CHECK(Quantile(h, 0.70) == Approx(0.75));  // 20 of the next 40 in (0.5, 1]
  CHECK(Quantile(h, 0.99) == Approx(1.0 + 1.5 * 0.9));
  h.buckets.back().second = 200;
  h.count = 200;
  CHECK(Quantile(h, 0.99) == 2.5);  // in +Inf: the largest finite bound
  CHECK(Quantile(Histogram{}, 0.99) == 0);
  // Deltas between scrapes, and a counter reset.
  Histogram before;
  before.buckets = {{0.5, 10}, {1.0, 10}, {2.5, 10}, {INFINITY, 10}};
  before.count = 10;
  CHECK(Delta(h, before).buckets[0].second == 40);
  CHECK(Delta(before, h).count == 10);
}

TEST_CASE("FindHistogram: a bucket whose bound is NaN is left out (NaN has no place in the order)",
          "[live]") {
  auto m = ParsePrometheusText(
      "t_bucket{le=\"NaN\"} 5\nt_bucket{le=\"1\"} 2\nt_bucket{le=\"+Inf\"} 3\n", "page");
  REQUIRE(m.ok());
  auto h = FindHistogram(*m, "t");
  REQUIRE(h);
  REQUIRE(h->buckets.size() == 2);
  CHECK(h->buckets[0].first == 1);
  CHECK(h->count == 3);
}

TEST_CASE("AppendMetric writes what ParsePrometheusText reads back, whole values exactly",
          "[live]") {
  std::string page;
  AppendMetric(&page, "requests_total", "counter", "Requests by outcome.",
               {{"outcome=\"ok\"", 12345678901234.0}, {"outcome=\"failed\"", 0}});
  AppendMetric(&page, "usage", "gauge", "A share.", {{"", 0.25}});
  CHECK(page ==
        "# HELP requests_total Requests by outcome.\n# TYPE requests_total counter\n"
        "requests_total{outcome=\"ok\"} 12345678901234\nrequests_total{outcome=\"failed\"} 0\n"
        "# HELP usage A share.\n# TYPE usage gauge\nusage 0.25\n");
  auto m = ParsePrometheusText(page, "page");
  REQUIRE(m.ok());
  REQUIRE(m->at("requests_total").size() == 2);
  CHECK(m->at("requests_total")[0].labels.at("outcome") == "ok");
  CHECK(m->at("requests_total")[0].value == 12345678901234.0);
  CHECK(m->at("usage")[0].value == 0.25);
}

}  // namespace fathom
