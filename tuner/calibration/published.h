// Published MLPerf results beside fathom's answers: the shipped rows (models/calibration/
// mlperf_*.csv) nearest a question's model, GPU, GPU count and scenario.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "base/status.h"
#include "sim/config.h"
#include "sim/deployment_config.h"
#include "tuner/calibration/calibrate.h"

namespace fathom::tuner {

struct PublishedReference {
  PublishedResult row;
  std::string file;  // the shipped results file, relative to the data folder
  // What the submitter ran, where fathom ships it (published_deployments_<round>.json).
  std::optional<sim::DeploymentConfig> deployment;
  // MLPerf's figure: the scheduled QPS of a Server or Interactive run, an Offline run's tokens/s.
  double figure = 0;
  OrderedJson ToJson() const;
};

// Every shipped row of `model` on `hardware` in `scenario` at the GPU count nearest `gpus` (by
// ratio; of two equally near, the smaller), highest figure first. Empty where none is shipped.
Result<std::vector<PublishedReference>> NearestPublished(const std::string& model,
                                                         const std::string& hardware, int gpus,
                                                         sim::Scenario scenario);

}  // namespace fathom::tuner
