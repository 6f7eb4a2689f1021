// The serving front's response path: every streamed response (one per `stream_interval` tokens of
// a running sequence) costs host time in a queue beside the GPU loop. TensorRT-LLM's MLPerf
// harness gathers every rank's responses on rank 0 each iteration and hands them to LoadGen from
// postprocess workers; vLLM's API server detokenises and sends each. When responses come faster
// than the front serves them, what the client sees (first token, completion) falls behind the
// engine, while the engine's own pace (and so TPOT) is unchanged.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

#include "base/sim_time.h"

namespace fathom::sim {

class ResponsePath {
 public:
  // `seconds_per_response` over all the front's workers; `stream_interval` tokens a response.
  // Either at 0: responses reach the client as the iteration ends.
  ResponsePath(double seconds_per_response, int64_t stream_interval);

  bool enabled() const { return enabled_; }
  // A batch leaving the last pipeline stage at `end` (started at `start`), `steps` iterations of
  // `sequences`: their responses join the queue, as the iterations produce them (a fluid queue).
  // Batches come in the order they end.
  void Batch(SimTime start, SimTime end, int64_t steps, int64_t sequences);
  // When the client sees what the batch ending at `end` produced (its responses are in the middle
  // of that batch's last iteration's).
  SimTime Delivered(SimTime end);
  // Host time spent serving responses so far, and the output tokens a second the front can
  // stream at most (0 when disabled).
  double busy_s() const { return busy_s_; }
  double max_tokens_per_s() const {
    return enabled_ ? 1.0 / (responses_per_token_ * seconds_per_response_) : 0.0;
  }

 private:
  bool enabled_;
  double seconds_per_response_ = 0;
  double responses_per_token_ = 0;
  double busy_s_ = 0;
  SimTime free_at_{0};                               // the front has served everything queued
  std::deque<std::pair<SimTime, SimTime>> batches_;  // (end, delivered), oldest first
};

}  // namespace fathom::sim
