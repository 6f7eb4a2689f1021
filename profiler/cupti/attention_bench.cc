// Attention microbenchmarks on cuDNN's fused SDPA operation, built through the backend graph API
// (one SDPA_FWD node: Q, K, V, O and a by-value scale).
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <utility>

#include "profiler/cupti/bench.h"

namespace fathom::profiler {
namespace {

// A cuDNN backend descriptor that destroys itself; Set and Finalize remember the first failure.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    ok_ = cudnnBackendCreateDescriptor(type, &d_) == CUDNN_STATUS_SUCCESS;
  }
  Desc(Desc&& other) noexcept : d_(std::exchange(other.d_, nullptr)), ok_(other.ok_) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }

  cudnnBackendDescriptor_t get() const { return d_; }
  bool ok() const { return ok_; }
  Desc& Set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
            const void* value) {
    ok_ = ok_ && cudnnBackendSetAttribute(d_, name, type, count, value) == CUDNN_STATUS_SUCCESS;
    return *this;
  }
  Desc& Set(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t d = other.get();
    return Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
  }
  bool Finalize() {
    ok_ = ok_ && cudnnBackendFinalize(d_) == CUDNN_STATUS_SUCCESS;
    return ok_;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  bool ok_ = false;
};

enum Uid : int64_t { kQ = 1, kK, kV, kO, kScale };

// A 4-d tensor of `type`; `by_value`: a scalar passed from the host.
Desc TensorDesc(int64_t uid, cudnnDataType_t type, int64_t alignment, const int64_t dims[4],
                const int64_t strides[4], bool by_value) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
      .Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
      .Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment)
      .Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims)
      .Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  if (by_value) t.Set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  t.Finalize();
  return t;
}

// The logical [batch, heads, sequence, width] BF16 tensor stored batch, sequence, head, width
// (the layout serving engines keep Q and a contiguous K/V cache in).
Desc Tensor(int64_t uid, int64_t batch, int64_t heads, int64_t sequence, int64_t width) {
  const int64_t dims[4] = {batch, heads, sequence, width};
  const int64_t strides[4] = {sequence * heads * width, width, heads * width, 1};
  return TensorDesc(uid, CUDNN_DATA_BFLOAT16, 16, dims, strides, false);
}

// The FP32 softmax scale, passed by value from the host.
Desc Scale() {
  const int64_t ones[4] = {1, 1, 1, 1};
  return TensorDesc(kScale, CUDNN_DATA_FLOAT, 4, ones, ones, true);
}

// An execution plan for one shape, with every descriptor it refers to.
struct SdpaPlan {
  std::vector<Desc> keep;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;
};

// The first of cuDNN's heuristic engine configurations that finalizes for `c`; false if none.
bool BuildPlan(cudnnHandle_t handle, const AttentionCase& c, SdpaPlan* out) {
  const models::AttentionHeads& h = c.heads;
  auto& keep = out->keep;
  keep.push_back(Tensor(kQ, c.sequences, h.heads, c.q_len, h.d_qk));
  keep.push_back(Tensor(kK, c.sequences, h.kv_heads, c.kv_len, h.d_qk));
  keep.push_back(Tensor(kV, c.sequences, h.kv_heads, c.kv_len, h.d_v));
  keep.push_back(Tensor(kO, c.sequences, h.heads, c.q_len, h.d_v));
  keep.push_back(Scale());
  for (const Desc& d : keep) {
    if (!d.ok()) return false;
  }
  Desc op(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  op.Set(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, keep[0])
      .Set(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, keep[1])
      .Set(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, keep[2])
      .Set(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, keep[3])
      .Set(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, keep[4]);
  if (!op.Finalize()) return false;
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .Set(CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
  if (!graph.Finalize()) return false;
  Desc heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.Set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (!heuristics.Finalize()) return false;
  int64_t available = 0;
  if (cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available,
                               nullptr) != CUDNN_STATUS_SUCCESS ||
      available == 0) {
    return false;
  }
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < available; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  if (cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned,
                               raw.data()) != CUDNN_STATUS_SUCCESS) {
    return false;
  }
  for (int64_t i = 0; i < returned; ++i) {
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
        .Set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
    if (!plan.Finalize()) continue;
    int64_t got = 0;
    if (cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &got,
                                 &out->workspace_bytes) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    out->plan = plan.get();
    keep.push_back(std::move(op));
    keep.push_back(std::move(graph));
    keep.push_back(std::move(heuristics));
    for (Desc& config : configs) keep.push_back(std::move(config));
    keep.push_back(std::move(plan));
    return true;
  }
  return false;
}

