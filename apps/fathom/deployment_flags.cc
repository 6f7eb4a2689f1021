#include "apps/fathom/deployment_flags.h"

namespace fathom::cli {

void AddDeploymentFlags(CLI::App* cmd, models::DeploymentRequest* f) {
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

}  // namespace fathom::cli
