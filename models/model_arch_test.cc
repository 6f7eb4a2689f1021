#include "models/model_arch.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "base/files.h"

namespace fathom::models {
namespace {

ModelArch Load(const std::string& name) {
  auto m = LoadModel(name);
  INFO(m.status().message());
  REQUIRE(m.ok());
  return *m;
}

}  // namespace

TEST_CASE("CountParams: matches the published totals and active counts", "[models]") {
  struct Row {
    const char* name;
    double total, active, tol_total, tol_active;
    bool active_with_embedding = false;  // the publisher's active count includes the embedding
  };
  // Active parameters exclude the input embedding (a lookup, no FLOPs); see model_arch.h. Total
  // counts of multimodal checkpoints (Llama 4, Gemma 3) include a vision tower fathom does not
  // serve (about 1B and 0.4B), hence their wider tolerance.
  const Row rows[] = {
      {"gpt-oss-20b", 20.91e9, 3.61e9, 0.002, 0.01},
      {"kimi-k2", 1.04e12, 32e9, 0.015, 0.015},
      {"qwen3-32b", 32.8e9, 32.8e9, 0.002, 0.03},
      {"qwen3-30b-a3b", 30.5e9, 3.3e9, 0.005, 0.02, true},  // published to 0.1B
      {"llama4-scout", 109e9, 17e9, 0.015, 0.03, true},     // published to 1B
      {"llama4-maverick", 400e9, 17e9, 0.005, 0.03, true},
      {"gemma3-27b", 27.4e9, 27.4e9, 0.02, 0.03},
      {"deepseek-r1", 671e9, 37e9, 0.005, 0.03},
      {"llama3.1-405b", 405e9, 405e9, 0.005, 0.005},
      {"llama3.1-70b", 70.6e9, 70.6e9, 0.002, 0.002, true},  // published to 0.1B
      {"llama3.1-8b", 8.03e9, 8.03e9, 0.002, 0.002, true},
      {"llama2-70b", 68.98e9, 68.98e9, 0.001, 0.01},
      {"gpt-oss-120b", 116.83e9, 5.13e9, 0.002, 0.01},
      {"qwen3-235b-a22b", 235e9, 22e9, 0.005, 0.03},
      {"mixtral-8x7b", 46.7e9, 12.9e9, 0.002, 0.015},
  };
  for (const Row& r : rows) {
    INFO(r.name);
    const ParamCounts c = CountParams(Load(r.name));
    CHECK(c.total == Approx(r.total).epsilon(r.tol_total));
    const double embedding =
        r.active_with_embedding ? static_cast<double>(Load(r.name).EmbeddingParams()) : 0;
    CHECK(c.active + embedding == Approx(r.active).epsilon(r.tol_active));
  }
}

TEST_CASE(
    "ParseModelConfig: Llama 4 interleaves MoE layers and attends in chunks on its RoPE layers; "
    "Gemma 3 keeps one global layer in six and the defaults its config leaves out",
    "[models]") {
  const ModelArch maverick = Load("llama4-maverick");
  CHECK(maverick.NumMoeLayers() == 24);
  CHECK_FALSE(maverick.moe_layer[0]);
  CHECK(maverick.moe_layer[1]);
  CHECK(maverick.experts == 128);
  CHECK(maverick.shared_experts == 1);
  CHECK(maverick.intermediate == 16384);     // dense layers
  CHECK(maverick.moe_intermediate == 8192);  // each expert
  CHECK(maverick.NumSlidingLayers() == 36);  // three RoPE (chunked) layers in four
  CHECK_FALSE(maverick.sliding_layer[3]);    // NoPE: the whole context
  CHECK(maverick.sliding_window == 8192);
  const ModelArch scout = Load("llama4-scout");
  CHECK(scout.NumMoeLayers() == 48);
  CHECK(scout.experts == 16);
  // Without moe_layers and no_rope_layers: every interleave step-th layer, every fourth NoPE.
  Json text = Json::parse(R"({"model_type": "llama4", "text_config": {"vocab_size": 1000,
      "hidden_size": 64, "num_hidden_layers": 8, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32,
      "intermediate_size_mlp": 128, "num_local_experts": 4, "num_experts_per_tok": 1,
      "interleave_moe_layer_step": 2, "attention_chunk_size": 256}})");
  auto derived = ParseModelConfig(text, "c.json");
  REQUIRE(derived.ok());
  CHECK(derived->model_type == "llama4_text");
  CHECK(derived->NumMoeLayers() == 4);
  CHECK(derived->moe_layer[1]);
  CHECK(derived->NumSlidingLayers() == 6);
  CHECK(derived->sliding_window == 256);
  text["text_config"]["no_rope_layers"] = Json::array({1, 1, 1, 0});
  CHECK(ParseModelConfig(text, "c.json").status().message() ==
        "c.json: field 'no_rope_layers' = 4 entries: must list one flag per layer (8)");
  text["text_config"].erase("no_rope_layers");
  text["text_config"]["moe_layers"] = Json::array({1, 8});
  CHECK(ParseModelConfig(text, "c.json").status().message() ==
        "c.json: field 'moe_layers' = 8: must hold layer indices in [0, 8)");

  const ModelArch gemma = Load("gemma3-27b");
  CHECK(gemma.model_type == "gemma3_text");
  CHECK(gemma.vocab == 262208);
  CHECK(gemma.tie_embeddings);
  CHECK(gemma.NumSlidingLayers() == 52);
  CHECK_FALSE(gemma.sliding_layer[5]);
  CHECK(gemma.sliding_window == 1024);
  CHECK(gemma.KvValuesPerTokenPerLayer() == 2 * 16 * 128);

  // Kimi K2: DeepSeek-V3's architecture under a model_type of its own.
  const ModelArch kimi = Load("kimi-k2");
  CHECK(kimi.attention == AttentionKind::kMla);
  CHECK(kimi.experts == 384);
  CHECK(kimi.NumMoeLayers() == 60);
  CHECK(kimi.mtp_layers == 0);
  CHECK(kimi.native_moe_weights == DType::kFp8);
  CHECK(Load("gpt-oss-20b").NumSlidingLayers() == 12);
}

