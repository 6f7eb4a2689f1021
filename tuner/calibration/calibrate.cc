#include "tuner/calibration/calibrate.h"

#include <ceres/ceres.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <tuple>

#include "base/files.h"
#include "base/format.h"
#include "base/line_reader.h"
#include "base/stats.h"
#include "sim/mlperf.h"
#include "sim/simulator.h"
#include "sim/time_model.h"
#include "traces/benchmark.h"
#include "traces/reader.h"
#include "traces/transforms.h"
#include "tuner/calibration/ceres_fit.h"
#include "tuner/search/tuner.h"

namespace fathom::tuner {
namespace {

std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    out.push_back(
        line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

}  // namespace

const CalibrationSetup::Entry* FindDeployment(const CalibrationSetup& setup,
                                              const PublishedResult& row) {
  for (const auto& e : setup.deployments) {
    if (e.model == row.model && e.hardware == row.accelerator &&
        (e.scenario == "*" || e.scenario == row.scenario) &&
        (e.submitter.empty() || e.submitter == row.submitter) &&
        e.deployment.TotalGpus() == row.gpus)
      return &e;
  }
  return nullptr;
}

namespace {

// Results files of rows other engines' harnesses produced: the file's prefix, the engine, and the
// prefix of its deployments file (published_deployments_<prefix><round>.json).
struct EngineFiles {
  const char* results_prefix;
  const char* engine;
  const char* setup_prefix;
};
constexpr EngineFiles kEngineFiles[] = {{"mlperf_vllm_", "vLLM", "vllm_"},
                                        {"mlperf_sglang_", "SGLang", "sglang_"}};

const EngineFiles* EngineFilesOf(const std::string& results) {
  const std::string name = std::filesystem::path(results).filename().string();
  for (const EngineFiles& e : kEngineFiles)
    if (name.rfind(e.results_prefix, 0) == 0) return &e;
  return nullptr;
}

}  // namespace

std::string ResultsEngine(const std::string& results) {
  const EngineFiles* e = EngineFilesOf(results);
  return e != nullptr ? e->engine : "TensorRT-LLM";
}

std::string DefaultSetupPath(const std::string& round, const std::string& results) {
  const EngineFiles* e = EngineFilesOf(results);
  return DataDir() + "/models/calibration/published_deployments_" +
         (e != nullptr ? e->setup_prefix : "") + round + ".json";
}

Result<std::vector<PublishedResult>> LoadPublishedResults(const std::string& path, Env* env) {
  auto opened = LineReader::Open(path, env);
  if (!opened.ok()) return Status::NotFound(path + ": cannot open results file");
  LineReader& lines = **opened;  // also ends CRLF lines, as MLCommons' exports have
  std::string_view view;
  std::string line;
  auto next_line = [&]() {
    if (!lines.Next(&view)) return false;
    line.assign(view);
    return true;
  };
  if (!next_line()) {
    FATHOM_RETURN_IF_ERROR(lines.status());
    return Status::InvalidArgument(path + ":1: empty file");
  }
  const std::vector<std::string> header = SplitCsvLine(line);
  auto col = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  };
  const char* required[] = {"submitter",   "system",    "accelerator",  "gpus",
                            "model",       "scenario",  "tokens_per_s", "ttft_p99_ms",
                            "tpot_p99_ms", "target_qps"};
  for (const char* r : required) {
    if (col(r) < 0) return Status::InvalidArgument(path + ":1: missing column " + std::string(r));
  }
  std::vector<PublishedResult> rows;
  int line_no = 1;
  while (next_line()) {
    ++line_no;
    if (line.empty()) continue;
    const std::vector<std::string> f = SplitCsvLine(line);
    if (f.size() < header.size()) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": " +
                                     std::to_string(f.size()) + " columns, expected " +
                                     std::to_string(header.size()));
    }
    PublishedResult r;
    r.line = line_no;
    if (col("version") >= 0) r.round = f[col("version")];
    r.submitter = f[col("submitter")];
    r.system = f[col("system")];
    r.accelerator = f[col("accelerator")];
    r.model = f[col("model")];
    r.scenario = f[col("scenario")];
    auto number = [&](const char* name, double* out, bool required_value) -> Status {
      const std::string& v = f[col(name)];
      if (v.empty() && !required_value) return Status::Ok();
      char* end = nullptr;
      *out = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(*out >= 0) || std::isinf(*out)) {
        return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": column " + name +
                                       ": \"" + v + "\" is not a non-negative number");
      }
      return Status::Ok();
    };
    double gpus = 0;
    FATHOM_RETURN_IF_ERROR(number("gpus", &gpus, true));
    r.gpus = static_cast<int>(gpus);
    FATHOM_RETURN_IF_ERROR(number("tokens_per_s", &r.tokens_per_s, true));
    const bool server = !r.offline();
    FATHOM_RETURN_IF_ERROR(number("ttft_p99_ms", &r.ttft_p99_ms, server));
    FATHOM_RETURN_IF_ERROR(number("tpot_p99_ms", &r.tpot_p99_ms, server));
    FATHOM_RETURN_IF_ERROR(number("target_qps", &r.target_qps, server));
    if (col("samples_per_s") >= 0)
      FATHOM_RETURN_IF_ERROR(number("samples_per_s", &r.samples_per_s, false));
    for (auto [name, out] : {std::pair{"samples_per_query", &r.samples_per_query},
                             {"min_query_count", &r.min_query_count}}) {
      if (col(name) < 0) continue;
      double v = 0;
      FATHOM_RETURN_IF_ERROR(number(name, &v, false));
      if (v > 1e9 || v != std::floor(v)) {
        return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": column " + name +
                                       ": \"" + f[col(name)] +
                                       "\" is not a whole number up to 1e9");
      }
      *out = static_cast<int64_t>(v);
    }
    rows.push_back(r);
  }
  FATHOM_RETURN_IF_ERROR(lines.status());
  return rows;
}

