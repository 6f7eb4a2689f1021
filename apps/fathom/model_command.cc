#include <cstdio>
#include <memory>

#include "apps/fathom/commands.h"
#include "base/json_fields.h"
#include "models/model_arch.h"

namespace fathom::cli {
namespace {

OrderedJson ToJson(const models::ModelArch& m) {
  const models::ParamCounts c = models::CountParams(m);
  OrderedJson j;
  j["name"] = m.name;
  j["model_type"] = m.model_type;
  j["params_total"] = c.total;
  j["params_active"] = c.active;
  j["params_mtp"] = c.mtp;
  j["layers"] = m.layers;
  j["hidden"] = m.hidden;
  j["attention"] = m.attention == models::AttentionKind::kMla ? "mla" : "gqa";
  j["heads"] = m.heads;
  j["kv_heads"] = m.kv_heads;
  j["kv_values_per_token_per_layer"] = m.KvValuesPerTokenPerLayer();
  j["experts"] = m.experts;
  j["experts_per_token"] = m.experts_per_token;
  j["shared_experts"] = m.shared_experts;
  j["moe_layers"] = m.NumMoeLayers();
  j["sliding_window"] = m.sliding_window;
  j["sliding_layers"] = m.NumSlidingLayers();
  j["vocab"] = m.vocab;
  j["native_weights"] = {{"moe", models::Name(m.native_moe_weights)},
                         {"dense", models::Name(m.native_dense_weights)}};
  return j;
}

}  // namespace

void RegisterModel(CLI::App& app, Status* result) {
  auto name = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("model", "List built-in models or show one architecture");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand("list", "Built-in models with their parameter counts");
  list->callback([result] {
    std::printf("%-18s %-12s %12s %12s\n", "name", "type", "params", "active");
    for (const auto& n : models::BuiltinModelNames()) {
      auto m = models::LoadModel(n);
      if (!m.ok()) {
        *result = m.status();
        return;
      }
      const models::ParamCounts c = models::CountParams(*m);
      std::printf("%-18s %-12s %11.1fB %11.1fB\n", n.c_str(), m->model_type.c_str(), c.total / 1e9,
                  c.active / 1e9);
    }
  });
  CLI::App* show = cmd->add_subcommand("show", "Architecture and parameter counts, as JSON");
  show->add_option("model", *name, "Built-in name or path to a config.json")->required();
  show->callback([name, result] {
    auto m = models::LoadModel(*name);
    if (!m.ok()) {
      *result = m.status();
      return;
    }
    std::printf("%s\n", ToJson(*m).dump(2).c_str());
  });
}

}  // namespace fathom::cli