std::string Dims(const models::AttentionHeads& h) {
  return "heads=" + std::to_string(h.heads) + " kv_heads=" + std::to_string(h.kv_heads) +
         " d_qk=" + std::to_string(h.d_qk) + " d_v=" + std::to_string(h.d_v);
}

// Runs `plan` once on device buffers Q, K, V, O and the plan's workspace.
bool Execute(cudnnHandle_t handle, const SdpaPlan& plan, int64_t d_qk, void* const tensors[4],
             void* workspace) {
  float scale = 1.0f / std::sqrt(static_cast<float>(d_qk));
  int64_t uids[5] = {kQ, kK, kV, kO, kScale};
  void* pointers[5] = {tensors[0], tensors[1], tensors[2], tensors[3], &scale};
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.Set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids)
      .Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, pointers)
      .Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
      .Finalize();
  return pack.ok() && cudnnBackendExecute(handle, plan.plan, pack.get()) == CUDNN_STATUS_SUCCESS;
}

}  // namespace

Status RunAttentionOnce(const AttentionCase& c, void* q, void* k, void* v, void* o) {
  cudnnHandle_t handle = nullptr;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS)
    return Status::Unavailable("cuDNN did not start");
  Status status = Status::Ok();
  {
    SdpaPlan plan;
    if (!BuildPlan(handle, c, &plan)) {
      status = Status::Unavailable("cuDNN has no SDPA engine for " + Dims(c.heads));
    } else {
      Buffers workspace({std::max<int64_t>(plan.workspace_bytes, 1)});
      void* const tensors[4] = {q, k, v, o};
      if (!workspace.ok || !Execute(handle, plan, c.heads.d_qk, tensors, workspace.ptrs[0]) ||
          cudaDeviceSynchronize() != cudaSuccess) {
        status = Status::Unavailable("cuDNN SDPA failed to run");
      }
    }
  }
  cudnnDestroy(handle);
  return status;
}

void BenchAttention(const std::vector<AttentionCase>& cases, BenchRun* run) {
  cudnnHandle_t handle = nullptr;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "fathom-ops-bench: cuDNN did not start: attention not measured\n");
    return;
  }
  const std::string stack = "cudnn-" + std::to_string(cudnnGetVersion());
  std::set<std::string> refused;  // (op, heads) that cuDNN has no engine for
  for (const AttentionCase& c : cases) {
    const models::AttentionHeads& h = c.heads;
    const std::string dims = Dims(h);
    if (refused.count(c.op + dims) > 0) continue;
    // Q, K, V and O in BF16.
    const int64_t bytes[4] = {c.sequences * c.q_len * h.heads * h.d_qk * 2,
                              c.sequences * c.kv_len * h.kv_heads * h.d_qk * 2,
                              c.sequences * c.kv_len * h.kv_heads * h.d_v * 2,
                              c.sequences * c.q_len * h.heads * h.d_v * 2};
    if (static_cast<size_t>(bytes[0] + bytes[1] + bytes[2] + bytes[3]) > run->memory_budget)
      continue;
    SdpaPlan plan;
    if (!BuildPlan(handle, c, &plan)) {
      std::fprintf(stderr,
                   "fathom-ops-bench: cuDNN has no SDPA engine for %s with %s: not measured\n",
                   c.op.c_str(), dims.c_str());
      refused.insert(c.op + dims);
      continue;
    }
    Buffers buf(
        {bytes[0], bytes[1], bytes[2], bytes[3], std::max<int64_t>(plan.workspace_bytes, 1)},
        run->fill);
    models::OpMeasurement shape;
    shape.op = c.op;
    shape.dtype = "bf16";
    shape.m = c.sequences;
    shape.n = c.kv_len;
    shape.k = c.q_len;
    shape.dims = dims;
    void* const tensors[4] = {buf.ptrs[0], buf.ptrs[1], buf.ptrs[2], buf.ptrs[3]};
    run->Record(shape, stack,
                buf.ok
                    ? TimeRuns([&] { return Execute(handle, plan, h.d_qk, tensors, buf.ptrs[4]); },
                               run->warmup, run->reps)
                    : std::vector<double>{});
  }
  cudnnDestroy(handle);
}

}  // namespace fathom::profiler
