// Imports timings that other tools recorded: kernels from Nsight Systems SQLite exports and
// PyTorch profiler Chrome-trace JSON, and measured GEMM and all-reduce tables in AIConfigurator's
// CSV layout.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "models/perf_db.h"

namespace fathom::profiler {

enum class ProfileFormat { kNsysSqlite, kPytorchJson, kOperatorTableCsv, kVidurCsv };

// Looks at the file's first bytes: "SQLite format 3", JSON, a CSV header naming op_name and
// latency, or Vidur's time_stats.<op>.* columns.
// Files are opened in `env` (borrowed; it must outlive the call only).
Result<ProfileFormat> DetectProfileFormat(const std::string& path, Env* env = Env::Default());

// Kernel, memcpy and memset records with their enclosing NVTX (or PyTorch user annotation) range.
Result<std::vector<models::KernelRecord>> ReadNsysSqlite(const std::string& path);
Result<std::vector<models::KernelRecord>> ReadPytorchTrace(const std::string& path);

// Operator measurements read from a table, and the rows left out: data type (or operator) -> rows.
struct OperatorTable {
  std::vector<models::OpMeasurement> rows;
  std::map<std::string, int64_t> skipped;
};

// A table of AIConfigurator's collector (framework, version, device, op_name, kernel_source, then
// the shape, latency in milliseconds): GEMMs (gemm_perf: gemm_dtype, m, n, k), all-reduces
// (custom_allreduce_perf, nccl_perf: allreduce_dtype or nccl_dtype, num_gpus, message_size in
// elements; other collectives are left out and counted) or whole MoE layers on one GPU (moe_perf:
// moe_dtype, num_tokens, hidden_size, inter_size, topk, num_experts, moe_tp_size, moe_ep_size,
// distribution; rows of balanced routing only, as "moe" rows, OpMeasurement's shape in
// models::MeasuredOperators; MXFP4 experts where they meet the activations the cost model gives
// them: MXFP8 on GPUs with FP4 cores, BF16 on others). Rows go under `hardware`, or the
// catalogue GPU the device column names; the stack is framework-version. Of several kernel
// sources for one shape the fastest counts. Rows of data types the cost model has no format for
// are left out and counted in `skipped`.
Result<OperatorTable> ReadOperatorTableCsv(const std::string& path, const std::string& hardware,
                                           Env* env = Env::Default());

// Vidur's profiles (microsoft/vidur, data/profiling): per-layer operator times of one model at
// each token count and tensor-parallel degree (compute/<gpu>/<model>/mlp.csv: the QKV, output,
// up and down projections become GEMM rows of that model's shapes, dims "model=<dir> tp=<t>";
// fp16, priced as bf16, the same tensor-core rate), and NCCL collectives on one or more nodes
// (network/<node>/all_reduce.csv, send_recv.csv: bytes per GPU, ranks, dims "nodes=<n>"). Norms,
// RoPE, activation, residual add and embedding are left out (counted): the cost model prices no
// such operator from a shape. The files name no GPU: `hardware`, else a path component naming
// a catalogue GPU family (h100 -> h100-sxm).
Result<OperatorTable> ReadVidurCsv(const std::string& path, const std::string& hardware,
                                   Env* env = Env::Default());

struct ImportResult {
  int64_t records = 0;  // kernel records or operator rows stored
  std::map<std::string, int64_t> skipped;
};

// Detects the format, reads the file and stores it in `db`, all or nothing. `hardware` files
// operator tables under a catalogue GPU (default: from the table's device column).
Result<ImportResult> ImportProfile(const std::string& path, models::PerfDb& db,
                                   const std::string& hardware = "");

}  // namespace fathom::profiler
