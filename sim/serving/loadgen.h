// A load generator for any OpenAI-compatible endpoint (fathom serve, vLLM, SGLang, trtllm-serve):
// MLPerf LoadGen's scenarios or a trace's own times, streamed, scored exactly as the simulator
// scores a run (sim::RunScore), so measured and predicted figures compare key for key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/simulator.h"
#include "sim/workload.h"

namespace fathom::sim {

struct LoadgenOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string model;    // the request's "model"; empty: the first of the endpoint's /v1/models
  std::string api_key;  // sent as a bearer token when set
  bool chat = false;    // /v1/chat/completions instead of /v1/completions
  // The endpoint runs this many times faster than real time (fathom serve --time-scale): arrivals
  // are issued that much sooner and latencies reported in the endpoint's time.
  double time_scale = 1;
  int max_in_flight = 1024;  // concurrent requests (an Offline query issues every sample at once)
  double request_timeout_s = 3600;  // a request not answered whole within this fails
  Status Validate() const;
};

struct LoadgenReport {
  SimulationResult result;           // the simulator's figures and keys
  int64_t failed = 0;                // requests that got an error or no complete answer
  std::vector<std::string> errors;   // the first few, as the endpoint gave them
  double schedule_error_p99_ms = 0;  // how late requests left against their scheduled time
  std::string model;
  std::vector<RequestRecord> answered;  // in the endpoint's time, in the order they finished
};

// Issues every request of `source` at its time and waits for all of them.
Result<LoadgenReport> RunLoad(RequestSource& source, const ScenarioConfig& scenario,
                              const std::optional<LatencyLimits>& limits, int total_gpus,
                              const LoadgenOptions& options);

}  // namespace fathom::sim
