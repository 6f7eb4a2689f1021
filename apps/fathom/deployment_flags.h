// Flags that describe a deployment (model, GPU, layout, precision), shared by the subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/deployment.h"
#include "models/hardware.h"
#include "models/model_arch.h"

namespace fathom::cli {

struct DeploymentFlags {
  std::string model;  // empty: the built-in default deployment
  std::string hardware;
  std::vector<std::string> hardware_files;
  int gpus = 0, tp = 0, pp = 0, ep = 0, attn_dp = 0;  // 0: not given
  std::string weights, dense_weights, kv;
};

struct Deployment {
  models::ModelArch model;
  models::Hardware hardware;
  models::ParallelLayout layout;
  models::Precision precision;
};

void AddDeploymentFlags(CLI::App* cmd, DeploymentFlags* flags);

// Fills what was not given (see README: the built-in default is the MLPerf DeepSeek-R1 8xB200
// deployment), loads model and GPU, and validates the layout.
Result<Deployment> ResolveDeployment(const DeploymentFlags& flags);

// Loads the built-in catalogue plus the user's --hardware-file entries.
Result<models::HardwareCatalog> LoadCatalog(const std::vector<std::string>& extra_files);

}  // namespace fathom::cli
