#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "base/fault_injection_env.h"
#include "base/files.h"
#include "models/fit.h"
#include "profiler/compare.h"
#include "profiler/import.h"

namespace fathom::profiler {
namespace {

const std::string kModels[] = {"Llama-2-70b-hf", "Llama-2-7b-hf", "phi-2"};

std::vector<models::OpMeasurement> VidurRows() {
  std::vector<models::OpMeasurement> rows;
  std::vector<std::string> files;
  for (const std::string& m : kModels) files.push_back("h100/" + m + "/mlp.csv");
  files.push_back("network/h100_dgx/all_reduce.csv");
  files.push_back("network/h100_dgx/send_recv.csv");
  for (const std::string& f : files) {
    const std::string path = DataDir() + "/profiler/data/vidur/" + f;
    auto format = DetectProfileFormat(path);
    REQUIRE(format.ok());
    REQUIRE(*format == ProfileFormat::kVidurCsv);
    auto table = ReadVidurCsv(path, "");
    INFO(table.status().message());
    REQUIRE(table.ok());
    rows.insert(rows.end(), table->rows.begin(), table->rows.end());
  }
  return rows;
}

double MedianAbs(const ModelComparison& c, const std::string& group) {
  for (const auto& g : c.by_kind) {
    if (g.key == group) return g.median_abs_pct;
  }
  FAIL("no group " << group);
  return 0;
}

models::Hardware H100Sxm() { return *(*models::HardwareCatalog::LoadBuiltin()).Find("h100-sxm"); }

}  // namespace

TEST_CASE("Vidur profiles: every GEMM and collective row of the shipped H100 files, with its shape",
          "[vidur]") {
  const auto rows = VidurRows();
  int gemms = 0, all_reduce = 0, send_recv = 0;
  for (const auto& r : rows) {
    CHECK(r.hardware == "h100-sxm");
    CHECK(r.median_us > 0);
    gemms += r.op == "gemm";
    all_reduce += r.op == "all_reduce";
    send_recv += r.op == "send_recv";
  }
  CHECK(gemms == 9324);
  CHECK(all_reduce == 2979);
  CHECK(send_recv == 1986);
  // Llama-2-70B at TP8: the QKV projection is 8192 -> (64 + 2 x 8) / 8 heads x 128.
  bool found = false;
  for (const auto& r : rows) {
    if (r.dims == "model=Llama-2-70b-hf tp=8 op=attn_pre_proj" && r.m == 4096) {
      CHECK(r.n == 10 * 128);
      CHECK(r.k == 8192);
      found = true;
    }
  }
  CHECK(found);
}

// The cost model against kernels measured on real H100s: the GEMM curve and the collective price
// fitted to them reproduce them (GEMMs within 10% in the median, collectives within 15%), and a
// GEMM curve fitted on two models' shapes prices the third's within 10%.
TEST_CASE(
    "Vidur profiles: the fitted operator model within 10% (GEMMs) and 15% (collectives), across "
    "models",
    "[vidur]") {
  const auto rows = VidurRows();
  const models::CostParams start;
  auto fit = models::FitOperators(rows, H100Sxm(), start);
  REQUIRE(fit.ok());
  REQUIRE(fit->gemm);
  REQUIRE(fit->links);
  auto after = CompareWithModel(rows, H100Sxm(), fit->Applied(start));
  REQUIRE(after.ok());
  CHECK(MedianAbs(*after, "gemm bf16") <= 10);
  CHECK(MedianAbs(*after, "all_reduce bf16") <= 15);
  CHECK(MedianAbs(*after, "send_recv bf16") <= 15);
  for (const std::string& held : kModels) {
    INFO(held);
    std::vector<models::OpMeasurement> train, test;
    for (const auto& r : rows)
      (models::DimText(r.dims, "model") == std::optional<std::string_view>(held) ? test : train)
          .push_back(r);
    auto fold = models::FitOperators(train, H100Sxm(), start);
    REQUIRE(fold.ok());
    auto priced = CompareWithModel(test, H100Sxm(), fold->Applied(start));
    REQUIRE(priced.ok());
    CHECK(MedianAbs(*priced, "gemm bf16") <= 10);
  }
}

TEST_CASE(
    "Vidur profiles: a file that names no GPU needs --hardware; bad rows name line and column",
    "[vidur]") {
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  const std::string path = dir + "/mlp.csv";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(
        "time_stats.mlp_up_proj.median,n_head,n_kv_head,n_embd,n_expanded_embd,use_gated_mlp,num_"
        "tokens,"
        "num_tensor_parallel_workers\n0.5,32,32,4096,11008,True,128,3\n",
        f);
    std::fclose(f);
  }
  auto none = ReadVidurCsv(path, "");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::Contains("give --hardware"));
  auto bad = ReadVidurCsv(path, "h100-sxm");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains(path + ":2: n_embd = \"4096\""));
  std::remove(path.c_str());
}

TEST_CASE("Vidur profiles: a short read or a failed open names the file", "[vidur]") {
  const std::string path = DataDir() + "/profiler/data/vidur/h100/phi-2/mlp.csv";
  FaultInjectionEnv env;
  env.short_read_after_bytes = 100000;  // past the header, inside the rows
  auto table = ReadVidurCsv(path, "", &env);
  REQUIRE_FALSE(table.ok());
  CHECK(table.status().code() == StatusCode::kIoError);
  CHECK(table.status().message() == path + ": short read: got 100000 of " +
                                        std::to_string(std::filesystem::file_size(path)) +
                                        " bytes");
  CHECK(ReadVidurCsv(path + ".none", "").status().message() == path + ".none: cannot open");
}

}  // namespace fathom::profiler
