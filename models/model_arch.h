// Transformer architectures read from Hugging Face config.json files, and their parameter counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "models/dtype.h"

namespace fathom::models {

enum class AttentionKind { kGqa, kMla };

struct ModelArch {
  std::string name;        // built-in name or the config's path
  std::string model_type;  // config's model_type: llama, deepseek_v3, mixtral, qwen3_moe, gpt_oss
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t layers = 0;  // decoder layers, not counting MTP layers
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;      // GQA head dimension
  int64_t intermediate = 0;  // dense MLP width
  bool tie_embeddings = false;
  bool attention_bias = false;
  bool qk_norm = false;  // per-head RMSNorm on q and k (Qwen3)
  bool attention_sinks = false;
  int64_t max_context = 0;

  AttentionKind attention = AttentionKind::kGqa;
  int64_t q_lora_rank = 0;  // MLA; 0 means a plain q projection
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;

  int64_t experts = 0;  // routed experts; 0 for a dense model
  int64_t experts_per_token = 0;
  int64_t moe_intermediate = 0;
  int64_t shared_experts = 0;
  bool expert_bias = false;
  std::vector<bool> moe_layer;  // per layer: MoE (true) or dense MLP (false)

  int64_t sliding_window = 0;       // tokens; 0 when no layer uses a window
  std::vector<bool> sliding_layer;  // per layer
  int64_t mtp_layers = 0;           // DeepSeek multi-token-prediction layers

  // Weight formats of the checkpoint as published (quantization_config).
  DType native_moe_weights = DType::kBf16;
  DType native_dense_weights = DType::kBf16;

  bool is_moe() const { return experts > 0; }
  int64_t NumMoeLayers() const;
  int64_t NumSlidingLayers() const;

  // Per-layer parameter counts of each part.
  int64_t QProjParams() const;   // MLA: q_b (or q_proj); GQA: q_proj (+bias)
  int64_t KvProjParams() const;  // MLA: kv_b; GQA: k_proj + v_proj (+bias)
  int64_t OProjParams() const;
  int64_t LoraDownParams() const;   // MLA q_a + kv_a projections and their norms (unsharded)
  int64_t AttentionParams() const;  // all of the above, plus sinks and q/k norms
  int64_t DenseMlpParams() const;
  int64_t ExpertParams() const;  // one expert
  int64_t RouterParams() const;
  int64_t LayerNormParams() const;
  int64_t EmbeddingParams() const { return vocab * hidden; }
  int64_t LmHeadParams() const { return vocab * hidden; }

  // Values one token stores per layer: MLA latent (kv_lora + rope) or 2 x kv_heads x head_dim.
  int64_t KvValuesPerTokenPerLayer() const;
};

struct ParamCounts {
  int64_t total = 0;   // every stored parameter, excluding MTP layers
  int64_t active = 0;  // parameters one token's forward pass multiplies: routed top-k plus
                       // shared experts, attention, LM head; not the input embedding (a lookup)
  int64_t mtp = 0;     // extra parameters of the MTP layers
};

ParamCounts CountParams(const ModelArch& m);

// Parses a config.json document. `source` names it in errors.
Result<ModelArch> ParseModelConfig(const Json& document, const std::string& source);

// A built-in name (models/configs/<name>.json) or a path to any config.json.
Result<ModelArch> LoadModel(const std::string& name_or_path);

std::vector<std::string> BuiltinModelNames();

}  // namespace fathom::models
