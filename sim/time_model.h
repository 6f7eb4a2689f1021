// Which execution-time model a simulation uses: the calibrated cost model (default) or the plain
// roofline, with an optional performance database of measured kernels.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/cost_model.h"
#include "models/hardware.h"
#include "models/stack.h"
#include "sim/deployment_config.h"

namespace fathom::sim {

// Errors name the flags (--cost-model, --engine, --stack, --calibration, --perf-db) that set these.
struct TimeModelOptions {
  std::string cost_model = "calibrated";  // or "roofline"
  std::string calibration;                // empty: the stack's
  // trtllm, vllm or sglang: the newest stack of that engine that runs on the GPU; empty: the
  // newest stack of any engine that does (models::DefaultStack).
  std::string engine;
  std::string stack;  // a stack by name, which wins over the engine's default (models/stacks.json)
  std::string perf_db;  // measured kernels (SQLite); empty: none
};

struct TimeModel {
  TimeModelFactory factory;
  models::Calibration calibration;
  std::shared_ptr<const models::MeasuredGemms> measured;
  bool roofline = false;
  std::string stack;  // the stack whose calibration it is; empty for a calibration file or roofline
  std::string engine;          // the stack's engine ("vLLM"); empty without a stack
  models::StackSearch search;  // what the tuner tries on the stack
  // The runtimes `model_type` runs on: the Python runtime, and the stack's C++ executor where the
  // stack serves that model_type as TensorRT engines (models/stacks.json).
  std::vector<models::Runtime> Runtimes(const std::string& model_type) const;
  std::vector<std::string> cpp_model_types;  // the stack's; empty without one
};

// The calibrated cost model with these parameters (and measured GEMMs, which may be null).
// The roofline's factory: operator times from the GPU's peak FLOP/s and bandwidth alone.
TimeModelFactory RooflineFactory();

TimeModelFactory CalibratedFactory(const models::CostParams& params,
                                   std::shared_ptr<const models::MeasuredGemms> measured);

// The calibrated model with each fitted parameter that has a spread one standard deviation up and
// down, the others held: the pairs error bars propagate (linearly, correlations ignored).
std::vector<std::array<TimeModelFactory, 2>> PerturbedFactories(const TimeModel& model);

// For a run on `gpu`: the default stack is one whose build runs on its vendor's GPUs, and the
// performance database's measurements are those of its name.
Result<TimeModel> MakeTimeModel(const TimeModelOptions& options, const models::Hardware& gpu);
// The same for the GPU `hardware` names in `catalog` (an error lists the known ones).
Result<TimeModel> MakeTimeModel(const TimeModelOptions& options,
                                const models::HardwareCatalog& catalog,
                                const std::string& hardware);

}  // namespace fathom::sim
