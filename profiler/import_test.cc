#include "profiler/import.h"

#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "base/fault_injection_env.h"
#include "base/files.h"
#include "profiler/summary.h"

namespace fathom::profiler {
namespace {

// Builds the Nsight Systems export fixture from its SQL text (tests/data/nsys_export.sql) under a
// name of the caller's (tests run in parallel processes).
std::string NsysFixture(const std::string& name) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("fathom_" + name + ".sqlite")).string();
  std::filesystem::remove(path);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const std::string sql = *ReadFile(std::string(FATHOM_TEST_DATA_DIR) + "/nsys_export.sql");
  REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  return path;
}

}  // namespace

TEST_CASE("ReadNsysSqlite: kernels with names, grids and their innermost NVTX range",
          "[profiler]") {
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
  // A file that looks like SQLite but is not, and an export without the kernel table.
  const std::string garbage = path + ".garbage";
  REQUIRE(
      WriteFileAtomic(garbage, std::string("SQLite format 3") + std::string(4000, '\x7f')).ok());
  CHECK(ReadNsysSqlite(garbage).status().message().rfind(
            garbage + ": not a Nsight Systems SQLite export", 0) == 0);
  std::filesystem::remove(garbage);
}

TEST_CASE("ReadNsysSqlite: a record ending before it starts is an error naming the file and table",
          "[profiler]") {
  // A corrupt row made a kernel's end - start overflow where the summary takes its duration.
  const std::string path = NsysFixture("nsys_interval");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db,
                       "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9000000000000000000, "
                       "end = -9000000000000000000 WHERE correlationId = 12",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  CHECK(ReadNsysSqlite(path).status().message() ==
        path +
            ": CUPTI_ACTIVITY_KIND_KERNEL: a record with start 9000000000000000000 and end "
            "-9000000000000000000: "
            "must have 0 <= start <= end");
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

TEST_CASE("ReadPytorchTrace: a kernel's time out of range is an error naming the event and field",
          "[profiler]") {
  // Found by fuzz_pytorch_trace: ts + dur overflowed int64 nanoseconds; a negative duration was
  // taken.
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_pytorch_times.json").string();
  auto read = [&](const std::string& ts, const std::string& dur) {
    REQUIRE(WriteFileAtomic(
                path, R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": )" + ts +
                          R"(, "dur": )" + dur + "}]}")
                .ok());
    return ReadPytorchTrace(path).status().message();
  };
  CHECK(read("9.2e15", "9.2e15") ==
        path + ": traceEvents[0]: field 'ts' = 9.2e+15: must be in [0, 4.6e15] microseconds");
  CHECK(read("1e300", "1") ==
        path + ": traceEvents[0]: field 'ts' = 1e+300: must be in [0, 4.6e15] microseconds");
  CHECK(read("10", "-5") ==
        path + ": traceEvents[0]: field 'dur' = -5: must be in [0, 4.6e15] microseconds");
  CHECK(read("1.7e15", "20").empty());  // Kineto's epoch microseconds
  std::filesystem::remove(path);
}

TEST_CASE("ImportProfile and Summarize: time per kernel, range and operator kind", "[profiler]") {
  const std::string nsys = NsysFixture("nsys_import");
  auto db = models::PerfDb::Open(":memory:");
  REQUIRE(db.ok());
  CHECK(ImportProfile(nsys, *db)->records == 7);
  CHECK(ImportProfile(std::string(FATHOM_TEST_DATA_DIR) + "/pytorch_trace.json", *db)->records ==
        3);
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

TEST_CASE("ReadOperatorTableCsv: an AIConfigurator GEMM table, fastest kernel source per shape",
          "[profiler]") {
  const std::string path = std::string(FATHOM_TEST_DATA_DIR) + "/gemm_table.csv";
  CHECK(*DetectProfileFormat(path) == ProfileFormat::kOperatorTableCsv);
  auto table = ReadOperatorTableCsv(path, "");
  INFO(table.status().message());
  REQUIRE(table.ok());
  REQUIRE(table->rows.size() == 28);  // 21 bf16 + 7 block-scaled FP8; the slower duplicate dropped
  CHECK(table->skipped.at("int8_wo") == 2);
  int fp8 = 0;
  for (const auto& r : table->rows) {
    CHECK(r.hardware == "h100-sxm");  // from "NVIDIA H100 80GB HBM3"
    CHECK(r.stack == "trtllm-1.2.0");
    CHECK(r.source == "imported");
    fp8 += r.dtype == "fp8";
    if (r.dtype == "bf16" && r.m == 128 && r.n == 4096 && r.k == 4096)
      CHECK(r.median_us == Approx(15.52));
  }
  CHECK(fp8 == 7);
  CHECK(ReadOperatorTableCsv(path, "h200")->rows.front().hardware == "h200");
}

TEST_CASE("ReadOperatorTableCsv: bad lines are refused with file, line, field and rule",
          "[profiler]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_bad_gemm_table.csv").string();
  const std::string header =
      "framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency\n";
  auto error = [&](const std::string& body, const std::string& hardware = "") {
    REQUIRE(WriteFileAtomic(path, header + body).ok());
    auto t = ReadOperatorTableCsv(path, hardware);
    return t.ok() ? std::string("ok") : t.status().message();
  };
  const std::string good =
      "TRTLLM,1.2.0,NVIDIA H100 80GB HBM3,gemm,torch_flow,bfloat16,8,16,32,0.01\n";
  CHECK(error(good) == "ok");
  CHECK(
      error(good + "TRTLLM,1.2.0,NVIDIA H100 80GB HBM3,gemm,torch_flow,bfloat16,-8,16,32,0.01\n") ==
      path + ":3: m = \"-8\": must be a positive integer");
  CHECK(error("TRTLLM,1.2.0,NVIDIA H100 80GB HBM3,gemm,torch_flow,bfloat16,8,16,32,fast\n") ==
        path + ":2: latency = \"fast\": must be a positive number of milliseconds");
  CHECK(error("TRTLLM,1.2.0,NVIDIA H100 80GB HBM3,gemm,bfloat16,8,16,32,0.01\n") ==
        path + ":2: 9 fields, the header has 10");
  CHECK(error("TRTLLM,1.2.0,NVIDIA H100 80GB HBM3,moe,torch_flow,bfloat16,8,16,32,0.01\n") ==
        path + ":2: op_name = \"moe\": only gemm rows are read");
  CHECK(error("TRTLLM,1.2.0,NVIDIA A10G,gemm,torch_flow,bfloat16,8,16,32,0.01\n") ==
        path +
            ":2: device = \"NVIDIA A10G\": not a GPU of the built-in catalogue; give --hardware");
  CHECK(error("TRTLLM,1.2.0,NVIDIA A10G,gemm,torch_flow,bfloat16,8,16,32,0.01\n", "h100-sxm") ==
        "ok");
  REQUIRE(WriteFileAtomic(path, "op_name,m,n,k,latency\n").ok());
  CHECK(ReadOperatorTableCsv(path, "").status().message() ==
        path +
            ":1: column 'dtype' missing (a GEMM table has framework, version, device, op_name, "
            "kernel_source, "
            "gemm_dtype, m, n, k, latency)");
  std::filesystem::remove(path);
}

TEST_CASE("ReadOperatorTableCsv: an AIConfigurator all-reduce table, its elements as bytes",
          "[profiler]") {
  const std::string path = DataDir() + "/profiler/data/aiconfigurator/h200/all_reduce.csv";
  CHECK(*DetectProfileFormat(path) == ProfileFormat::kOperatorTableCsv);
  auto table = ReadOperatorTableCsv(path, "");
  INFO(table.status().message());
  REQUIRE(table.ok());
  REQUIRE(table->rows.size() == 69);  // 23 sizes on 2, 4 and 8 GPUs
  for (const auto& r : table->rows) {
    CHECK(r.op == "all_reduce");
    CHECK(r.hardware == "h200");  // from "NVIDIA H200"
    CHECK(r.stack == "trtllm-1.2.0rc5");
    CHECK(r.dtype == "bf16");
    if (r.extra == 8 && r.m == 1048576) CHECK(r.median_us == Approx(19.6).epsilon(0.01));
  }
  const std::string bad =
      (std::filesystem::temp_directory_path() / "fathom_bad_all_reduce.csv").string();
  const std::string header =
      "framework,version,device,op_name,kernel_source,nccl_dtype,num_gpus,message_size,latency\n";
  REQUIRE(WriteFileAtomic(bad, header + "TRTLLM,2.26,NVIDIA H200,all_reduce,NCCL,half,1,128,0.01\n")
              .ok());
  CHECK(ReadOperatorTableCsv(bad, "").status().message() ==
        bad + ":2: num_gpus = \"1\": must be at least 2");
  REQUIRE(WriteFileAtomic(bad, header +
                                   "TRTLLM,2.26,NVIDIA H200,all_gather,NCCL,half,2,128,0.01\n" +
                                   "TRTLLM,2.26,NVIDIA H200,all_reduce,NCCL,int8,2,128,0.01\n" +
                                   "TRTLLM,2.26,NVIDIA H200,all_reduce,NCCL,half,2,128,0.01\n")
              .ok());
  auto read = ReadOperatorTableCsv(bad, "");
  REQUIRE(read.ok());
  REQUIRE(read->rows.size() == 1);
  CHECK(read->rows[0].m == 256);  // 128 fp16 elements
  CHECK(read->rows[0].dtype == "fp16");
  CHECK(read->skipped.at("all_gather") == 1);
  CHECK(read->skipped.at("int8") == 1);
  REQUIRE(WriteFileAtomic(bad, header + "TRTLLM,2.26,NVIDIA H200,all_reduce,NCCL,half,2," +
                                   "9223372036854775807,0.01\n")
              .ok());
  CHECK(ReadOperatorTableCsv(bad, "").status().message() ==
        bad + ":2: message_size = \"9223372036854775807\": must be at most 2^50 elements");
  REQUIRE(WriteFileAtomic(bad, "op_name,num_gpus,latency,nccl_dtype\n").ok());
  CHECK(ReadOperatorTableCsv(bad, "").status().message() ==
        bad +
            ":1: column 'message_size' missing (an all-reduce table has framework, version, "
            "device, op_name, kernel_source, allreduce_dtype or nccl_dtype, num_gpus, "
            "message_size, latency)");
  std::filesystem::remove(bad);
}

TEST_CASE(
    "ReadOperatorTableCsv: an AIConfigurator MoE table, balanced routing, MXFP4 by its activations",
    "[profiler]") {
  const std::string shipped = DataDir() + "/profiler/data/aiconfigurator/b200/moe.csv";
  CHECK(*DetectProfileFormat(shipped) == ProfileFormat::kOperatorTableCsv);
  auto table = ReadOperatorTableCsv(shipped, "");
  INFO(table.status().message());
  REQUIRE(table.ok());
  REQUIRE(table->rows.size() == 810);  // DeepSeek-R1's layer, 3 formats, 10 layouts, 27 sizes
  for (const auto& r : table->rows) {
    CHECK(r.op == "moe");
    CHECK(r.hardware == "b200");
    CHECK(r.k == 7168);     // hidden
    CHECK(r.n == 2048);     // each expert's intermediate
    CHECK(r.extra == 256);  // experts
  }
  const std::string path = (std::filesystem::temp_directory_path() / "fathom_moe.csv").string();
  const std::string header =
      "framework,version,device,op_name,kernel_source,moe_dtype,num_tokens,hidden_size,"
      "inter_size,topk,num_experts,moe_tp_size,moe_ep_size,distribution,latency\n";
  const std::string shape = ",64,2880,2880,4,128,1,8,";
  REQUIRE(WriteFileAtomic(
              path, header + "TRTLLM,1.3,NVIDIA B200,moe,a,w4a8_mxfp4_mxfp8" + shape +
                        "balanced,0.2\n" + "TRTLLM,1.3,NVIDIA B200,moe,b,w4a8_mxfp4_mxfp8" + shape +
                        "balanced,0.1\n" + "TRTLLM,1.3,NVIDIA B200,moe,a,w4a16_mxfp4" + shape +
                        "balanced,0.3\n" + "TRTLLM,1.3,NVIDIA B200,moe,a,nvfp4" + shape +
                        "power_law_1.2,0.3\n" + "TRTLLM,1.3,NVIDIA H200,moe,a,w4a16_mxfp4" + shape +
                        "balanced,0.4\n" + "TRTLLM,1.3,NVIDIA H200,moe,a,w4a8_mxfp4_mxfp8" + shape +
                        "balanced,0.4\n")
              .ok());
  auto read = ReadOperatorTableCsv(path, "");
  INFO(read.status().message());
  REQUIRE(read.ok());
  REQUIRE(read->rows.size() == 2);
  // B200 runs MXFP4 experts against MXFP8 activations: the faster kernel source of that pairing.
  CHECK(read->rows[0].hardware == "b200");
  CHECK(read->rows[0].dtype == "mxfp4");
  CHECK(read->rows[0].median_us == Approx(100));
  CHECK(read->rows[0].m == 64);
  CHECK(read->rows[0].dims == "topk=4 tp=1 ep=8");
  CHECK(read->rows[0].stack == "trtllm-1.3");
  // H200 has no FP4 cores: its MXFP4 experts meet BF16 activations.
  CHECK(read->rows[1].hardware == "h200");
  CHECK(read->rows[1].dtype == "mxfp4");
  CHECK(read->rows[1].median_us == Approx(400));
  CHECK(read->skipped.at("w4a16_mxfp4") == 1);
  CHECK(read->skipped.at("w4a8_mxfp4_mxfp8") == 1);
  CHECK(read->skipped.at("moe routed power_law_1.2") == 1);
  REQUIRE(WriteFileAtomic(path, header + "TRTLLM,1.3,NVIDIA B200,moe,a,nvfp4,64,2880,0,4,128,1,"
                                         "8,balanced,0.2\n")
              .ok());
  CHECK(ReadOperatorTableCsv(path, "").status().message() ==
        path + ":2: inter_size = \"0\": must be a positive integer");
  REQUIRE(WriteFileAtomic(path, "op_name,latency,moe_dtype,num_tokens\n").ok());
  CHECK(ReadOperatorTableCsv(path, "").status().message() ==
        path +
            ":1: column 'inter_size' missing (a MoE table has framework, version, device, "
            "op_name, kernel_source, moe_dtype, num_tokens, hidden_size, inter_size, topk, "
            "num_experts, moe_tp_size, moe_ep_size, distribution, latency)");
  std::filesystem::remove(path);
}

TEST_CASE("DetectProfileFormat: other files are refused with the reason", "[profiler]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_not_a_profile.txt").string();
  REQUIRE(WriteFileAtomic(path, "hello").ok());
  auto f = DetectProfileFormat(path);
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().message().find("not an Nsight Systems SQLite export") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE(
    "DetectProfileFormat and ReadOperatorTableCsv: a short read or a failed open names the file",
    "[profiler]") {
  const std::string path = std::string(FATHOM_TEST_DATA_DIR) + "/gemm_table.csv";
  const std::string size = std::to_string(std::filesystem::file_size(path));
  FaultInjectionEnv env;
  env.short_read_after_bytes = 10;
  auto format = DetectProfileFormat(path, &env);
  REQUIRE_FALSE(format.ok());
  CHECK(format.status().message() == path + ": short read: got 10 of " + size + " bytes");
  env.short_read_after_bytes = 200;  // past the header, inside the rows
  auto table = ReadOperatorTableCsv(path, "", &env);
  REQUIRE_FALSE(table.ok());
  CHECK(table.status().code() == StatusCode::kIoError);
  CHECK(table.status().message() == path + ": short read: got 200 of " + size + " bytes");
  CHECK(DetectProfileFormat(path + ".none").status().message() ==
        path + ".none: cannot open profile");
  CHECK(ReadOperatorTableCsv(path + ".none", "").status().message() == path + ".none: cannot open");
}

}  // namespace fathom::profiler
