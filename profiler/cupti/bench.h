// What the operator microbenchmarks share: kernel timing from CUPTI timestamps, device buffers,
// and the rows they write to the performance database.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/dtype.h"
#include "models/operators.h"
#include "models/perf_db.h"

namespace fathom::profiler {

// Kernel microseconds of each of `reps` runs of `run` after `warmup` runs (a run may launch
// several kernels, a split-K reduction say: their times add up), counting only kernels on CUDA
// device `device` (-1: every device); empty if a run failed.
std::vector<double> TimeRuns(const std::function<bool()>& run, int warmup, int reps,
                             int device = -1);

// What the operands hold. Tensor cores run faster on zeros than on real data (less switching,
// higher sustained clocks): on an H100, zeroed operands made large BF16 GEMMs about 10% faster.
enum class Fill { kRandom, kZeros };

// Device buffers of the given sizes on the current device, freed together. kRandom fills them
// with values that read as small finite numbers in BF16 (magnitudes 2^-15 to 2) and in FP8 E4M3
// (no byte is a NaN), the same every run.
struct Buffers {
  std::vector<void*> ptrs;
  bool ok = true;
  explicit Buffers(std::initializer_list<int64_t> bytes, Fill fill = Fill::kRandom);
  ~Buffers();
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
};

// One benchmark run: its settings, the GPU it runs on and the rows it has measured.
struct BenchRun {
  int warmup = 5, reps = 20;
  Fill fill = Fill::kRandom;
  size_t memory_budget = 0;  // bytes one measurement may allocate
  std::string hardware, date, device_info;
  std::vector<models::OpMeasurement> rows;

  // Adds a row of median / p10 / p90 over `per_rep`; an empty `per_rep` (the run failed) is
  // reported on stderr and skipped.
  void Record(const models::OpMeasurement& shape, const std::string& stack,
              std::vector<double> per_rep);
};

// An attention shape to time: `sequences` of `q_len` queries over `kv_len` keys, on `heads`.
struct AttentionCase {
  std::string op;  // attention_prefill or attention_decode
  models::AttentionHeads heads;
  int64_t sequences = 1, q_len = 1, kv_len = 1;
};

// A collective to time: `bytes` per GPU as OpMeasurement counts them, over `ranks` GPUs.
struct CollectiveCase {
  models::CommKind kind = models::CommKind::kAllReduce;
  int64_t bytes = 0;
  int ranks = 2;
};

// cuDNN's fused attention (SDPA) in BF16 over contiguous K/V, not masked (the backend's SDPA
// operation takes no causal mask before cuDNN 9.21); shapes cuDNN has no engine for are skipped.
void BenchAttention(const std::vector<AttentionCase>& cases, BenchRun* run);
// Runs that attention once for `c` on device buffers laid out [sequence, position, head, width]
// (BF16), for checking its output; Unavailable when cuDNN has no engine for the shape.
Status RunAttentionOnce(const AttentionCase& c, void* q, void* k, void* v, void* o);

// NCCL collectives in BF16 across the first `ranks` GPUs of this process, timed on GPU 0.
void BenchCollectives(const std::vector<CollectiveCase>& cases, BenchRun* run);

}  // namespace fathom::profiler
