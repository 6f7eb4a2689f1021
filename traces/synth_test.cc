#include "traces/synth.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "base/random.h"
#include "traces/stats.h"

namespace fathom::traces {
namespace {

TraceStats Run(const SynthSpec& spec, std::vector<Request>* keep = nullptr) {
  auto reader = Synthesize(spec);
  INFO(reader.status().message());
  REQUIRE(reader.ok());
  StatsAccumulator acc;
  Request r;
  while (*(*reader)->Next(&r)) {
    acc.Add(r);
    if (keep) keep->push_back(r);
  }
  return acc.Finish();
}

}  // namespace

TEST_CASE("Synthesize: Poisson, Gamma and Weibull arrivals have the asked rate and burstiness",
          "[traces]") {
  SynthSpec spec;
  spec.requests = 200000;
  spec.arrivals.rate_per_s = 4.0;
  TraceStats s = Run(spec);
  CHECK(s.rate_per_s == Approx(4.0).epsilon(0.01));
  CHECK(s.burstiness_cv == Approx(1.0).epsilon(0.02));

  spec.arrivals.kind = ArrivalKind::kGamma;
  spec.arrivals.cv = 2.0;
  s = Run(spec);
  CHECK(s.rate_per_s == Approx(4.0).epsilon(0.02));
  CHECK(s.burstiness_cv == Approx(2.0).epsilon(0.03));

  spec.arrivals.kind = ArrivalKind::kWeibull;
  spec.arrivals.weibull_shape = 0.5;  // CV = sqrt(Gamma(5) / Gamma(3)^2 - 1) = sqrt(5)
  s = Run(spec);
  CHECK(s.rate_per_s == Approx(4.0).epsilon(0.03));
  CHECK(s.burstiness_cv == Approx(std::sqrt(5.0)).epsilon(0.05));
}

TEST_CASE("Synthesize: a rate schedule sets the local rate and ends the trace", "[traces]") {
  SynthSpec spec;
  spec.requests = 1'000'000;
  spec.arrivals.schedule = {{1000, 2.0}, {1000, 10.0}, {1000, 0.0}, {1000, 4.0}};
  std::vector<Request> reqs;
  Run(spec, &reqs);
  int counts[4] = {0, 0, 0, 0};
  for (const auto& r : reqs) counts[std::min(3, static_cast<int>(*r.arrival_s / 1000))]++;
  CHECK(counts[0] == Approx(2000).epsilon(0.06));
  CHECK(counts[1] == Approx(10000).epsilon(0.03));
  CHECK(counts[2] == 0);
  CHECK(counts[3] == Approx(4000).epsilon(0.05));
  CHECK(*reqs.back().arrival_s <= 4000);
}

TEST_CASE("Synthesize: a shifting mix draws each segment's lengths with its weights", "[traces]") {
  SynthSpec spec;
  spec.requests = 1'000'000;
  spec.arrivals.schedule = {{1000, 5.0}, {1000, 5.0}, {1000, 5.0}};
  LengthModel chat, code;
  chat.kind = code.kind = LengthModel::kEmpirical;
  chat.samples = {{100, 200}};
  code.samples = {{2000, 20}};
  spec.mix_lengths = {chat, code};
  spec.mix = {{1, 0}, {0.25, 0.75}, {0, 2}};
  std::vector<Request> reqs;
  Run(spec, &reqs);
  int code_share[3][2] = {};  // per segment: requests, of them code
  for (const auto& r : reqs) {
    const int s = std::min(2, static_cast<int>(*r.arrival_s / 1000));
    ++code_share[s][0];
    code_share[s][1] += r.input_tokens == 2000;
  }
  CHECK(code_share[0][1] == 0);
  CHECK(code_share[1][1] == Approx(0.75 * code_share[1][0]).epsilon(0.05));
  CHECK(code_share[2][1] == code_share[2][0]);
  spec.mix = {{1, 0}, {0.25, 0.75}};
  CHECK(spec.Validate().message() ==
        "--mix: weights for 2 segments, --schedule has 3: give one mix a segment");
  spec.mix = {{1, 0}, {0.25, 0.75, 1}, {0, 1}};
  CHECK(spec.Validate().message() == "--mix segment 2: 3 weights for 2 length models (--from)");
  spec.mix = {{1, 0}, {0, 0}, {0, 1}};
  CHECK(spec.Validate().message() == "--mix segment 2 = 0: its weights must not all be 0");
}

TEST_CASE("Synthesize: the same seed gives the same trace", "[traces]") {
  SynthSpec spec;
  spec.requests = 1000;
  spec.lengths.correlation = 0.5;
  std::vector<Request> a, b;
  Run(spec, &a);
  Run(spec, &b);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(*a[i].arrival_s == *b[i].arrival_s);
    CHECK(a[i].input_tokens == b[i].input_tokens);
  }
}

