#include "tuner/online/live_runtime.h"

#include <chrono>
#include <cmath>
#include <thread>

#include "base/format.h"
#include "tuner/online/vllm_metrics.h"

namespace fathom::tuner {

Result<std::unique_ptr<LiveRuntime>> LiveRuntime::Create(LiveRuntimeOptions options) {
  if (options.metrics_cmd.empty())
    return Status::InvalidArgument("--metrics-cmd: give the command that prints the metrics");
  if (options.apply_cmd.empty())
    return Status::InvalidArgument("--apply-cmd: give the command that applies new limits");
  if (!(options.window_s > 0) || !std::isfinite(options.window_s)) {
    return Status::InvalidArgument("--window-s = " + StrFormat("%g", options.window_s) +
                                   ": must be > 0 and finite");
  }
  if (!(options.command_timeout_s > 0) || !std::isfinite(options.command_timeout_s)) {
    return Status::InvalidArgument(
        "--command-timeout = " + StrFormat("%g", options.command_timeout_s) +
        ": must be > 0 and finite");
  }
  if (!options.wait) {
    options.wait = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
  }
  std::unique_ptr<LiveRuntime> r(new LiveRuntime(std::move(options)));
  FATHOM_ASSIGN_OR_RETURN(r->last_, r->Scrape());
  return r;
}

Result<Metrics> LiveRuntime::Scrape() const {
  FATHOM_ASSIGN_OR_RETURN(
      std::string text,
      options_.env->RunCommand(options_.metrics_cmd, "--metrics-cmd", options_.command_timeout_s));
  FATHOM_ASSIGN_OR_RETURN(Metrics m, ParsePrometheusText(text, "--metrics-cmd output"));
  FATHOM_RETURN_IF_ERROR(CheckVllmMetrics(m, "--metrics-cmd output"));
  return m;
}

Result<std::optional<Window>> LiveRuntime::Observe() {
  options_.wait(options_.window_s);
  FATHOM_ASSIGN_OR_RETURN(Metrics now, Scrape());
  Window w = VllmWindow(last_, now, elapsed_s_, elapsed_s_ + options_.window_s, options_.max_sample,
                        pairing_seed_++);
  elapsed_s_ = w.end_s;
  last_ = std::move(now);
  return std::optional<Window>(std::move(w));
}

Result<ApplyOutcome> LiveRuntime::Apply(const BatchLimits& limits) {
  std::string command = options_.apply_cmd;
  auto replace = [&](const std::string& key, int64_t value) {
    for (size_t at = command.find(key); at != std::string::npos; at = command.find(key, at)) {
      command.replace(at, key.size(), std::to_string(value));
    }
  };
  replace("{max_batch}", limits.max_batch);
  replace("{max_num_tokens}", limits.max_num_tokens);
  FATHOM_RETURN_IF_ERROR(
      options_.env->RunCommand(command, "--apply-cmd", options_.command_timeout_s).status());
  return ApplyOutcome{};
}

}  // namespace fathom::tuner