Result<CalibrationSetup> LoadCalibrationSetup(const std::string& path, int64_t samples,
                                              uint64_t seed) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path));
  CalibrationSetup setup;
  if (!j.contains("deployments") || !j["deployments"].is_array()) {
    return Status::InvalidArgument(path + ": field 'deployments': missing (required array)");
  }
  for (size_t i = 0; i < j["deployments"].size(); ++i) {
    const Json& e = j["deployments"][i];
    const std::string where = path + ": deployments[" + std::to_string(i) + "]";
    JsonFields f(e, where);
    CalibrationSetup::Entry entry;
    entry.model = f.String("model");
    entry.hardware = f.String("hardware");
    entry.scenario = f.String("scenario");
    entry.submitter = f.String("submitter", "");
    entry.samples = f.Int("samples", 0);
    FATHOM_RETURN_IF_ERROR(f.status());
    if (!e.contains("deployment"))
      return Status::InvalidArgument(where + ": field 'deployment': missing");
    Json dep = e["deployment"];
    dep["hardware"] = entry.hardware;
    FATHOM_ASSIGN_OR_RETURN(entry.deployment, sim::DeploymentFromJson(dep, where + ".deployment"));
    setup.deployments.push_back(std::move(entry));
  }
  if (j.contains("workloads")) {
    return Status::InvalidArgument(
        path + ": field 'workloads': no longer read; workloads are the benchmarks' data sets (" +
        traces::DefaultBenchmarksPath() + ")");
  }
  // Each benchmark's data set, under every name its rows may use.
  for (const traces::Benchmark& b : traces::MlperfBenchmarks()) {
    FATHOM_ASSIGN_OR_RETURN(std::vector<traces::Request> data, traces::BenchmarkDataset(b));
    if (samples > 0) {
      auto all = traces::Repeat(std::move(data), b.samples);
      FATHOM_ASSIGN_OR_RETURN(data, traces::SampleWithoutReplacement(*all, samples, seed));
    }
    setup.workloads[b.name] = std::move(data);
  }
  return setup;
}

int64_t RunLength(const PublishedResult& row, const CalibrationSetup::Entry& entry,
                  int64_t dataset_size, int64_t max_requests) {
  int64_t n = 0;
  if (entry.samples > 0) {
    n = entry.samples;  // the submitter's published sample count
  } else if (row.offline() && row.samples_per_query > 1) {
    n = row.samples_per_query;
  } else {
    // Server: 600 s of arrivals and at least the row's minimum, else the benchmark's minimum
    // Server run (DeepSeek-R1's 26,382 samples, published for v6.0 runs of the same harness),
    // padded to whole data sets.
    const traces::Benchmark* b = traces::FindBenchmark(traces::MlperfBenchmarks(), row.model);
    const int64_t least = row.min_query_count > 1 ? row.min_query_count
                          : b != nullptr          ? b->server_min_query_count
                                                  : 0;
    n = row.offline()
            ? sim::LoadGenOfflineSamples(dataset_size, row.samples_per_s)
            : traces::EqualIssueCount(
                  dataset_size,
                  std::max(least, sim::LoadGenServerSamples(dataset_size, row.target_qps)));
  }
  return max_requests > 0 ? std::min(n, max_requests) : n;
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(PublishedResult, line, round, submitter, system, accelerator,
                                   model, scenario, gpus, tokens_per_s, ttft_p99_ms, tpot_p99_ms,
                                   target_qps, samples_per_s, samples_per_query, min_query_count)

namespace {

// The run a row stands for: rows with the same deployment, workload, scenario, length and rate
// share one.
struct RowRun {
  const CalibrationSetup::Entry* entry;
  const std::vector<traces::Request>* workload;
  bool offline;
  int64_t n;
  double qps;
  using Key = std::tuple<const CalibrationSetup::Entry*, bool, int64_t, double>;
  Key key() const { return {entry, offline, n, qps}; }
};

Result<RowRun> PlanRun(const PublishedResult& row, const CalibrationSetup& setup,
                       int64_t max_requests) {
  const CalibrationSetup::Entry* entry = FindDeployment(setup, row);
  if (entry == nullptr) {
    return Status::InvalidArgument(
        "results line " + std::to_string(row.line) + ": no deployment known for " + row.model +
        " on " + std::to_string(row.gpus) + " " + row.accelerator + " (" + row.scenario + ")");
  }
  const traces::Benchmark* benchmark = traces::FindBenchmark(traces::MlperfBenchmarks(), row.model);
  auto workload = setup.workloads.find(benchmark != nullptr ? benchmark->name : row.model);
  if (workload == setup.workloads.end() || workload->second.empty()) {
    return Status::InvalidArgument("results line " + std::to_string(row.line) +
                                   ": no workload for " + row.model);
  }
  const int64_t n =
      RunLength(row, *entry, static_cast<int64_t>(workload->second.size()), max_requests);
  return RowRun{entry, &workload->second, row.offline(), n, row.offline() ? 0.0 : row.target_qps};
}

// A double as text that reads back to the same bits (hexadecimal), infinities and NaN included.
std::string Exact(double v) { return StrFormat("%a", v); }
double FromExact(const Json& text) { return std::strtod(text.get<std::string>().c_str(), nullptr); }

Json CalibrationJson(const models::Calibration& c) { return Json::parse(models::ToJson(c).dump()); }

}  // namespace

Result<std::array<bool, models::CostParams::kNumFitted>> FreeParams(
    const std::vector<std::string>& free_params) {
  const auto& names = models::CostParams::kFitted;
  for (const std::string& name : free_params) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string known;
      for (const char* n : names) known += (known.empty() ? "" : ", ") + std::string(n);
      return Status::InvalidArgument("--free = \"" + name + "\": not a fitted parameter (" + known +
                                     ")");
    }
  }
  std::array<bool, models::CostParams::kNumFitted> free{};
  for (int k = 0; k < models::CostParams::kNumFitted; ++k) {
    free[k] = free_params.empty() ||
              std::find(free_params.begin(), free_params.end(), names[k]) != free_params.end();
  }
  return free;
}