TEST_CASE("FitLognormal: recovers known parameters, with and without censoring", "[traces]") {
  Rng rng(11);
  std::vector<int64_t> values;
  for (int i = 0; i < 50000; ++i)
    values.push_back(std::max<int64_t>(1, std::llround(std::exp(7.0 + 0.8 * rng.Normal()))));
  auto fit = FitLognormal(values, std::nullopt);
  REQUIRE(fit.ok());
  CHECK(fit->mu == Approx(7.0).epsilon(0.01));
  CHECK(fit->sigma == Approx(0.8).epsilon(0.02));

  // Cap at about the 80th percentile: a naive fit of the capped values is biased, the censored
  // likelihood is not.
  const int64_t cap = std::llround(std::exp(7.0 + 0.8 * 0.8416));
  for (auto& v : values) v = std::min(v, cap);
  auto censored = FitLognormal(values, cap);
  REQUIRE(censored.ok());
  CHECK(censored->mu == Approx(7.0).epsilon(0.01));
  CHECK(censored->sigma == Approx(0.8).epsilon(0.03));
  auto naive = FitLognormal(values, std::nullopt);
  CHECK(naive->sigma < 0.75);
}

TEST_CASE("Synthesize: conversations share their earlier turns as prefix blocks", "[traces]") {
  SynthSpec spec;
  spec.requests = 5000;
  spec.arrivals.rate_per_s = 1.0;
  spec.conversations.turns_mean = 4;
  spec.conversations.think_time_s = 20;
  spec.conversations.system_prompt_tokens = 2048;
  std::vector<Request> reqs;
  const TraceStats s = Run(spec, &reqs);
  CHECK(s.requests == 5000);
  CHECK(s.prefix_reuse_ratio > 0.5);
  for (size_t i = 1; i < reqs.size(); ++i) CHECK(*reqs[i].arrival_s >= *reqs[i - 1].arrival_s);
  for (const auto& r : reqs) {
    REQUIRE(r.prefix_blocks.size() >= 4);
    CHECK(r.prefix_blocks[0] == 0);  // the shared system prompt
    CHECK(static_cast<int64_t>(r.prefix_blocks.size()) == r.input_tokens / kPrefixBlockTokens);
  }
}

TEST_CASE("SynthSpec: invalid parameters name the flag and the rule", "[traces]") {
  SynthSpec spec;
  spec.arrivals.rate_per_s = 0;
  CHECK(spec.Validate().message() == "--rate = 0: must be > 0 and at most 1e6 requests a second");
  spec.arrivals.rate_per_s = 1;
  spec.lengths.correlation = 2;
  CHECK(spec.Validate().message() == "--correlation = 2: must be in [-1, 1]");
  spec.lengths.correlation = 0;
  spec.arrivals.cv = std::nan("");  // NaN breaks every rule, never passes one
  CHECK(spec.Validate().message() == "--cv = nan: must be > 0 and finite");
  spec.arrivals.cv = 1;
  spec.duration_s = -1;
  CHECK(spec.Validate().message() == "--duration = -1: must be > 0 and finite");
  spec.duration_s = std::nullopt;
  spec.arrivals.schedule = {{60, INFINITY}};
  CHECK(spec.Validate().message() ==
        "--schedule segment = 60: needs a finite duration > 0 and a rate from 0 to 1e6 requests a "
        "second");
}

}  // namespace fathom::traces
