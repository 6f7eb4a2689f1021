#include "traces/synth.h"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>

#include "base/format.h"
#include "base/random.h"
#include "traces/transforms.h"

namespace fathom::traces {
namespace {

// Unit-mean renewal gaps of the chosen shape.
double UnitGap(const ArrivalSpec& a, Rng& rng) {
  switch (a.kind) {
    case ArrivalKind::kPoisson:
      return rng.Exponential(1.0);
    case ArrivalKind::kGamma: {
      const double k = 1.0 / (a.cv * a.cv);
      return rng.Gamma(k, 1.0 / k);
    }
    case ArrivalKind::kWeibull: {
      const double scale = 1.0 / std::tgamma(1.0 + 1.0 / a.weibull_shape);
      return rng.Weibull(a.weibull_shape, scale);
    }
  }
  return 1.0;
}

// Maps operational time (expected arrivals so far) to wall time through the rate schedule.
// Returns false past the end of the schedule.
bool OperationalToWall(const ArrivalSpec& a, double tau, double* t) {
  if (a.schedule.empty()) {
    *t = tau / a.rate_per_s;
    return true;
  }
  double start = 0;
  for (const RateSegment& s : a.schedule) {
    const double mass = s.rate_per_s * s.duration_s;
    if (tau <= mass && s.rate_per_s > 0) {
      *t = start + tau / s.rate_per_s;
      return true;
    }
    tau -= mass;
    start += s.duration_s;
  }
  return false;
}

class SyntheticReader : public TraceReader {
 public:
  explicit SyntheticReader(const SynthSpec& spec) : spec_(spec), rng_(spec.seed) {
    const int64_t sys_blocks = spec.conversations.system_prompt_tokens / kPrefixBlockTokens;
    for (int64_t i = 0; i < sys_blocks; ++i) system_blocks_.push_back(next_block_++);
  }

  Result<bool> Next(Request* out) override {
    if (counters_.requests >= spec_.requests) return false;
    if (spec_.conversations.turns_mean <= 0) {
      double t;
      if (!NextArrival(&t)) return false;
      const auto [in, out_tokens] = SampleLengths(t);
      *out = Request{};
      out->arrival_s = t;
      out->input_tokens = in;
      out->output_tokens = out_tokens;
    } else if (!NextTurn(out)) {
      return false;
    }
    out->id = counters_.requests++;
    return true;
  }
  const ReadCounters& counters() const override { return counters_; }
  TraceFormat format() const override { return TraceFormat::kJsonl; }

 private:
  struct Session {
    double next_s = 0;
    int64_t turns_left = 0;
    int64_t context = 0;
    std::vector<uint64_t> blocks;
    int64_t order = 0;  // tie-break: sessions created earlier go first
  };
  struct Later {
    bool operator()(const Session& a, const Session& b) const {
      return a.next_s != b.next_s ? a.next_s > b.next_s : a.order > b.order;
    }
  };

  bool NextArrival(double* t) {
    tau_ += UnitGap(spec_.arrivals, rng_);
    if (!OperationalToWall(spec_.arrivals, tau_, t)) return false;
    return !spec_.duration_s || *t <= *spec_.duration_s;
  }

  // The model of the mix segment time `t` falls in (the last past the schedule's end).
  const LengthModel& ModelAt(double t) {
    if (spec_.mix_lengths.empty()) return spec_.lengths;
    size_t segment = 0;
    for (double end = 0; segment + 1 < spec_.mix.size(); ++segment) {
      end += spec_.arrivals.schedule[segment].duration_s;
      if (t < end) break;
    }
    const std::vector<double>& w = spec_.mix[segment];
    double total = 0;
    for (double x : w) total += x;
    double u = rng_.Uniform() * total;
    for (size_t i = 0; i < w.size(); ++i) {
      if (u < w[i]) return spec_.mix_lengths[i];
      u -= w[i];
    }
    for (size_t i = w.size(); i-- > 0;) {  // rounding at the top end: the last weighted model
      if (w[i] > 0) return spec_.mix_lengths[i];
    }
    return spec_.mix_lengths.back();
  }

