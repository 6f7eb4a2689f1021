#include <cstdio>
#include <memory>

#include "apps/fathom/commands.h"
#include "apps/fathom/trace_flags.h"
#include "base/json_fields.h"
#include "traces/stats.h"
#include "traces/synth.h"
#include "traces/transforms.h"
#include "traces/writer.h"

namespace fathom::cli {
namespace {

struct StatsFlags {
  std::string path;
  TraceReadFlags read;
  bool json = false;
};

struct ConvertFlags {
  std::vector<std::string> inputs;
  std::string out;
  std::string to = "jsonl";
  std::string combine = "concat";
  TraceReadFlags read;
  traces::TransformOptions transform;
  std::optional<int64_t> sample;
  std::optional<int64_t> equal_issue;
};

struct SynthFlags {
  traces::SynthSpec spec;
  std::string out;
  std::string to = "jsonl";
  std::string arrival = "poisson";
  std::string schedule;
  std::string lengths = "lognormal";
  std::vector<std::string> from;
  std::string mix;  // per --schedule segment, weights of the --from traces: "0.8/0.2,0.3/0.7"
  TraceReadFlags read;
};

Status Stats(const StatsFlags& f) {
  FATHOM_ASSIGN_OR_RETURN(auto reader, OpenTraceWithFlags(f.path, f.read));
  traces::StatsAccumulator acc;
  traces::Request r;
  while (true) {
    FATHOM_ASSIGN_OR_RETURN(bool more, reader->Next(&r));
    if (!more) break;
    acc.Add(r);
  }
  const traces::TraceStats s = acc.Finish();
  const traces::ReadCounters& c = reader->counters();
  if (f.json) {
    auto lengths = [](const traces::LengthSummary& l) {
      OrderedJson j;
      j["mean"] = l.mean;
      j["p50"] = l.p50;
      j["p90"] = l.p90;
      j["p99"] = l.p99;
      j["max"] = l.max;
      return j;
    };
    OrderedJson j;
    j["file"] = f.path;
    j["format"] = traces::Name(reader->format());
    j["requests"] = s.requests;
    j["duration_s"] = s.duration_s;
    j["rate_per_s"] = s.rate_per_s;
    j["input_tokens"] = lengths(s.input);
    j["output_tokens"] = lengths(s.output);
    j["burstiness_cv"] = s.burstiness_cv;
    j["prefix_reuse_ratio"] = s.prefix_reuse_ratio;
    j["timed"] = s.timed;
    j["skipped_bad_lines"] = c.skipped_bad;
    j["filtered"] = c.filtered;
    j["failed_responses"] = c.failed_responses;
    j["capped_outputs"] = c.capped;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s (%s)\n", f.path.c_str(), std::string(traces::Name(reader->format())).c_str());
    std::printf("  requests        %lld\n", static_cast<long long>(s.requests));
    if (s.timed) {
      std::printf(
          "  duration        %.1f s\n  rate            %.3f req/s\n  burstiness CV   %.3f\n",
          s.duration_s, s.rate_per_s, s.burstiness_cv);
    } else {
      std::printf("  arrivals        none (lengths only)\n");
    }
    std::printf("  %-14s %10s %8s %8s %8s %8s\n", "tokens", "mean", "p50", "p90", "p99", "max");
    for (const auto& [name, l] : {std::pair{"input", s.input}, std::pair{"output", s.output}}) {
      std::printf("  %-14s %10.2f %8lld %8lld %8lld %8lld\n", name, l.mean,
                  static_cast<long long>(l.p50), static_cast<long long>(l.p90),
                  static_cast<long long>(l.p99), static_cast<long long>(l.max));
    }
    if (s.prefix_blocks > 0) {
      std::printf("  prefix blocks   %lld, %.1f%% repeated\n",
                  static_cast<long long>(s.prefix_blocks), 100 * s.prefix_reuse_ratio);
    }
    if (c.skipped_bad > 0)
      std::printf("  skipped lines   %lld (first: %s)\n", static_cast<long long>(c.skipped_bad),
                  c.first_error.c_str());
    if (c.filtered > 0) std::printf("  filtered        %lld\n", static_cast<long long>(c.filtered));
    if (c.failed_responses > 0)
      std::printf("  failed responses %lld (left out)\n",
                  static_cast<long long>(c.failed_responses));
    if (c.capped > 0) std::printf("  outputs capped  %lld\n", static_cast<long long>(c.capped));
  }
  return Status::Ok();
}

Status Write(traces::TraceReader& reader, const std::string& out, const std::string& to) {
  FATHOM_ASSIGN_OR_RETURN(traces::TraceFormat format, traces::ParseTraceFormat(to));
  FATHOM_ASSIGN_OR_RETURN(int64_t n, traces::WriteTrace(reader, out, format));
  std::fprintf(stderr, "fathom: wrote %lld requests to %s\n", static_cast<long long>(n),
               out.c_str());
  return Status::Ok();
}

Status Convert(const ConvertFlags& f) {
  FATHOM_RETURN_IF_ERROR(f.transform.Validate());
  for (const auto& [flag, count] :
       {std::pair{"--sample", f.sample}, {"--equal-issue", f.equal_issue}}) {
    if (count && !(*count >= 1 && *count <= traces::kMaxTraceRequests)) {
      return Status::InvalidArgument(std::string(flag) + " = " + std::to_string(*count) +
                                     ": must be from 1 to 100,000,000");
    }
  }
  if (f.combine != "concat" && f.combine != "mix") {
    return Status::InvalidArgument("--combine = \"" + f.combine + "\": must be concat or mix");
  }
  std::vector<std::unique_ptr<traces::TraceReader>> inputs;
  for (const auto& path : f.inputs) {
    FATHOM_ASSIGN_OR_RETURN(auto reader, OpenTraceWithFlags(path, f.read));
    inputs.push_back(std::move(reader));
  }
  std::unique_ptr<traces::TraceReader> reader =
      inputs.size() == 1
          ? std::move(inputs[0])
          : traces::Combine(std::move(inputs), f.combine == "mix" ? traces::CombineMode::kMix
                                                                  : traces::CombineMode::kConcat);
  reader = traces::Transform(std::move(reader), f.transform);
  if (f.sample || f.equal_issue) {
    // These need the whole dataset in memory.
    std::vector<traces::Request> dataset;
    if (f.sample) {
      FATHOM_ASSIGN_OR_RETURN(
          dataset, traces::SampleWithoutReplacement(*reader, *f.sample, f.transform.seed));
    } else {
      FATHOM_ASSIGN_OR_RETURN(dataset, traces::ReadAll(*reader));
    }
    ReportReadCounters("input", reader->counters());
    const int64_t total = f.equal_issue ? traces::EqualIssueCount(dataset.size(), *f.equal_issue)
                                        : static_cast<int64_t>(dataset.size());
    auto repeated = traces::Repeat(std::move(dataset), total);
    return Write(*repeated, f.out, f.to);
  }
  FATHOM_RETURN_IF_ERROR(Write(*reader, f.out, f.to));
  ReportReadCounters("input", reader->counters());
  return Status::Ok();
}

Status Synth(SynthFlags f) {
  if (f.spec.requests > traces::kMaxTraceRequests) {
    return Status::InvalidArgument("--requests = " + std::to_string(f.spec.requests) +
                                   ": must be at most 100,000,000");
  }
  if (f.arrival == "poisson") {
    f.spec.arrivals.kind = traces::ArrivalKind::kPoisson;
  } else if (f.arrival == "gamma") {
    f.spec.arrivals.kind = traces::ArrivalKind::kGamma;
  } else if (f.arrival == "weibull") {
    f.spec.arrivals.kind = traces::ArrivalKind::kWeibull;
  } else {
    return Status::InvalidArgument("--arrival = \"" + f.arrival +
                                   "\": must be poisson, gamma or weibull");
  }
  if (!f.schedule.empty()) {
    FATHOM_ASSIGN_OR_RETURN(f.spec.arrivals.schedule, ParseSchedule("--schedule", f.schedule));
  }
  if (f.from.size() > 1 && f.mix.empty())
    return Status::InvalidArgument("several --from traces need --mix, their weights a segment");
  if (!f.mix.empty() && f.from.size() < 2)
    return Status::InvalidArgument("--mix needs at least two --from traces");
  if (f.lengths == "empirical" || f.lengths == "fit") {
    if (f.from.empty())
      return Status::InvalidArgument("--lengths " + f.lengths + " needs --from TRACE");
    for (const std::string& from : f.from) {
      FATHOM_ASSIGN_OR_RETURN(auto reader, OpenTraceWithFlags(from, f.read));
      FATHOM_ASSIGN_OR_RETURN(
          traces::LengthModel model,
          traces::FitLengthModel(*reader, f.lengths == "fit", f.read.max_output));
      if (f.lengths == "fit") {
        std::fprintf(stderr,
                     "fathom: %s: fitted lognormal lengths: input mu %.3f sigma %.3f, output mu "
                     "%.3f sigma %.3f, correlation %.3f\n",
                     from.c_str(), model.input.mu, model.input.sigma, model.output.mu,
                     model.output.sigma, model.correlation);
      }
      f.spec.lengths = model;
      if (f.from.size() > 1) f.spec.mix_lengths.push_back(std::move(model));
    }
    if (!f.mix.empty()) {
      FATHOM_ASSIGN_OR_RETURN(f.spec.mix, ParseMix("--mix", f.mix));
    }
  } else if (!f.from.empty()) {
    return Status::InvalidArgument("--from: for --lengths empirical or fit");
  } else if (f.lengths != "lognormal") {
    return Status::InvalidArgument("--lengths = \"" + f.lengths +
                                   "\": must be lognormal, empirical or fit");
  } else if (f.read.max_output) {
    f.spec.lengths.max_output = *f.read.max_output;
  }
  FATHOM_ASSIGN_OR_RETURN(auto reader, traces::Synthesize(f.spec));
  return Write(*reader, f.out, f.to);
}

}  // namespace

void RegisterTrace(CLI::App& app, Status* result) {
  CLI::App* cmd = app.add_subcommand("trace", "Workload statistics, conversion and synthesis");
  cmd->require_subcommand(1);

  auto stats = std::make_shared<StatsFlags>();
  CLI::App* s =
      cmd->add_subcommand("stats", "Requests, rate, length percentiles, burstiness, prefix reuse");
  s->add_option("file", stats->path, "Trace file (format detected unless --format)")->required();
  AddTraceReadFlags(s, &stats->read);
  s->add_flag("--json", stats->json, "Print JSON");
  s->callback([stats, result] { *result = Stats(*stats); });

  auto conv = std::make_shared<ConvertFlags>();
  CLI::App* c =
      cmd->add_subcommand("convert", "Transform, combine and rewrite traces as CSV or JSONL");
  c->add_option("files", conv->inputs, "Input traces")->required();
  c->add_option("--out", conv->out, "Output file")->required();
  c->add_option("--to", conv->to, "csv or jsonl")->capture_default_str();
  c->add_option("--combine", conv->combine, "Several inputs: concat or mix (by arrival time)")
      ->capture_default_str();
  AddTraceReadFlags(c, &conv->read);
  c->add_option("--min-input", conv->transform.min_input,
                "Keep requests with at least this many input tokens");
  c->add_option("--max-input", conv->transform.max_input,
                "Keep requests with at most this many input tokens");
  c->add_option("--min-output", conv->transform.min_output,
                "Keep requests with at least this many output tokens");
  c->add_option("--max-output-filter", conv->transform.max_output,
                "Keep requests with at most this many output tokens");
  c->add_option("--sample-fraction", conv->transform.sample_fraction,
                "Keep each request with this probability");
  c->add_option("--head", conv->transform.head, "Keep the first N requests");
  c->add_option("--time-scale", conv->transform.time_scale,
                "Multiply arrival times (0.5 doubles the rate)");
  c->add_option("--rate", conv->transform.rate,
                "Replace arrivals with a Poisson process at this rate (req/s)");
  c->add_option("--seed", conv->transform.seed, "Seed for sampling and re-timing")
      ->capture_default_str();
  c->add_option("--sample", conv->sample, "Exactly N requests drawn without replacement");
  c->add_option(
      "--equal-issue", conv->equal_issue,
      "Repeat the data set to the smallest multiple of its size >= N (MLPerf equal issue)");
  c->callback([conv, result] { *result = Convert(*conv); });

  auto syn = std::make_shared<SynthFlags>();
  CLI::App* y = cmd->add_subcommand("synth", "Generate a synthetic workload");
  y->add_option("--out", syn->out, "Output file")->required();
  y->add_option("--to", syn->to, "csv or jsonl")->capture_default_str();
  y->add_option("--requests", syn->spec.requests, "Number of requests")->capture_default_str();
  y->add_option("--duration", syn->spec.duration_s, "Stop at this time (s)");
  y->add_option("--arrival", syn->arrival, "poisson, gamma or weibull")->capture_default_str();
  y->add_option("--rate", syn->spec.arrivals.rate_per_s, "Mean arrival rate (req/s)")
      ->capture_default_str();
  y->add_option("--cv", syn->spec.arrivals.cv, "Gamma: coefficient of variation of the gaps")
      ->capture_default_str();
  y->add_option("--weibull-shape", syn->spec.arrivals.weibull_shape, "Weibull shape k")
      ->capture_default_str();
  y->add_option("--schedule", syn->schedule,
                "Piecewise rates DURATION_S:RATE,... (e.g. a diurnal curve)");
  y->add_option("--lengths", syn->lengths,
                "lognormal, empirical (resample --from) or fit (lognormal fitted to --from)")
      ->capture_default_str();
  y->add_option("--from", syn->from,
                "Trace whose lengths to resample or fit; several, with --mix, for a shifting mix");
  y->add_option("--mix", syn->mix,
                "With several --from and --schedule: each segment's weights of the --from traces, "
                "W/W/...,... (e.g. 0.8/0.2,0.3/0.7)");
  AddTraceReadFlags(y, &syn->read);
  y->add_option("--input-mu", syn->spec.lengths.input.mu, "Lognormal input: mean of ln(tokens)")
      ->capture_default_str();
  y->add_option("--input-sigma", syn->spec.lengths.input.sigma,
                "Lognormal input: std of ln(tokens)")
      ->capture_default_str();
  y->add_option("--output-mu", syn->spec.lengths.output.mu, "Lognormal output: mean of ln(tokens)")
      ->capture_default_str();
  y->add_option("--output-sigma", syn->spec.lengths.output.sigma,
                "Lognormal output: std of ln(tokens)")
      ->capture_default_str();
  y->add_option("--correlation", syn->spec.lengths.correlation,
                "Correlation of log input and log output")
      ->capture_default_str();
  y->add_option("--turns", syn->spec.conversations.turns_mean,
                "Mean turns per conversation (0: independent requests)");
  y->add_option("--think-time", syn->spec.conversations.think_time_s,
                "Mean pause between turns (s)")
      ->capture_default_str();
  y->add_option("--system-prompt", syn->spec.conversations.system_prompt_tokens,
                "Tokens of a prompt every conversation shares");
  y->add_option("--seed", syn->spec.seed, "Random seed")->capture_default_str();
  y->callback([syn, result] { *result = Synth(*syn); });
}

}  // namespace fathom::cli
