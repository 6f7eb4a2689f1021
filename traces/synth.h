// Synthetic workloads: arrival processes, length models (empirical or lognormal fitted with
// Ceres), and multi-turn conversations that share prefixes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "base/status.h"
#include "traces/reader.h"

namespace fathom::traces {

struct RateSegment {
  double duration_s = 0;
  double rate_per_s = 0;
};

enum class ArrivalKind { kPoisson, kGamma, kWeibull };

struct ArrivalSpec {
  ArrivalKind kind = ArrivalKind::kPoisson;
  double rate_per_s = 1.0;
  double cv = 1.0;             // Gamma: coefficient of variation of the gaps (burstiness)
  double weibull_shape = 1.0;  // Weibull: shape k (k < 1 is bursty)
  // Piecewise-constant rate (e.g. a diurnal curve); overrides rate_per_s and ends the trace
  // after the last segment. Renewal gaps are laid out in operational time and mapped through the
  // cumulative rate, so the local rate follows the schedule and the gap shape is kept.
  std::vector<RateSegment> schedule;
};

struct Lognormal {
  double mu = 0, sigma = 1;  // of the natural log of the length
};

struct LengthModel {
  enum Kind { kEmpirical, kLognormal } kind = kLognormal;
  std::vector<std::pair<int64_t, int64_t>> samples;  // empirical (input, output) pairs
  Lognormal input{6.5, 1.0}, output{5.5, 1.0};
  double correlation = 0;  // between log input and log output (Gaussian copula)
  int64_t max_input = 1 << 20;
  int64_t max_output = 1 << 20;
};

struct ConversationSpec {
  double turns_mean = 0;     // 0: independent requests; else sessions of 1 + Geometric turns
  double think_time_s = 30;  // mean pause between a reply and the next turn
  int64_t system_prompt_tokens = 0;  // shared by every session
};

struct SynthSpec {
  ArrivalSpec arrivals;
  LengthModel lengths;
  // A shifting mix (e.g. chat by day, code by night): each request's lengths come from one of
  // these models, drawn with the weights of the schedule segment its arrival falls in
  // (mix[segment][model]). Empty: every request from `lengths`.
  std::vector<LengthModel> mix_lengths;
  std::vector<std::vector<double>> mix;
  ConversationSpec conversations;
  int64_t requests = 1000;           // stop after this many...
  std::optional<double> duration_s;  // ...or at this time, whichever comes first
  uint64_t seed = 1;

  Status Validate() const;
};

Result<std::unique_ptr<TraceReader>> Synthesize(const SynthSpec& spec);

// Maximum-likelihood lognormal of `values` (each >= 1) where values >= censor_at (when given)
// are right-censored, as outputs cut at a max-tokens cap are. Solved with Ceres.
Result<Lognormal> FitLognormal(const std::vector<int64_t>& values,
                               std::optional<int64_t> censor_at);

// Reads `reader` to the end and builds a length model: its (input, output) pairs, or a fitted
// correlated lognormal pair when `parametric`.
Result<LengthModel> FitLengthModel(TraceReader& reader, bool parametric,
                                   std::optional<int64_t> output_cap);

}  // namespace fathom::traces
