#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "base/files.h"
#include "profiler/import.h"
#include "profiler/summary.h"

namespace fathom::profiler {
namespace {

// Builds the Nsight Systems export fixture from its SQL text (tests/data/nsys_export.sql) under a
// name of the caller's (tests run in parallel processes).
std::string NsysFixture(const std::string& name) {
  const std::string path = (std::filesystem::temp_directory_path() / ("fathom_" + name + ".sqlite")).string();
  std::filesystem::remove(path);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string sql = *ReadFile(std::string(FATHOM_TEST_DATA_DIR) + "/nsys_export.sql");
  REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  return path;
}

}  // namespace

TEST_CASE("ReadNsysSqlite: kernels with names, grids and their innermost NVTX range", "[profiler]") {
  const std::string path = NsysFixture("nsys_read");
  CHECK(*DetectProfileFormat(path) == ProfileFormat::kNsysSqlite);
  auto records = ReadNsysSqlite(path);
  INFO(records.status().message());
  REQUIRE(records.ok());
  REQUIRE(records->size() == 7);
  const auto& copy = (*records)[0];
  CHECK(copy.kind == "memcpy");
  CHECK(copy.nvtx_range.empty());  // launched before any range opened
  const auto& gemm = (*records)[1];
  CHECK(gemm.name.find("sm90_xmma_gemm") == 0);
  CHECK(gemm.start_ns == 1000);
  CHECK(gemm.end_ns == 1040);
  CHECK(gemm.grid[0] == 132);
  CHECK(gemm.block[0] == 384);
  CHECK(gemm.nvtx_range == "layer.0");
  CHECK((*records)[4].nvtx_range == "layer.1");  // name through StringIds (textId)
  std::filesystem::remove(path);
}

TEST_CASE("ReadPytorchTrace: kernels, copies and GPU user annotations", "[profiler]") {
  const std::string path = std::string(FATHOM_TEST_DATA_DIR) + "/pytorch_trace.json";
  CHECK(*DetectProfileFormat(path) == ProfileFormat::kPytorchJson);
  auto records = ReadPytorchTrace(path);
  REQUIRE(records.ok());
  REQUIRE(records->size() == 3);
  CHECK((*records)[0].start_ns == 112000);
  CHECK((*records)[0].end_ns == 132500);
  CHECK((*records)[0].nvtx_range == "decode_step");
  CHECK((*records)[0].correlation == 21);
  CHECK((*records)[0].grid[0] == 108);
  CHECK((*records)[2].kind == "memcpy");
  CHECK((*records)[2].nvtx_range.empty());
}

TEST_CASE("ImportProfile and Summarize: time per kernel, range and operator kind", "[profiler]") {
  const std::string nsys = NsysFixture("nsys_import");
  auto db = models::PerfDb::Open(":memory:");
  REQUIRE(db.ok());
  CHECK(*ImportProfile(nsys, *db) == 7);
  CHECK(*ImportProfile(std::string(FATHOM_TEST_DATA_DIR) + "/pytorch_trace.json", *db) == 3);
  const ProfileSummary s = Summarize(*db->Kernels());
  CHECK(s.records == 10);
  CHECK(s.total_us == Approx((40 + 20 + 30 + 40 + 20 + 30 + 20) / 1e3 + 20.5 + 4.0 + 2.0));
  CHECK(s.kinds.front().key == "gemm");  // the PyTorch GEMM (20.5 us) dominates
  std::map<std::string, double> kinds;
  for (const auto& k : s.kinds) kinds[k.key] = k.total_us;
  CHECK(kinds["communication"] == Approx(0.06));
  CHECK(kinds["attention"] == Approx(0.04));
  CHECK(kinds["elementwise"] == Approx(4.0));
  CHECK(kinds["memcpy"] == Approx(2.02));
  std::map<std::string, int64_t> ranges;
  for (const auto& r : s.ranges) ranges[r.key] = r.count;
  CHECK(ranges["layer.0"] == 3);
  CHECK(ranges["layer.1"] == 3);
  CHECK(ranges["decode_step"] == 2);
  CHECK(ranges["(none)"] == 2);
  CHECK(s.ToJson(3)["top_kernels"].size() == 3);
  std::filesystem::remove(nsys);
}

TEST_CASE("DetectProfileFormat: other files are refused with the reason", "[profiler]") {
  const std::string path = (std::filesystem::temp_directory_path() / "fathom_not_a_profile.txt").string();
  REQUIRE(WriteFileAtomic(path, "hello").ok());
  auto f = DetectProfileFormat(path);
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().message().find("not an Nsight Systems SQLite export") != std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace fathom::profiler