Calibrator::Calibrator(const CalibrationSetup& setup, const models::HardwareCatalog& catalog,
                       int64_t max_requests, WorkPool* pool)
    : setup_(setup), catalog_(catalog), max_requests_(max_requests), pool_(pool) {}

Status Calibrator::Spread(size_t n, const std::function<std::string(size_t)>& assign,
                          const std::function<Status(size_t, const std::string&)>& finish) const {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::vector<int64_t> items(n);
  for (size_t i = 0; i < n; ++i) items[i] = static_cast<int64_t>(i);
  WorkHandlers h;
  h.next = EachOf(std::move(items), [&](int64_t item) -> Result<std::string> {
    const auto start = Clock::now();
    std::string assignment = assign(static_cast<size_t>(item));
    ++items_;
    coordinator_s_ += since(start);
    return assignment;
  });
  h.compute = [this](const WorkUnit& unit) { return Compute(unit.assignment); };
  h.finish = [&](const WorkUnit& unit, const std::string& result) {
    const auto start = Clock::now();
    Status finished = finish(static_cast<size_t>(unit.id), result);
    coordinator_s_ += since(start);
    return finished;
  };
  return pool_->Run(h);
}

Status Calibrator::Serve() const { return Spread(0, {}, {}); }

Result<std::vector<RowPrediction>> Calibrator::PredictRows(
    const std::vector<PublishedResult>& rows, const models::Calibration& calibration) const {
  std::vector<RowRun> runs;
  std::vector<size_t> first_row;  // of each run
  std::map<RowRun::Key, size_t> run_of_key;
  std::vector<size_t> run_of_row;
  for (size_t r = 0; r < rows.size(); ++r) {
    FATHOM_ASSIGN_OR_RETURN(RowRun run, PlanRun(rows[r], setup_, max_requests_));
    auto [it, fresh] = run_of_key.emplace(run.key(), runs.size());
    if (fresh) {
      runs.push_back(run);
      first_row.push_back(r);
    }
    run_of_row.push_back(it->second);
  }
  const Json params = CalibrationJson(calibration);
  std::vector<Json> results(runs.size());
  FATHOM_RETURN_IF_ERROR(Spread(
      runs.size(),
      [&](size_t i) {
        return Json{{"task", "run"}, {"row", rows[first_row[i]]}, {"calibration", params}}.dump();
      },
      [&](size_t i, const std::string& result) {
        results[i] = Json::parse(result);
        return Status::Ok();
      }));

  std::vector<RowPrediction> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    const Json& result = results[run_of_row[r]];
    RowPrediction p;
    p.row = rows[r];
    p.deployment = result.at("layout").get<std::string>();
    p.requests = runs[run_of_row[r]].n;
    p.tokens_per_s = FromExact(result.at("tokens_per_s"));
    p.ttft_p99_ms = FromExact(result.at("ttft_p99_ms"));
    p.tpot_p99_ms = FromExact(result.at("tpot_p99_ms"));
    p.front_busy_share = FromExact(result.at("front_busy_share"));
    p.overloaded = result.at("overloaded").get<bool>();
    p.extrapolated =
        std::find(calibration.fitted_hardware.begin(), calibration.fitted_hardware.end(),
                  rows[r].accelerator) == calibration.fitted_hardware.end();
    out.push_back(p);
  }
  return out;
}

Status Calibrator::PredictCapacity(std::vector<RowPrediction>* predictions,
                                   const models::Calibration& calibration, bool at_limits) const {
  std::vector<size_t> server;
  for (size_t i = 0; i < predictions->size(); ++i) {
    if (!(*predictions)[i].row.offline()) server.push_back(i);
  }
  // Each row's search, then those the serving front bounds again with a front that costs nothing.
  struct Search {
    size_t row;
    bool front_free;
  };
  std::vector<Search> searches;
  for (const size_t i : server) searches.push_back({i, false});
  for (const size_t i : server) {
    if (at_limits && (*predictions)[i].FrontBound()) searches.push_back({i, true});
  }
  models::Calibration front_free = calibration;
  front_free.params.response_us = 0;
  const Json params = CalibrationJson(calibration), free_params = CalibrationJson(front_free);
  return Spread(
      searches.size(),
      [&](size_t k) {
        const Search& s = searches[k];
        return Json{{"task", "capacity"},
                    {"row", (*predictions)[s.row].row},
                    {"calibration", s.front_free ? free_params : params},
                    {"at_limits", at_limits && !s.front_free}}
            .dump();
      },
      [&](size_t k, const std::string& result) {
        RowPrediction& p = (*predictions)[searches[k].row];
        const Json j = Json::parse(result);
        if (searches[k].front_free) {  // what CapacityAtFittedFront() is set against
          const char* key = j.contains("qps_at_use") ? "qps_at_use" : "qps";
          p.has_front_free_capacity = j.contains(key);
          if (p.has_front_free_capacity) p.front_free_capacity_qps = FromExact(j.at(key));
          return Status::Ok();
        }
        p.has_capacity = j.contains("qps");
        if (p.has_capacity) p.capacity_qps = FromExact(j.at("qps"));
        p.limit_use = FromExact(j.at("limit_use"));
        p.has_capacity_at_use = j.contains("qps_at_use");
        if (p.has_capacity_at_use) p.capacity_at_use_qps = FromExact(j.at("qps_at_use"));
        return Status::Ok();
      });
}

