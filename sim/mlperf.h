// MLPerf Inference latency limits (p99) per benchmark and scenario.
#pragma once

#include <optional>
#include <string>

#include "sim/config.h"

namespace fathom::sim {

struct LatencyLimits {
  double ttft_ms = 0;
  double tpot_ms = 0;
};

// Known for deepseek-r1, llama3.1-405b, llama2-70b, gpt-oss-120b, mixtral-8x7b (Server and
// Interactive); none for Offline or other models.
std::optional<LatencyLimits> MlperfLimits(const std::string& benchmark, Scenario scenario);

}  // namespace fathom::sim
