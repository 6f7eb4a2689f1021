#include "tuner/sweep/sweep_plan.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "base/format.h"
#include "base/json_fields.h"
#include "tuner/search/tuner.h"

namespace fathom::tuner {
namespace {

// Reads the arrays and objects of a plan, keeping the first error (as JsonFields does).
class PlanReader {
 public:
  PlanReader(const Json& obj, std::string source) : fields_(obj, std::move(source)), obj_(obj) {}

  JsonFields& fields() { return fields_; }

  // Fails on a key not in `known`: a misspelt axis would otherwise be silently ignored.
  void OnlyKeys(const std::set<std::string>& known) {
    for (const auto& [key, value] : obj_.items()) {
      if (known.count(key) == 0) {
        std::string names;
        for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
        fields_.Fail(key, "", "unknown field (known: " + names + ")");
      }
    }
  }

  // An array of `what`, each checked by `read` (which returns false after a Fail); `required`
  // arrays must be given and not empty.
  template <typename T, typename Read>
  std::vector<T> Array(const std::string& key, bool required, const char* what, Read read) {
    std::vector<T> out;
    if (!fields_.Has(key)) {
      if (required)
        fields_.Fail(key, "", std::string("missing (required: a non-empty array of ") + what + ")");
      return out;
    }
    const Json& a = obj_.at(key);
    if (!a.is_array() || (required && a.empty())) {
      fields_.Fail(key, a.dump(), std::string("must be a non-empty array of ") + what);
      return out;
    }
    for (size_t i = 0; i < a.size(); ++i) {
      T value{};
      if (!read(key + "[" + std::to_string(i) + "]", a[i], &value)) return out;
      out.push_back(value);
    }
    return out;
  }

  std::vector<std::string> Strings(const std::string& key, bool required) {
    return Array<std::string>(key, required, "strings",
                              [&](const std::string& at, const Json& v, std::string* out) {
                                if (!v.is_string() || v.get<std::string>().empty())
                                  return Fail(at, v, "must be a non-empty string");
                                *out = v.get<std::string>();
                                return true;
                              });
  }

  template <typename Int>
  std::vector<Int> PositiveInts(const std::string& key, bool required) {
    return Array<Int>(key, required, "positive integers",
                      [&](const std::string& at, const Json& v, Int* out) {
                        if (!v.is_number_integer() || v.get<int64_t>() < 1 ||
                            v.get<int64_t>() > (int64_t{1} << 30)) {
                          return Fail(at, v, "must be an integer from 1 to 2^30");
                        }
                        *out = static_cast<Int>(v.get<int64_t>());
                        return true;
                      });
  }

  bool Fail(const std::string& at, const Json& v, const std::string& rule) {
    fields_.Fail(at, v.dump(), rule);
    return false;
  }