bool RowPrediction::PublishedWithinFrontBound() const {
  return has_front_free_capacity && (has_capacity_at_use || has_capacity) &&
         CapacityAtFittedFront() <= row.target_qps && row.target_qps <= front_free_capacity_qps;
}

namespace {

// One row's simulation under `calibration`.
Result<Json> SimulateRow(const PublishedResult& row, const models::Calibration& calibration,
                         const CalibrationSetup& setup, const models::HardwareCatalog& catalog,
                         int64_t max_requests) {
  FATHOM_ASSIGN_OR_RETURN(RowRun run, PlanRun(row, setup, max_requests));
  auto resolved = sim::Resolve(run.entry->deployment, catalog,
                               sim::CalibratedFactory(calibration.params, nullptr));
  if (!resolved.ok())
    return resolved.status().WithContext("results line " + std::to_string(row.line));
  sim::ScenarioConfig sc;
  sc.min_duration_s = 0;
  std::unique_ptr<sim::RequestSource> source;
  if (run.offline) {
    sc.scenario = sim::Scenario::kOffline;
    source = sim::OfflineSource(*run.workload, run.n, 1);
  } else {
    sc.scenario = sim::Scenario::kServer;
    sc.qps = run.qps;
    source = sim::PoissonSource(*run.workload, run.n, run.qps, 1);
  }
  (*resolved)->spec.scenario = sc;
  const std::string layout = (*resolved)->layout.ToString();
  sim::Simulator simulator(std::move((*resolved)->spec), std::move(source));
  auto result = simulator.Run();
  if (!result.ok()) return result.status().WithContext("results line " + std::to_string(row.line));
  return Json{{"layout", layout},
              {"tokens_per_s", Exact(result->throughput_tokens_per_s)},
              {"ttft_p99_ms", Exact(result->ttft_p99_ms)},
              {"tpot_p99_ms", Exact(result->tpot_p99_ms)},
              {"front_busy_share", Exact(result->front_busy_share)},
              {"overloaded", result->overloaded}};
}

// One Server/Interactive row's capacity under `calibration`: the highest QPS within its limits
// ("qps"), and within the fraction of them the published run used ("limit_use", "qps_at_use"; use
// 0 where the row has no published p99s). `at_limits` false: the first only where the second is
// not computed or is the same search (use 1).
Result<Json> RowCapacity(const PublishedResult& row, const models::Calibration& calibration,
                         const CalibrationSetup& setup, const models::HardwareCatalog& catalog,
                         int64_t max_requests, bool at_limits) {
  const CalibrationSetup::Entry* entry = FindDeployment(setup, row);
  const traces::Benchmark* benchmark = traces::FindBenchmark(traces::MlperfBenchmarks(), row.model);
  auto scenario = sim::ParseScenario(row.scenario == "Interactive" ? "interactive" : "server");
  if (entry == nullptr || benchmark == nullptr || !scenario.ok()) {
    return Status::InvalidArgument("results line " + std::to_string(row.line) +
                                   ": no deployment or benchmark");
  }
  TuneOptions o;
  o.space.model = entry->deployment.model;
  o.space.hardware = entry->deployment.hardware;
  o.space.gpus = entry->deployment.TotalGpus();
  o.space.scenario = *scenario;
  o.benchmark = benchmark->name;
  o.dataset = setup.workloads.at(benchmark->name);
  // Each probe as long as LoadGen makes a run at its QPS (600 s of arrivals, at least the
  // benchmark's minimum Server run), or the row's published sample count where known.
  o.probe_min_samples = entry->samples > 0 ? entry->samples : row.min_query_count;
  o.probe_max_samples = entry->samples > 0 ? entry->samples : std::numeric_limits<int64_t>::max();
  if (max_requests > 0) o.probe_max_samples = std::min(o.probe_max_samples, max_requests);
  o.qps_steps = 12;
  o.jobs = 1;
  o.make_time = sim::CalibratedFactory(calibration.params, nullptr);
  // How close the published run came to its limits: the larger p99 over its limit.
  const auto limits = sim::MlperfLimits(benchmark->name, *scenario);
  double use = 0;
  if (limits && limits->ttft_ms > 0 && limits->tpot_ms > 0 && row.ttft_p99_ms > 0 &&
      row.tpot_p99_ms > 0) {
    use = std::min(1.0,
                   std::max(row.ttft_p99_ms / limits->ttft_ms, row.tpot_p99_ms / limits->tpot_ms));
  }
  auto search = [&](double fraction) -> Result<double> {
    if (limits) {
      o.ttft_limit_ms = fraction * limits->ttft_ms;
      o.tpot_limit_ms = fraction * limits->tpot_ms;
    }
    auto c = Evaluate(entry->deployment, o, catalog);
    if (!c.ok()) return c.status().WithContext("results line " + std::to_string(row.line));
    return c->qps;
  };
  Json out{{"limit_use", Exact(use)}};
  if (at_limits || use == 0 || use == 1) {
    FATHOM_ASSIGN_OR_RETURN(const double qps, search(1));
    out["qps"] = Exact(qps);
    if (use == 1) out["qps_at_use"] = Exact(qps);
  }
  if (use > 0 && use < 1) {
    FATHOM_ASSIGN_OR_RETURN(const double qps, search(use));
    out["qps_at_use"] = Exact(qps);
  }
  return out;
}

}  // namespace

double RobustLogError(double predicted, double published) {
  constexpr double kScale = 0.2;  // log errors well below this count in full
  const double e = std::log(std::max(predicted, 1e-9) / published);
  const double a2 = kScale * kScale;
  return std::copysign(std::sqrt(a2 * std::log1p(e * e / a2)), e);
}