TEST_CASE("ParseModelConfig: DeepSeek-R1 reads MLA, shared experts, dense first layers and MTP",
          "[models]") {
  const ModelArch m = Load("deepseek-r1");
  CHECK(m.attention == AttentionKind::kMla);
  CHECK(m.NumMoeLayers() == 58);
  CHECK_FALSE(m.moe_layer[2]);
  CHECK(m.moe_layer[3]);
  CHECK(m.shared_experts == 1);
  CHECK(m.mtp_layers == 1);
  CHECK(m.KvValuesPerTokenPerLayer() == 576);
  CHECK(m.native_moe_weights == DType::kFp8);
  // The MTP layer: a full MoE decoder layer plus its projection (685B - 671B in DeepSeek's count,
  // which also stores a copy of the embedding and head).
  CHECK(CountParams(m).mtp == Approx(11.61e9).epsilon(0.01));
}

TEST_CASE("ParseModelConfig: GPT-OSS alternates sliding-window and full layers", "[models]") {
  const ModelArch m = Load("gpt-oss-120b");
  CHECK(m.NumSlidingLayers() == 18);
  CHECK(m.sliding_window == 128);
  CHECK(m.KvValuesPerTokenPerLayer() == 2 * 8 * 64);
  CHECK(m.native_moe_weights == DType::kMxfp4);
  CHECK(m.native_dense_weights == DType::kBf16);
}

TEST_CASE("ParseModelConfig: a missing field names the file and the field", "[models]") {
  Json cfg = Json::parse(R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
                             "num_attention_heads": 32, "intermediate_size": 11008})");
  auto r = ParseModelConfig(cfg, "my/config.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "my/config.json: field 'num_hidden_layers': missing (required integer)");
}

TEST_CASE("ParseModelConfig: an unsupported model_type and bad values name the rule", "[models]") {
  Json cfg = Json::parse(R"({"model_type": "mamba", "vocab_size": 1, "hidden_size": 8,
                             "num_hidden_layers": 2, "num_attention_heads": 2})");
  auto r = ParseModelConfig(cfg, "c.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().rfind("c.json: field 'model_type' = \"mamba\": unsupported", 0) == 0);
  // Named before the fields it would read, which another architecture's config need not have.
  r = ParseModelConfig(Json::parse(R"({"model_type": "mamba2"})"), "m.json");
  CHECK(r.status().message() ==
        "m.json: field 'model_type' = \"mamba2\": unsupported architecture (supported: llama, "
        "mistral, qwen2, qwen3, gemma3, mixtral, qwen3_moe, qwen2_moe, llama4, deepseek_v3, "
        "deepseek_v2, kimi_k2, gpt_oss)");

  cfg = Json::parse(R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
       "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 5,
       "intermediate_size": 11008})");
  r = ParseModelConfig(cfg, "c.json");
  CHECK(r.status().message() ==
        "c.json: field 'num_key_value_heads' = 5: must divide num_attention_heads (32)");
}

TEST_CASE("ParseModelConfig: sizes beyond any model are refused before they overflow a count",
          "[models]") {
  // Found by probing fuzz_model_config: vocab_size 2^62 overflowed the LM head's parameter count,
  // num_hidden_layers 2^62 asked for a per-layer table of that length.
  auto message = [](const std::string& field, const std::string& value) {
    Json cfg = Json::parse(R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
         "num_hidden_layers": 2, "num_attention_heads": 32, "intermediate_size": 11008})");
    cfg[field] = Json::parse(value);
    return ParseModelConfig(cfg, "c.json").status().message();
  };
  CHECK(message("vocab_size", "4611686018427387904") ==
        "c.json: field 'vocab_size' = 4611686018427387904: must be an integer in [1, 4194304]");
  CHECK(message("num_hidden_layers", "4611686018427387904") ==
        "c.json: field 'num_hidden_layers' = 4611686018427387904: must be an integer in [1, 4096]");
  CHECK(message("hidden_size", "0") ==
        "c.json: field 'hidden_size' = 0: must be an integer in [1, 131072]");
  CHECK(message("head_dim", "1099511627776") ==
        "c.json: field 'head_dim' = 1099511627776: must be an integer in [1, 4096]");
  CHECK(message("intermediate_size", "131072").empty());
}

TEST_CASE("LoadModel: a malformed config.json names the file; an unknown name lists built-ins",
          "[models]") {
  const std::string path = (std::filesystem::temp_directory_path() / "fathom_cfg.json").string();
  REQUIRE(WriteFileAtomic(path, "{\"model_type\": \"llama\",").ok());
  auto r = LoadModel(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().rfind(path + ": malformed JSON", 0) == 0);
  std::filesystem::remove(path);

  r = LoadModel("gpt-5");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("deepseek-r1") != std::string::npos);
}

}  // namespace fathom::models
