// fathom-ops-bench: times the operators of the configured models' operator lists on this GPU
// (GEMMs in BF16 and, where the GPU has it, FP8; MoE grouped GEMMs; attention prefill and decode
// on cuDNN; NCCL collectives across the GPUs present), kernel time from CUPTI timestamps, and
// stores median / p10 / p90 per shape in the performance database. `fathom profile ops` runs it.
//   fathom-ops-bench --db DB [--hardware NAME] [--models deepseek-r1,llama3.1-405b] [--reps 20]
//                    [--fill random|zeros]   (operands: random by default, as real data runs)
//   fathom-ops-bench --list [--models ...]   (the shapes it would time; no GPU needed)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "base/csv.h"
#include "models/deployment.h"
#include "models/hardware.h"
#include "models/operators.h"
#include "models/perf_db.h"
#include "profiler/cupti/bench.h"
#include "profiler/cupti/cupti_tracer.h"

namespace {

using fathom::models::DType;
using fathom::profiler::AttentionCase;
using fathom::profiler::BenchRun;
using fathom::profiler::Buffers;
using fathom::profiler::CollectiveCase;
using fathom::profiler::TimeRuns;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "fathom-ops-bench: %s\n", msg.c_str());
  return 2;
}

// Per GPU, from the operator lists: GEMM (N, K) and grouped GEMM (N, K, groups) shapes, the heads
// of the attention kernels, and the collectives with their bytes per token.
struct Shapes {
  std::set<std::pair<int64_t, int64_t>> gemms;
  std::set<std::tuple<int64_t, int64_t, int64_t>> grouped;
  std::set<fathom::models::AttentionHeads> prefill_heads, decode_heads;
  std::set<std::pair<fathom::models::CommKind, int64_t>> collectives;
};

fathom::Status AddShapes(const std::string& model, const fathom::models::ParallelLayout& l,
                         Shapes* shapes) {
  FATHOM_ASSIGN_OR_RETURN(fathom::models::ModelArch m, fathom::models::LoadModel(model));
  if (!fathom::models::ValidateLayout(m, l).ok())
    return fathom::Status::Ok();  // not a layout of this model
  fathom::models::OperatorBuilder builder(m, l, fathom::models::Precision{});
  fathom::models::BatchShape b;
  b.Add({512, 0, false, true}, 0);
  b.Add({1, 1000, true, true}, 0);
  std::vector<fathom::models::Operator> ops;
  builder.Build(b, fathom::models::MoeInput{513}, 0, &ops);
  for (const auto& op : ops) {
    if (op.kind == fathom::models::OpKind::kGemm) shapes->gemms.insert({op.n, op.k});
    if (op.kind == fathom::models::OpKind::kGroupedGemm)
      shapes->grouped.insert({op.n, op.k, op.groups});
  }
  // Collectives from a decode batch, where every token is also sampled (the LM head's gather
  // scales with sampled tokens): bytes per token.
  constexpr int64_t kDecode = 64;
  fathom::models::BatchShape decode;
  for (int64_t i = 0; i < kDecode; ++i) decode.Add({1, 1000, true, true}, 0);
  builder.Build(decode, fathom::models::MoeInput{kDecode}, 0, &ops);
  for (const auto& op : ops) {
    if (op.kind == fathom::models::OpKind::kCommunication &&
        op.comm != fathom::models::CommKind::kSendRecv) {
      shapes->collectives.insert({op.comm, static_cast<int64_t>(op.comm_bytes) / kDecode});
    }
  }
  shapes->prefill_heads.insert(builder.PrefillHeads());
  fathom::models::AttentionHeads decode_heads = builder.DecodeHeads();
  decode_heads.v_in_k =
      false;  // cuDNN keeps K and V apart, so MLA's latent decode is timed with a separate V
  shapes->decode_heads.insert(decode_heads);
  return fathom::Status::Ok();
}