namespace {

// First index of each runtime's (per-iteration, per-sequence) host pair in CostParams::kFitted,
// of each runtime's host time per launch, and of the experts' streaming rate.
using models::CostParams;
constexpr int kPythonHost = CostParams::FittedIndex("iteration_overhead_us"),
              kCppHost = CostParams::FittedIndex("cpp_iteration_overhead_us"),
              kCppLaunch = CostParams::FittedIndex("cpp_launch_us"),
              kEagerLaunch = CostParams::FittedIndex("eager_launch_us"),
              kExperts = CostParams::FittedIndex("grouped_memory_efficiency");
static_assert(kPythonHost + 1 == CostParams::FittedIndex("per_sequence_overhead_us") &&
              kCppHost + 1 == CostParams::FittedIndex("cpp_per_sequence_overhead_us"));

// Robust log(predicted / published) of throughput and, for server-type rows, of p99 TTFT and
// TPOT, in row order.
std::vector<double> Residuals(const std::vector<RowPrediction>& preds) {
  std::vector<double> r;
  for (const RowPrediction& p : preds) {
    r.push_back(RobustLogError(p.tokens_per_s, p.row.tokens_per_s));
    if (!p.row.offline()) {
      r.push_back(RobustLogError(p.ttft_p99_ms, p.row.ttft_p99_ms));
      r.push_back(RobustLogError(p.tpot_p99_ms, p.row.tpot_p99_ms));
    }
  }
  return r;
}

// Robust log(predicted / published) of each server-type row's capacity against the published QPS,
// in row order: the highest QPS within the fraction of the p99 limits the published run used (a
// run that stopped short of its limits says nothing about where they are), else within the limits;
// rows without either are 0.
std::vector<double> CapacityResiduals(const std::vector<RowPrediction>& preds) {
  std::vector<double> r;
  for (const RowPrediction& p : preds) {
    if (p.row.offline()) continue;
    const bool has = p.has_capacity_at_use || p.has_capacity;
    r.push_back(has && p.row.target_qps > 0
                    ? RobustLogError(p.has_capacity_at_use ? p.capacity_at_use_qps : p.capacity_qps,
                                     p.row.target_qps)
                    : 0.0);
  }
  return r;
}

// Residuals of all rows for one parameter vector: robust log(predicted / published) of
// throughput and, for server-type rows, of p99 TTFT and TPOT (a server row's throughput is its
// target QPS times its tokens per sample whenever the run keeps up, so its latencies carry
// what the row says about speed).
struct RowsResidual {
  const std::vector<PublishedResult>* rows;
  const Calibrator* calibrator;
  models::Calibration base;

  // The calibration at `params`; an error where they are not valid.
  Result<models::Calibration> At(const double* params) const {
    std::array<double, models::CostParams::kNumFitted> x;
    std::copy(params, params + x.size(), x.begin());
    return CalibrationAt(base, x);
  }

