// The per-GPU operators of one engine iteration: the single description that the cost model
// prices and the profiler measures.
#pragma once

#include <compare>
#include <cstdint>
#include <string_view>
#include <vector>

#include "models/batch_shape.h"
#include "models/deployment.h"
#include "models/model_arch.h"

namespace fathom::models {

enum class OpKind { kGemm, kGroupedGemm, kAttention, kElementwise, kCommunication };
enum class CommKind {
  kNone,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kSendRecv,
  kKvTransfer
};

std::string_view Name(OpKind k);
std::string_view Name(CommKind k);

struct Operator {
  OpKind kind = OpKind::kElementwise;
  std::string_view name;       // static string, e.g. "attn.q_b_proj"
  int64_t count = 1;           // identical instances per iteration (layers of the stage)
  DType dtype = DType::kBf16;  // weight / math format
  // GEMM: (m x k) x (k x n). Grouped GEMM: m rows spread over `groups` experts.
  int64_t m = 0, n = 0, k = 0;
  int64_t groups = 0;
  double active_groups = 0;  // experts expected to receive at least one token
  // Per instance.
  double flops = 0;
  double bytes = 0;  // HBM traffic
  // Communication over a group of `ranks` GPUs spanning `span` consecutive GPUs (the cost model
  // compares the span with the scale-up domain). Bytes: the buffer for all-reduce, one shard for
  // all-gather / reduce-scatter, all this GPU sends for all-to-all and send / receive. A GEMM
  // fused with its all-reduce (Fusions::gemm_allreduce) carries these too.
  CommKind comm = CommKind::kNone;
  double comm_bytes = 0;
  int ranks = 1;
  int span = 1;
};

// A GEMM (m x k) x (k x n) with weights in `dt` and bf16 activations, run `count` times.
Operator Gemm(std::string_view name, int64_t count, int64_t m, int64_t n, int64_t k, DType dt);
// A grouped GEMM: `rows` rows spread over `groups` experts, `active_groups` of which get any
// (only their weights are read).
Operator GroupedGemm(std::string_view name, int64_t count, int64_t rows, int64_t n, int64_t k,
                     int64_t groups, double active_groups, DType dt);

// A collective of `kind` over `ranks` GPUs spanning `span`, `bytes` as Operator::comm_bytes.
Operator Comm(std::string_view name, int64_t count, CommKind kind, double bytes, int ranks,
              int span);

// One GPU's attention heads: query heads, the K/V heads they share, and the widths of a query /
// key head and of a value head. `v_in_k`: values are the first d_v elements of the keys (MLA's
// latent cache), so only keys are read.
struct AttentionHeads {
  int64_t heads = 0, kv_heads = 0, d_qk = 0, d_v = 0;
  bool v_in_k = false;
  auto operator<=>(const AttentionHeads&) const = default;
};

// An attention kernel over `pairs` (query, key) pairs of `q_tokens` queries and `kv_tokens`
// cached keys / values, K/V in `kv`: the FLOPs of QK^T and PV and the bytes of reading K, V and
// Q and writing O once.
Operator AttentionKernel(std::string_view name, int64_t count, const AttentionHeads& h,
                         double pairs, double kv_tokens, double q_tokens, DType kv);

// Tokens that reach this GPU's MoE layers: the batch of every attention rank of the group when
// attention is data parallel, else the rank's own.
struct MoeInput {
  int64_t group_tokens = 0;
};

// How a MoE layer's tokens pick experts: at random (a trained router, on average) or balanced
// (as many token copies on every expert, as kernel benchmarks route them).
enum class Routing { kRandom, kBalanced };

// One MoE layer's routed experts: each token goes to `experts_per_token` of `experts`, each an MLP
// of `intermediate` over `hidden`.
struct ExpertLayer {
  int64_t hidden = 0, intermediate = 0, experts = 0, experts_per_token = 0;
  Routing routing = Routing::kRandom;
};

// Appends the routed experts one GPU runs in `layers` such layers when `tokens` tokens reach
// them, the experts spread over `ep` GPUs and each expert's intermediate split over `moe_tp`:
// the gate/up and down grouped GEMMs (weights in `dtype`; only experts that get a token are
// read) and the activation between them.
void AddRoutedExperts(const ExpertLayer& e, int64_t tokens, int ep, int moe_tp, DType dtype,
                      int64_t layers, std::vector<Operator>* out);

// Which of one GPU's operators to build: all, or all but the routed experts (whose work depends
// only on the tokens reaching the MoE layers, the same on every rank of an attention-DP group).
enum class OpScope { kAll, kWithoutExperts };

class OperatorBuilder {
 public:
  // Borrows `m`; it must outlive the builder.
  OperatorBuilder(const ModelArch& m, const ParallelLayout& layout, const Precision& precision,
                  Fusions fusions = {});

