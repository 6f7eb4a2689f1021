#include "models/memory.h"

#include <algorithm>
#include <cmath>

namespace fathom::models {
namespace {

constexpr double kActivationBytes = 2.0;  // bf16 activations
constexpr double kLogitBytes = 4.0;       // fp32 logits

struct StageWeights {
  double attention = 0, dense_mlp = 0, experts = 0, shared = 0, router_norm = 0, embedding = 0,
         lm_head = 0;
  double total() const {
    return attention + dense_mlp + experts + shared + router_norm + embedding + lm_head;
  }
};

// Fraction of a GQA layer's KV heads one GPU holds: kv_heads / attn_tp heads, at least one.
double KvHeadShare(const ModelArch& m, int attn_tp) {
  if (m.attention == AttentionKind::kMla) return 1.0;  // one latent "head", replicated
  const double local = std::max<int64_t>(1, m.kv_heads / attn_tp);
  return local / static_cast<double>(m.kv_heads);
}

// Fraction of the K/V projection weights one GPU holds: MLA's kv_b splits by heads like q; GQA
// keeps whole KV heads, replicated when there are fewer heads than GPUs.
double KvProjShare(const ModelArch& m, int attn_tp) {
  if (m.attention == AttentionKind::kMla) return 1.0 / attn_tp;
  return KvHeadShare(m, attn_tp);
}

StageWeights WeightsOfStage(const ModelArch& m, const ParallelLayout& l, const Precision& p,
                            int64_t first_layer, int64_t num_layers, bool first, bool last) {
  const double dense_b = BytesPerElement(p.dense_weights);
  const double moe_b = BytesPerElement(p.moe_weights);
  const double high_b = BytesPerElement(Precision::kHighPrecision);
  const int attn_tp = l.attn_tp();
  const double attn_per_layer =
      (m.LoraDownParams() + static_cast<double>(m.QProjParams() + m.OProjParams()) / attn_tp +
       m.KvProjParams() * KvProjShare(m, attn_tp)) *
          dense_b +
      (m.AttentionParams() - m.LoraDownParams() - m.QProjParams() - m.OProjParams() -
       m.KvProjParams()) *
          high_b;

  StageWeights w;
  for (int64_t i = first_layer; i < first_layer + num_layers; ++i) {
    w.attention += attn_per_layer;
    w.router_norm += m.LayerNormParams() * high_b;
    if (m.moe_layer[i]) {
      w.experts += static_cast<double>(m.experts / l.ep) * m.ExpertParams() / l.moe_tp() * moe_b;
      w.shared += static_cast<double>(m.shared_experts) * m.ExpertParams() / attn_tp * dense_b;
      w.router_norm += m.RouterParams() * high_b;
    } else {
      w.dense_mlp += static_cast<double>(m.DenseMlpParams()) / attn_tp * dense_b;
    }
  }
  if (first) w.embedding = static_cast<double>(m.EmbeddingParams()) / attn_tp * high_b;
  if (last) {
    // A tied head shares the embedding only when both sit on the same stage.
    if (!m.tie_embeddings || !first)
      w.lm_head = static_cast<double>(m.LmHeadParams()) / attn_tp * high_b;
    w.router_norm += m.hidden * high_b;
  }
  return w;
}

// Peak activation memory of one iteration of `tokens` tokens on one GPU.
double ActivationBytes(const ModelArch& m, const ParallelLayout& l, const MemoryOptions& o) {
  const double tokens = static_cast<double>(o.max_num_tokens);
  const int attn_tp = l.attn_tp();
  double qkv_width = m.attention == AttentionKind::kMla
                         ? static_cast<double>(m.heads) *
                                   (m.qk_nope_dim + m.qk_rope_dim + m.v_head_dim) / attn_tp +
                               m.kv_lora_rank + m.qk_rope_dim + m.q_lora_rank
                         : static_cast<double>(m.heads + 2 * m.kv_heads) * m.head_dim / attn_tp;
  double mlp_width = m.NumMoeLayers() < m.layers ? 2.0 * m.intermediate / attn_tp : 0.0;
  if (m.is_moe()) {
    // Tokens of all attention ranks arrive at this GPU's experts, top-k copies each.
    const double routed_share = static_cast<double>(l.attn_dp) * m.experts_per_token / l.ep;
    mlp_width =
        std::max(mlp_width, routed_share * (2.0 * m.moe_intermediate / l.moe_tp() + m.hidden));
  }
  const double per_token = (4.0 * m.hidden + qkv_width + mlp_width) * kActivationBytes;
  const double logits = static_cast<double>(o.max_batch) * m.vocab / attn_tp * kLogitBytes;
  return tokens * per_token + logits;
}

}  // namespace

MemoryPlan PlanMemory(const ModelArch& m, const Hardware& hw, const ParallelLayout& l,
                      const Precision& p, const MemoryOptions& o) {
  MemoryPlan plan;
  plan.params = CountParams(m);
  const std::vector<int64_t> stage_layers = LayersPerStage(m.layers, l.pp);
  const double kv_b = KvBytesPerElement(p.kv);
  const double kv_per_layer = m.KvValuesPerTokenPerLayer() * KvHeadShare(m, l.attn_tp()) * kv_b;

  double worst_need = -1;
  int64_t first_layer = 0;
  for (int s = 0; s < l.pp; ++s) {
    const StageWeights w =
        WeightsOfStage(m, l, p, first_layer, stage_layers[s], s == 0, s == l.pp - 1);
    int64_t sliding = 0;
    for (int64_t i = first_layer; i < first_layer + stage_layers[s]; ++i)
      sliding += m.sliding_layer[i];
    const double full_kv = (stage_layers[s] - sliding) * kv_per_layer;
    const double sliding_kv = sliding * kv_per_layer;
    // The stage with the least room for KV decides the capacity.
    const double need =
        w.total() + static_cast<double>(o.max_batch) * m.sliding_window * sliding_kv;
    const double per_token_need = full_kv > 0 ? need / full_kv : need;
    if (per_token_need > worst_need || s == 0) {
      worst_need = per_token_need;
      plan.worst_stage = s;
      plan.attention_bytes = w.attention;
      plan.dense_mlp_bytes = w.dense_mlp;
      plan.expert_bytes = w.experts;
      plan.shared_expert_bytes = w.shared;
      plan.router_norm_bytes = w.router_norm;
      plan.embedding_bytes = w.embedding;
      plan.lm_head_bytes = w.lm_head;
      plan.weights_bytes = w.total();
      plan.kv_bytes_per_token = full_kv + sliding_kv;
      plan.kv_bytes_per_token_full_layers = full_kv;
      plan.sliding_kv_bytes = static_cast<double>(o.max_batch) * m.sliding_window * sliding_kv;
    }
    first_layer += stage_layers[s];
  }

  plan.activation_bytes = ActivationBytes(m, l, o);
  plan.runtime_bytes = o.runtime_overhead_bytes;
  const double free_bytes = hw.memory_bytes - plan.runtime_bytes - plan.activation_bytes -
                            plan.weights_bytes - plan.sliding_kv_bytes;
  plan.reserve_bytes = o.kv_free_fraction > 0 ? std::max(0.0, free_bytes) * (1 - o.kv_free_fraction)
                                              : hw.memory_bytes * o.reserve_fraction;
  plan.kv_budget_bytes = free_bytes - plan.reserve_bytes;
  const double per_token = plan.kv_bytes_per_token_full_layers > 0
                               ? plan.kv_bytes_per_token_full_layers
                               : plan.kv_bytes_per_token;
  plan.kv_capacity_tokens = plan.kv_budget_bytes > 0
                                ? static_cast<int64_t>(std::floor(plan.kv_budget_bytes / per_token))
                                : 0;
  const int64_t min_kv = o.min_kv_tokens > 0 ? o.min_kv_tokens : o.max_num_tokens;
  plan.fits = plan.kv_capacity_tokens >= min_kv;
  if (!plan.fits) {
    plan.why_not = "weights (" + std::to_string(plan.weights_bytes / 1e9) +
                   " GB) + activations + " + "reserve leave room for " +
                   std::to_string(plan.kv_capacity_tokens) +
                   " KV tokens per GPU, fewer than the minimum " + std::to_string(min_kv);
  }
  return plan;
}

}  // namespace fathom::models
