#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "base/files.h"
#include "tuner/calibrate.h"

namespace fathom::tuner {

TEST_CASE("LoadPublishedResults: reads the shipped MLPerf v5.1 rows", "[tuner]") {
  auto rows = LoadPublishedResults(DataDir() + "/models/calibration/mlperf_v5.1.csv");
  INFO(rows.status().message());
  REQUIRE(rows.ok());
  CHECK(rows->size() == 20);
  CHECK((*rows)[0].model == "deepseek-r1");
  CHECK((*rows)[0].offline());
  CHECK((*rows)[1].target_qps == 3.8);
  CHECK((*rows)[1].ttft_p99_ms == 1631.1);
}

TEST_CASE("LoadPublishedResults: a bad value names file, line and column", "[tuner]") {
  const std::string path = (std::filesystem::temp_directory_path() / "fathom_results.csv").string();
  REQUIRE(WriteFileAtomic(path,
                          "version,division,submitter,system,accelerator,gpus,model,scenario,tokens_per_s,samples_per_s,"
                          "ttft_p99_ms,tpot_p99_ms,target_qps,ttft_limit_ms,tpot_limit_ms\n"
                          "v5.1,closed,X,Y,b200,8,deepseek-r1,Server,fast,3.78,1631.1,64.87,3.8,2000,80\n")
              .ok());
  auto rows = LoadPublishedResults(path);
  REQUIRE_FALSE(rows.ok());
  CHECK(rows.status().message() == path + ":2: column tokens_per_s: \"fast\" is not a non-negative number");
  std::filesystem::remove(path);
}

TEST_CASE("RunLength: the published count, else LoadGen's run length padded to whole data sets", "[tuner]") {
  PublishedResult offline;
  offline.scenario = "Offline";
  offline.samples_per_s = 8.9;
  PublishedResult server;
  server.scenario = "Server";
  server.target_qps = 5;
  CalibrationSetup::Entry entry;
  CHECK(RunLength(offline, entry, 4388, 0) == 2 * 4388);  // 1.1 x 600 x 8.9 = 5874
  CHECK(RunLength(server, entry, 4388, 0) == 4388);       // 3000
  CHECK(RunLength(server, entry, 1000, 0) == 3000);
  CHECK(RunLength(server, entry, 1000, 2500) == 2500);    // the cap
  entry.samples = 26328;
  CHECK(RunLength(offline, entry, 4388, 0) == 26328);
}

TEST_CASE("PredictRows: simulates every calibration row under its deployment", "[tuner]") {
  auto rows = LoadPublishedResults(DataDir() + "/models/calibration/mlperf_v5.1.csv");
  auto setup = LoadCalibrationSetup(DefaultSetupPath(), 500, 1);
  INFO(setup.status().message());
  REQUIRE(setup.ok());
  auto catalog = models::HardwareCatalog::LoadBuiltin();
  auto calibration = models::LoadCalibration(models::DefaultCalibrationPath());
  REQUIRE(calibration.ok());
  std::vector<PublishedResult> some = {(*rows)[0], (*rows)[1], (*rows)[19]};
  auto preds = PredictRows(some, *setup, *catalog, *calibration, 3000);
  INFO(preds.status().message());
  REQUIRE(preds.ok());
  REQUIRE(preds->size() == 3);
  for (const auto& p : *preds) {
    CHECK(p.tokens_per_s > 0);
    CHECK(std::isfinite(p.TokensErrorPct()));
  }
  CHECK((*preds)[1].ttft_p99_ms > 0);
  const ErrorSummary s = Summarize(*preds);
  CHECK(s.rows == 3);
  CHECK(s.tokens_median_abs_pct >= 0);
}

TEST_CASE("FindDeployment: each row runs its submitter's published configuration", "[tuner]") {
  auto rows = LoadPublishedResults(DataDir() + "/models/calibration/mlperf_v5.1.csv");
  auto setup = LoadCalibrationSetup(DefaultSetupPath(), 10, 1);
  INFO(setup.status().message());
  REQUIRE(rows.ok());
  REQUIRE(setup.ok());
  int checked = 0;
  for (const PublishedResult& row : *rows) {
    INFO(row.submitter << " " << row.model << " " << row.scenario);
    const CalibrationSetup::Entry* e = FindDeployment(*setup, row);
    REQUIRE(e != nullptr);
    const sim::DeploymentConfig& d = e->deployment;
    // DeepSeek-R1 runs TensorRT-LLM's PyTorch flow; the Llamas, TensorRT engines.
    CHECK(d.runtime == (row.model == "deepseek-r1" ? models::Runtime::kPython : models::Runtime::kCpp));
    if (row.model != "deepseek-r1") continue;
    const sim::EngineConfig& engine = d.engine;
    CHECK(engine.adp_balance);
    if (row.offline()) {
      CHECK(engine.adp_timeout_iters == 500);
    } else if (row.submitter == "Dell") {
      CHECK(engine.adp_batching_wait_iters == 2);
      CHECK(engine.adp_timeout_iters == 6);
    } else {
      CHECK(engine.adp_batching_wait_iters == 3);
      CHECK(engine.adp_timeout_iters == 9);
    }
    // Only GigaComputing's Server run chunks prompts.
    CHECK((engine.scheduler == sim::SchedulerKind::kChunked) == (row.submitter == "GigaComputing" && !row.offline()));
    ++checked;
  }
  CHECK(checked == 8);
}

TEST_CASE("RobustLogError: the log error near zero, bounded far off, sign kept", "[tuner]") {
  CHECK(RobustLogError(101, 100) == Approx(std::log(1.01)).epsilon(1e-3));
  CHECK(RobustLogError(99, 100) == Approx(std::log(0.99)).epsilon(1e-3));
  CHECK(RobustLogError(100, 100) == 0.0);
  // An overloaded run 20x off counts less than half its plain log error...
  CHECK(RobustLogError(2000, 100) > 0);
  CHECK(RobustLogError(2000, 100) < 0.5 * std::log(2000.0 / 100));
  CHECK(RobustLogError(5, 100) < 0);
  CHECK(std::abs(RobustLogError(5, 100)) < 0.5 * std::log(100.0 / 5));
  // ...and still grows with the error, so the fit keeps a direction.
  CHECK(RobustLogError(4000, 100) > RobustLogError(2000, 100));
}

}  // namespace fathom::tuner