// The attention and collective cases to time: prefill of one sequence at growing lengths, decode
// of growing batches at growing contexts; collectives at growing token counts over 2, 4 and 8 GPUs.
std::vector<AttentionCase> AttentionCases(const Shapes& shapes) {
  std::vector<AttentionCase> out;
  for (const auto& h : shapes.prefill_heads) {
    for (int64_t len : {256, 1024, 4096, 16384})
      out.push_back({"attention_prefill", h, 1, len, len});
  }
  for (const auto& h : shapes.decode_heads) {
    for (int64_t batch : {1, 16, 64, 256}) {
      for (int64_t context : {1024, 8192, 32768})
        out.push_back({"attention_decode", h, batch, 1, context});
    }
  }
  return out;
}

std::vector<CollectiveCase> CollectiveCases(const Shapes& shapes) {
  std::vector<CollectiveCase> out;
  for (const auto& [kind, per_token] : shapes.collectives) {
    for (int ranks : {2, 4, 8}) {
      for (int64_t tokens : {1, 8, 64, 512, 4096}) out.push_back({kind, per_token * tokens, ranks});
    }
  }
  return out;
}

struct Bench {
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = size_t{64} << 20;
};

// The row-major GEMM C[m,n] = A[m,k] x W[k,n] with A and W in `dtype` (bf16, or fp8 E4M3 with
// unit scales) and C in bf16. Column-major, that is C^T = W^T x A^T; FP8 needs cuBLASLt's "TN"
// form, so W is stored as [n, k] (nn.Linear's layout) and transposed by cuBLASLt.
std::vector<double> TimeGemm(const Bench& g, const BenchRun& run, int64_t m, int64_t n, int64_t k,
                             DType dtype) {
  const bool fp8 = dtype == DType::kFp8;
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const int64_t in_bytes = fp8 ? 1 : 2;
  Buffers buf({m * k * in_bytes, k * n * in_bytes, m * n * 2}, run.fill);
  if (!buf.ok) return {};
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t lw, la, lc;
  if (fp8) {
    const cublasOperation_t transpose = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                   sizeof(transpose));
    cublasLtMatrixLayoutCreate(&lw, in_type, k, n, k);
  } else {
    cublasLtMatrixLayoutCreate(&lw, in_type, n, k, n);
  }
  cublasLtMatrixLayoutCreate(&la, in_type, k, m, k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n);
  const float alpha = 1.0f, beta = 0.0f;
  void *a = buf.ptrs[0], *w = buf.ptrs[1], *c = buf.ptrs[2];
  auto per_rep = TimeRuns(
      [&] {
        return cublasLtMatmul(g.lt, desc, &alpha, w, lw, a, la, &beta, c, lc, c, lc, nullptr,
                              g.workspace, g.workspace_bytes, 0) == CUBLAS_STATUS_SUCCESS;
      },
      run.warmup, run.reps);
  cublasLtMatrixLayoutDestroy(lw);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  return per_rep;
}

// An MoE grouped GEMM in BF16: `groups` experts, each multiplying its own m rows by its own
// [k, n] weights (one strided batched cuBLAS call; every expert gets the same rows, as the cost
// model's mean per active expert assumes).
std::vector<double> TimeGroupedGemm(const Bench& g, const BenchRun& run, int64_t m, int64_t n,
                                    int64_t k, int64_t groups) {
  Buffers buf({groups * m * k * 2, groups * k * n * 2, groups * m * n * 2}, run.fill);
  if (!buf.ok) return {};
  const float alpha = 1.0f, beta = 0.0f;
  void *a = buf.ptrs[0], *w = buf.ptrs[1], *c = buf.ptrs[2];
  return TimeRuns(
      [&] {
        return cublasGemmStridedBatchedEx(
                   g.blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                   static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(n), n * k, a,
                   CUDA_R_16BF, static_cast<int>(k), m * k, &beta, c, CUDA_R_16BF,
                   static_cast<int>(n), m * n, static_cast<int>(groups), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
      },
      run.warmup, run.reps);
}

}  // namespace

