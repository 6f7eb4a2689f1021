// The simulator's engine served in real time: requests submitted from any thread are issued into
// a live simulation paced against the wall clock, so a client sees the tokens when the cost model
// says the GPUs would have produced them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sim/deployment_config.h"
#include "sim/simulator.h"

namespace fathom::sim {

// One request's progress, shared between the engine thread and the thread answering it.
struct LiveStream {
  std::mutex mu;
  std::condition_variable cv;
  int64_t id = 0;  // the engine's
  int64_t input = 0, output = 0;
  int64_t tokens = 0;  // produced so far
  bool done = false;
  bool aborted = false;  // ended without its tokens (engine stopped, or Cancel)
  double arrival_s = 0;  // wall seconds since the engine started
  double first_token_s = -1;
  double done_s = -1;
};

// Prometheus-style counts and histograms of what the engine served (vLLM's metric meanings).
struct LiveHistogram {
  std::vector<double> bounds;   // upper bounds, ascending; +Inf implied
  std::vector<int64_t> counts;  // per bucket (not cumulative), bounds.size() + 1
  double sum = 0;
  int64_t count = 0;
  explicit LiveHistogram(std::vector<double> b)
      : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void Observe(double v);
};

struct LiveMetrics {
  int64_t running = 0, waiting = 0;
  double kv_usage = 0;  // fraction of KV blocks in use, mean over ranks
  int64_t prompt_tokens = 0, generation_tokens = 0, preemptions = 0;
  int64_t finished_length = 0, finished_abort = 0;
  LiveHistogram ttft_s, itl_s, e2e_s, tpot_s, prompt_len, generation_len;
  LiveMetrics();
};

// Whether the engine serves: not when it stopped on an error, drains, or holds requests and has
// produced nothing for longer than a stall limit (wedged: nothing it holds can run).
struct LiveHealth {
  bool ok = true;
  std::string why;  // when not ok
};

class LiveEngine {
 public:
  // `deployment` must be resolved for an aggregated or disaggregated deployment; decoding is made
  // explicit and step by step so every token is reported as it is produced. `time_scale`
  // simulated seconds pass per wall second (1: real time).
  LiveEngine(std::unique_ptr<ResolvedDeployment> deployment, double time_scale);
  ~LiveEngine();
  LiveEngine(const LiveEngine&) = delete;
  LiveEngine& operator=(const LiveEngine&) = delete;

  // Issues a request now; nullptr once draining (the caller answers 503).
  std::shared_ptr<LiveStream> Submit(int64_t input_tokens, int64_t output_tokens);
  // The client left: the request ends after the token being computed, aborted, its KV cache
  // freed (vLLM aborts a request whose client disconnects). Nothing once it has ended.
  void Cancel(LiveStream& stream);
  // Stops admitting; requests in flight run to their end.
  void BeginDrain();
  bool draining() const;
  // Requests issued and not finished.
  int64_t in_flight() const;
  // Ends the engine: requests still in flight end aborted.
  void Stop();
  LiveMetrics Metrics() const;
  LiveHealth Health(double stall_s) const;
  // Sets what the engine calls after each step that produced tokens or ended requests (on the
  // engine thread, with the engine's lock held: it must be quick and must not call the engine);
  // an empty function removes it, and no call runs after this returns.
  void set_on_progress(std::function<void()> on_progress);
  double WallSeconds() const;
  const ResolvedDeployment& deployment() const { return *deployment_; }

 private:
  void Loop();
  void AdvanceToNow();      // with mu_ held
  void AnnounceProgress();  // with mu_ held
  SimTime SimNow() const;

  std::unique_ptr<ResolvedDeployment> deployment_;
  const double time_scale_;
  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::unique_ptr<Simulator> sim_;
  std::map<int64_t, std::shared_ptr<LiveStream>> streams_;
  std::set<int64_t> cancelled_;  // streams_ ids whose clients left
  int64_t next_id_ = 0;
  bool kicked_ = false, stop_ = false, draining_ = false;
  bool progressed_ = false;  // tokens or ends not yet announced through on_progress_
  // Wall seconds of the last token or end, or of the request that ended an idle spell.
  double last_progress_s_ = 0;
  std::function<void()> on_progress_;
  Status failure_;  // the first simulation error; the engine stops on it
  LiveMetrics metrics_;
  std::thread thread_;
};

}  // namespace fathom::sim
