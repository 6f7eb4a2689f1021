#include "tuner/calibration/published.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>

#include "base/files.h"
#include "traces/benchmark.h"

namespace fathom::tuner {

OrderedJson PublishedReference::ToJson() const {
  OrderedJson j;
  j["round"] = row.round;
  j["submitter"] = row.submitter;
  j["system"] = row.system;
  j["gpus"] = row.gpus;
  j["scenario"] = row.scenario;
  j["figure"] = figure;
  j["tokens_per_s"] = row.tokens_per_s;
  if (!row.offline()) {
    j["ttft_p99_ms"] = row.ttft_p99_ms;
    j["tpot_p99_ms"] = row.tpot_p99_ms;
  }
  if (deployment) j["deployment"] = sim::ToJson(*deployment);
  j["source"] = file + " line " + std::to_string(row.line);
  return j;
}

Result<std::vector<PublishedReference>> NearestPublished(const std::string& model,
                                                         const std::string& hardware, int gpus,
                                                         sim::Scenario scenario) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(DataDir()) / "models" / "calibration";
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("mlperf_", 0) == 0 && e.path().extension() == ".csv") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  const std::string wanted(sim::Name(scenario));
  auto same_scenario = [&](const std::string& s) {
    if (s.size() != wanted.size()) return false;
    for (size_t i = 0; i < s.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(s[i])) != wanted[i]) return false;
    }
    return true;
  };
  // Results tables name the benchmark ("llama2-70b-99"), fathom the model it runs.
  const traces::Benchmark* benchmark = traces::FindBenchmark(traces::MlperfBenchmarks(), model);
  auto same_model = [&](const std::string& m) {
    return m == model || (benchmark != nullptr &&
                          traces::FindBenchmark(traces::MlperfBenchmarks(), m) == benchmark);
  };
  std::vector<PublishedReference> matching;
  for (const fs::path& path : files) {
    FATHOM_ASSIGN_OR_RETURN(std::vector<PublishedResult> rows, LoadPublishedResults(path.string()));
    for (PublishedResult& r : rows) {
      if (!same_model(r.model) || r.accelerator != hardware || !same_scenario(r.scenario)) continue;
      PublishedReference ref;
      ref.figure =
          r.offline() ? r.tokens_per_s : (r.target_qps > 0 ? r.target_qps : r.samples_per_s);
      ref.row = std::move(r);
      ref.file = (fs::path("models") / "calibration" / path.filename()).string();
      matching.push_back(std::move(ref));
    }
  }
  if (matching.empty()) return matching;
  auto distance = [&](int n) { return std::abs(std::log(static_cast<double>(n) / gpus)); };
  int nearest = matching.front().row.gpus;
  for (const auto& m : matching) {
    const double d = distance(m.row.gpus), best = distance(nearest);
    if (d < best - 1e-12 || (std::abs(d - best) <= 1e-12 && m.row.gpus < nearest))
      nearest = m.row.gpus;
  }
  std::vector<PublishedReference> out;
  std::map<std::string, std::optional<CalibrationSetup>> setups;  // by path
  for (auto& m : matching) {
    if (m.row.gpus != nearest) continue;
    const std::string setup_path = DefaultSetupPath(m.row.round, m.file);
    auto [it, fresh] = setups.try_emplace(setup_path);
    if (fresh && fs::exists(setup_path)) {
      // Only its deployments are used (it draws one sample of each workload).
      auto setup = LoadCalibrationSetup(setup_path, 1, 1);
      if (setup.ok()) it->second = std::move(*setup);
    }
    if (it->second) {
      if (const CalibrationSetup::Entry* e = FindDeployment(*it->second, m.row))
        m.deployment = e->deployment;
    }
    out.push_back(std::move(m));
  }
  std::stable_sort(
      out.begin(), out.end(),
      [](const PublishedReference& a, const PublishedReference& b) { return a.figure > b.figure; });
  return out;
}

}  // namespace fathom::tuner
