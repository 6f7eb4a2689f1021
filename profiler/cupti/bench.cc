#include "profiler/cupti/bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>

#include "profiler/cupti/cupti_tracer.h"

namespace fathom::profiler {

std::vector<double> TimeRuns(const std::function<bool()>& run, int warmup, int reps, int device) {
  bool ok = true;
  for (int i = 0; i < warmup && ok; ++i) ok = run();
  cudaDeviceSynchronize();
  (void)FlushTracing();  // discard set-up and warm-up kernels
  for (int i = 0; i < reps && ok; ++i) ok = run();
  cudaDeviceSynchronize();
  auto kernels = FlushTracing();
  std::vector<double> per_rep;
  if (!ok || !kernels.ok()) return per_rep;
  std::vector<int64_t> durations;
  for (const auto& kr : *kernels) {
    if (kr.kind == "kernel" && (device < 0 || kr.device == device))
      durations.push_back(kr.end_ns - kr.start_ns);
  }
  if (durations.empty() || durations.size() % reps != 0) return per_rep;
  const size_t per = durations.size() / reps;
  for (int r = 0; r < reps; ++r) {
    double sum = 0;
    for (size_t j = 0; j < per; ++j) sum += static_cast<double>(durations[r * per + j]);
    per_rep.push_back(sum / 1e3);
  }
  return per_rep;
}

namespace {

// One MiB of the pattern Buffers describes, copied in and then doubled on the device.
bool FillRandom(void* p, size_t size) {
  std::vector<uint8_t> host(std::min(size, size_t{1} << 20));
  std::mt19937 rng(20261127);
  for (size_t i = 0; i + 1 < host.size(); i += 2) {
    const uint32_t r = rng();
    // Low byte: any but 0x7F and 0xFF (E4M3's NaNs); high byte: BF16 exponents 2^-15 to 2^0.
    host[i] = static_cast<uint8_t>(((r & 0x7F) % 0x7F) | ((r >> 8) & 0x80));
    host[i + 1] = static_cast<uint8_t>((0x38 + ((r >> 16) & 7)) | ((r >> 24) & 0x80));
  }
  if (cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess) return false;
  for (size_t done = host.size(); done < size; done *= 2) {
    if (cudaMemcpy(static_cast<char*>(p) + done, p, std::min(done, size - done),
                   cudaMemcpyDeviceToDevice) != cudaSuccess)
      return false;
  }
  return true;
}

}  // namespace

Buffers::Buffers(std::initializer_list<int64_t> bytes, Fill fill) {
  for (int64_t b : bytes) {
    void* p = nullptr;
    const auto size = static_cast<size_t>(b);
    ok = ok && cudaMalloc(&p, size) == cudaSuccess &&
         (fill == Fill::kRandom ? FillRandom(p, size) : cudaMemset(p, 0, size) == cudaSuccess);
    ptrs.push_back(p);
  }
}

Buffers::~Buffers() {
  for (void* p : ptrs) cudaFree(p);
}

void BenchRun::Record(const models::OpMeasurement& shape, const std::string& stack,
                      std::vector<double> per_rep) {
  if (per_rep.empty()) {
    std::fprintf(
        stderr, "fathom-ops-bench: %s %s %lldx%lldx%lld (extra %lld%s%s) failed, skipped\n",
        shape.op.c_str(), shape.dtype.c_str(), static_cast<long long>(shape.m),
        static_cast<long long>(shape.n), static_cast<long long>(shape.k),
        static_cast<long long>(shape.extra), shape.dims.empty() ? "" : "; ", shape.dims.c_str());
    return;
  }
  std::sort(per_rep.begin(), per_rep.end());
  models::OpMeasurement row = shape;
  row.hardware = hardware;
  row.stack = stack;
  row.median_us = per_rep[per_rep.size() / 2];
  row.p10_us = per_rep[per_rep.size() / 10];
  row.p90_us = per_rep[per_rep.size() * 9 / 10];
  row.count = static_cast<int64_t>(per_rep.size());
  row.source = "measured";
  row.date = date;
  row.device_info = device_info;
  rows.push_back(row);
}

}  // namespace fathom::profiler
