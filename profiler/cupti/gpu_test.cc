// GPU tests of the profiler: the CUPTI tracer sees a memset and a copy, and (built with cuDNN) the
// attention microbenchmark's SDPA, grouped-query, with more keys than queries, matches a
// reference computed here. Exits 77 (skipped) when no CUDA device is visible, so that a
// machine without a GPU never reports it as passed or failed.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "profiler/cupti/bench.h"
#include "profiler/cupti/cupti_tracer.h"

namespace {

bool TracerSeesCopies() {
  if (!fathom::profiler::StartTracing({.buffer_bytes = 1 << 20, .max_buffers = 4, .sink = nullptr})
           .ok())
    return false;
  void* buf = nullptr;
  cudaMalloc(&buf, 1 << 20);
  cudaMemset(buf, 1, 1 << 20);
  std::vector<char> host(1 << 20);
  cudaMemcpy(host.data(), buf, 1 << 20, cudaMemcpyDeviceToHost);
  cudaDeviceSynchronize();
  cudaFree(buf);
  auto records = fathom::profiler::FlushTracing();
  if (!records.ok()) return false;
  bool memset = false, memcpy = false;
  for (const auto& r : *records) {
    memset = memset || (r.kind == "memset" && r.end_ns > r.start_ns);
    memcpy = memcpy || (r.kind == "memcpy" && r.end_ns > r.start_ns);
  }
  std::printf("tracer: records %zu, memset %d, memcpy %d\n", records->size(), memset, memcpy);
  return memset && memcpy;
}

#ifdef FATHOM_WITH_CUDNN
uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float FromBf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Deterministic values in [-1, 1], rounded to BF16 (so the reference sees what the GPU sees).
std::vector<uint16_t> Fill(size_t n, float phase) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = ToBf16(std::sin(0.37f * static_cast<float>(i) + phase));
  return out;
}

// Index of element (sequence s, position p, head h, width d) in [S, P, H, D] storage.
size_t At(int64_t s, int64_t p, int64_t h, int64_t d, int64_t positions, int64_t heads,
          int64_t width) {
  return static_cast<size_t>(((s * positions + p) * heads + h) * width + d);
}

bool AttentionMatchesReference() {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major < 8) {
    std::printf("attention: cuDNN's fused attention needs sm 8.0 or newer: not checked\n");
    return true;
  }
  fathom::profiler::AttentionCase c;
  c.op = "attention_prefill";
  c.heads = {4, 2, 64, 64};  // two query heads per K/V head
  c.sequences = 2;
  c.q_len = 3;
  c.kv_len = 5;
  const auto& hd = c.heads;
  auto q = Fill(c.sequences * c.q_len * hd.heads * hd.d_qk, 0.1f);
  auto k = Fill(c.sequences * c.kv_len * hd.kv_heads * hd.d_qk, 0.7f);
  auto v = Fill(c.sequences * c.kv_len * hd.kv_heads * hd.d_v, 1.3f);
  std::vector<uint16_t> o(c.sequences * c.q_len * hd.heads * hd.d_v);
  void *dq, *dk, *dv, *dout;
  cudaMalloc(&dq, q.size() * 2);
  cudaMalloc(&dk, k.size() * 2);
  cudaMalloc(&dv, v.size() * 2);
  cudaMalloc(&dout, o.size() * 2);
  cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice);
  const fathom::Status ran = fathom::profiler::RunAttentionOnce(c, dq, dk, dv, dout);
  cudaMemcpy(o.data(), dout, o.size() * 2, cudaMemcpyDeviceToHost);
  for (void* p : {dq, dk, dv, dout}) cudaFree(p);
  if (!ran.ok()) {
    std::printf("attention: %s\n", ran.message().c_str());
    return false;
  }
  double worst = 0;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd.d_qk));
  for (int64_t s = 0; s < c.sequences; ++s) {
    for (int64_t h = 0; h < hd.heads; ++h) {
      const int64_t g = h / (hd.heads / hd.kv_heads);
      for (int64_t i = 0; i < c.q_len; ++i) {
        std::vector<double> p(c.kv_len);
        double max = -1e30, sum = 0;
        for (int64_t j = 0; j < c.kv_len; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd.d_qk; ++d) {
            dot += FromBf16(q[At(s, i, h, d, c.q_len, hd.heads, hd.d_qk)]) *
                   FromBf16(k[At(s, j, g, d, c.kv_len, hd.kv_heads, hd.d_qk)]);
          }
          p[j] = dot * scale;
          max = std::max(max, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - max));
        for (int64_t d = 0; d < hd.d_v; ++d) {
          double ref = 0;
          for (int64_t j = 0; j < c.kv_len; ++j)
            ref += p[j] / sum * FromBf16(v[At(s, j, g, d, c.kv_len, hd.kv_heads, hd.d_v)]);
          worst = std::max(worst,
                           std::abs(ref - FromBf16(o[At(s, i, h, d, c.q_len, hd.heads, hd.d_v)])));
        }
      }
    }
  }
  std::printf("attention: cuDNN SDPA against the reference, worst |error| %.4f\n", worst);
  return worst < 2e-2;
}
#endif

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  bool ok = TracerSeesCopies();
#ifdef FATHOM_WITH_CUDNN
  ok = AttentionMatchesReference() && ok;
#endif
  return ok ? 0 : 1;
}
