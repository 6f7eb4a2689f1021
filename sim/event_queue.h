// The simulator's clock and pending events, in one total order: (time, phase, sequence).
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

#include "base/check.h"
#include "base/sim_time.h"

namespace fathom::sim {

// At equal times, finished work frees resources before newcomers are routed.
enum class EventKind : int {
  kBatchDone = 0,   // a batch left the last pipeline stage
  kKvArrived = 1,   // a disaggregated request's KV reached its decode instance
  kStageFree = 2,   // the first pipeline stage can take another microbatch
  kArrival = 3,     // a request is issued
  kKick = 4,        // an engine may start a batch, after every same-time arrival is queued
};

struct Event {
  SimTime time;
  EventKind kind;
  uint64_t sequence;  // insertion order: the final tie-break
  int64_t a = 0;      // kind-specific payload (instance, slot, batch id)
  int64_t b = 0;
};

class EventQueue {
 public:
  SimTime now() const { return now_; }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }

  // Schedules at `time` >= now (a handler never schedules into the past).
  void Push(SimTime time, EventKind kind, int64_t a = 0, int64_t b = 0) {
    FATHOM_CHECK(time >= now_);
    heap_.push(Event{time, kind, next_sequence_++, a, b});
  }
  SimTime next_time() const { return heap_.top().time; }
  // Moves the clock on to `t` when no event is due before it (a run paused at a window's end).
  void AdvanceClock(SimTime t) {
    FATHOM_CHECK(empty() || next_time() >= t);
    if (t > now_) now_ = t;
  }
  // Removes the earliest event and advances the clock to it.
  Event Pop() {
    Event e = heap_.top();
    heap_.pop();
    now_ = e.time;
    return e;
  }

 private:
  struct Later {
    bool operator()(const Event& x, const Event& y) const {
      if (x.time != y.time) return x.time > y.time;
      if (x.kind != y.kind) return static_cast<int>(x.kind) > static_cast<int>(y.kind);
      return x.sequence > y.sequence;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  SimTime now_{0};
  uint64_t next_sequence_ = 0;
};

}  // namespace fathom::sim