  bool operator()(double const* const* params, double* residuals) const {
    auto c = At(params[0]);
    if (!c.ok()) return false;
    auto pred = calibrator->PredictRows(*rows, *c);
    if (!pred.ok()) return false;
    const std::vector<double> r = Residuals(*pred);
    std::copy(r.begin(), r.end(), residuals);
    return true;
  }
};

// The cost at `x` of each runtime's rows (0: Python, 1: C++), in two parts: half the sum of
// squared residuals of their throughput and p99s (what the local solver fits) and of their Server
// capacity against the published QPS (a step function of the parameters, invisible to the
// solver's differences, but it tells apart basins that the p99s at the published QPS price about
// the same). Infinite where `x` cannot be priced.
struct BasinCosts {
  std::array<double, 2> fit = {kInf, kInf}, capacity = {kInf, kInf};
  double Total() const { return fit[0] + fit[1] + capacity[0] + capacity[1]; }
  static constexpr double kInf = std::numeric_limits<double>::infinity();
};
BasinCosts CostsAt(const RowsResidual& f,
                   const std::array<double, models::CostParams::kNumFitted>& x,
                   const std::vector<bool>& cpp_row) {
  auto c = f.At(x.data());
  if (!c.ok()) return {};
  auto pred = f.calibrator->PredictRows(*f.rows, *c);
  if (!pred.ok() || !f.calibrator->PredictCapacity(&*pred, *c, /*at_limits=*/false).ok()) return {};
  const std::vector<double> r = Residuals(*pred), capacity = CapacityResiduals(*pred);
  BasinCosts costs;
  costs.fit = costs.capacity = {0, 0};
  size_t i = 0, k = 0;
  for (size_t row = 0; row < pred->size(); ++row) {
    const int runtime = cpp_row[row] ? 1 : 0;
    for (int n = (*pred)[row].row.offline() ? 1 : 3; n > 0; --n, ++i)
      costs.fit[runtime] += 0.5 * r[i] * r[i];
    if (!(*pred)[row].row.offline()) {
      costs.capacity[runtime] += 0.5 * capacity[k] * capacity[k];
      ++k;
    }
  }
  return costs;
}

// Simulated metrics are piecewise constant in the parameters and the cost has several basins,
// which a local solver does not leave: start it from the best of `start` and a coarse grid of
// physically plausible points. The Python runtime's rows depend on its host costs only, the C++
// runtime's on theirs (`cpp_row` marks their rows), so each runtime's corner is chosen on its own
// rows: gemm {0.5, 0.8} x memory {0.5, 0.85} x experts (grouped_memory_efficiency) {as started,
// 0.3}, then iteration {2, 12, 30 ms} x sequence {5, 40 us} x launch (Python eager {10, 80 us},
// C++ {2, 10 us}). Two starts: the best on the throughput and p99s alone, and the best with the
// Server capacity too (CostsAt). The slow experts' corner is where engines without TensorRT-LLM's
// fused MoE layer stream them (PyTorch's FP8 grouped GEMMs 0.49 on an H200, AITER's MXFP4 ones
// about 0.2 on MI355X), a basin that a fit started at TensorRT-LLM's 0.765 does not reach.
struct Starts {
  std::array<double, models::CostParams::kNumFitted> by_fit, by_total;
};
Starts BestStarts(const RowsResidual& f,
                  const std::array<double, models::CostParams::kNumFitted>& start,
                  const std::vector<bool>& cpp_row,
                  const std::array<bool, models::CostParams::kNumFitted>& held) {
  using Params = std::array<double, models::CostParams::kNumFitted>;
  constexpr double kGemm[2] = {0.5, 0.8}, kMemory[2] = {0.5, 0.85},
                   kIteration[3] = {2000, 12000, 30000}, kSequence[2] = {5, 40},
                   kEager[2] = {10, 80}, kCpp[2] = {2, 10};
  const BasinCosts at_start = CostsAt(f, start, cpp_row);
  Starts out{start, start};
  double best_fit = at_start.fit[0] + at_start.fit[1], best_total = at_start.Total();
  std::set<Params> tried;
  for (int g = 0; g < 8; ++g) {
    const int gemm = (g >> 1) & 1, memory = g & 1, experts = g >> 2;
    // A held parameter makes its other corners those before them.
    if ((held[0] && gemm) || (held[1] && memory) || (held[kExperts] && experts)) continue;
    Params base = start;
    if (!held[0]) base[0] = kGemm[gemm];
    if (!held[1]) base[1] = kMemory[memory];
    if (experts) base[kExperts] = 0.3;
    // Each runtime's best corner on the fit alone ([0]) and with capacity ([1]).
    std::array<std::array<double, 2>, 2> best_cost = {
        {{BasinCosts::kInf, BasinCosts::kInf}, {BasinCosts::kInf, BasinCosts::kInf}}};
    std::array<std::array<Params, 2>, 2> corner = {{{base, base}, {base, base}}};
    for (int c = 0; c < 12; ++c) {
      Params x = base;
      x[kPythonHost] = x[kCppHost] = kIteration[c >> 2];
      x[kPythonHost + 1] = x[kCppHost + 1] = kSequence[(c >> 1) & 1];
      x[kEagerLaunch] = kEager[c & 1];
      x[kCppLaunch] = kCpp[c & 1];
      for (int k = kPythonHost; k < models::CostParams::kNumFitted; ++k) {
        if (held[k]) x[k] = start[k];
      }
      if (!tried.insert(x).second) continue;  // held parameters make corners coincide
      const BasinCosts costs = CostsAt(f, x, cpp_row);
      for (int runtime = 0; runtime < 2; ++runtime) {
        const double by[2] = {costs.fit[runtime], costs.fit[runtime] + costs.capacity[runtime]};
        for (int j = 0; j < 2; ++j) {
          if (by[j] < best_cost[j][runtime]) {
            best_cost[j][runtime] = by[j];
            corner[j][runtime] = x;
          }
        }
      }
    }
    // The Python corner with the C++ corner's host costs, by each measure (priced once when the
    // two coincide).
    std::array<Params, 2> joined;
    for (int j = 0; j < 2; ++j) {
      joined[j] = corner[j][0];
      for (int k : {kCppHost, kCppHost + 1, kCppLaunch}) joined[j][k] = corner[j][1][k];
    }
    const BasinCosts by_fit = CostsAt(f, joined[0], cpp_row);
    const BasinCosts by_total = joined[1] == joined[0] ? by_fit : CostsAt(f, joined[1], cpp_row);
    if (by_fit.fit[0] + by_fit.fit[1] < best_fit) {
      best_fit = by_fit.fit[0] + by_fit.fit[1];
      out.by_fit = joined[0];
    }
    if (by_total.Total() < best_total) {
      best_total = by_total.Total();
      out.by_total = joined[1];
    }
  }
  return out;
}

}  // namespace