  std::pair<int64_t, int64_t> SampleLengths(double t) {
    const LengthModel& m = ModelAt(t);
    if (m.kind == LengthModel::kEmpirical) return m.samples[rng_.Below(m.samples.size())];
    const double z1 = rng_.Normal();
    const double z2 =
        m.correlation * z1 + std::sqrt(1 - m.correlation * m.correlation) * rng_.Normal();
    auto draw = [](const Lognormal& l, double z, int64_t cap) {
      const double v = std::exp(l.mu + l.sigma * z);
      return std::clamp<int64_t>(static_cast<int64_t>(std::llround(std::min(v, 1e15))), 1, cap);
    };
    return {draw(m.input, z1, m.max_input), draw(m.output, z2, m.max_output)};
  }

  bool NextTurn(Request* out) {
    // Start sessions until the earliest pending turn is earlier than the next new session.
    while (true) {
      if (!next_session_s_ && !sessions_done_) {
        double t;
        if (NextArrival(&t)) {
          next_session_s_ = t;
        } else {
          sessions_done_ = true;
        }
      }
      if (!pending_.empty() && (!next_session_s_ || pending_.top().next_s <= *next_session_s_))
        break;
      if (!next_session_s_) return false;
      Session s;
      s.next_s = *next_session_s_;
      s.turns_left = 1 + static_cast<int64_t>(std::floor(rng_.Exponential(1.0) *
                                                         (spec_.conversations.turns_mean - 1)));
      s.context = spec_.conversations.system_prompt_tokens;
      s.blocks = system_blocks_;
      s.order = sessions_started_++;
      pending_.push(std::move(s));
      next_session_s_.reset();
    }
    Session s = pending_.top();
    pending_.pop();
    if (spec_.duration_s && s.next_s > *spec_.duration_s) return NextTurn(out);
    const auto [user, reply] = SampleLengths(s.next_s);
    *out = Request{};
    out->arrival_s = s.next_s;
    out->input_tokens = std::min(s.context + user, spec_.lengths.max_input);
    out->output_tokens = reply;
    // Whole blocks of this prompt: earlier turns' blocks keep their ids (a shared prefix).
    const int64_t full_blocks = out->input_tokens / kPrefixBlockTokens;
    while (static_cast<int64_t>(s.blocks.size()) < full_blocks) s.blocks.push_back(next_block_++);
    out->prefix_blocks.assign(s.blocks.begin(), s.blocks.begin() + full_blocks);
    s.context = out->input_tokens + reply;
    if (--s.turns_left > 0) {
      s.next_s += rng_.Exponential(1.0 / spec_.conversations.think_time_s);
      pending_.push(std::move(s));
    }
    return true;
  }

  SynthSpec spec_;
  Rng rng_;
  double tau_ = 0;
  ReadCounters counters_;
  std::priority_queue<Session, std::vector<Session>, Later> pending_;
  std::optional<double> next_session_s_;
  bool sessions_done_ = false;
  int64_t sessions_started_ = 0;
  uint64_t next_block_ = 0;
  std::vector<uint64_t> system_blocks_;
};

// Negative log-likelihood of a right-censored lognormal over weighted distinct values.
// Parameters: mu and log(sigma).
class CensoredLognormalNll final : public ceres::FirstOrderFunction {
 public:
  CensoredLognormalNll(std::vector<std::pair<double, double>> logs_and_weights, double log_cap,
                       double censored)
      : data_(std::move(logs_and_weights)), log_cap_(log_cap), censored_(censored) {}

  bool Evaluate(const double* p, double* cost, double* gradient) const override {
    const double mu = p[0];
    const double sigma = std::exp(p[1]);
    double c = 0, g_mu = 0, g_ls = 0;
    for (const auto& [x, w] : data_) {
      const double z = (x - mu) / sigma;
      c += w * (p[1] + 0.5 * z * z);
      g_mu += w * (-z / sigma);
      g_ls += w * (1.0 - z * z);
    }
    if (censored_ > 0) {
      const double z = (log_cap_ - mu) / sigma;
      const double survival = std::max(0.5 * std::erfc(z / std::sqrt(2.0)), 1e-300);
      const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
      c += censored_ * -std::log(survival);
      g_mu += censored_ * -pdf / (sigma * survival);
      g_ls += censored_ * -pdf * z / survival;
    }
    *cost = c;
    if (gradient != nullptr) {
      gradient[0] = g_mu;
      gradient[1] = g_ls;
    }
    return std::isfinite(c);
  }
  int NumParameters() const override { return 2; }

