#include "sim/response_path.h"

#include <algorithm>

namespace fathom::sim {

ResponsePath::ResponsePath(double seconds_per_response, int64_t stream_interval)
    : enabled_(seconds_per_response > 0 && stream_interval > 0) {
  if (enabled_) {
    seconds_per_response_ = seconds_per_response;
    responses_per_token_ = 1.0 / static_cast<double>(stream_interval);
  }
}

void ResponsePath::Batch(SimTime start, SimTime end, int64_t steps, int64_t sequences) {
  const double step_work =
      static_cast<double>(sequences) * responses_per_token_ * seconds_per_response_;
  const SimTime last = FromSeconds(step_work);
  const SimTime all = FromSeconds(step_work * static_cast<double>(steps));
  busy_s_ += step_work * static_cast<double>(steps);
  // Queued behind what came before, and never served before its last iteration produced it.
  free_at_ = std::max(std::max(free_at_, start) + all, end + last);
  batches_.emplace_back(end, free_at_ - last / 2);
}

SimTime ResponsePath::Delivered(SimTime end) {
  while (!batches_.empty() && batches_.front().first < end) batches_.pop_front();
  if (!batches_.empty() && batches_.front().first == end) return batches_.front().second;
  return end;
}

}  // namespace fathom::sim