Result<FitOutcome> Calibrator::FitToPublished(const std::vector<PublishedResult>& rows,
                                              const models::Calibration& start,
                                              const FitProgress& progress,
                                              const std::vector<std::string>& free_params) const {
  std::array<bool, models::CostParams::kNumFitted> held{};
  std::vector<int> held_indices;
  FATHOM_ASSIGN_OR_RETURN(const auto free, FreeParams(free_params));
  for (int k = 0; k < models::CostParams::kNumFitted; ++k) {
    held[k] = !free[k];
    if (held[k]) held_indices.push_back(k);
  }
  int residuals = 0;
  for (const auto& r : rows) residuals += r.offline() ? 1 : 3;
  const int free_count = models::CostParams::kNumFitted - static_cast<int>(held_indices.size());
  if (residuals < free_count) {
    return Status::InvalidArgument("calibration needs at least " + std::to_string(free_count) +
                                   " residuals (one a free parameter)");
  }
  // Every row must simulate (a clear error now rather than a failed fit later).
  FATHOM_RETURN_IF_ERROR(PredictRows(rows, start).status());
  if (held_indices.size() == static_cast<size_t>(models::CostParams::kNumFitted)) {
    return Status::InvalidArgument("--free: no parameter left to fit");
  }
  using Params = std::array<double, models::CostParams::kNumFitted>;
  const RowsResidual rows_residual{&rows, this, start};
  std::vector<bool> cpp_row;
  for (const auto& r : rows)
    cpp_row.push_back(FindDeployment(setup_, r)->deployment.runtime == models::Runtime::kCpp);
  // The least-squares problem over the free parameters of `x` (the held ones fixed, within
  // bounds). Only the free ones are differenced: each costs two evaluations of every row.
  std::vector<int> free_indices;
  for (int k = 0; k < models::CostParams::kNumFitted; ++k) {
    if (!held[k]) free_indices.push_back(k);
  }
  struct FreeResidual {
    RowsResidual full;
    Params x;  // the held values
    std::vector<int> free;
    bool operator()(double const* const* z, double* residuals) const {
      Params at = x;
      for (size_t i = 0; i < free.size(); ++i) at[free[i]] = z[0][i];
      const double* all = at.data();
      return full(&all, residuals);
    }
  };
  auto problem_at = [&](const Params& x, std::vector<double>* z) {
    z->clear();
    for (int k : free_indices) z->push_back(x[k]);
    return BoundedProblem(new FreeResidual{rows_residual, x, free_indices}, residuals, free_indices,
                          z);
  };
  // Ceres from `x`, in place.
  auto solve = [&](Params* x, ceres::Solver::Summary* summary) {
    ceres::Solver::Options options;
    options.max_num_iterations = 25;
    options.function_tolerance = 1e-4;
    ProgressCallback callback(progress);
    if (progress) options.callbacks.push_back(&callback);
    std::vector<double> z;
    ceres::Solve(options, problem_at(*x, &z).get(), summary);
    for (int i = 0; i < free_count; ++i) (*x)[free_indices[i]] = z[i];
  };
  // The solver from each start; the result with the lower cost, Server capacity included.
  const Starts starts = BestStarts(rows_residual, start.params.Fitted(), cpp_row, held);
  Params x = starts.by_fit;
  ceres::Solver::Summary summary;
  solve(&x, &summary);
  if (!summary.IsSolutionUsable())
    return Status::InvalidArgument("calibration fit failed: " + summary.message);
  int iterations = static_cast<int>(summary.iterations.size());
  if (starts.by_total != starts.by_fit) {
    Params y = starts.by_total;
    ceres::Solver::Summary other;
    solve(&y, &other);
    iterations += static_cast<int>(other.iterations.size());
    if (other.IsSolutionUsable() &&
        CostsAt(rows_residual, y, cpp_row).Total() < CostsAt(rows_residual, x, cpp_row).Total()) {
      x = y;
      summary = other;
    }
  }

  FitOutcome out;
  out.calibration = start;
  out.calibration.params.SetFitted(x);
  out.iterations = iterations;
  out.initial_cost = summary.initial_cost;
  out.final_cost = summary.final_cost;
  // Parameter uncertainty: Ceres's covariance at the result, scaled by the residual variance;
  // where it cannot be computed the start's stands.
  std::vector<double> z;
  const auto problem = problem_at(x, &z);
  const std::vector<double> spreads = FreeSpreads(problem.get(), &z, summary.final_cost,
                                                  residuals - models::CostParams::kNumFitted);
  for (size_t i = 0; i < spreads.size(); ++i) out.calibration.stddev[free_indices[i]] = spreads[i];
  // Host costs of a runtime no row runs on: the fitted runtime's.
  const bool cpp = std::find(cpp_row.begin(), cpp_row.end(), true) != cpp_row.end(),
             python = std::find(cpp_row.begin(), cpp_row.end(), false) != cpp_row.end();
  if (python != cpp) {
    auto fitted = out.calibration.params.Fitted();
    const int from = python ? kPythonHost : kCppHost, to = python ? kCppHost : kPythonHost;
    for (int k = 0; k < 2; ++k) {
      if (held[to + k]) continue;  // held: the start's evidence stands
      fitted[to + k] = fitted[from + k];
      out.calibration.stddev[to + k] = out.calibration.stddev[from + k];
    }
    out.calibration.params.SetFitted(fitted);
  }
  // Held parameters keep the evidence of the rows that fitted them: their hardware stays fitted.
  if (held_indices.empty()) out.calibration.fitted_hardware.clear();
  for (const auto& r : rows) {
    if (std::find(out.calibration.fitted_hardware.begin(), out.calibration.fitted_hardware.end(),
                  r.accelerator) == out.calibration.fitted_hardware.end())
      out.calibration.fitted_hardware.push_back(r.accelerator);
  }
  return out;
}

