#include "apps/fathom/time_model_flags.h"

#include <filesystem>

#include "models/roofline.h"

namespace fathom::cli {

void AddTimeModelFlags(CLI::App* cmd, TimeModelFlags* f) {
  cmd->add_option("--cost-model", f->cost_model, "calibrated or roofline")->capture_default_str();
  cmd->add_option("--calibration", f->calibration, "Calibration file (default: models/calibration/default.json)");
  cmd->add_option("--perf-db", f->perf_db, "Performance database of measured kernels (SQLite)");
}

Result<TimeModel> MakeTimeModel(const TimeModelFlags& f, const std::string& hardware) {
  TimeModel out;
  if (f.cost_model == "roofline") {
    out.roofline = true;
    out.factory = [](const models::ModelArch& m, const models::Hardware& hw, const models::ParallelLayout& l,
                     const models::Precision& p, models::Runtime) -> std::unique_ptr<models::ExecutionTimeModel> {
      return std::make_unique<models::RooflineModel>(m, hw, l, p);
    };
    return out;
  }
  if (f.cost_model != "calibrated") {
    return Status::InvalidArgument("--cost-model = \"" + f.cost_model + "\": must be calibrated or roofline");
  }
  FATHOM_ASSIGN_OR_RETURN(out.calibration,
                          models::LoadCalibration(f.calibration.empty() ? models::DefaultCalibrationPath() : f.calibration));
  std::shared_ptr<const models::MeasuredGemms> measured;
  if (!f.perf_db.empty()) {
    // Reading only: a mistyped path must not become a new, empty database.
    if (!std::filesystem::is_regular_file(f.perf_db)) {
      return Status::InvalidArgument("--perf-db = \"" + f.perf_db + "\": no such file");
    }
    FATHOM_ASSIGN_OR_RETURN(models::PerfDb db, models::PerfDb::Open(f.perf_db));
    FATHOM_ASSIGN_OR_RETURN(models::MeasuredGemms gemms, models::MeasuredGemms::Load(db, hardware));
    measured = std::make_shared<const models::MeasuredGemms>(std::move(gemms));
  }
  out.measured = measured;
  out.factory = CalibratedFactory(out.calibration.params, measured);
  return out;
}

sim::TimeModelFactory CalibratedFactory(const models::CostParams& params,
                                        std::shared_ptr<const models::MeasuredGemms> measured) {
  return [params, measured](const models::ModelArch& m, const models::Hardware& hw, const models::ParallelLayout& l,
                            const models::Precision& p,
                            models::Runtime runtime) -> std::unique_ptr<models::ExecutionTimeModel> {
    return std::make_unique<models::CalibratedModel>(m, hw, l, p, params, runtime, measured);
  };
}

}  // namespace fathom::cli
