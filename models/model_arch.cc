#include "models/model_arch.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <string_view>

#include "base/files.h"

namespace fathom::models {
namespace {

std::filesystem::path ConfigDir() {
  return std::filesystem::path(DataDir()) / "models" / "configs";
}

// Reads the weight formats a checkpoint ships in from its quantization_config.
Status ReadNativePrecision(const Json& config, const std::string& source, ModelArch* m) {
  if (!config.contains("quantization_config") || !config["quantization_config"].is_object())
    return Status::Ok();
  const Json& q = config["quantization_config"];
  JsonFields f(q, source + ": quantization_config");
  const std::string method = f.String("quant_method", "");
  FATHOM_RETURN_IF_ERROR(f.status());
  if (method == "fp8") {
    m->native_moe_weights = DType::kFp8;
    m->native_dense_weights = DType::kFp8;
  } else if (method == "mxfp4") {
    m->native_moe_weights = DType::kMxfp4;
    bool attention_excluded = false;
    if (q.contains("modules_to_not_convert") && q["modules_to_not_convert"].is_array()) {
      for (const auto& mod : q["modules_to_not_convert"]) {
        if (mod.is_string() && mod.get<std::string>().find("self_attn") != std::string::npos)
          attention_excluded = true;
      }
    }
    m->native_dense_weights = attention_excluded ? DType::kBf16 : DType::kMxfp4;
  }
  return Status::Ok();
}

}  // namespace

int64_t ModelArch::NumMoeLayers() const {
  return std::count(moe_layer.begin(), moe_layer.end(), true);
}

int64_t ModelArch::NumSlidingLayers() const {
  return std::count(sliding_layer.begin(), sliding_layer.end(), true);
}

int64_t ModelArch::QProjParams() const {
  if (attention == AttentionKind::kMla) {
    const int64_t in = q_lora_rank > 0 ? q_lora_rank : hidden;
    return in * heads * (qk_nope_dim + qk_rope_dim);
  }
  return hidden * heads * head_dim + (attention_bias ? heads * head_dim : 0);
}

int64_t ModelArch::KvProjParams() const {
  if (attention == AttentionKind::kMla) return kv_lora_rank * heads * (qk_nope_dim + v_head_dim);
  return 2 * (hidden * kv_heads * head_dim + (attention_bias ? kv_heads * head_dim : 0));
}

int64_t ModelArch::OProjParams() const {
  const int64_t in = attention == AttentionKind::kMla ? heads * v_head_dim : heads * head_dim;
  return in * hidden + (attention_bias ? hidden : 0);
}

int64_t ModelArch::LoraDownParams() const {
  if (attention != AttentionKind::kMla) return 0;
  int64_t p = hidden * (kv_lora_rank + qk_rope_dim) + kv_lora_rank;  // kv_a_proj + kv_a_layernorm
  if (q_lora_rank > 0) p += hidden * q_lora_rank + q_lora_rank;      // q_a_proj + q_a_layernorm
  return p;
}

int64_t ModelArch::AttentionParams() const {
  int64_t p = QProjParams() + KvProjParams() + OProjParams() + LoraDownParams();
  if (qk_norm) p += 2 * head_dim;
  if (attention_sinks) p += heads;
  return p;
}

int64_t ModelArch::DenseMlpParams() const { return 3 * hidden * intermediate; }

int64_t ModelArch::ExpertParams() const {
  return 3 * hidden * moe_intermediate + (expert_bias ? 2 * moe_intermediate + hidden : 0);
}

int64_t ModelArch::RouterParams() const {
  if (!is_moe()) return 0;
  // DeepSeek-V3 (and Kimi K2) and GPT-OSS carry a per-expert bias (correction or router bias).
  const bool bias =
      model_type == "deepseek_v3" || model_type == "kimi_k2" || model_type == "gpt_oss";
  return hidden * experts + (bias ? experts : 0);
}

int64_t ModelArch::LayerNormParams() const { return 2 * hidden; }

int64_t ModelArch::KvValuesPerTokenPerLayer() const {
  if (attention == AttentionKind::kMla) return kv_lora_rank + qk_rope_dim;
  return 2 * kv_heads * head_dim;
}

ParamCounts CountParams(const ModelArch& m) {
  ParamCounts c;
  const int64_t moe_layers = m.NumMoeLayers();
  const int64_t dense_layers = m.layers - moe_layers;
  const int64_t per_layer_common = m.AttentionParams() + m.LayerNormParams();
  const int64_t moe_shared = m.shared_experts * m.ExpertParams() + m.RouterParams();
  const int64_t lm_head = m.tie_embeddings ? 0 : m.LmHeadParams();

  c.total = m.EmbeddingParams() + lm_head + m.hidden /* final norm */ +
            m.layers * per_layer_common + dense_layers * m.DenseMlpParams() +
            moe_layers * (m.experts * m.ExpertParams() + moe_shared);
  c.active = m.LmHeadParams() + m.layers * per_layer_common + dense_layers * m.DenseMlpParams() +
             moe_layers * (m.experts_per_token * m.ExpertParams() + moe_shared);
  if (m.mtp_layers > 0) {
    // Each DeepSeek MTP layer: two norms, a 2h -> h projection, one full MoE decoder layer and a
    // final norm; the embedding and head are shared with the main model.
    const int64_t one =
        2 * m.hidden + 2 * m.hidden * m.hidden + per_layer_common +
        (m.is_moe() ? m.experts * m.ExpertParams() + moe_shared : m.DenseMlpParams()) + m.hidden;
    c.mtp = m.mtp_layers * one;
  }
  return c;
}

namespace {

// The model_types whose operators fathom lists: config.json's, or a multimodal checkpoint's as
// "<its model_type>_text" (its text_config).
constexpr std::string_view kModelTypes[] = {
    "llama",     "mistral",     "qwen2",       "qwen3",       "gemma3_text", "mixtral", "qwen3_moe",
    "qwen2_moe", "llama4_text", "deepseek_v3", "deepseek_v2", "kimi_k2",     "gpt_oss"};

// An architecture fathom does not model, named before any field it would read: a config of
// another kind need not have those.
Status CheckModelType(const std::string& type, const std::string& source) {
  if (std::find(std::begin(kModelTypes), std::end(kModelTypes), type) != std::end(kModelTypes))
    return Status::Ok();
  std::string supported;
  for (std::string_view t : kModelTypes) {
    if (t.ends_with("_text")) t.remove_suffix(std::string_view("_text").size());
    supported += (supported.empty() ? "" : ", ") + std::string(t);
  }
  return Status::InvalidArgument(source + ": field 'model_type' = \"" + type +
                                 "\": unsupported architecture (supported: " + supported + ")");
}

}  // namespace

Result<ModelArch> ParseModelConfig(const Json& document, const std::string& source) {
  // A multimodal checkpoint (Llama 4, Gemma 3) nests its language model in text_config: that is
  // the model served here (a vision tower's parameters are not counted); its precision is the
  // checkpoint's.
  Json config = document;
  if (document.contains("text_config") && document["text_config"].is_object()) {
    config = document["text_config"];
    if (!config.contains("model_type") && document.contains("model_type") &&
        document["model_type"].is_string()) {
      config["model_type"] = document["model_type"].get<std::string>() + "_text";
    }
    if (!config.contains("quantization_config") && document.contains("quantization_config"))
      config["quantization_config"] = document["quantization_config"];
    if (!config.contains("tie_word_embeddings") && document.contains("tie_word_embeddings"))
      config["tie_word_embeddings"] = document["tie_word_embeddings"];
  }
  // Gemma 3's published text_config leaves these to transformers' Gemma3TextConfig defaults.
  if (config.contains("model_type") && config["model_type"] == "gemma3_text") {
    const std::pair<const char*, Json> defaults[] = {{"vocab_size", 262208},
                                                     {"sliding_window_pattern", 6},
                                                     {"max_position_embeddings", 131072},
                                                     {"tie_word_embeddings", true}};
    for (const auto& [key, value] : defaults) {
      if (!config.contains(key)) config[key] = value;
    }
  }
  JsonFields f(config, source);
  ModelArch m;
  m.model_type = f.String("model_type");
  FATHOM_RETURN_IF_ERROR(f.status());
  FATHOM_RETURN_IF_ERROR(CheckModelType(m.model_type, source));
  m.vocab = f.Int("vocab_size");
  m.hidden = f.Int("hidden_size");
  m.layers = f.Int("num_hidden_layers");
  m.heads = f.Int("num_attention_heads");
  m.kv_heads = f.Int("num_key_value_heads", m.heads);
  m.intermediate = f.Int("intermediate_size", 0);
  m.tie_embeddings = f.Bool("tie_word_embeddings", false);
  m.attention_bias = f.Bool("attention_bias", false);
  m.max_context = f.Int("max_position_embeddings", 0);
  FATHOM_RETURN_IF_ERROR(f.status());

  // Sizes are bounded far above any published model (about 16x the largest), so that parameter
  // and memory counts stay within int64 and a per-layer table fits in memory.
  auto require_in = [&](const char* field, int64_t v, int64_t min, int64_t max) {
    if (v < min || v > max) {
      f.Fail(field, std::to_string(v),
             "must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    }
  };
  constexpr int64_t kMaxWidth = int64_t{1} << 17, kMaxMlpWidth = int64_t{1} << 19,
                    kMaxCount = int64_t{1} << 12;
  require_in("vocab_size", m.vocab, 1, int64_t{1} << 22);
  require_in("hidden_size", m.hidden, 1, kMaxWidth);
  require_in("num_hidden_layers", m.layers, 1, kMaxCount);
  require_in("num_attention_heads", m.heads, 1, kMaxCount);
  require_in("num_key_value_heads", m.kv_heads, 1, kMaxCount);
  require_in("intermediate_size", m.intermediate, 0, kMaxMlpWidth);
  require_in("max_position_embeddings", m.max_context, 0, int64_t{1} << 30);
  FATHOM_RETURN_IF_ERROR(f.status());
  if (m.heads % m.kv_heads != 0) {
    f.Fail("num_key_value_heads", std::to_string(m.kv_heads),
           "must divide num_attention_heads (" + std::to_string(m.heads) + ")");
  }
  m.head_dim = f.Int("head_dim", m.hidden / m.heads);

  const std::string& type = m.model_type;
  // Kimi K2 names its own model_type for DeepSeek-V3's architecture (DeepseekV3ForCausalLM).
  if (type == "deepseek_v3" || type == "deepseek_v2" || type == "kimi_k2") {
    m.attention = AttentionKind::kMla;
    m.q_lora_rank = f.Int("q_lora_rank", 0);
    m.kv_lora_rank = f.Int("kv_lora_rank");
    m.qk_nope_dim = f.Int("qk_nope_head_dim");
    m.qk_rope_dim = f.Int("qk_rope_head_dim");
    m.v_head_dim = f.Int("v_head_dim");
    m.experts = f.Int("n_routed_experts", 0);
    require_in("n_routed_experts", m.experts, 0, kMaxCount);
    m.shared_experts = f.Int("n_shared_experts", 0);
    m.mtp_layers = f.Int("num_nextn_predict_layers", 0);
    const int64_t first_dense = f.Int("first_k_dense_replace", 0);
    const int64_t freq = f.Int("moe_layer_freq", 1);
    if (freq <= 0) f.Fail("moe_layer_freq", std::to_string(freq), "must be >= 1");
    m.moe_layer.assign(m.layers, false);
    for (int64_t i = 0; i < m.layers && freq > 0; ++i)
      m.moe_layer[i] = m.experts > 0 && i >= first_dense && i % freq == 0;
  } else if (type == "mixtral" || type == "gpt_oss") {
    m.experts = f.Int("num_local_experts");
    require_in("num_local_experts", m.experts, 1, kMaxCount);
    m.moe_layer.assign(m.layers, true);
    if (type == "gpt_oss") {
      m.expert_bias = true;
      m.attention_sinks = true;
    }
  } else if (type == "qwen3_moe" || type == "qwen2_moe") {
    m.experts = f.Int("num_experts");
    require_in("num_experts", m.experts, 1, kMaxCount);
    m.shared_experts = 0;
    m.qk_norm = type == "qwen3_moe";
    const int64_t step = f.Int("decoder_sparse_step", 1);
    if (step <= 0) f.Fail("decoder_sparse_step", std::to_string(step), "must be >= 1");
    m.moe_layer.assign(m.layers, false);
    for (int64_t i = 0; i < m.layers && step > 0; ++i) m.moe_layer[i] = (i + 1) % step == 0;
    if (config.contains("mlp_only_layers") && config["mlp_only_layers"].is_array()) {
      for (const auto& idx : config["mlp_only_layers"]) {
        if (idx.is_number_integer() && idx.get<int64_t>() >= 0 && idx.get<int64_t>() < m.layers)
          m.moe_layer[idx.get<int64_t>()] = false;
      }
    }
  } else if (type == "llama4_text") {
    // Llama 4: every interleave_moe_layer_step-th layer is MoE, a routed and a shared expert of
    // intermediate_size each; the others are dense MLPs of intermediate_size_mlp.
    m.experts = f.Int("num_local_experts");
    require_in("num_local_experts", m.experts, 1, kMaxCount);
    m.shared_experts = 1;
    m.intermediate = f.Int("intermediate_size_mlp", m.intermediate);
    const int64_t step = f.Int("interleave_moe_layer_step", 1);
    if (step <= 0) f.Fail("interleave_moe_layer_step", std::to_string(step), "must be >= 1");
    m.moe_layer.assign(m.layers, false);
    for (int64_t i = 0; i < m.layers && step > 0; ++i) m.moe_layer[i] = (i + 1) % step == 0;
    if (config.contains("moe_layers") && config["moe_layers"].is_array()) {  // explicit: it wins
      m.moe_layer.assign(m.layers, false);
      for (const auto& idx : config["moe_layers"]) {
        if (!idx.is_number_integer() || idx.get<int64_t>() < 0 || idx.get<int64_t>() >= m.layers) {
          f.Fail("moe_layers", idx.dump(),
                 "must hold layer indices in [0, " + std::to_string(m.layers) + ")");
          break;
        }
        m.moe_layer[idx.get<int64_t>()] = true;
      }
    }
  } else {  // dense: llama, mistral, qwen2, qwen3, gemma3_text (CheckModelType)
    m.moe_layer.assign(m.layers, false);
    m.qk_norm = type == "qwen3" || type == "gemma3_text";
  }
  require_in("head_dim", m.head_dim, 1, kMaxCount);
  if (m.attention == AttentionKind::kMla) {
    require_in("q_lora_rank", m.q_lora_rank, 0, kMaxWidth);
    require_in("kv_lora_rank", m.kv_lora_rank, 1, kMaxWidth);
    require_in("qk_nope_head_dim", m.qk_nope_dim, 1, kMaxCount);
    require_in("qk_rope_head_dim", m.qk_rope_dim, 1, kMaxCount);
    require_in("v_head_dim", m.v_head_dim, 1, kMaxCount);
    require_in("n_shared_experts", m.shared_experts, 0, kMaxCount);
    require_in("num_nextn_predict_layers", m.mtp_layers, 0, kMaxCount);
  }
  FATHOM_RETURN_IF_ERROR(f.status());
  if (m.experts > 0) {
    m.experts_per_token = f.Int("num_experts_per_tok");
    // Mixtral's experts are full-width MLPs; the others name the expert width separately.
    m.moe_intermediate = f.Has("moe_intermediate_size") ? f.Int("moe_intermediate_size")
                                                        : f.Int("intermediate_size");
    require_in(f.Has("moe_intermediate_size") ? "moe_intermediate_size" : "intermediate_size",
               m.moe_intermediate, 1, kMaxMlpWidth);
    if (m.experts_per_token <= 0 || m.experts_per_token > m.experts) {
      f.Fail("num_experts_per_tok", std::to_string(m.experts_per_token),
             "must be between 1 and the number of experts (" + std::to_string(m.experts) + ")");
    }
  }
  if (m.NumMoeLayers() < m.layers && m.intermediate <= 0) {
    f.Fail("intermediate_size", std::to_string(m.intermediate),
           "must be a positive integer (the model has dense MLP layers)");
  }

  m.sliding_layer.assign(m.layers, false);
  if (config.contains("layer_types") && config["layer_types"].is_array()) {
    const Json& types = config["layer_types"];
    if (static_cast<int64_t>(types.size()) != m.layers) {
      f.Fail("layer_types", std::to_string(types.size()) + " entries",
             "must list one type per layer (" + std::to_string(m.layers) + ")");
    } else {
      for (int64_t i = 0; i < m.layers; ++i)
        m.sliding_layer[i] = types[i].is_string() && types[i] == "sliding_attention";
    }
  } else if (type == "gemma3_text" && f.Has("sliding_window_pattern")) {
    // Gemma 3: every sliding_window_pattern-th layer global, the others local.
    const int64_t pattern = f.Int("sliding_window_pattern");
    if (pattern <= 0) f.Fail("sliding_window_pattern", std::to_string(pattern), "must be >= 1");
    for (int64_t i = 0; i < m.layers && pattern > 0; ++i)
      m.sliding_layer[i] = (i + 1) % pattern != 0;
  } else if (type == "llama4_text" && f.Has("attention_chunk_size")) {
    // Llama 4's RoPE layers attend within chunks of attention_chunk_size tokens, its NoPE layers
    // (no_rope_layers[i] == 0; by default every fourth) to the whole context. A chunk is priced
    // as a window of its size: the most a token attends to and the KV a layer keeps (within a
    // chunk a token attends to those before it, half the chunk on average).
    const Json* nope = config.contains("no_rope_layers") && config["no_rope_layers"].is_array()
                           ? &config["no_rope_layers"]
                           : nullptr;
    if (nope != nullptr && !nope->empty() && static_cast<int64_t>(nope->size()) != m.layers) {
      f.Fail("no_rope_layers", std::to_string(nope->size()) + " entries",
             "must list one flag per layer (" + std::to_string(m.layers) + ")");
    } else {
      for (int64_t i = 0; i < m.layers; ++i) {
        m.sliding_layer[i] = nope != nullptr && !nope->empty()
                                 ? (*nope)[i].is_number_integer() && (*nope)[i].get<int64_t>() != 0
                                 : (i + 1) % 4 != 0;
      }
    }
  } else if (f.Bool("use_sliding_window", false) || type == "mistral") {
    std::fill(m.sliding_layer.begin(), m.sliding_layer.end(), f.Has("sliding_window"));
  }
  if (m.NumSlidingLayers() > 0) {
    const char* window = type == "llama4_text" ? "attention_chunk_size" : "sliding_window";
    m.sliding_window = f.Int(window);
    require_in(window, m.sliding_window, 1, int64_t{1} << 30);
  }
  FATHOM_RETURN_IF_ERROR(f.status());
  FATHOM_RETURN_IF_ERROR(ReadNativePrecision(config, source, &m));
  m.name = source;
  return m;
}

Result<ModelArch> LoadModel(const std::string& name_or_path) {
  std::filesystem::path path = name_or_path;
  bool builtin = false;
  if (!std::filesystem::exists(path)) {
    path = ConfigDir() / (name_or_path + ".json");
    builtin = true;
    if (!std::filesystem::exists(path)) {
      std::string known;
      for (const auto& n : BuiltinModelNames()) known += (known.empty() ? "" : ", ") + n;
      return Status::NotFound("model '" + name_or_path +
                              "': no such file and no built-in of that name (built-ins: " + known +
                              ")");
    }
  }
  FATHOM_ASSIGN_OR_RETURN(Json config, ReadJsonFile(path.string()));
  FATHOM_ASSIGN_OR_RETURN(ModelArch m, ParseModelConfig(config, path.string()));
  m.name = builtin ? name_or_path : path.string();
  return m;
}

std::vector<std::string> BuiltinModelNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(ConfigDir(), ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace fathom::models
