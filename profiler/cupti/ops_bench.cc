// fathom-ops-bench: times the GEMMs of the configured models' operator lists on this GPU with
// cuBLASLt, in BF16 and (where the GPU has it) FP8, kernel time from CUPTI timestamps, and stores
// median / p10 / p90 per shape in the performance database. `fathom profile ops` runs it.
//   fathom-ops-bench --db DB [--hardware NAME] [--models deepseek-r1,llama3.1-405b] [--reps 20]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "models/hardware.h"
#include "models/operators.h"
#include "models/perf_db.h"
#include "profiler/cupti/cupti_tracer.h"

namespace {

using fathom::models::DType;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "fathom-ops-bench: %s\n", msg.c_str());
  return 2;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// GEMM (N, K) shapes per GPU from the operator lists of a model under a layout.
std::set<std::pair<int64_t, int64_t>> GemmShapes(const std::string& model, const fathom::models::ParallelLayout& l) {
  std::set<std::pair<int64_t, int64_t>> shapes;
  auto m = fathom::models::LoadModel(model);
  if (!m.ok()) return shapes;
  fathom::models::OperatorBuilder builder(*m, l, fathom::models::Precision{});
  fathom::models::BatchShape b;
  b.Add({512, 0, false, true}, 0);
  b.Add({1, 1000, true, true}, 0);
  std::vector<fathom::models::Operator> ops;
  builder.Build(b, fathom::models::MoeInput{513}, 0, &ops);
  for (const auto& op : ops) {
    if (op.kind == fathom::models::OpKind::kGemm) shapes.insert({op.n, op.k});
  }
  return shapes;
}

struct Gemm {
  cublasLtHandle_t lt;
  void* workspace;
  size_t workspace_bytes;
  int warmup, reps;
};

// Kernel microseconds of each repetition of the row-major GEMM C[m,n] = A[m,k] x W[k,n], with
// A and W in `dtype` (bf16, or fp8 E4M3 with unit scales) and C in bf16; empty when cuBLASLt
// cannot run it. Column-major, that is C^T = W^T x A^T; FP8 needs the "TN" form, so W is
// stored as [n, k] (nn.Linear's layout) and transposed by cuBLASLt.
std::vector<double> TimeGemm(const Gemm& g, int64_t m, int64_t n, int64_t k, DType dtype) {
  const bool fp8 = dtype == DType::kFp8;
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const size_t in_bytes = fp8 ? 1 : 2;
  void *a = nullptr, *w = nullptr, *c = nullptr;
  std::vector<double> per_rep;
  if (cudaMalloc(&a, m * k * in_bytes) != cudaSuccess || cudaMalloc(&w, k * n * in_bytes) != cudaSuccess ||
      cudaMalloc(&c, m * n * 2) != cudaSuccess) {
    cudaFree(a);
    cudaFree(w);
    return per_rep;
  }
  cudaMemset(a, 0, m * k * in_bytes);
  cudaMemset(w, 0, k * n * in_bytes);
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t lw, la, lc;
  if (fp8) {
    const cublasOperation_t transpose = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose));
    cublasLtMatrixLayoutCreate(&lw, in_type, k, n, k);
  } else {
    cublasLtMatrixLayoutCreate(&lw, in_type, n, k, n);
  }
  cublasLtMatrixLayoutCreate(&la, in_type, k, m, k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n);
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    return cublasLtMatmul(g.lt, desc, &alpha, w, lw, a, la, &beta, c, lc, c, lc, nullptr, g.workspace,
                          g.workspace_bytes, 0) == CUBLAS_STATUS_SUCCESS;
  };
  bool ok = true;
  for (int i = 0; i < g.warmup && ok; ++i) ok = run();
  cudaDeviceSynchronize();
  (void)fathom::profiler::FlushTracing();  // discard warm-up kernels
  for (int i = 0; i < g.reps && ok; ++i) ok = run();
  cudaDeviceSynchronize();
  auto kernels = fathom::profiler::FlushTracing();
  cublasLtMatrixLayoutDestroy(lw);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(a);
  cudaFree(w);
  cudaFree(c);
  if (!ok || !kernels.ok()) return per_rep;
  std::vector<int64_t> durations;
  for (const auto& kr : *kernels) {
    if (kr.kind == "kernel") durations.push_back(kr.end_ns - kr.start_ns);
  }
  // Each rep launches the same kernels (a GEMM may add a split-K reduction).
  if (durations.empty() || durations.size() % g.reps != 0) return per_rep;
  const size_t per = durations.size() / g.reps;
  for (int r = 0; r < g.reps; ++r) {
    double sum = 0;
    for (size_t j = 0; j < per; ++j) sum += static_cast<double>(durations[r * per + j]);
    per_rep.push_back(sum / 1e3);
  }
  return per_rep;
}

}  // namespace

