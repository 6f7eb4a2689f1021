// Collective microbenchmarks on NCCL: one process drives every GPU of a group (ncclCommInitAll),
// each collective launched on all of them inside one NCCL group call.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <map>
#include <memory>

#include "profiler/cupti/bench.h"

namespace fathom::profiler {
namespace {

// Elements of each GPU's send and receive buffers and the count NCCL takes, for `bytes` per GPU
// as OpMeasurement counts them (two bytes an element).
struct Counts {
  size_t send = 0, receive = 0, count = 0;
};

Counts CountsFor(const CollectiveCase& c) {
  const auto elements = static_cast<size_t>(c.bytes / 2);
  const auto ranks = static_cast<size_t>(c.ranks);
  switch (c.kind) {
    case models::CommKind::kAllGather:
      return {elements, elements * ranks, elements};  // bytes: one shard
    case models::CommKind::kReduceScatter:
      return {elements * ranks, elements, elements};
    case models::CommKind::kAllToAll: {
      const size_t per_peer =
          std::max<size_t>(1, elements / (ranks - 1));  // bytes: what goes to the others
      return {per_peer * ranks, per_peer * ranks, per_peer};
    }
    default:
      return {elements, elements, elements};  // all-reduce: the buffer
  }
}

ncclResult_t Launch(const CollectiveCase& c, const Counts& n, void* send, void* receive,
                    ncclComm_t comm, cudaStream_t stream) {
  switch (c.kind) {
    case models::CommKind::kAllGather:
      return ncclAllGather(send, receive, n.count, ncclBfloat16, comm, stream);
    case models::CommKind::kReduceScatter:
      return ncclReduceScatter(send, receive, n.count, ncclBfloat16, ncclSum, comm, stream);
    case models::CommKind::kAllToAll:
      return ncclAlltoAll(send, receive, n.count, ncclBfloat16, comm, stream);
    default:
      return ncclAllReduce(send, receive, n.count, ncclBfloat16, ncclSum, comm, stream);
  }
}

}  // namespace

void BenchCollectives(const std::vector<CollectiveCase>& cases, BenchRun* run) {
  int devices = 0;
  cudaGetDeviceCount(&devices);
  int version = 0;
  ncclGetVersion(&version);
  const std::string stack = "nccl-" + std::to_string(version);
  std::map<int, std::vector<const CollectiveCase*>> by_ranks;
  for (const CollectiveCase& c : cases) by_ranks[c.ranks].push_back(&c);
  for (const auto& [ranks, group] : by_ranks) {
    if (ranks > devices) {
      std::fprintf(
          stderr,
          "fathom-ops-bench: collectives over %d GPUs need %d GPUs, %d visible: not measured\n",
          ranks, ranks, devices);
      continue;
    }
    std::vector<ncclComm_t> comms(ranks);
    std::vector<int> ids(ranks);
    for (int i = 0; i < ranks; ++i) ids[i] = i;
    if (ncclCommInitAll(comms.data(), ranks, ids.data()) != ncclSuccess) {
      std::fprintf(stderr,
                   "fathom-ops-bench: NCCL could not join %d GPUs: collectives not measured\n",
                   ranks);
      continue;
    }
    std::vector<cudaStream_t> streams(ranks);
    for (int i = 0; i < ranks; ++i) {
      cudaSetDevice(i);
      cudaStreamCreate(&streams[i]);
    }
    for (const CollectiveCase* c : group) {
      const Counts n = CountsFor(*c);
      if ((n.send + n.receive) * 2 > run->memory_budget) continue;
      std::vector<std::unique_ptr<Buffers>> buffers;
      bool ok = true;
      for (int i = 0; i < ranks; ++i) {
        cudaSetDevice(i);
        buffers.push_back(std::make_unique<Buffers>(std::initializer_list<int64_t>{
            static_cast<int64_t>(n.send * 2), static_cast<int64_t>(n.receive * 2)}));
        ok = ok && buffers.back()->ok;
      }
      cudaSetDevice(0);  // TimeRuns synchronizes the current device, whose kernels it times
      models::OpMeasurement shape;
      shape.op = std::string(models::Name(c->kind));
      shape.dtype = "bf16";
      shape.m = c->bytes;
      shape.extra = ranks;
      auto launch_all = [&] {
        bool launched = ncclGroupStart() == ncclSuccess;
        for (int i = 0; i < ranks && launched; ++i) {
          launched = Launch(*c, n, buffers[i]->ptrs[0], buffers[i]->ptrs[1], comms[i],
                            streams[i]) == ncclSuccess;
        }
        return ncclGroupEnd() == ncclSuccess && launched;
      };
      run->Record(
          shape, stack,
          ok ? TimeRuns(launch_all, run->warmup, run->reps, /*device=*/0) : std::vector<double>{});
      for (int i = 0; i < ranks; ++i) {
        cudaSetDevice(i);
        cudaStreamSynchronize(streams[i]);
      }
    }
    for (int i = 0; i < ranks; ++i) {
      cudaSetDevice(i);
      cudaStreamDestroy(streams[i]);
      ncclCommDestroy(comms[i]);
    }
    cudaSetDevice(0);
  }
}

}  // namespace fathom::profiler