int main(int argc, char** argv) {
  std::string db_path = "fathom_perf.db", hardware, models_arg = "deepseek-r1,llama3.1-405b";
  Bench bench;
  BenchRun run;
  bool list = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--list") {
      list = true;
      --i;  // takes no value
      continue;
    }
    if (i + 1 >= argc) return Fail(a + " needs a value");
    if (a == "--db")
      db_path = argv[i + 1];
    else if (a == "--hardware")
      hardware = argv[i + 1];
    else if (a == "--models")
      models_arg = argv[i + 1];
    else if (a == "--reps")
      run.reps = std::atoi(argv[i + 1]);
    else if (a == "--fill" && std::string(argv[i + 1]) == "random")
      run.fill = fathom::profiler::Fill::kRandom;
    else if (a == "--fill" && std::string(argv[i + 1]) == "zeros")
      run.fill = fathom::profiler::Fill::kZeros;
    else if (a == "--fill")
      return Fail("--fill must be random or zeros, not " + std::string(argv[i + 1]));
    else
      return Fail("unknown flag " + a);
  }
  if (run.reps < 1) return Fail("--reps must be at least 1");
  Shapes shapes;
  std::vector<std::string_view> models;
  fathom::SplitCsv(models_arg, &models);
  for (const auto& model : models) {
    for (const auto& l : {fathom::models::ParallelLayout{8, 8, 1, 8, 8},
                          fathom::models::ParallelLayout{8, 8, 1, 1, 1},
                          fathom::models::ParallelLayout{1, 1, 1, 1, 1}}) {
      if (auto s = AddShapes(std::string(model), l, &shapes); !s.ok())
        return Fail("--models: " + s.message());
    }
  }
  const std::vector<int64_t> gemm_ms = {1, 8, 32, 128, 512, 2048, 8192},
                             grouped_ms = {1, 4, 16, 64, 256};
  const std::vector<AttentionCase> attention = AttentionCases(shapes);
  const std::vector<CollectiveCase> collectives = CollectiveCases(shapes);
  if (list) {
    for (const auto& [n, k] : shapes.gemms)
      std::printf("gemm N %lld K %lld\n", static_cast<long long>(n), static_cast<long long>(k));
    for (const auto& [n, k, groups] : shapes.grouped) {
      std::printf("grouped_gemm N %lld K %lld groups %lld\n", static_cast<long long>(n),
                  static_cast<long long>(k), static_cast<long long>(groups));
    }
    for (const auto& [set, op] : {std::pair{&shapes.prefill_heads, "attention_prefill"},
                                  std::pair{&shapes.decode_heads, "attention_decode"}}) {
      for (const auto& h : *set) {
        std::printf("%s heads %lld kv_heads %lld d_qk %lld d_v %lld\n", op,
                    static_cast<long long>(h.heads), static_cast<long long>(h.kv_heads),
                    static_cast<long long>(h.d_qk), static_cast<long long>(h.d_v));
      }
    }
    for (const auto& [kind, per_token] : shapes.collectives) {
      std::printf("%s %lld bytes per token\n", std::string(fathom::models::Name(kind)).c_str(),
                  static_cast<long long>(per_token));
    }
    std::printf(
        "%zu GEMM shapes x %zu M (BF16, and FP8 from sm 8.9), %zu grouped GEMM shapes x %zu M, %zu "
        "attention "
        "cases (cuDNN), %zu collective cases (NCCL, over as many GPUs as are visible)\n",
        shapes.gemms.size(), gemm_ms.size(), shapes.grouped.size(), grouped_ms.size(),
        attention.size(), collectives.size());
    return 0;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return Fail("no CUDA device visible: the microbenchmarks need an NVIDIA GPU and driver");
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int clock_khz = 0, mem_clock_khz = 0, driver = 0, runtime = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  run.memory_budget = prop.totalGlobalMem / 2;
  run.hardware = hardware;
  if (run.hardware.empty()) {
    auto name = fathom::models::CatalogNameForDevice(prop.name);
    if (!name.ok())
      return Fail(name.status().message() + "; give --hardware with a catalogue name");
    run.hardware = *name;
  }
  run.device_info = std::string(prop.name) + "; sm " + std::to_string(prop.major) + "." +
                    std::to_string(prop.minor) + "; clock " + std::to_string(clock_khz / 1000) +
                    " MHz; memory clock " + std::to_string(mem_clock_khz / 1000) + " MHz; driver " +
                    std::to_string(driver) + "; CUDA runtime " + std::to_string(runtime) + "; " +
                    std::to_string(devices) + " GPUs; operands " +
                    (run.fill == fathom::profiler::Fill::kZeros ? "zeros" : "random");
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  run.date = date;

  auto db = fathom::models::PerfDb::Open(db_path);
  if (!db.ok()) return Fail(db.status().message());
  if (auto s = fathom::profiler::StartTracing(); !s.ok()) return Fail(s.message());
  cublasLtCreate(&bench.lt);
  cublasCreate(&bench.blas);
  cudaMalloc(&bench.workspace, bench.workspace_bytes);
  int blas_version = 0;
  cublasGetVersion(bench.blas, &blas_version);

  auto gemm_shape = [](const char* op, DType dtype, int64_t m, int64_t n, int64_t k,
                       int64_t groups) {
    fathom::models::OpMeasurement shape;
    shape.op = op;
    shape.dtype = std::string(fathom::models::Name(dtype));
    shape.m = m;
    shape.n = n;
    shape.k = k;
    shape.extra = groups;
    return shape;
  };
  // FP8 tensor cores from Ada / Hopper (sm 8.9) on.
  std::vector<DType> dtypes = {DType::kBf16};
  if (prop.major * 10 + prop.minor >= 89) dtypes.push_back(DType::kFp8);
  const std::string lt_stack = "cublaslt-" + std::to_string(cublasLtGetVersion());
  for (DType dtype : dtypes) {
    for (const auto& [n, k] : shapes.gemms) {
      for (int64_t m : gemm_ms) {
        if (static_cast<size_t>((m * k + k * n + m * n) * 2) > run.memory_budget) continue;
        run.Record(gemm_shape("gemm", dtype, m, n, k, 0), lt_stack,
                   TimeGemm(bench, run, m, n, k, dtype));
      }
    }
  }
  const std::string blas_stack = "cublas-" + std::to_string(blas_version);
  for (const auto& [n, k, groups] : shapes.grouped) {
    for (int64_t m : grouped_ms) {
      if (static_cast<size_t>(groups * (m * k + k * n + m * n) * 2) > run.memory_budget) continue;
      run.Record(gemm_shape("grouped_gemm", DType::kBf16, m, n, k, groups), blas_stack,
                 TimeGroupedGemm(bench, run, m, n, k, groups));
    }
  }
  cudaFree(bench.workspace);
  cublasDestroy(bench.blas);
  cublasLtDestroy(bench.lt);
#ifdef FATHOM_WITH_CUDNN
  fathom::profiler::BenchAttention(attention, &run);
#else
  std::fprintf(stderr, "fathom-ops-bench: built without cuDNN: attention not measured\n");
#endif
#ifdef FATHOM_WITH_NCCL
  fathom::profiler::BenchCollectives(collectives, &run);
#else
  std::fprintf(stderr, "fathom-ops-bench: built without NCCL: collectives not measured\n");
#endif
  if (auto s = db->Insert(run.rows); !s.ok()) return Fail(s.message());
  std::printf("fathom-ops-bench: %zu operator shapes measured on %s into %s\n", run.rows.size(),
              prop.name, db_path.c_str());
  return 0;
}