int main(int argc, char** argv) {
  std::string db_path = "fathom_perf.db", hardware, models_arg = "deepseek-r1,llama3.1-405b";
  int reps = 20, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--db") db_path = argv[i + 1];
    else if (a == "--hardware") hardware = argv[i + 1];
    else if (a == "--models") models_arg = argv[i + 1];
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else return Fail("unknown flag " + a);
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
  if (hardware.empty()) {
    auto name = fathom::models::CatalogNameForDevice(prop.name);
    if (!name.ok()) return Fail(name.status().message() + "; give --hardware with a catalogue name");
    hardware = *name;
  }
  const std::string device_info = std::string(prop.name) + "; sm " + std::to_string(prop.major) + "." +
                                  std::to_string(prop.minor) + "; clock " + std::to_string(clock_khz / 1000) +
                                  " MHz; memory clock " + std::to_string(mem_clock_khz / 1000) + " MHz; driver " +
                                  std::to_string(driver) + "; CUDA runtime " + std::to_string(runtime);
  const std::string stack = "cublaslt-" + std::to_string(cublasLtGetVersion());
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));

  auto db = fathom::models::PerfDb::Open(db_path);
  if (!db.ok()) return Fail(db.status().message());
  if (auto s = fathom::profiler::StartTracing(); !s.ok()) return Fail(s.message());

  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const auto& model : Split(models_arg)) {
    for (const auto& l : {fathom::models::ParallelLayout{8, 8, 1, 8, 8}, fathom::models::ParallelLayout{8, 8, 1, 1, 1},
                          fathom::models::ParallelLayout{1, 1, 1, 1, 1}}) {
      for (const auto& s : GemmShapes(model, l)) shapes.insert(s);
    }
  }
  Gemm gemm{nullptr, nullptr, size_t{64} << 20, warmup, reps};
  cublasLtCreate(&gemm.lt);
  cudaMalloc(&gemm.workspace, gemm.workspace_bytes);
  // FP8 tensor cores from Ada / Hopper (sm 8.9) on.
  std::vector<DType> dtypes = {DType::kBf16};
  if (prop.major * 10 + prop.minor >= 89) dtypes.push_back(DType::kFp8);
  const std::vector<int64_t> ms = {1, 8, 32, 128, 512, 2048, 8192};
  int rows = 0;
  for (DType dtype : dtypes) {
    for (const auto& [n, k] : shapes) {
      for (int64_t m : ms) {
        if ((m * k + k * n + m * n) * 2 > static_cast<int64_t>(prop.totalGlobalMem / 2)) continue;
        std::vector<double> per_rep = TimeGemm(gemm, m, n, k, dtype);
        if (per_rep.empty()) {
          std::fprintf(stderr, "fathom-ops-bench: %s GEMM %lldx%lldx%lld failed, skipped\n",
                       std::string(fathom::models::Name(dtype)).c_str(), static_cast<long long>(m),
                       static_cast<long long>(n), static_cast<long long>(k));
          continue;
        }
        std::sort(per_rep.begin(), per_rep.end());
        fathom::models::OpMeasurement row;
        row.hardware = hardware;
        row.stack = stack;
        row.op = "gemm";
        row.dtype = std::string(fathom::models::Name(dtype));
        row.m = m;
        row.n = n;
        row.k = k;
        row.median_us = per_rep[per_rep.size() / 2];
        row.p10_us = per_rep[per_rep.size() / 10];
        row.p90_us = per_rep[per_rep.size() * 9 / 10];
        row.count = static_cast<int64_t>(per_rep.size());
        row.date = date;
        row.device_info = device_info;
        if (auto s = db->Insert(row); !s.ok()) return Fail(s.message());
        ++rows;
      }
    }
  }
  cudaFree(gemm.workspace);
  cublasLtDestroy(gemm.lt);
  std::printf("fathom-ops-bench: %d GEMM shapes measured on %s into %s\n", rows, prop.name, db_path.c_str());
  return 0;
}
