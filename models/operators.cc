#include "models/operators.h"

#include <cmath>

namespace fathom::models {
namespace {

constexpr double kAct = 2.0;  // bf16 activation bytes

Operator Elementwise(std::string_view name, int64_t count, double bytes, double flops) {
  Operator op;
  op.kind = OpKind::kElementwise;
  op.name = name;
  op.count = count;
  op.bytes = bytes;
  op.flops = flops;
  return op;
}

}  // namespace

Operator Comm(std::string_view name, int64_t count, CommKind kind, double bytes, int ranks,
              int span) {
  Operator op;
  op.kind = OpKind::kCommunication;
  op.name = name;
  op.count = count;
  op.comm = kind;
  op.comm_bytes = bytes;
  op.ranks = ranks;
  op.span = span;
  return op;
}

Operator AttentionKernel(std::string_view name, int64_t count, const AttentionHeads& h,
                         double pairs, double kv_tokens, double q_tokens, DType kv) {
  const double width = static_cast<double>(h.d_qk + h.d_v);
  Operator op;
  op.kind = OpKind::kAttention;
  op.name = name;
  op.count = count;
  op.dtype = kv;
  op.flops = 2.0 * h.heads * width * pairs;
  op.bytes = kv_tokens * h.kv_heads * (h.v_in_k ? h.d_qk : width) * KvBytesPerElement(kv) +
             q_tokens * h.heads * width * kAct;
  return op;
}

Operator Gemm(std::string_view name, int64_t count, int64_t m, int64_t n, int64_t k, DType dt) {
  Operator op;
  op.kind = OpKind::kGemm;
  op.name = name;
  op.count = count;
  op.dtype = dt;
  op.m = m;
  op.n = n;
  op.k = k;
  op.flops = 2.0 * m * n * k;
  op.bytes = static_cast<double>(n) * k * BytesPerElement(dt) +
             (static_cast<double>(m) * k + static_cast<double>(m) * n) * kAct;
  return op;
}

Operator GroupedGemm(std::string_view name, int64_t count, int64_t rows, int64_t n, int64_t k,
                     int64_t groups, double active_groups, DType dt) {
  Operator op = Gemm(name, count, rows, n, k, dt);
  op.kind = OpKind::kGroupedGemm;
  op.groups = groups;
  op.active_groups = active_groups;
  op.bytes =
      active_groups * n * k * BytesPerElement(dt) + static_cast<double>(rows) * (n + k) * kAct;
  return op;
}

std::string_view Name(OpKind k) {
  switch (k) {
    case OpKind::kGemm:
      return "gemm";
    case OpKind::kGroupedGemm:
      return "grouped_gemm";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kElementwise:
      return "elementwise";
    case OpKind::kCommunication:
      return "communication";
  }
  return "";
}

std::string_view Name(CommKind k) {
  switch (k) {
    case CommKind::kNone:
      return "none";
    case CommKind::kAllReduce:
      return "all_reduce";
    case CommKind::kAllGather:
      return "all_gather";
    case CommKind::kReduceScatter:
      return "reduce_scatter";
    case CommKind::kAllToAll:
      return "all_to_all";
    case CommKind::kSendRecv:
      return "send_recv";
    case CommKind::kKvTransfer:
      return "kv_transfer";
  }
  return "";
}

OperatorBuilder::OperatorBuilder(const ModelArch& m, const ParallelLayout& layout,
                                 const Precision& precision, Fusions fusions)
    : m_(m), layout_(layout), precision_(precision), fusions_(fusions) {
  const std::vector<int64_t> per_stage = LayersPerStage(m.layers, layout.pp);
  int64_t first = 0;
  for (int64_t n : per_stage) {
    StageInfo s;
    s.layers = n;
    for (int64_t i = first; i < first + n; ++i) {
      s.sliding += m.sliding_layer[i];
      s.moe += m.moe_layer[i];
    }
    stages_.push_back(s);
    first += n;
  }
}

void OperatorBuilder::AddAttentionIn(const BatchShape& b, int64_t layers,
                                     std::vector<Operator>* out) const {
  const DType dt = precision_.dense_weights;
  const int64_t T = b.tokens;
  const int64_t heads = m_.heads / layout_.attn_tp();
  out->push_back(Elementwise("attn.norm", layers, 2.0 * T * m_.hidden * kAct, 4.0 * T * m_.hidden));
  if (m_.attention == AttentionKind::kMla) {
    const int64_t qk = m_.qk_nope_dim + m_.qk_rope_dim;
    const int64_t latent = m_.kv_lora_rank + m_.qk_rope_dim;
    if (m_.q_lora_rank > 0) {
      out->push_back(Gemm("attn.q_a_proj", layers, T, m_.q_lora_rank, m_.hidden, dt));
      out->push_back(Gemm("attn.q_b_proj", layers, T, heads * qk, m_.q_lora_rank, dt));
    } else {
      out->push_back(Gemm("attn.q_proj", layers, T, heads * qk, m_.hidden, dt));
    }
    out->push_back(Gemm("attn.kv_a_proj", layers, T, latent, m_.hidden, dt));
  } else {
    const int64_t kvh = std::max<int64_t>(1, m_.kv_heads / layout_.attn_tp());
    out->push_back(
        Gemm("attn.qkv_proj", layers, T, (heads + 2 * kvh) * m_.head_dim, m_.hidden, dt));
  }
}

void OperatorBuilder::AddAttentionCore(const BatchShape& b, int64_t layers, int64_t sliding,
                                       std::vector<Operator>* out) const {
  if (m_.attention != AttentionKind::kMla) {
    AddAttentionKernels(b, layers, sliding, out);
    return;
  }
  const DType dt = precision_.dense_weights;
  const int64_t heads = m_.heads / layout_.attn_tp();
  if (b.prefill_tokens > 0) {
    // Prefill expands the latent of new and cached tokens into per-head keys and values.
    const int64_t rows = b.prefill_tokens + static_cast<int64_t>(b.prefill_cached);
    out->push_back(Gemm("attn.kv_b_proj", layers, rows, heads * (m_.qk_nope_dim + m_.v_head_dim),
                        m_.kv_lora_rank, dt));
  }
  if (b.decode_tokens > 0) {
    // Decode absorbs W_UK into the query and W_UV into the output (weight absorption), so
    // attention runs over the compressed latent cache.
    out->push_back(Gemm("attn.absorb_uk", layers, b.decode_tokens, heads * m_.kv_lora_rank,
                        m_.qk_nope_dim, dt));
  }
  AddAttentionKernels(b, layers, sliding, out);
  if (b.decode_tokens > 0) {
    out->push_back(Gemm("attn.absorb_uv", layers, b.decode_tokens, heads * m_.v_head_dim,
                        m_.kv_lora_rank, dt));
  }
}

void OperatorBuilder::AddAttentionOut(const BatchShape& b, int64_t layers,
                                      std::vector<Operator>* out) const {
  const int a = layout_.attn_tp();
  const int64_t T = b.tokens;
  const int64_t heads = m_.heads / a;
  const int64_t v_dim = m_.attention == AttentionKind::kMla ? m_.v_head_dim : m_.head_dim;
  out->push_back(
      Gemm("attn.o_proj", layers, T, m_.hidden, heads * v_dim, precision_.dense_weights));
  if (a > 1) AddRowParallelAllReduce("attn.all_reduce", layers, T * m_.hidden * kAct, out);
}

void OperatorBuilder::AddRowParallelAllReduce(std::string_view name, int64_t layers, double bytes,
                                              std::vector<Operator>* out) const {
  const int a = layout_.attn_tp();
  Operator reduce = Comm(name, layers, CommKind::kAllReduce, bytes, a, a);
  if (!fusions_.gemm_allreduce) {
    out->push_back(reduce);
    return;
  }
  Operator& gemm = out->back();
  gemm.comm = reduce.comm;
  gemm.comm_bytes = reduce.comm_bytes;
  gemm.ranks = reduce.ranks;
  gemm.span = reduce.span;
}

AttentionHeads OperatorBuilder::PrefillHeads() const {
  const int a = layout_.attn_tp();
  if (m_.attention == AttentionKind::kMla) {
    return {m_.heads / a, m_.heads / a, m_.qk_nope_dim + m_.qk_rope_dim, m_.v_head_dim};
  }
  return {m_.heads / a, std::max<int64_t>(1, m_.kv_heads / a), m_.head_dim, m_.head_dim};
}

AttentionHeads OperatorBuilder::DecodeHeads() const {
  if (m_.attention == AttentionKind::kMla) {
    return {m_.heads / layout_.attn_tp(), 1, m_.kv_lora_rank + m_.qk_rope_dim, m_.kv_lora_rank,
            true};
  }
  return PrefillHeads();
}

void OperatorBuilder::AddAttentionKernels(const BatchShape& b, int64_t layers, int64_t sliding,
                                          std::vector<Operator>* out) const {
  const DType kv = precision_.kv;
  if (m_.attention == AttentionKind::kMla) {
    if (b.prefill_tokens > 0) {
      // Keys and values expanded per head from the latent (activations), plus the latent of
      // the cached tokens read from the cache.
      const double rows = b.prefill_tokens + b.prefill_cached;
      Operator op = AttentionKernel("attn.prefill", layers, PrefillHeads(), b.prefill_pairs, rows,
                                    b.prefill_tokens, DType::kBf16);
      op.bytes += b.prefill_cached * (m_.kv_lora_rank + m_.qk_rope_dim) * KvBytesPerElement(kv);
      op.dtype = kv;
      out->push_back(op);
    }
    if (b.decode_tokens > 0) {
      out->push_back(AttentionKernel("attn.decode", layers, DecodeHeads(), b.decode_pairs,
                                     b.decode_kv, b.decode_tokens, kv));
    }
    return;
  }
  const AttentionHeads h = PrefillHeads();
  const int64_t full = layers - sliding;
  auto add = [&](std::string_view name, int64_t count, double pairs, double kv_tokens,
                 double q_tokens) {
    if (count <= 0 || q_tokens <= 0) return;
    out->push_back(AttentionKernel(name, count, h, pairs, kv_tokens, q_tokens, kv));
  };
  add("attn.prefill", full, b.prefill_pairs, b.prefill_cached + b.prefill_tokens, b.prefill_tokens);
  add("attn.prefill_window", sliding, b.prefill_pairs_window,
      b.prefill_cached_window + b.prefill_tokens, b.prefill_tokens);
  add("attn.decode", full, b.decode_pairs, b.decode_kv, b.decode_tokens);
  add("attn.decode_window", sliding, b.decode_pairs_window, b.decode_kv_window, b.decode_tokens);
}

void OperatorBuilder::AddMlp(const BatchShape& b, MoeInput moe, int64_t dense_layers,
                             int64_t moe_layers, bool experts, std::vector<Operator>* out) const {
  const int a = layout_.attn_tp();
  const int64_t T = b.tokens;
  const int64_t h = m_.hidden;
  const DType dt = precision_.dense_weights;
  out->push_back(
      Elementwise("mlp.norm", dense_layers + moe_layers, 2.0 * T * h * kAct, 4.0 * T * h));
  if (dense_layers > 0) {
    const int64_t inter = m_.intermediate / a;
    out->push_back(Gemm("mlp.gate_up", dense_layers, T, 2 * inter, h, dt));
    out->push_back(Elementwise("mlp.act", dense_layers, 3.0 * T * inter * kAct, 4.0 * T * inter));
    out->push_back(Gemm("mlp.down", dense_layers, T, h, inter, dt));
    if (a > 1) AddRowParallelAllReduce("mlp.all_reduce", dense_layers, T * h * kAct, out);
  }
  if (moe_layers == 0) return;

  const int ep = layout_.ep;
  const int tp = layout_.tp;
  const bool dp = layout_.attn_dp > 1;
  out->push_back(Gemm("moe.router", moe_layers, T, m_.experts, h, Precision::kHighPrecision));
  out->push_back(Elementwise("moe.topk", moe_layers, T * m_.experts * 4.0, 4.0 * T * m_.experts));
  if (dp && tp > 1) {
    // Each token travels to the GPUs of its top-k experts; (ep-1)/ep of the copies leave.
    const double sent = static_cast<double>(T) * m_.experts_per_token * h * kAct * (ep - 1) / ep;
    out->push_back(Comm("moe.dispatch", moe_layers, CommKind::kAllToAll, sent, tp, tp));
  }
  if (experts) AddExperts(dp ? moe.group_tokens : T, moe_layers, out);
  if (m_.shared_experts > 0) {
    const int64_t shared = m_.shared_experts * m_.moe_intermediate / a;
    out->push_back(Gemm("moe.shared_gate_up", moe_layers, T, 2 * shared, h, dt));
    out->push_back(Gemm("moe.shared_down", moe_layers, T, h, shared, dt));
  }
  if (dp && tp > 1) {
    const double back = static_cast<double>(T) * m_.experts_per_token * h * kAct * (ep - 1) / ep;
    out->push_back(Comm("moe.combine", moe_layers, CommKind::kAllToAll, back, tp, tp));
  } else if (tp > 1) {
    out->push_back(Comm("moe.all_reduce", moe_layers, CommKind::kAllReduce, T * h * kAct, tp, tp));
  }
}

void AddRoutedExperts(const ExpertLayer& e, int64_t tokens, int ep, int moe_tp, DType dtype,
                      int64_t layers, std::vector<Operator>* out) {
  const int64_t local_experts = e.experts / ep;
  const int64_t inter = e.intermediate / moe_tp;
  // Token copies routed to this GPU's experts, on average.
  const int64_t routed = (tokens * e.experts_per_token + ep - 1) / ep;
  // Experts that get a token: under random routing each is idle with probability
  // (1 - k / experts)^tokens; balanced routing fills as many as there are copies.
  const double p_idle = std::pow(1.0 - static_cast<double>(e.experts_per_token) / e.experts,
                                 static_cast<double>(tokens));
  const double active = e.routing == Routing::kBalanced
                            ? static_cast<double>(std::min(local_experts, routed))
                            : local_experts * (1.0 - p_idle);
  auto grouped = [&](std::string_view name, int64_t n, int64_t k) {
    return GroupedGemm(name, layers, routed, n, k, local_experts, active, dtype);
  };
  out->push_back(grouped("moe.experts_gate_up", 2 * inter, e.hidden));
  out->push_back(Elementwise("moe.act", layers, 3.0 * routed * inter * kAct, 4.0 * routed * inter));
  out->push_back(grouped("moe.experts_down", e.hidden, inter));
}

void OperatorBuilder::AddExperts(int64_t group_tokens, int64_t moe_layers,
                                 std::vector<Operator>* out) const {
  AddRoutedExperts({m_.hidden, m_.moe_intermediate, m_.experts, m_.experts_per_token}, group_tokens,
                   layout_.ep, layout_.moe_tp(), precision_.moe_weights, moe_layers, out);
}

void OperatorBuilder::Build(const BatchShape& b, MoeInput moe, int stage,
                            std::vector<Operator>* out, OpScope scope) const {
  out->clear();
  if (scope == OpScope::kAll && b.tokens == 0 && moe.group_tokens == 0) return;
  for (const Run run : {Run::kHead, Run::kAttention, Run::kBody, Run::kTail})
    AddRun(run, b, moe, stage, out, scope);
}

void OperatorBuilder::BuildRun(Run run, const BatchShape& b, MoeInput moe, int stage,
                               std::vector<Operator>* out, OpScope scope) const {
  out->clear();
  AddRun(run, b, moe, stage, out, scope);
}

void OperatorBuilder::AddRun(Run run, const BatchShape& b, MoeInput moe, int stage,
                             std::vector<Operator>* out, OpScope scope) const {
  const StageInfo& s = stages_[stage];
  const int a = layout_.attn_tp();
  const int64_t T = b.tokens;
  const int64_t h = m_.hidden;
  const bool last = stage == layout_.pp - 1;
  switch (run) {
    case Run::kHead:
      if (stage == 0) {
        out->push_back(Elementwise("embedding", 1, 2.0 * T * h * kAct, 0.0));
        if (a > 1)
          out->push_back(Comm("embedding.all_reduce", 1, CommKind::kAllReduce, T * h * kAct, a, a));
      }
      AddAttentionIn(b, s.layers, out);
      break;
    case Run::kAttention:
      AddAttentionCore(b, s.layers, s.sliding, out);
      break;
    case Run::kBody:
      AddAttentionOut(b, s.layers, out);
      AddMlp(b, moe, s.layers - s.moe, s.moe, scope == OpScope::kAll, out);
      if (!last) {
        out->push_back(Comm("pp.send", 1, CommKind::kSendRecv, T * h * kAct, 2, 2 * layout_.tp));
      }
      break;
    case Run::kTail:
      if (!last) break;
      out->push_back(Elementwise("final_norm", 1, 2.0 * b.sampled_tokens * h * kAct,
                                 4.0 * b.sampled_tokens * h));
      if (b.sampled_tokens > 0) {
        out->push_back(
            Gemm("lm_head", 1, b.sampled_tokens, m_.vocab / a, h, Precision::kHighPrecision));
        if (a > 1) {
          out->push_back(Comm("lm_head.all_gather", 1, CommKind::kAllGather,
                              b.sampled_tokens * static_cast<double>(m_.vocab) / a * 4.0, a, a));
        }
      }
      break;
  }
}

void OperatorBuilder::BuildAttention(const BatchShape& b, int stage,
                                     std::vector<Operator>* out) const {
  out->clear();
  AddAttentionKernels(b, stages_[stage].layers, stages_[stage].sliding, out);
}

void OperatorBuilder::BuildExperts(int64_t moe_tokens, int stage,
                                   std::vector<Operator>* out) const {
  out->clear();
  if (stages_[stage].moe > 0) AddExperts(moe_tokens, stages_[stage].moe, out);
}

double GemmFlops(const std::vector<Operator>& ops) {
  double f = 0;
  for (const auto& op : ops) {
    if (op.kind == OpKind::kGemm || op.kind == OpKind::kGroupedGemm) f += op.flops * op.count;
  }
  return f;
}

double AttentionFlops(const std::vector<Operator>& ops) {
  double f = 0;
  for (const auto& op : ops) {
    if (op.kind == OpKind::kAttention) f += op.flops * op.count;
  }
  return f;
}

}  // namespace fathom::models
