#include <cstdio>
#include <memory>

#include "apps/fathom/commands.h"
#include "apps/fathom/deployment_flags.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "models/memory.h"

namespace fathom::cli {
namespace {

struct MemoryFlags {
  models::DeploymentRequest deployment;
  models::MemoryOptions options;
  bool json = false;
};

Status Run(const MemoryFlags& f) {
  FATHOM_ASSIGN_OR_RETURN(models::Deployment d, models::ResolveDeployment(f.deployment));
  if (f.options.reserve_fraction < 0 || f.options.reserve_fraction >= 1) {
    return Status::InvalidArgument("--reserve = " + std::to_string(f.options.reserve_fraction) +
                                   ": must be in [0, 1)");
  }
  if (f.options.kv_free_fraction < 0 || f.options.kv_free_fraction > 1) {
    return Status::InvalidArgument(
        "--kv-free-fraction = " + std::to_string(f.options.kv_free_fraction) +
        ": must be in [0, 1] (0: use --reserve)");
  }
  const models::MemoryPlan p =
      models::PlanMemory(d.model, d.hardware, d.layout, d.precision, f.options);
  if (f.json) {
    OrderedJson j;
    j["model"] = d.model.name;
    j["hardware"] = d.hardware.name;
    j["layout"] = {{"gpus", d.layout.gpus},
                   {"tp", d.layout.tp},
                   {"pp", d.layout.pp},
                   {"ep", d.layout.ep},
                   {"attn_dp", d.layout.attn_dp}};
    j["precision"] = {{"moe_weights", models::Name(d.precision.moe_weights)},
                      {"dense_weights", models::Name(d.precision.dense_weights)},
                      {"kv", models::Name(d.precision.kv)}};
    j["params_total"] = p.params.total;
    j["params_active"] = p.params.active;
    j["weights_bytes_per_gpu"] = p.weights_bytes;
    j["weights_breakdown_bytes"] = {{"attention", p.attention_bytes},
                                    {"dense_mlp", p.dense_mlp_bytes},
                                    {"routed_experts", p.expert_bytes},
                                    {"shared_experts", p.shared_expert_bytes},
                                    {"router_and_norms", p.router_norm_bytes},
                                    {"embedding", p.embedding_bytes},
                                    {"lm_head", p.lm_head_bytes}};
    j["activation_bytes"] = p.activation_bytes;
    j["runtime_bytes"] = p.runtime_bytes;
    j["reserve_bytes"] = p.reserve_bytes;
    j["kv_bytes_per_token"] = p.kv_bytes_per_token;
    j["kv_budget_bytes"] = p.kv_budget_bytes;
    j["kv_capacity_tokens_per_gpu"] = p.kv_capacity_tokens;
    j["fits"] = p.fits;
    if (!p.fits) j["why_not"] = p.why_not;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("Memory plan: %s on %d x %s, %s\n", d.model.name.c_str(), d.layout.gpus,
              d.hardware.name.c_str(), d.layout.ToString().c_str());
  std::printf("  weights %s (dense: %s), KV cache %s\n",
              std::string(models::Name(d.precision.moe_weights)).c_str(),
              std::string(models::Name(d.precision.dense_weights)).c_str(),
              std::string(models::Name(d.precision.kv)).c_str());
  std::printf("  parameters: %.1fB total, %.1fB active per token\n\n", p.params.total / 1e9,
              p.params.active / 1e9);
  std::printf("  per GPU (pipeline stage %d)            %12s\n", p.worst_stage, "");
  auto row = [](const char* label, double bytes) {
    std::printf("    %-34s %12s\n", label, HumanBytes(bytes).c_str());
  };
  row("HBM", d.hardware.memory_bytes);
  row("attention weights", p.attention_bytes);
  row("dense MLP weights", p.dense_mlp_bytes);
  row("routed expert weights", p.expert_bytes);
  row("shared expert weights", p.shared_expert_bytes);
  row("router and norms", p.router_norm_bytes);
  row("embedding", p.embedding_bytes);
  row("LM head", p.lm_head_bytes);
  row("= weights", p.weights_bytes);
  row("activations (peak iteration)", p.activation_bytes);
  row("runtime (CUDA, workspaces, graphs)", p.runtime_bytes);
  row("reserve", p.reserve_bytes);
  if (p.sliding_kv_bytes > 0) row("sliding-window KV (max batch)", p.sliding_kv_bytes);
  row("= KV-cache budget", p.kv_budget_bytes);
  std::printf(
      "\n  KV cache: %.0f bytes per token per GPU; capacity %lld tokens per GPU (its attention "
      "rank's)\n",
      p.kv_bytes_per_token, static_cast<long long>(p.kv_capacity_tokens));
  std::printf("  fits: %s%s\n", p.fits ? "yes" : "no, ", p.fits ? "" : p.why_not.c_str());
  return Status::Ok();
}

}  // namespace

void RegisterMemory(CLI::App& app, Status* result) {
  auto f = std::make_shared<MemoryFlags>();
  CLI::App* cmd =
      app.add_subcommand("memory", "Per-GPU memory plan: weights, activations, KV-cache capacity");
  AddDeploymentFlags(cmd, &f->deployment);
  cmd->add_option("--max-num-tokens", f->options.max_num_tokens,
                  "Tokens per engine iteration (sizes activations)")
      ->capture_default_str();
  cmd->add_option("--max-batch", f->options.max_batch, "Sequences per attention rank")
      ->capture_default_str();
  cmd->add_option("--reserve", f->options.reserve_fraction, "Fraction of HBM kept free")
      ->capture_default_str();
  cmd->add_option("--kv-free-fraction", f->options.kv_free_fraction,
                  "KV cache as this fraction of the memory weights, activations and runtime "
                  "leave (TensorRT-LLM's kv_cache_free_gpu_memory_fraction; replaces --reserve)");
  cmd->add_option("--min-kv-tokens", f->options.min_kv_tokens,
                  "KV tokens that must fit besides weights (default: max-num-tokens)");
  cmd->add_flag("--json", f->json, "Print JSON");
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