 private:
  std::vector<std::pair<double, double>> data_;
  double log_cap_;
  double censored_;
};

}  // namespace

Status SynthSpec::Validate() const {
  auto bad = [](const std::string& flag, double v, const std::string& rule) {
    return Status::InvalidArgument(flag + " = " + StrFormat("%g", v) + ": " + rule);
  };
  // Written so that NaN fails every rule.
  auto positive = [](double v) { return v > 0 && std::isfinite(v); };
  if (arrivals.schedule.empty() &&
      !(arrivals.rate_per_s > 0 && arrivals.rate_per_s <= kMaxArrivalRate)) {
    return bad("--rate", arrivals.rate_per_s, "must be > 0 and at most 1e6 requests a second");
  }
  for (const auto& s : arrivals.schedule) {
    if (!positive(s.duration_s) || !(s.rate_per_s >= 0 && s.rate_per_s <= kMaxArrivalRate)) {
      return bad("--schedule segment", s.duration_s,
                 "needs a finite duration > 0 and a rate from 0 to 1e6 requests a second");
    }
  }
  if (!positive(arrivals.cv)) return bad("--cv", arrivals.cv, "must be > 0 and finite");
  if (!positive(arrivals.weibull_shape))
    return bad("--weibull-shape", arrivals.weibull_shape, "must be > 0 and finite");
  if (duration_s && !positive(*duration_s))
    return bad("--duration", *duration_s, "must be > 0 and finite");
  if (!std::isfinite(lengths.input.mu) || !std::isfinite(lengths.output.mu)) {
    return bad("--input-mu/--output-mu",
               std::isfinite(lengths.input.mu) ? lengths.output.mu : lengths.input.mu,
               "must be finite");
  }
  if (requests < 0) return bad("--requests", static_cast<double>(requests), "must be >= 0");
  if (lengths.kind == LengthModel::kEmpirical && lengths.samples.empty()) {
    return Status::InvalidArgument("empirical lengths need a trace with at least one request");
  }
  if (!(lengths.correlation >= -1 && lengths.correlation <= 1)) {
    return bad("--correlation", lengths.correlation, "must be in [-1, 1]");
  }
  if (!positive(lengths.input.sigma) || !positive(lengths.output.sigma)) {
    return bad("--input-sigma/--output-sigma", std::min(lengths.input.sigma, lengths.output.sigma),
               "must be > 0");
  }
  if (!mix_lengths.empty()) {
    if (mix.size() != arrivals.schedule.size()) {
      return Status::InvalidArgument(
          "--mix: weights for " + std::to_string(mix.size()) +
          (mix.size() == 1 ? " segment" : " segments") + ", --schedule has " +
          std::to_string(arrivals.schedule.size()) + ": give one mix a segment");
    }
    for (size_t s = 0; s < mix.size(); ++s) {
      const std::string segment = "--mix segment " + std::to_string(s + 1);
      if (mix[s].size() != mix_lengths.size()) {
        return Status::InvalidArgument(segment + ": " + std::to_string(mix[s].size()) +
                                       " weights for " + std::to_string(mix_lengths.size()) +
                                       " length models (--from)");
      }
      double total = 0;
      for (double w : mix[s]) {
        if (!(w >= 0 && std::isfinite(w)))
          return bad(segment, w, "weights must be finite and >= 0");
        total += w;
      }
      if (!(total > 0)) return bad(segment, total, "its weights must not all be 0");
    }
    for (const LengthModel& m : mix_lengths) {
      if (m.kind == LengthModel::kEmpirical && m.samples.empty())
        return Status::InvalidArgument("empirical lengths need a trace with at least one request");
    }
  }
  if (conversations.turns_mean != 0 &&
      !(conversations.turns_mean >= 1 && std::isfinite(conversations.turns_mean))) {
    return bad("--turns", conversations.turns_mean, "must be >= 1 (or 0 for independent requests)");
  }
  if (conversations.turns_mean >= 1 && !positive(conversations.think_time_s)) {
    return bad("--think-time", conversations.think_time_s, "must be > 0");
  }
  return Status::Ok();
}

Result<std::unique_ptr<TraceReader>> Synthesize(const SynthSpec& spec) {
  FATHOM_RETURN_IF_ERROR(spec.Validate());
  return std::unique_ptr<TraceReader>(std::make_unique<SyntheticReader>(spec));
}

Result<Lognormal> FitLognormal(const std::vector<int64_t>& values,
                               std::optional<int64_t> censor_at) {
  std::map<int64_t, double> counts;
  double censored = 0;
  for (int64_t v : values) {
    if (v < 1)
      return Status::InvalidArgument("lognormal fit: length " + std::to_string(v) +
                                     " must be >= 1");
    if (censor_at && v >= *censor_at) {
      censored += 1;
    } else {
      counts[v] += 1;
    }
  }
  if (counts.size() < 2)
    return Status::InvalidArgument("lognormal fit: needs at least two distinct uncensored lengths");
  std::vector<std::pair<double, double>> data;
  double n = 0, sum = 0, sum2 = 0;
  for (const auto& [v, w] : counts) {
    const double x = std::log(static_cast<double>(v));
    data.emplace_back(x, w);
    n += w;
    sum += w * x;
    sum2 += w * x * x;
  }
  // Start from the uncensored moments; Ceres corrects for the censored tail.
  const double mean = sum / n;
  double params[2] = {mean, 0.5 * std::log(std::max(sum2 / n - mean * mean, 1e-6))};
  ceres::GradientProblem problem(new CensoredLognormalNll(
      std::move(data), censor_at ? std::log(static_cast<double>(*censor_at)) : 0.0, censored));
  ceres::GradientProblemSolver::Options options;
  options.max_num_iterations = 200;
  ceres::GradientProblemSolver::Summary summary;
  ceres::Solve(options, problem, params, &summary);
  if (!summary.IsSolutionUsable()) {
    return Status::InvalidArgument("lognormal fit did not converge: " + summary.message);
  }
  return Lognormal{params[0], std::exp(params[1])};
}

Result<LengthModel> FitLengthModel(TraceReader& reader, bool parametric,
                                   std::optional<int64_t> output_cap) {
  LengthModel model;
  model.kind = parametric ? LengthModel::kLognormal : LengthModel::kEmpirical;
  std::vector<int64_t> inputs, outputs;
  int64_t longest_input = 0;
  Request r;
  while (true) {
    FATHOM_ASSIGN_OR_RETURN(bool more, reader.Next(&r));
    if (!more) break;
    inputs.push_back(r.input_tokens);
    outputs.push_back(r.output_tokens);
    longest_input = std::max(longest_input, r.input_tokens);
  }
  if (inputs.empty()) return Status::InvalidArgument("the length model's trace has no requests");
  model.max_input = longest_input;
  if (output_cap) model.max_output = *output_cap;
  if (!parametric) {
    for (size_t i = 0; i < inputs.size(); ++i) model.samples.emplace_back(inputs[i], outputs[i]);
    return model;
  }
  FATHOM_ASSIGN_OR_RETURN(model.input, FitLognormal(inputs, std::nullopt));
  FATHOM_ASSIGN_OR_RETURN(model.output, FitLognormal(outputs, output_cap));
  // Correlation of the logs, from the sample.
  double mx = 0, my = 0;
  const double n = static_cast<double>(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    mx += std::log(static_cast<double>(inputs[i])) / n;
    my += std::log(static_cast<double>(outputs[i])) / n;
  }
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const double dx = std::log(static_cast<double>(inputs[i])) - mx;
    const double dy = std::log(static_cast<double>(outputs[i])) - my;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  model.correlation = sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
  return model;
}

}  // namespace fathom::traces
