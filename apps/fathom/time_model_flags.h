// The flags that choose a command's execution-time model (sim::TimeModelOptions).
#pragma once

#include <CLI/CLI.hpp>

#include "sim/time_model.h"

namespace fathom::cli {

void AddTimeModelFlags(CLI::App* cmd, sim::TimeModelOptions* options);

}  // namespace fathom::cli
