// Which execution-time model a command uses: the calibrated cost model (default) or the plain
// roofline, with an optional performance database of measured kernels.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "base/status.h"
#include "models/cost_model.h"
#include "sim/deployment_config.h"

namespace fathom::cli {

struct TimeModelFlags {
  std::string cost_model = "calibrated";
  std::string calibration;  // empty: the stack's
  std::string stack;        // empty: the newest (models/stacks.json)
  std::string perf_db;
};

void AddTimeModelFlags(CLI::App* cmd, TimeModelFlags* flags);

struct TimeModel {
  sim::TimeModelFactory factory;
  models::Calibration calibration;
  std::shared_ptr<const models::MeasuredGemms> measured;
  bool roofline = false;
  std::string stack;  // the stack whose calibration it is; empty for a --calibration file or roofline
};

// The calibrated cost model with these parameters (and measured GEMMs, which may be null).
sim::TimeModelFactory CalibratedFactory(const models::CostParams& params,
                                        std::shared_ptr<const models::MeasuredGemms> measured);

// `hardware` names the GPU whose measurements are taken from the perf database.
Result<TimeModel> MakeTimeModel(const TimeModelFlags& flags, const std::string& hardware);

}  // namespace fathom::cli
