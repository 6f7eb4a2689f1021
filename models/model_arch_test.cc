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
  };
  // Active parameters exclude the input embedding (a lookup, no FLOPs); see model_arch.h.
  const Row rows[] = {
      {"deepseek-r1", 671e9, 37e9, 0.005, 0.03},
      {"llama3.1-405b", 405e9, 405e9, 0.005, 0.005},
      {"llama2-70b", 68.98e9, 68.98e9, 0.001, 0.01},
      {"gpt-oss-120b", 116.83e9, 5.13e9, 0.002, 0.01},
      {"qwen3-235b-a22b", 235e9, 22e9, 0.005, 0.03},
      {"mixtral-8x7b", 46.7e9, 12.9e9, 0.002, 0.015},
  };
  for (const Row& r : rows) {
    INFO(r.name);
    const ParamCounts c = CountParams(Load(r.name));
    CHECK(c.total == Approx(r.total).epsilon(r.tol_total));
    CHECK(c.active == Approx(r.active).epsilon(r.tol_active));
  }
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
