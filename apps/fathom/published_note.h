// The published MLPerf results nearest a question, printed beside fathom's answer (tune,
// simulate), with the answer against the best of them.
#pragma once

#include <string>

#include "base/json_fields.h"
#include "base/status.h"
#include "sim/config.h"
#include "sim/deployment_config.h"

namespace fathom::cli {

struct PublishedNote {
  std::string text;  // empty where no result is shipped for the question
  OrderedJson json;  // {"nearest": [...], "vs_best_pct": ...}; null where none
};

// `figure` is fathom's answer in MLPerf's unit for `scenario` (QPS for Server and Interactive,
// tokens/s for Offline) on `config`; 0 lists the published results without a comparison.
Result<PublishedNote> DescribePublished(const sim::DeploymentConfig& config, sim::Scenario scenario,
                                        double figure);

}  // namespace fathom::cli
