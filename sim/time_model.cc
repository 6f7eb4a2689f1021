#include "sim/time_model.h"

#include <algorithm>
#include <filesystem>

#include "models/roofline.h"

namespace fathom::sim {

TimeModelFactory RooflineFactory() {
  return [](const models::ModelArch& m, const models::Hardware& hw, const models::ParallelLayout& l,
            const models::Precision& p, models::Runtime,
            models::Fusions) -> std::unique_ptr<models::ExecutionTimeModel> {
    return std::make_unique<models::RooflineModel>(m, hw, l, p);
  };
}

Result<TimeModel> MakeTimeModel(const TimeModelOptions& f, const models::Hardware& gpu) {
  TimeModel out;
  if (f.cost_model == "roofline") {
    if (!f.stack.empty() || !f.calibration.empty() || !f.engine.empty()) {
      return Status::InvalidArgument(
          "--engine, --stack and --calibration apply to the calibrated cost model, not the "
          "roofline");
    }
    out.roofline = true;
    out.factory = RooflineFactory();
    return out;
  }
  if (f.cost_model != "calibrated") {
    return Status::InvalidArgument("--cost-model = \"" + f.cost_model +
                                   "\": must be calibrated or roofline");
  }
  std::string engine;
  if (!f.engine.empty()) {
    FATHOM_ASSIGN_OR_RETURN(engine, models::EngineNamed(f.engine));
  }
  std::string path = f.calibration;
  if (path.empty()) {
    FATHOM_ASSIGN_OR_RETURN(std::vector<models::Stack> stacks,
                            models::LoadStacks(models::DefaultStacksPath()));
    models::Stack stack;
    if (!f.stack.empty()) {
      FATHOM_ASSIGN_OR_RETURN(stack, models::FindStack(stacks, f.stack, engine));
    } else {
      FATHOM_ASSIGN_OR_RETURN(stack, models::DefaultStack(stacks, engine, gpu.vendor));
    }
    path = stack.CalibrationPath();
    out.stack = stack.name;
    out.engine = stack.engine;
    out.search = stack.search;
    out.cpp_model_types = stack.cpp_model_types;
  } else if (!f.stack.empty() || !f.engine.empty()) {
    return Status::InvalidArgument(std::string(f.stack.empty() ? "--engine" : "--stack") +
                                   " and --calibration: give one");
  }
  FATHOM_ASSIGN_OR_RETURN(out.calibration, models::LoadCalibration(path));
  std::shared_ptr<const models::MeasuredGemms> measured;
  if (!f.perf_db.empty()) {
    // Reading only: a mistyped path must not become a new, empty database.
    if (!std::filesystem::is_regular_file(f.perf_db)) {
      return Status::InvalidArgument("--perf-db = \"" + f.perf_db + "\": no such file");
    }
    FATHOM_ASSIGN_OR_RETURN(models::PerfDb db, models::PerfDb::Open(f.perf_db));
    FATHOM_ASSIGN_OR_RETURN(models::MeasuredGemms gemms, models::MeasuredGemms::Load(db, gpu.name));
    measured = std::make_shared<const models::MeasuredGemms>(std::move(gemms));
  }
  out.measured = measured;
  out.factory = CalibratedFactory(out.calibration.params, measured);
  return out;
}

Result<TimeModel> MakeTimeModel(const TimeModelOptions& options,
                                const models::HardwareCatalog& catalog,
                                const std::string& hardware) {
  FATHOM_ASSIGN_OR_RETURN(models::Hardware gpu, catalog.Find(hardware));
  return MakeTimeModel(options, gpu);
}

std::vector<models::Runtime> TimeModel::Runtimes(const std::string& model_type) const {
  std::vector<models::Runtime> out = {models::Runtime::kPython};
  if (std::find(cpp_model_types.begin(), cpp_model_types.end(), model_type) !=
      cpp_model_types.end())
    out.push_back(models::Runtime::kCpp);
  return out;
}

TimeModelFactory CalibratedFactory(const models::CostParams& params,
                                   std::shared_ptr<const models::MeasuredGemms> measured) {
  return [params, measured](
             const models::ModelArch& m, const models::Hardware& hw,
             const models::ParallelLayout& l, const models::Precision& p, models::Runtime runtime,
             models::Fusions fusions) -> std::unique_ptr<models::ExecutionTimeModel> {
    return std::make_unique<models::CalibratedModel>(m, hw, l, p, params, runtime, measured,
                                                     fusions);
  };
}

std::vector<std::array<TimeModelFactory, 2>> PerturbedFactories(const TimeModel& model) {
  std::vector<std::array<TimeModelFactory, 2>> out;
  for (int i = 0; i < models::CostParams::kNumFitted; ++i) {
    if (!(model.calibration.stddev[i] > 0)) continue;
    std::array<TimeModelFactory, 2> pair;
    for (int side = 0; side < 2; ++side) {
      models::CostParams p = model.calibration.params;
      auto v = p.Fitted();
      v[i] += (side == 0 ? 1 : -1) * model.calibration.stddev[i];
      v[i] = std::max(v[i], 1e-3);
      if (models::CostParams::FittedIsShare(i)) v[i] = std::min(v[i], 1.0);  // shares stay <= 1
      p.SetFitted(v);
      pair[side] = CalibratedFactory(p, model.measured);
    }
    out.push_back(std::move(pair));
  }
  return out;
}

}  // namespace fathom::sim
