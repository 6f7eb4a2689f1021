// Flags that describe a deployment (model, GPU, layout, precision), shared by the subcommands;
// models::ResolveDeployment turns them into one.
#pragma once

#include <CLI/CLI.hpp>

#include "models/deployment.h"

namespace fathom::cli {

void AddDeploymentFlags(CLI::App* cmd, models::DeploymentRequest* flags);

}  // namespace fathom::cli
