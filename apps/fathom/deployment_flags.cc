#include "apps/fathom/deployment_flags.h"

namespace fathom::cli {

void AddDeploymentFlags(CLI::App* cmd, DeploymentFlags* f) {
  cmd->add_option("--model", f->model,
                  "Built-in model name or path to a Hugging Face config.json (default: deepseek-r1 "
                  "with its MLPerf 8xB200 deployment)");
  cmd->add_option("--hardware", f->hardware,
                  "GPU name from `fathom hardware list` (default: b200)");
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  cmd->add_option("--gpus", f->gpus, "Total GPUs (default: tp x pp)");
  cmd->add_option("--tp", f->tp, "Tensor-parallel degree (default: gpus / pp)");
  cmd->add_option("--pp", f->pp, "Pipeline-parallel degree (default: 1)");
  cmd->add_option("--ep", f->ep, "Expert-parallel degree, a divisor of tp (default: 1)");
  cmd->add_option("--attn-dp", f->attn_dp,
                  "Attention data-parallel ranks within the TP group (default: 1)");
  cmd->add_option("--weights", f->weights,
                  "Weight format of linear layers: bf16, fp8, fp4/nvfp4, mxfp4 (default: the "
                  "checkpoint's own)");
  cmd->add_option("--dense-weights", f->dense_weights,
                  "Override the format of attention, dense MLP and shared experts only");
  cmd->add_option("--kv", f->kv, "KV-cache format (default: bf16)");
}

Result<models::HardwareCatalog> LoadCatalog(const std::vector<std::string>& extra_files) {
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog, models::HardwareCatalog::LoadBuiltin());
  for (const auto& file : extra_files) FATHOM_RETURN_IF_ERROR(catalog.AddFile(file));
  return catalog;
}

Result<Deployment> ResolveDeployment(const DeploymentFlags& given) {
  DeploymentFlags f = given;
  if (f.model.empty()) {
    f.model = models::kDefaultModel;
    if (f.gpus == 0 && f.tp == 0) f.gpus = models::kDefaultLayout.gpus;
    if (f.ep == 0) f.ep = models::kDefaultLayout.ep;
    if (f.attn_dp == 0) f.attn_dp = models::kDefaultLayout.attn_dp;
    if (f.weights.empty()) f.weights = models::kDefaultWeights;
    if (f.kv.empty()) f.kv = models::kDefaultKv;
  }
  if (f.hardware.empty()) f.hardware = models::kDefaultHardware;
  if (f.pp == 0) f.pp = 1;
  if (f.tp == 0) f.tp = f.gpus > 0 ? f.gpus / f.pp : 1;
  if (f.gpus == 0) f.gpus = f.tp * f.pp;
  if (f.ep == 0) f.ep = 1;
  if (f.attn_dp == 0) f.attn_dp = 1;

  Deployment d;
  FATHOM_ASSIGN_OR_RETURN(d.model, models::LoadModel(f.model));
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog, LoadCatalog(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(d.hardware, catalog.Find(f.hardware));
  d.layout = {f.gpus, f.tp, f.pp, f.ep, f.attn_dp};
  FATHOM_RETURN_IF_ERROR(models::ValidateLayout(d.model, d.layout).WithContext(d.model.name));

  d.precision.moe_weights = d.model.native_moe_weights;
  d.precision.dense_weights = d.model.native_dense_weights;
  if (!f.weights.empty()) {
    FATHOM_ASSIGN_OR_RETURN(models::DType w, models::ParseDType(f.weights, "--weights"));
    d.precision.moe_weights = w;
    d.precision.dense_weights = w;
  }
  if (!f.dense_weights.empty()) {
    FATHOM_ASSIGN_OR_RETURN(d.precision.dense_weights,
                            models::ParseDType(f.dense_weights, "--dense-weights"));
  }
  if (!f.kv.empty()) {
    FATHOM_ASSIGN_OR_RETURN(d.precision.kv, models::ParseDType(f.kv, "--kv"));
  }
  return d;
}

}  // namespace fathom::cli
