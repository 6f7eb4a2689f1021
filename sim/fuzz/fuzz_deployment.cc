// libFuzzer target: feeds arbitrary bytes to the deployment file reader (what `fathom simulate
// --deployment` reads) as a file, and resolves every deployment it accepts against the built-in
// models and GPUs with the roofline time model.
#include <cstdint>
#include <memory>

#include "base/fuzz/fuzz_input_file.h"
#include "models/roofline.h"
#include "sim/deployment_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  static const auto* catalog = new models::HardwareCatalog(*models::HardwareCatalog::LoadBuiltin());
  FuzzInputFile file(data, size, ".json");
  auto deployment = sim::LoadDeploymentFile(file.path());
  if (!deployment.ok()) return 0;
  auto roofline = [](const models::ModelArch& m, const models::Hardware& hw,
                     const models::ParallelLayout& l, const models::Precision& p, models::Runtime,
                     models::Fusions) -> std::unique_ptr<models::ExecutionTimeModel> {
    return std::make_unique<models::RooflineModel>(m, hw, l, p);
  };
  (void)sim::Resolve(deployment->config, *catalog, roofline);
  return 0;
}