Result<std::vector<CrossValidation>> Calibrator::CrossValidate(
    const std::vector<PublishedResult>& rows, const std::vector<PublishedResult>& unfitted,
    const models::Calibration& calibration, const std::vector<std::string>& free_params,
    const std::function<void(int done, int folds)>& fold_done) const {
  models::Calibration neutral = calibration;
  {
    auto x = neutral.params.Fitted();
    const auto defaults = models::CostParams{}.Fitted();
    FATHOM_ASSIGN_OR_RETURN(const auto free, FreeParams(free_params));
    for (int k = 0; k < models::CostParams::kNumFitted; ++k) {
      if (free[k]) x[k] = defaults[k];
    }
    neutral.params.SetFitted(x);
  }
  struct FoldKind {
    const char* name;
    std::string (*key)(const PublishedResult&);
  };
  const FoldKind kinds[] = {{"hardware", [](const PublishedResult& r) { return r.accelerator; }},
                            {"model", [](const PublishedResult& r) { return r.model; }},
                            {"submitter", [](const PublishedResult& r) { return r.submitter; }}};
  // A fold fits on the fitted rows outside its group and predicts every row of the group, the
  // unfitted ones too. Folds with the same training rows (every group with no fitted row: the
  // whole fitted set) share one fit, and each fit is one work item.
  std::vector<CrossValidation> out;
  struct Split {
    Fold* fold = nullptr;
    std::vector<PublishedResult> test;
    size_t fit = 0;  // index into trains
  };
  std::vector<Split> splits;
  std::vector<std::vector<PublishedResult>> trains;
  std::map<std::vector<int>, size_t> train_index;  // by the training rows' lines
  for (const FoldKind& kind : kinds) {
    out.push_back({kind.name, {}});
    std::set<std::string> keys;
    for (const auto* set : {&rows, &unfitted}) {
      for (const auto& r : *set) keys.insert(kind.key(r));
    }
    for (const auto& key : keys) {
      Split split;
      std::vector<PublishedResult> train;
      std::vector<int> lines;
      for (const auto& r : rows) {
        if (kind.key(r) == key) {
          split.test.push_back(r);
        } else {
          train.push_back(r);
          lines.push_back(r.line);
        }
      }
      if (train.empty()) continue;
      for (const auto& r : unfitted) {
        if (kind.key(r) == key) split.test.push_back(r);
      }
      auto [it, added] = train_index.emplace(lines, trains.size());
      if (added) trains.push_back(std::move(train));
      split.fit = it->second;
      out.back().folds.emplace_back().held_out = key;
      splits.push_back(std::move(split));
    }
  }
  size_t next = 0;  // the folds' addresses are fixed from here on
  for (CrossValidation& cv : out) {
    for (Fold& fold : cv.folds) splits[next++].fold = &fold;
  }
  const Json start = CalibrationJson(neutral);
  std::vector<Result<FitOutcome>> fits(trains.size(), Status::Unavailable("not fitted"));
  int done = 0;
  FATHOM_RETURN_IF_ERROR(Spread(
      trains.size(),
      [&](size_t i) {
        return Json{
            {"task", "fold"}, {"train", trains[i]}, {"calibration", start}, {"free", free_params}}
            .dump();
      },
      [&](size_t i, const std::string& text) -> Status {
        const Json result = Json::parse(text);
        if (fold_done) fold_done(++done, static_cast<int>(trains.size()));
        if (result.contains("error")) {
          fits[i] = Status::InvalidArgument(result.at("error").get<std::string>());
          return Status::Ok();
        }
        FitOutcome fit;
        FATHOM_ASSIGN_OR_RETURN(
            fit.calibration,
            models::CalibrationFromJson(result.at("calibration"), "fold " + std::to_string(i + 1)));
        fit.iterations = result.at("iterations").get<int>();
        fit.initial_cost = FromExact(result.at("initial_cost"));
        fit.final_cost = FromExact(result.at("final_cost"));
        fits[i] = fit;
        return Status::Ok();
      }));
  for (Split& split : splits) {
    Fold& fold = *split.fold;
    fold.fit = fits[split.fit];
    if (!fold.fit.ok()) continue;
    FATHOM_ASSIGN_OR_RETURN(fold.predictions, PredictRows(split.test, fold.fit->calibration));
    FATHOM_RETURN_IF_ERROR(PredictCapacity(&fold.predictions, fold.fit->calibration));
  }
  return out;
}

Result<std::string> Calibrator::Compute(const std::string& assignment) const {
  const Json a = Json::parse(assignment);
  const std::string task = a.at("task").get<std::string>();
  FATHOM_ASSIGN_OR_RETURN(models::Calibration calibration,
                          models::CalibrationFromJson(a.at("calibration"), task));
  if (task == "fold") {
    // The fold's fit runs here, on one thread: the folds are the units spread over the workers.
    const std::unique_ptr<WorkPool> here = MakeThreadWorkPool(1);
    const Calibrator local(setup_, catalog_, max_requests_, here.get());
    auto fit = local.FitToPublished(a.at("train").get<std::vector<PublishedResult>>(), calibration,
                                    {}, a.at("free").get<std::vector<std::string>>());
    // Too few rows left to fit (one GPU or submitter holds most of them): said, not fatal.
    if (!fit.ok()) return Json{{"error", fit.status().message()}}.dump();
    return Json{{"calibration", CalibrationJson(fit->calibration)},
                {"iterations", fit->iterations},
                {"initial_cost", Exact(fit->initial_cost)},
                {"final_cost", Exact(fit->final_cost)}}
        .dump();
  }
  const PublishedResult row = a.at("row").get<PublishedResult>();
  FATHOM_ASSIGN_OR_RETURN(
      Json result, task == "run" ? SimulateRow(row, calibration, setup_, catalog_, max_requests_)
                                 : RowCapacity(row, calibration, setup_, catalog_, max_requests_,
                                               a.at("at_limits").get<bool>()));
  return result.dump();
}

ErrorSummary Summarize(const std::vector<RowPrediction>& predictions) {
  std::vector<double> tokens, latency, capacity, at_use, offline;
  int front_bound = 0, front_within = 0;
  for (const auto& p : predictions) {
    tokens.push_back(std::abs(p.TokensErrorPct()));
    if (p.row.offline()) offline.push_back(std::abs(p.TokensErrorPct()));
    if (!p.row.offline()) {
      latency.push_back(std::abs(p.TtftErrorPct()));
      latency.push_back(std::abs(p.TpotErrorPct()));
      if (p.has_capacity && p.row.target_qps > 0)
        capacity.push_back(std::abs(p.CapacityErrorPct()));
      if (p.has_capacity_at_use && p.row.target_qps > 0)
        at_use.push_back(std::abs(p.CapacityAtUseErrorPct()));
    }
    front_bound += p.has_front_free_capacity ? 1 : 0;
    front_within += p.PublishedWithinFrontBound() ? 1 : 0;
  }
  ErrorSummary s;
  s.rows = static_cast<int>(predictions.size());
  s.tokens_median_abs_pct = Median(tokens);
  s.latency_median_abs_pct = Median(latency);
  s.capacity_median_abs_pct = Median(capacity);
  s.capacity_at_use_median_abs_pct = Median(at_use);
  s.offline_tokens_median_abs_pct = Median(offline);
  s.offline_rows = static_cast<int>(offline.size());
  s.latency_rows = static_cast<int>(latency.size() / 2);
  s.capacity_rows = static_cast<int>(capacity.size());
  s.capacity_at_use_rows = static_cast<int>(at_use.size());
  s.front_bound_rows = front_bound;
  s.front_bound_within = front_within;
  return s;
}

}  // namespace fathom::tuner