 private:
  JsonFields fields_;
  const Json& obj_;
};

// A positive, finite number of milliseconds, or nothing.
std::optional<double> Milliseconds(JsonFields& f, const std::string& key) {
  if (!f.Has(key)) return std::nullopt;
  const double ms = f.Double(key);
  if (!std::isfinite(ms) || ms <= 0)
    f.Fail(key, StrFormat("%g", ms), "must be a finite number of milliseconds > 0");
  return ms;
}

Status ReadTuneSettings(const Json& j, const std::string& source, SweepPlan* plan) {
  if (!j.is_object())
    return Status::InvalidArgument(source + ": must be an object of tune settings");
  PlanReader r(j, source);
  r.OnlyKeys({"weights", "kv", "max_batch", "max_num_tokens", "disaggregated", "prune", "samples",
              "dataset_samples", "probe_duration_s", "probe_max_samples", "qps_steps", "seed",
              "cost_model"});
  JsonFields& f = r.fields();
  plan->weights = r.Strings("weights", false);
  if (f.Has("kv")) plan->kv = r.Strings("kv", true);
  if (f.Has("max_batch")) plan->max_batch = r.PositiveInts<int64_t>("max_batch", true);
  if (f.Has("max_num_tokens"))
    plan->max_num_tokens = r.PositiveInts<int64_t>("max_num_tokens", true);
  plan->disaggregated = f.Bool("disaggregated", true);
  plan->prune = f.Bool("prune", true);
  plan->samples = f.Int("samples", 0);
  if (plan->samples < 0)
    f.Fail("samples", std::to_string(plan->samples), "must be >= 0 (0: a submitter's run)");
  plan->dataset_samples = f.Int("dataset_samples", 0);
  if (plan->dataset_samples < 0) {
    f.Fail("dataset_samples", std::to_string(plan->dataset_samples),
           "must be >= 0 (0: the whole data set)");
  }
  if (f.Has("probe_duration_s")) {
    const double s = f.Double("probe_duration_s");
    if (!std::isfinite(s) || s <= 0)
      f.Fail("probe_duration_s", StrFormat("%g", s), "must be a finite number > 0");
    plan->probe_duration_s = s;
  }
  if (f.Has("probe_max_samples")) {
    const int64_t n = f.Int("probe_max_samples");
    if (n < TuneOptions{}.probe_min_samples)
      f.Fail("probe_max_samples", std::to_string(n), "must be >= 300");
    plan->probe_max_samples = n;
  }
  if (f.Has("qps_steps")) {
    const int64_t n = f.Int("qps_steps");
    if (n < 1 || n > 64) f.Fail("qps_steps", std::to_string(n), "must be from 1 to 64");
    plan->qps_steps = static_cast<int>(n);
  }
  const int64_t seed = f.Int("seed", 1);
  if (seed < 0) f.Fail("seed", std::to_string(seed), "must be >= 0");
  plan->seed = static_cast<uint64_t>(seed);
  plan->cost_model = f.String("cost_model", "calibrated");
  if (plan->cost_model != "calibrated" && plan->cost_model != "roofline") {
    f.Fail("cost_model", "\"" + plan->cost_model + "\"", "must be calibrated or roofline");
  }
  return f.status();
}

}  // namespace

std::string SweepCell::Label() const {
  std::string s = model + " on " + std::to_string(gpus) + " x " + hardware + ", " +
                  std::string(sim::Name(scenario));
  if (!stack.empty()) s += ", stack " + stack;
  if (limits.ttft_ms) s += StrFormat(", TTFT %g ms", *limits.ttft_ms);
  if (limits.tpot_ms) s += StrFormat(", TPOT %g ms", *limits.tpot_ms);
  if (!trace.empty()) s += ", trace " + trace;
  return s;
}

std::vector<SweepCell> SweepPlan::Cells() const {
  const std::vector<std::string> stack_axis =
      stacks.empty() ? std::vector<std::string>{""} : stacks;
  const std::vector<std::string> trace_axis =
      traces.empty() ? std::vector<std::string>{""} : traces;
  std::vector<SweepCell> cells;
  for (const std::string& model : models) {
    for (const std::string& gpu : hardware) {
      for (int n : gpus) {
        for (sim::Scenario scenario : scenarios) {
          std::vector<SweepLimits> limit_axis = {SweepLimits{}};
          if (ServerLike(scenario) && !limits.empty()) limit_axis = limits;
          for (const std::string& stack : stack_axis) {
            for (const SweepLimits& l : limit_axis) {
              for (const std::string& trace : trace_axis) {
                cells.push_back({model, gpu, n, scenario, stack, l, trace});
              }
            }
          }
        }
      }
    }
  }
  return cells;
}

Result<SweepPlan> LoadSweepPlan(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path));
  if (!j.is_object())
    return Status::InvalidArgument(path + ": must be a JSON object (a sweep plan)");
  SweepPlan plan;
  plan.path = path;
  PlanReader r(j, path);
  r.OnlyKeys(
      {"models", "hardware", "gpus", "scenarios", "stacks", "limits", "traces", "prices", "tune"});
  JsonFields& f = r.fields();
  plan.models = r.Strings("models", true);
  plan.hardware = r.Strings("hardware", true);
  plan.gpus = r.PositiveInts<int>("gpus", true);
  plan.scenarios = r.Array<sim::Scenario>(
      "scenarios", true, "scenarios",
      [&](const std::string& at, const Json& v, sim::Scenario* out) {
        constexpr const char* kRule = "must be offline, server or interactive";
        if (!v.is_string()) return r.Fail(at, v, kRule);
        auto s = sim::ParseScenario(v.get<std::string>());
        if (!s.ok() || !(*s == sim::Scenario::kOffline || ServerLike(*s)))
          return r.Fail(at, v, kRule);
        *out = *s;
        return true;
      });
  plan.stacks = r.Strings("stacks", false);
  Status limit_error;
  plan.limits = r.Array<SweepLimits>(
      "limits", false, "objects {\"ttft_ms\": X, \"tpot_ms\": Y}",
      [&](const std::string& at, const Json& v, SweepLimits* out) {
        if (!v.is_object() || v.empty())
          return r.Fail(at, v, "must be an object with ttft_ms and/or tpot_ms");
        PlanReader limit(v, path + ": " + at);
        limit.OnlyKeys({"ttft_ms", "tpot_ms"});
        out->ttft_ms = Milliseconds(limit.fields(), "ttft_ms");
        out->tpot_ms = Milliseconds(limit.fields(), "tpot_ms");
        limit_error = limit.fields().status();
        return limit_error.ok();
      });
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  for (const std::string& trace : r.Strings("traces", false)) {
    plan.traces.push_back(std::filesystem::path(trace).is_absolute() ? trace
                                                                     : (folder / trace).string());
  }
  if (f.Has("prices")) {
    const Json& prices = j.at("prices");
    if (!prices.is_object())
      f.Fail("prices", prices.dump(), "must be an object of GPU name: USD per GPU-hour");
    if (prices.is_object()) {
      for (const auto& [gpu, usd] : prices.items()) {
        if (!usd.is_number() || !std::isfinite(usd.get<double>()) || usd.get<double>() <= 0) {
          r.Fail("prices." + gpu, usd, "must be USD per GPU-hour > 0");
          break;
        }
        plan.prices[gpu] = usd.get<double>();
      }
    }
  }
  FATHOM_RETURN_IF_ERROR(f.status());
  FATHOM_RETURN_IF_ERROR(limit_error);
  if (j.contains("tune"))
    FATHOM_RETURN_IF_ERROR(ReadTuneSettings(j.at("tune"), path + ": tune", &plan));
  return plan;
}

Result<Shard> ParseShard(const std::string& text) {
  Shard s;
  const size_t slash = text.find('/');
  size_t used_i = 0, used_n = 0;
  try {
    if (slash != std::string::npos) {
      s.index = std::stoi(text.substr(0, slash), &used_i);
      s.count = std::stoi(text.substr(slash + 1), &used_n);
    }
  } catch (const std::exception&) {
    used_i = 0;
  }
  if (slash == std::string::npos || used_i != slash || used_n != text.size() - slash - 1 ||
      s.count < 1 || s.index < 0 || s.index >= s.count) {
    return Status::InvalidArgument("--shard = \"" + text +
                                   "\": must be I/N with 0 <= I < N (a Slurm array's " +
                                   "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)");
  }
  return s;
}

std::vector<int> BalanceShards(const std::vector<double>& costs, int shards) {
  std::vector<size_t> order(costs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<size_t>(shards), 0.0);
  std::vector<int> shard(costs.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    shard[i] = static_cast<int>(least);
    load[static_cast<size_t>(least)] += costs[i];
  }
  return shard;
}

}  // namespace fathom::tuner
