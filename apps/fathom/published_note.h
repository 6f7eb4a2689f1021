// The published MLPerf results nearest a question, printed beside fathom's answer (tune,
// simulate), with the answer against the best of them.
#pragma once

#include <optional>
#include <string>

#include "base/json_fields.h"
#include "base/status.h"
#include "sim/config.h"
#include "sim/deployment_config.h"
#include "tuner/calibration/published.h"

namespace fathom::cli {

struct PublishedNote {
  std::string text;  // empty where no result is shipped for the question
  OrderedJson json;  // {"nearest": [...], "vs_best_pct": ...}; null where none
  // Where the answer is more than 15% above the best published result on the same system: that
  // result, where its deployment is shipped, for a side-by-side breakdown.
  std::optional<tuner::PublishedReference> check_against;
};

// `figure` is fathom's answer in MLPerf's unit for `scenario` (QPS for Server and Interactive,
// tokens/s for Offline) on `config`; 0 lists the published results without a comparison.
// `stack_interval`: the tokens a streamed response of the stack answering, for deployments that
// name none (0: unknown, not shown).
Result<PublishedNote> DescribePublished(const sim::DeploymentConfig& config, sim::Scenario scenario,
                                        double figure, int64_t stack_interval);

}  // namespace fathom::cli
