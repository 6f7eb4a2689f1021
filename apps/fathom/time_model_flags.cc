#include "apps/fathom/time_model_flags.h"

namespace fathom::cli {

void AddTimeModelFlags(CLI::App* cmd, sim::TimeModelOptions* f) {
  cmd->add_option("--cost-model", f->cost_model, "calibrated or roofline")->capture_default_str();
  cmd->add_option("--engine", f->engine,
                  "trtllm, vllm or sglang: predict with the newest stack of that engine that runs "
                  "on the GPU (default: the newest stack of any engine that does)");
  cmd->add_option("--stack", f->stack,
                  "Software stack whose calibration to use, by name (fathom stack list; wins over "
                  "--engine's default)");
  cmd->add_option("--calibration", f->calibration, "Calibration file (default: the stack's)");
  cmd->add_option("--perf-db", f->perf_db, "Performance database of measured kernels (SQLite)");
}

}  // namespace fathom::cli
