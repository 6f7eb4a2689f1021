// The simulator's clock and pending events, in one total order: (time, phase, sequence).
#pragma once

#include <cstdint>
#include <queue>
#include <variant>
#include <vector>

#include "base/check.h"
#include "base/sim_time.h"

namespace fathom::sim {

// The kinds of event, each with its payload.
struct BatchDoneEvent {  // a batch left the last pipeline stage
  int engine;
  int64_t batch_id;
};
struct ReleaseEvent {  // a request completed: the client may send one it held back
};
struct KvArrivedEvent {  // a disaggregated request's KV reached its decode instance
  int64_t slot;
  int engine;
};
struct StageFreeEvent {  // the first pipeline stage can take another microbatch
  int engine;
};
struct ArrivalEvent {   // a request is issued
  int64_t request_key;  // into the simulator's pending arrivals
};
struct KickEvent {  // an engine may start a batch, after every same-time arrival is queued
  int engine;
};
struct ResponseEvent {  // the client sees a request's first token, or its end (the response path)
  int64_t slot;
  bool complete;
  bool planned = false;  // its time is in pending_times_: a request may follow it at once
};

struct SwitchEvent {  // a configuration switch is due, or its new engines are up
  bool resume;
};

// The order of the kinds here is the phase: at equal times, finished work frees resources before
// newcomers are routed.
using EventPayload = std::variant<BatchDoneEvent, ReleaseEvent, KvArrivedEvent, StageFreeEvent,
                                  ArrivalEvent, KickEvent, ResponseEvent, SwitchEvent>;

struct Event {
  SimTime time;
  uint64_t sequence;  // insertion order: the final tie-break
  EventPayload payload;

  size_t phase() const { return payload.index(); }
};

class EventQueue {
 public:
  SimTime now() const { return now_; }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }

  // Schedules at `time` >= now (a handler never schedules into the past).
  // `Payload` is one of EventPayload's kinds.
  template <typename Payload>
  void Push(SimTime time, const Payload& payload) {
    FATHOM_CHECK(time >= now_);
    heap_.push(Event{time, next_sequence_++, EventPayload(std::in_place_type<Payload>, payload)});
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
      if (x.phase() != y.phase()) return x.phase() > y.phase();
      return x.sequence > y.sequence;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  SimTime now_{0};
  uint64_t next_sequence_ = 0;
};

}  // namespace fathom::sim