  // Replaces `out` with the operators one GPU of pipeline stage `stage` runs for `batch` (this
  // GPU's attention rank) while the MoE layers see `moe.group_tokens` tokens. Reuses capacity.
  void Build(const BatchShape& batch, MoeInput moe, int stage, std::vector<Operator>* out,
             OpScope scope = OpScope::kAll) const;
  // Only the attention kernels (the operators that read the KV cache) of `batch` on `stage`.
  void BuildAttention(const BatchShape& batch, int stage, std::vector<Operator>* out) const;
  // Build's operators come in four runs, in this order: the head and the body depend on the
  // rank's token count alone (embedding, norms and projections into attention; its output
  // projection, the MLP or MoE layers and a pipeline's send), attention between them on the
  // batch's prompts and contexts (MLA's cache expansion and weight absorption, the kernels), and
  // the tail after them on the tokens sampled (final norm and LM head). Replaces `out` with one.
  enum class Run { kHead, kAttention, kBody, kTail };
  void BuildRun(Run run, const BatchShape& batch, MoeInput moe, int stage,
                std::vector<Operator>* out, OpScope scope = OpScope::kAll) const;
  // Only the routed experts of `stage` when `moe_tokens` tokens reach its MoE layers (MoeInput's
  // group tokens under attention DP, else the rank's own).
  void BuildExperts(int64_t moe_tokens, int stage, std::vector<Operator>* out) const;

  int num_stages() const { return layout_.pp; }
  // The heads of this GPU's prefill and decode attention kernels (MLA prefills per head and
  // decodes in its latent space: one shared K/V head).
  AttentionHeads PrefillHeads() const;
  AttentionHeads DecodeHeads() const;

 private:
  void AddRun(Run run, const BatchShape& b, MoeInput moe, int stage, std::vector<Operator>* out,
              OpScope scope) const;
  // Attention's layers in three runs: norm and projections in, the kernels and what MLA does
  // around them, the output projection and its all-reduce.
  void AddAttentionIn(const BatchShape& b, int64_t layers, std::vector<Operator>* out) const;
  void AddAttentionCore(const BatchShape& b, int64_t layers, int64_t sliding,
                        std::vector<Operator>* out) const;
  void AddAttentionOut(const BatchShape& b, int64_t layers, std::vector<Operator>* out) const;
  void AddAttentionKernels(const BatchShape& b, int64_t layers, int64_t sliding,
                           std::vector<Operator>* out) const;
  void AddMlp(const BatchShape& b, MoeInput moe, int64_t dense_layers, int64_t moe_layers,
              bool experts, std::vector<Operator>* out) const;
  void AddExperts(int64_t group_tokens, int64_t moe_layers, std::vector<Operator>* out) const;
  // The all-reduce of the row-parallel GEMM just added: fused into it, or after it.
  void AddRowParallelAllReduce(std::string_view name, int64_t layers, double bytes,
                               std::vector<Operator>* out) const;

  const ModelArch& m_;
  ParallelLayout layout_;
  Precision precision_;
  Fusions fusions_;
  struct StageInfo {
    int64_t layers = 0, sliding = 0, moe = 0;
  };
  std::vector<StageInfo> stages_;
};

// Sum of flops x count over GEMM and grouped-GEMM operators.
double GemmFlops(const std::vector<Operator>& ops);
double AttentionFlops(const std::vector<Operator>& ops);

}  // namespace fathom::models
