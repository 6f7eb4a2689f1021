// The performance database (SQLite): measured, imported or published operator latencies per
// GPU and software stack, plus raw kernel activity from the profiler. The profiler writes it;
// the cost model reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/sqlite.h"
#include "base/status.h"

namespace fathom::models {

struct OpMeasurement {
  std::string hardware;  // catalogue name, e.g. "h100-sxm"
  std::string stack;     // software stack tag, e.g. "trtllm-1.0", "cublaslt-13.0"
  std::string op;        // operator kind: gemm, grouped_gemm, attention_prefill, attention_decode,
                         // all_reduce, all_gather, all_to_all, ...
  std::string dtype;     // bf16, fp8, nvfp4, ...
  // Shape. GEMM: M, N, K; grouped GEMM: M rows per group, N, K, groups in extra. Attention:
  // sequences, K/V length and query tokens per sequence in m, n, k, the heads in dims
  // ("heads=16 kv_heads=1 d_qk=128 d_v=128", "causal=1" when masked). Collectives: bytes per
  // GPU as NCCL counts them (the buffer for all_reduce, a shard for all_gather and
  // reduce_scatter, all it sends for all_to_all) in m, ranks in extra.
  int64_t m = 0, n = 0, k = 0;
  int64_t extra = 0;
  std::string dims;  // the shape beyond (m, n, k, extra): space-separated key=value pairs
  double median_us = 0, p10_us = 0, p90_us = 0;
  int64_t count = 0;
  std::string source = "measured";  // measured, imported or published
  std::string date;                 // ISO 8601
  std::string device_info;          // GPU name, clocks, driver and CUDA versions
};

// One kernel execution recorded by the CUPTI tracer or imported from a profile.
struct KernelRecord {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
  int32_t device = 0, stream = 0;
  int64_t correlation = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  std::string kind = "kernel";  // kernel, memcpy, memset
  std::string nvtx_range;       // innermost enclosing NVTX range, "" when none
  std::string source;           // which run or file it came from
};

class PerfDb {
 public:
  // Opens (creating when missing) the database at `path`; ":memory:" for a temporary one.
  static Result<PerfDb> Open(const std::string& path);

  Status Insert(const OpMeasurement& m);
  Status Insert(const std::vector<OpMeasurement>& rows);           // all or nothing
  Status InsertKernels(const std::vector<KernelRecord>& kernels);  // one transaction

  // Rows for one GPU, operator kind, data type and stack; an empty one of the last three matches
  // every value.
  Result<std::vector<OpMeasurement>> Query(const std::string& hardware, const std::string& op,
                                           const std::string& dtype,
                                           const std::string& stack = "") const;
  Result<std::vector<KernelRecord>> Kernels() const;
  Result<std::vector<std::string>> HardwareNames() const;  // GPUs with operator rows

 private:
  explicit PerfDb(sqlite::Database db) : db_(std::move(db)) {}
  Status InsertOne(const OpMeasurement& m);  // inside a transaction
  sqlite::Database db_;
};

// The integer value of `key` in a dims string ("heads=16 kv_heads=1"); nullopt when absent or
// not an integer.
std::optional<int64_t> DimValue(std::string_view dims, std::string_view key);
// The text of `key`'s value in `dims` ("model=Llama-2-7b-hf"), if present.
std::optional<std::string_view> DimText(std::string_view dims, std::string_view key);

// Latency at `x` from points (x_i, y_i) sorted by x: piecewise linear in (log x, log y), exact
// at the points; below the first point the first latency (a kernel's floor), above the last the
// last segment extended. Empty input gives nullopt.
std::optional<double> InterpolateLogLog(const std::vector<std::pair<double, double>>& points,
                                        double x);

}  // namespace fathom::models
