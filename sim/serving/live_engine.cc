#include "sim/serving/live_engine.h"

#include <algorithm>

#include "base/format.h"

namespace fathom::sim {
namespace {

// Requests come from Submit, not from a source.
class NoRequests : public RequestSource {
 public:
  Result<bool> Next(traces::Request*, SimTime*) override { return false; }
};

// vLLM's bucket layouts (vllm/engine/metrics.py and v1/metrics/loggers.py).
std::vector<double> OneTwoFive(double max) {
  std::vector<double> b;
  for (double scale = 1; b.empty() || b.back() < max; scale *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale > max) return b;
      b.push_back(m * scale);
    }
  }
  return b;
}

}  // namespace

void LiveHistogram::Observe(double v) {
  const size_t i = std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
  ++counts[i];
  sum += v;
  ++count;
}

LiveMetrics::LiveMetrics()
    : ttft_s({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
              1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_s({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
             10.0, 20.0, 40.0, 80.0}),
      e2e_s({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
             30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      tpot_s(itl_s.bounds),
      prompt_len(OneTwoFive(1 << 20)),
      generation_len(OneTwoFive(1 << 20)) {}

LiveEngine::LiveEngine(std::unique_ptr<ResolvedDeployment> deployment, double time_scale)
    : deployment_(std::move(deployment)),
      time_scale_(time_scale),
      start_(std::chrono::steady_clock::now()) {
  SimulationSpec spec = deployment_->spec;
  for (EngineConfig* e : {&spec.engine, &spec.decode_engine}) {
    e->implicit_decode = false;  // every token reported when produced
    e->fast_forward = 1;         // arrivals are not known ahead: one step at a time
  }
  spec.scenario = ScenarioConfig{};
  spec.scenario.scenario = Scenario::kReplay;
  sim_ = std::make_unique<Simulator>(std::move(spec), std::make_unique<NoRequests>());
  sim_->set_on_tokens([this](int64_t id, int64_t count, SimTime) {
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    LiveStream& s = *it->second;
    const double now = WallSeconds();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.tokens == 0) {
      s.first_token_s = now;
      metrics_.ttft_s.Observe(now - s.arrival_s);
    } else {
      const double gap = (now - std::max(s.first_token_s, s.done_s)) / static_cast<double>(count);
      for (int64_t k = 0; k < count; ++k) metrics_.itl_s.Observe(gap);
    }
    s.done_s = now;  // last token so far; final once done
    s.tokens += count;
    progressed_ = true;
    last_progress_s_ = now;
    metrics_.generation_tokens += count;
    s.cv.notify_all();
  });
  sim_->set_on_complete([this](const RequestRecord& r) {
    auto it = streams_.find(r.id);
    if (it == streams_.end()) return;
    LiveStream& s = *it->second;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.done = true;
      s.done_s = WallSeconds();
      if (cancelled_.erase(r.id) > 0) {
        s.tokens = r.output;
        s.aborted = true;
        ++metrics_.finished_abort;
      } else {
        s.tokens = s.output;
        metrics_.e2e_s.Observe(s.done_s - s.arrival_s);
        if (s.output > 1)
          metrics_.tpot_s.Observe((s.done_s - s.first_token_s) / static_cast<double>(s.output - 1));
        metrics_.generation_len.Observe(static_cast<double>(s.output));
        ++metrics_.finished_length;
      }
      s.cv.notify_all();
    }
    progressed_ = true;
    last_progress_s_ = WallSeconds();
    streams_.erase(it);
  });
  thread_ = std::thread([this] { Loop(); });
}

LiveEngine::~LiveEngine() { Stop(); }

double LiveEngine::WallSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

SimTime LiveEngine::SimNow() const { return FromSeconds(WallSeconds() * time_scale_); }

void LiveEngine::AdvanceToNow() {
  if (!failure_.ok()) return;
  const SimTime now = std::max(SimNow(), sim_->now());
  failure_ = sim_->Advance(now);
}

std::shared_ptr<LiveStream> LiveEngine::Submit(int64_t input_tokens, int64_t output_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || stop_ || !failure_.ok()) return nullptr;
  AdvanceToNow();
  auto stream = std::make_shared<LiveStream>();
  stream->input = input_tokens;
  stream->output = output_tokens;
  stream->arrival_s = WallSeconds();
  if (streams_.empty()) last_progress_s_ = stream->arrival_s;  // the stall clock starts
  const int64_t id = next_id_++;
  stream->id = id;
  streams_[id] = stream;
  metrics_.prompt_tokens += input_tokens;
  metrics_.prompt_len.Observe(static_cast<double>(input_tokens));
  traces::Request r;
  r.id = id;
  r.input_tokens = input_tokens;
  r.output_tokens = output_tokens;
  sim_->Inject(r);
  kicked_ = true;
  wake_.notify_one();
  return stream;
}

void LiveEngine::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    AdvanceToNow();
    if (!failure_.ok()) break;
    AnnounceProgress();
    const std::optional<SimTime> next = sim_->NextEventTime();
    auto woken = [&] { return stop_ || kicked_; };
    if (next) {
      const auto due = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(ToSeconds(*next) / time_scale_));
      wake_.wait_until(lock, due, woken);
    } else {
      wake_.wait(lock, woken);
    }
    kicked_ = false;
  }
  // Stopped (or failed): whatever is in flight ends without its tokens.
  for (auto& [id, stream] : streams_) {
    std::lock_guard<std::mutex> s(stream->mu);
    stream->done = stream->aborted = true;
    stream->done_s = WallSeconds();
    ++metrics_.finished_abort;
    stream->cv.notify_all();
    progressed_ = true;
  }
  streams_.clear();
  AnnounceProgress();
}

void LiveEngine::AnnounceProgress() {
  if (progressed_ && on_progress_) on_progress_();
  progressed_ = false;
}

void LiveEngine::set_on_progress(std::function<void()> on_progress) {
  std::lock_guard<std::mutex> lock(mu_);
  on_progress_ = std::move(on_progress);
}

void LiveEngine::Cancel(LiveStream& stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!streams_.count(stream.id) || !sim_->Cancel(stream.id)) return;
  cancelled_.insert(stream.id);
  kicked_ = true;
  wake_.notify_one();
}

void LiveEngine::BeginDrain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

bool LiveEngine::draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draining_;
}

LiveHealth LiveEngine::Health(double stall_s) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.ok()) return {false, "the engine stopped: " + failure_.message()};
  if (stop_) return {false, "the engine stopped"};
  if (draining_) return {false, "draining: no new requests"};
  const double idle = WallSeconds() - last_progress_s_;
  if (!streams_.empty() && idle > stall_s) {
    return {false, StrFormat("no token for %.1f s with %zu requests in flight (stalled past %g s)",
                             idle, streams_.size(), stall_s)};
  }
  return {};
}

int64_t LiveEngine::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(streams_.size());
}

void LiveEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

LiveMetrics LiveEngine::Metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  LiveMetrics m = metrics_;
  m.waiting = sim_->awaiting_first_token();
  m.running = sim_->in_system() - m.waiting;
  m.kv_usage = sim_->KvUtilization();
  m.preemptions = sim_->Counters().preemptions;
  return m;
}

}  // namespace fathom::sim
