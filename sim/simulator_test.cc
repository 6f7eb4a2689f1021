#include "sim/simulator.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/cancel.h"
#include "base/files.h"
#include "base/random.h"
#include "models/hardware.h"
#include "models/memory.h"
#include "models/roofline.h"
#include "traces/reader.h"
#include "traces/transforms.h"

namespace fathom::sim {
namespace {

constexpr SchedulerKind kSchedulers[] = {SchedulerKind::kStatic, SchedulerKind::kPrefillFirst,
                                         SchedulerKind::kChunked, SchedulerKind::kMixed,
                                         SchedulerKind::kDecodeFirst};

// An engine whose every iteration takes a fixed time, or an exponential one.
class FakeTime : public models::ExecutionTimeModel {
 public:
  FakeTime(double seconds, bool exponential, int stages = 1, double response_s = 0)
      : seconds_(seconds),
        exponential_(exponential),
        stages_(stages),
        response_s_(response_s),
        rng_(99) {}
  SimTime StageTime(std::span<const models::BatchShape> ranks, int) const override {
    int64_t tokens = 0;
    for (const auto& r : ranks) tokens += r.tokens;
    if (tokens == 0) return SimTime(0);
    return FromSeconds(exponential_ ? rng_.Exponential(1.0 / seconds_) : seconds_);
  }
  int num_stages() const override { return stages_; }
  double ResponseSeconds() const override { return response_s_; }

 private:
  double seconds_;
  bool exponential_;
  int stages_;
  double response_s_;
  mutable Rng rng_;
};

std::vector<traces::Request> Dataset(int n, int64_t input, int64_t output) {
  std::vector<traces::Request> d(n);
  for (int i = 0; i < n; ++i) {
    d[i].id = i;
    d[i].input_tokens = input;
    d[i].output_tokens = output;
  }
  return d;
}

SimulationSpec SingleSlot(const models::ExecutionTimeModel* time) {
  SimulationSpec spec;
  spec.pool.time = time;
  spec.pool.kv_blocks_per_rank = 1 << 20;
  spec.engine.max_batch = 1;
  spec.engine.scheduler = SchedulerKind::kChunked;
  spec.scenario.scenario = Scenario::kServer;
  spec.scenario.min_duration_s = 0;
  return spec;
}

// DeepSeek-R1 on 8xB200, TP8/EP8/attention DP, FP4 weights, FP8 KV, under the roofline.
struct DeepSeek {
  models::ModelArch model;
  models::Hardware hw;
  models::ParallelLayout layout{8, 8, 1, 8, 8};
  models::Precision precision{models::DType::kNvfp4, models::DType::kNvfp4, models::DType::kFp8};
  std::unique_ptr<models::RooflineModel> time;
  models::MemoryPlan plan;

  explicit DeepSeek(models::ParallelLayout l = {8, 8, 1, 8, 8}) : layout(l) {
    model = *models::LoadModel("deepseek-r1");
    hw = *(*models::HardwareCatalog::LoadBuiltin()).Find("b200");
    time = std::make_unique<models::RooflineModel>(model, hw, layout, precision);
    models::MemoryOptions o;
    o.max_num_tokens = 4608;
    o.max_batch = 512;
    plan = models::PlanMemory(model, hw, layout, precision, o);
  }
  SimulationSpec Spec(Scenario scenario, int64_t kv_tokens = 0) const {
    SimulationSpec spec;
    spec.pool.time = time.get();
    spec.pool.ranks = layout.attn_dp;
    spec.pool.kv_blocks_per_rank = (kv_tokens > 0 ? kv_tokens : plan.kv_capacity_tokens) / 32;
    spec.pool.kv_bytes_per_token = plan.kv_bytes_per_token;
    spec.engine.max_batch = 512;
    spec.engine.max_num_tokens = 4608;
    spec.scenario.scenario = scenario;
    spec.benchmark = "deepseek-r1";
    spec.total_gpus = 8;
    return spec;
  }
};

// `n` requests with uniform random lengths in [min_input, min_input + input_span) and
// [1, 1 + output_span).
std::vector<traces::Request> RandomRequests(size_t n, uint64_t seed, int64_t min_input,
                                            uint64_t input_span, uint64_t output_span) {
  std::vector<traces::Request> d(n);
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) {
    d[i].id = static_cast<int64_t>(i);
    d[i].input_tokens = min_input + static_cast<int64_t>(rng.Below(input_span));
    d[i].output_tokens = 1 + static_cast<int64_t>(rng.Below(output_span));
  }
  return d;
}

std::vector<traces::Request> MlperfSet() {
  traces::ReadOptions o;
  o.max_output = 20000;
  auto reader = traces::OpenTrace(traces::DefaultTracePath(), o);
  REQUIRE(reader.ok());
  return *traces::ReadAll(**reader);
}

SimulationResult RunOk(SimulationSpec spec, std::unique_ptr<RequestSource> source,
                       OutputFile* log = nullptr) {
  Simulator sim(std::move(spec), std::move(source));
  sim.set_event_log(log);
  auto r = sim.Run();
  INFO(r.status().message());
  REQUIRE(r.ok());
  return *r;
}

// Requests at given issue times (seconds).
std::unique_ptr<RequestSource> TimedSource(std::vector<std::pair<traces::Request, double>> items) {
  std::vector<std::pair<traces::Request, SimTime>> timed;
  for (auto& [r, t] : items) timed.emplace_back(std::move(r), FromSeconds(t));
  return ListSource(std::move(timed));
}

}  // namespace

TEST_CASE("Simulator: Server throughput counts to the last-issued sample's completion (LoadGen)",
          "[sim]") {
  FakeTime time(0.01, false);
  SimulationSpec spec = SingleSlot(&time);
  spec.engine.max_batch = 2;
  traces::Request long_one{
      .id = 0, .arrival_s = {}, .input_tokens = 10, .output_tokens = 50, .prefix_blocks = {}};
  traces::Request short_one{
      .id = 1, .arrival_s = {}, .input_tokens = 10, .output_tokens = 2, .prefix_blocks = {}};
  const SimulationResult r =
      RunOk(spec, TimedSource(std::vector<std::pair<traces::Request, double>>{{long_one, 0.0},
                                                                              {short_one, 0.105}}));
  // The short request, issued last, joins at the next step boundary (0.11) and finishes after its
  // prefill and one decode step; the long one (50 steps from t = 0) finishes later and only
  // extends the drain.
  CHECK(r.duration_s == Approx(0.11 + 2 * 0.01));
  CHECK(r.drain_end_s == Approx(50 * 0.01));
  CHECK(r.throughput_tokens_per_s == Approx(52 / r.duration_s));
  CHECK(r.requests_per_s == Approx(1 / r.duration_s));  // n - 1 samples
  // Offline is one query: its time is the last completion.
  spec.scenario.scenario = Scenario::kOffline;
  const SimulationResult off =
      RunOk(spec, TimedSource(std::vector<std::pair<traces::Request, double>>{{long_one, 0.0},
                                                                              {short_one, 0.0}}));
  CHECK(off.duration_s == off.drain_end_s);
}

TEST_CASE("Simulator: attention-DP balancing holds prefills until every rank has one", "[sim]") {
  FakeTime time(0.01, false);
  SimulationSpec spec = SingleSlot(&time);
  spec.pool.ranks = 2;
  spec.engine.max_batch = 4;
  spec.engine.adp_balance = true;
  spec.engine.adp_batching_wait_iters = 3;
  spec.engine.adp_timeout_iters = 1000;
  traces::Request long_one{
      .id = 0, .arrival_s = {}, .input_tokens = 10, .output_tokens = 50, .prefix_blocks = {}};
  traces::Request short_one{
      .id = 2, .arrival_s = {}, .input_tokens = 10, .output_tokens = 2, .prefix_blocks = {}};
  using Items = std::vector<std::pair<traces::Request, double>>;
  // One long request per rank from t = 0, then new ones on both ranks at 0.105: they wait for
  // three more iterations (0.11 to 0.14), prefill together, and their first token is at 0.15.
  SimulationResult both = RunOk(
      spec,
      TimedSource(Items{{long_one, 0.0}, {long_one, 0.0}, {short_one, 0.105}, {short_one, 0.105}}));
  CHECK(both.ttft_p99_ms == Approx(45).epsilon(1e-6));
  // A new request on one rank only waits until the other rank has nothing left to decode.
  SimulationResult one =
      RunOk(spec, TimedSource(Items{{long_one, 0.0}, {long_one, 0.0}, {short_one, 0.105}}));
  CHECK(one.ttft_p99_ms > 350);
  spec.engine.adp_balance = false;
  SimulationResult off =
      RunOk(spec, TimedSource(Items{{long_one, 0.0}, {long_one, 0.0}, {short_one, 0.105}}));
  CHECK(off.ttft_p99_ms == Approx(15).epsilon(1e-6));
}

TEST_CASE("Simulator: max_concurrency holds requests at the client until one in flight completes",
          "[sim]") {
  FakeTime time(0.01, false);
  SimulationSpec spec = SingleSlot(&time);
  spec.scenario.scenario = Scenario::kOffline;
  spec.pool.ranks = 2;
  spec.engine.max_batch = 4;
  // One at a time: each request prefills (first token) and decodes 9 more tokens, 10 iterations,
  // and the next is sent as it completes; the third's TTFT counts from issue at t = 0.
  spec.engine.max_concurrency = 1;
  const SimulationResult serial = RunOk(spec, OfflineSource(Dataset(3, 10, 10), 3, 1));
  CHECK(serial.drain_end_s == Approx(0.3));
  CHECK(serial.ttft_p99_ms == Approx(210));
  spec.engine.max_concurrency = 0;
  const SimulationResult together = RunOk(spec, OfflineSource(Dataset(3, 10, 10), 3, 1));
  CHECK(together.drain_end_s == Approx(0.1));

  // Long and short requests in turn: routed as they arrive, every long one lands on rank 0 and
  // it drains alone; held back at the two ranks' eight seats, each goes to the rank that freed
  // one, and the run ends sooner.
  std::vector<std::pair<traces::Request, double>> mixed;
  for (int i = 0; i < 16; ++i) {
    mixed.push_back({{.id = i,
                      .arrival_s = {},
                      .input_tokens = 10,
                      .output_tokens = i % 2 == 0 ? 100 : 2,
                      .prefix_blocks = {}},
                     0.0});
  }
  const SimulationResult routed = RunOk(spec, TimedSource(mixed));
  spec.engine.max_concurrency = 8;
  const SimulationResult held = RunOk(spec, TimedSource(mixed));
  CHECK(routed.drain_end_s == Approx(2.0));  // two waves of four long requests on rank 0
  // Rank 1's short requests free its seats by turns, each refilled from the eight held back: its
  // last long request starts at 0.06 s.
  CHECK(held.drain_end_s == Approx(1.06));
  CHECK(held.peak_in_flight == 16);  // issued at once: in the system, though not all in flight
}

TEST_CASE("Simulator: a run stops once its p99 limits cannot be met, and only then", "[sim]") {
  FakeTime time(0.01, false);
  SimulationSpec spec = SingleSlot(&time);
  spec.scenario.ttft_limit_ms = 100;
  spec.scenario.tpot_limit_ms = 1000;
  const int64_t n = 2000;
  spec.scenario.stop_after_violations = n - static_cast<int64_t>(std::floor(0.99 * n));  // 20
  // Overloaded (rho = 1.5): the queue grows, TTFTs pass 100 ms early on and the run stops.
  const SimulationResult over = RunOk(spec, PoissonSource(Dataset(1, 10, 1), n, 150.0, 3));
  CHECK(over.stopped_early);
  CHECK_FALSE(over.latency_limits_met);
  CHECK(over.completed_requests < n / 2);
  // Sooner still once the violations rule the p99 out (P99ClearlyBroken) before they reach 1%.
  spec.scenario.stop_when_clearly_broken = true;
  const SimulationResult clear = RunOk(spec, PoissonSource(Dataset(1, 10, 1), n, 150.0, 3));
  CHECK(clear.stopped_early);
  CHECK_FALSE(clear.latency_limits_met);
  CHECK(clear.ttft_violations < over.ttft_violations);
  CHECK(clear.completed_requests < over.completed_requests);
  // Under load (rho = 0.5) it runs to the end with the same figures as without the rules.
  const SimulationResult under = RunOk(spec, PoissonSource(Dataset(1, 10, 1), n, 50.0, 3));
  spec.scenario.stop_after_violations = 0;
  spec.scenario.stop_when_clearly_broken = false;
  const SimulationResult plain = RunOk(spec, PoissonSource(Dataset(1, 10, 1), n, 50.0, 3));
  CHECK_FALSE(under.stopped_early);
  CHECK(under.latency_limits_met);
  CHECK(under.ToJson().dump() == plain.ToJson().dump());
}

TEST_CASE("P99ClearlyBroken: a one-in-a-million binomial tail at 1% over the limit", "[sim]") {
  CHECK_FALSE(P99ClearlyBroken(0, 0));
  CHECK_FALSE(P99ClearlyBroken(10, 1000));  // exactly 1%
  CHECK_FALSE(P99ClearlyBroken(2, 2));      // 1e-4 by chance
  CHECK(P99ClearlyBroken(3, 3));            // 1e-6
  // n KL(q || 1%) >= ln 1e6 = 13.8: 31 of 1,000 (14.3) but not 30 (13.2).
  CHECK(P99ClearlyBroken(31, 1000));
  CHECK_FALSE(P99ClearlyBroken(30, 1000));
  // On a LoadGen-length run it asks more than the count that settles it (1% of 30,716 is 308).
  CHECK_FALSE(P99ClearlyBroken(360, 30716));
  CHECK(P99ClearlyBroken(420, 30716));
}

TEST_CASE("Simulator: a violation counts as soon as it is certain, before the request ends",
          "[sim]") {
  FakeTime time(0.01, false);  // 10 ms per token
  SimulationSpec spec = SingleSlot(&time);
  spec.scenario.ttft_limit_ms = 1e6;
  spec.scenario.tpot_limit_ms = 5;
  spec.scenario.stop_after_violations = 1;
  // The first request's TPOT is certainly over 5 ms once 5 ms x 999 have passed since its first
  // token, about 5 s before it would complete.
  const SimulationResult r = RunOk(spec, PoissonSource(Dataset(1, 10, 1000), 50, 1.0, 3));
  CHECK(r.stopped_early);
  CHECK(r.completed_requests == 0);
  // A TTFT that cannot be met counts while the request still waits.
  spec.scenario.ttft_limit_ms = 50;
  spec.scenario.tpot_limit_ms = 1e6;
  const SimulationResult waits = RunOk(spec, PoissonSource(Dataset(1, 10, 1000), 50, 50.0, 3));
  CHECK(waits.stopped_early);
  CHECK(waits.completed_requests == 0);
}

TEST_CASE("Simulator: a constant-time single-slot engine is an M/D/1 queue (Pollaczek-Khinchine)",
          "[sim]") {
  const double service = 0.01, lambda = 70.0;  // rho = 0.7
  FakeTime time(service, false);
  SimulationSpec spec = SingleSlot(&time);
  const int64_t n = 200000;
  const SimulationResult r = RunOk(spec, PoissonSource(Dataset(1, 10, 1), n, lambda, 5));
  const double rho = lambda * service;
  const double wait = rho * service / (2 * (1 - rho));  // P-K mean wait for deterministic service
  CHECK(r.completed_requests == n);
  CHECK((r.e2e_mean_ms / 1e3 - service) == Approx(wait).epsilon(0.03));
}

TEST_CASE("Simulator: a run whose result is no longer wanted stops at its next poll", "[sim]") {
  FakeTime time(0.01, false);
  int polls = 0;
  {
    CancelCheck check([&] { return ++polls == 3; });  // cancelled at the third poll
    Simulator sim(SingleSlot(&time), PoissonSource(Dataset(1, 10, 1), 100000, 50.0, 5));
    const auto r = sim.Run();
    CHECK(r.status().code() == StatusCode::kUnavailable);
    CHECK(polls == 3);  // a poll every 1,024 events: stopped within the first few thousand
  }
  // Outside the check nothing polls it: the same run ends.
  CHECK(RunOk(SingleSlot(&time), PoissonSource(Dataset(1, 10, 1), 1000, 50.0, 5))
            .completed_requests == 1000);
  CHECK(polls == 3);
}

TEST_CASE("ResponsePath: a fluid queue that falls behind only past its service rate", "[sim]") {
  const auto ms = [](double v) { return FromSeconds(v * 1e-3); };
  // 100 sequences a 10 ms iteration, one response each: 5 ms of work at 50 us a response.
  ResponsePath under(50e-6, 1);
  for (int k = 1; k <= 20; ++k) under.Batch(ms(10 * (k - 1)), ms(10 * k), 1, 100);
  CHECK(under.Delivered(ms(200)) == ms(200 + 2.5));  // mid-way through its own 5 ms
  // At 150 us a response the front needs 15 ms a 10 ms iteration: 5 ms more behind each time.
  ResponsePath over(150e-6, 1);
  for (int k = 1; k <= 20; ++k) {
    over.Batch(ms(10 * (k - 1)), ms(10 * k), 1, 100);
    CHECK(over.Delivered(ms(10 * k)) == ms(10 * k + 7.5 + 5 * (k - 1)));
  }
  // Streaming every 4 tokens, the same front keeps up (3.75 ms of work an iteration).
  ResponsePath sparse(150e-6, 4);
  for (int k = 1; k <= 20; ++k) sparse.Batch(ms(10 * (k - 1)), ms(10 * k), 1, 100);
  CHECK(sparse.Delivered(ms(200)) == ms(200 + 1.875));
  // Four decode steps taken at once: their responses arrive as the steps run.
  ResponsePath steps(150e-6, 1);
  steps.Batch(ms(0), ms(40), 4, 100);
  CHECK(steps.Delivered(ms(40)) == ms(60 - 7.5));  // 60 ms of work from t = 0
  // Its busy time is the work it was given, its rate one response's tokens over its cost.
  CHECK(over.busy_s() == Approx(20 * 0.015));
  CHECK(steps.busy_s() == Approx(0.06));
  CHECK(over.max_tokens_per_s() == Approx(1 / 150e-6));
  CHECK(sparse.max_tokens_per_s() == Approx(4 / 150e-6));
  CHECK(ResponsePath(0, 1).max_tokens_per_s() == 0);
  CHECK(!ResponsePath(0, 1).enabled());
  CHECK(!ResponsePath(1e-4, 0).enabled());
  CHECK(ResponsePath(1e-4, 0).Delivered(ms(5)) == ms(5));
}

// `n` requests of 10 input and 8 output tokens, one every `every_s` seconds from t = 0.
std::vector<std::pair<traces::Request, double>> EvenlySpaced(int n, double every_s) {
  std::vector<std::pair<traces::Request, double>> items;
  for (int i = 0; i < n; ++i) {
    items.push_back({Dataset(1, 10, 8)[0], i * every_s});
    items.back().first.id = i;
  }
  return items;
}

TEST_CASE("Simulator: the response path delays what clients see, not the engine", "[sim]") {
  // One sequence at a time, 10 ms iterations, a 1 ms response per token: each token reaches the
  // client 0.5 ms after its iteration (the middle of its one response), so TTFT and end-to-end
  // grow by 0.5 ms and TPOT is unchanged; Offline is not streamed.
  FakeTime plain(0.01, false), front(0.01, false, 1, 1e-3);
  const auto items = EvenlySpaced(50, 1.0);
  SimulationSpec spec = SingleSlot(&plain);
  spec.engine.stream_interval = 1;
  const SimulationResult base = RunOk(spec, TimedSource(items));
  spec.pool.time = &front;
  const SimulationResult seen = RunOk(spec, TimedSource(items));
  CHECK(seen.completed_requests == 50);
  CHECK(seen.output_tokens == base.output_tokens);
  CHECK(seen.ttft_mean_ms == Approx(base.ttft_mean_ms + 0.5).epsilon(1e-9));
  CHECK(seen.e2e_mean_ms == Approx(base.e2e_mean_ms + 0.5).epsilon(1e-9));
  CHECK(seen.tpot_mean_ms == Approx(base.tpot_mean_ms).epsilon(1e-9));
  // The front served one response a token, 1 ms each: by the last arrival (49 s), the 49 requests
  // before it, a small share of that time.
  CHECK(seen.front_max_tokens_per_s == Approx(1000));
  CHECK(seen.last_arrival_s == Approx(49));
  CHECK(seen.front_busy_share ==
        Approx(static_cast<double>(seen.output_tokens) * 49 / 50 * 1e-3 / 49));
  CHECK(seen.front_busy_share < sim::kFrontBoundShare);
  CHECK(base.front_busy_share == 0);
  CHECK(base.front_max_tokens_per_s == 0);
  spec.scenario.scenario = Scenario::kOffline;
  spec.pool.time = &plain;
  const SimulationResult offline = RunOk(spec, TimedSource(items));
  spec.pool.time = &front;
  const SimulationResult unstreamed = RunOk(spec, TimedSource(items));
  CHECK(unstreamed.e2e_mean_ms == offline.e2e_mean_ms);
  CHECK(unstreamed.front_max_tokens_per_s == 0);
}

TEST_CASE("Simulator: a front slower than the engine's tokens is busy the whole run", "[sim]") {
  // A 10 ms iteration makes a token; at 20 ms a response the front is given twice the work it
  // can do while requests arrive.
  FakeTime slow(0.01, false, 1, 20e-3);
  SimulationSpec spec = SingleSlot(&slow);
  spec.engine.stream_interval = 1;
  const SimulationResult r = RunOk(spec, TimedSource(EvenlySpaced(20, 0.05)));
  CHECK(r.front_busy_share > sim::kFrontBoundShare);
  CHECK(r.front_busy_share <= 1);
  CHECK(r.front_max_tokens_per_s == Approx(50));
}

TEST_CASE("Simulator: exponential service gives M/M/1 waiting times", "[sim]") {
  const double service = 0.01, lambda = 60.0;  // rho = 0.6
  FakeTime time(service, true);
  const SimulationResult r =
      RunOk(SingleSlot(&time), PoissonSource(Dataset(1, 10, 1), 300000, lambda, 8));
  const double mu = 1 / service;
  const double wait = lambda / (mu * (mu - lambda));
  CHECK((r.e2e_mean_ms / 1e3 - service) == Approx(wait).epsilon(0.03));
}

TEST_CASE("Simulator: Little's law and token conservation on DeepSeek-R1 Server", "[sim]") {
  DeepSeek ds;
  SimulationSpec spec = ds.Spec(Scenario::kServer);
  spec.scenario.min_duration_s = 0;
  auto data = MlperfSet();
  int64_t input = 0, output = 0, steps = 0;
  const int64_t n = 600;
  // The source cycles through a permutation; count what it will issue by replaying it.
  auto preview = PoissonSource(data, n, 2.0, 3);
  traces::Request req;
  SimTime t{}, last_arrival{};
  while (*preview->Next(&req, &t)) {
    input += req.input_tokens;
    output += req.output_tokens;
    steps += req.output_tokens - 1;
    last_arrival = t;
  }
  const SimulationResult r = RunOk(spec, PoissonSource(data, n, 2.0, 3));
  // The sustained rate is the work that arrived per second: QPS x mean output, within the
  // sampling error of 600 Poisson arrivals (about 4%).
  CHECK(r.sustained_tokens_per_s == Approx(output / ToSeconds(last_arrival)).epsilon(1e-9));
  CHECK(r.sustained_tokens_per_s == Approx(2.0 * output / n).epsilon(0.1));
  CHECK(r.completed_requests == n);
  CHECK(r.mean_in_system == Approx(r.arrival_rate_per_s * r.e2e_mean_ms / 1e3).epsilon(1e-6));
  CHECK(r.counters.generated_tokens == output);
  CHECK(r.output_tokens == output);
  CHECK(r.counters.prefill_tokens + r.counters.cached_tokens ==
        input + r.counters.recomputed_tokens);
  CHECK(r.counters.decode_tokens == steps);
  CHECK(r.preemptions == 0);
  CHECK(r.ttft_p99_ms > 0);
  CHECK(r.tpot_p99_ms > 0);
}

TEST_CASE("Simulator: a run advanced window by window is the run taken in one go", "[sim]") {
  DeepSeek ds;
  SimulationSpec spec = ds.Spec(Scenario::kServer);
  spec.scenario.min_duration_s = 0;
  auto data = MlperfSet();
  const SimulationResult whole = RunOk(spec, PoissonSource(data, 300, 2.0, 5));
  Simulator sim(spec, PoissonSource(data, 300, 2.0, 5));
  int64_t seen = 0;
  double last_done = 0;
  sim.set_on_complete([&](const RequestRecord& r) {
    ++seen;
    CHECK(r.done_s >= last_done);
    CHECK(r.first_token_s >= r.issue_s);
    last_done = r.done_s;
  });
  for (double t = 7.5; !sim.finished(); t += 7.5) {
    REQUIRE(sim.Advance(FromSeconds(t)).ok());
    CHECK(sim.now() == FromSeconds(t));
    CHECK(last_done <= t);
  }
  auto stepped = sim.Run();
  REQUIRE(stepped.ok());
  CHECK(seen == 300);
  CHECK(stepped->ToJson().dump() == whole.ToJson().dump());
}

TEST_CASE("Simulator: batch limits changed mid-run keep every request and apply to later batches",
          "[sim]") {
  DeepSeek ds;
  for (bool implicit : {true, false}) {
    SimulationSpec spec = ds.Spec(Scenario::kServer);
    spec.scenario.min_duration_s = 0;
    spec.engine.implicit_decode = implicit;
    auto data = MlperfSet();
    int64_t output = 0;
    auto preview = PoissonSource(data, 400, 6.0, 7);
    traces::Request req;
    SimTime t{};
    while (*preview->Next(&req, &t)) output += req.output_tokens;
    Simulator sim(spec, PoissonSource(data, 400, 6.0, 7));
    int64_t done = 0;
    sim.set_on_complete([&](const RequestRecord&) { ++done; });
    // Down to 4 sequences and 512 tokens a rank while hundreds run, then back up.
    REQUIRE(sim.Advance(FromSeconds(30)).ok());
    const int64_t running = sim.in_system();
    REQUIRE(running > 8 * 4);
    REQUIRE(sim.SetBatchLimits(4, 512).ok());
    REQUIRE(sim.Advance(FromSeconds(60)).ok());
    CHECK(sim.in_system() > running);  // admissions slowed: the queue grew
    REQUIRE(sim.SetBatchLimits(512, 4608).ok());
    auto r = sim.Run();
    REQUIRE(r.ok());
    CHECK(done == 400);
    CHECK(r->completed_requests == 400);
    CHECK(r->output_tokens == output);
    CHECK(r->counters.generated_tokens == output);
    CHECK(r->mean_in_system == Approx(r->arrival_rate_per_s * r->e2e_mean_ms / 1e3).epsilon(1e-6));
  }
  FakeTime time(0.01, false);
  Simulator sim(SingleSlot(&time), PoissonSource(Dataset(1, 10, 10), 1, 1.0, 1));
  CHECK(sim.SetBatchLimits(0, 512).message().find("each must be >= 1") != std::string::npos);
}

TEST_CASE("Simulator: preemption under KV pressure loses and duplicates no token", "[sim]") {
  DeepSeek ds;
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    SimulationSpec spec = ds.Spec(Scenario::kOffline, /*kv_tokens=*/60000);
    spec.engine.preemption = mode;
    auto data = MlperfSet();
    data.resize(400);
    int64_t input = 0, output = 0;
    for (const auto& d : data) {
      input += d.input_tokens;
      output += d.output_tokens;
    }
    const SimulationResult r = RunOk(spec, OfflineSource(data, 400, 1));
    CHECK(r.completed_requests == 400);
    CHECK(r.preemptions > 0);
    CHECK(r.counters.generated_tokens == output);
    CHECK(r.kv_peak_utilization <= 1.0);
    if (mode == PreemptionMode::kRecompute) {
      CHECK(r.counters.recomputed_tokens > 0);
      CHECK(r.counters.prefill_tokens == input + r.counters.recomputed_tokens);
    } else {
      CHECK(r.counters.recomputed_tokens == 0);
      CHECK(r.counters.prefill_tokens == input);
      CHECK(r.counters.swapped_bytes > 0);
    }
  }
}

TEST_CASE("Simulator::Remaining: the work left and the tokens generated add up to the query's",
          "[sim]") {
  // Under KV pressure (preemption, recompute) and with decode cohorts whose members' counters lag.
  DeepSeek ds;
  SimulationSpec spec = ds.Spec(Scenario::kOffline, /*kv_tokens=*/60000);
  auto data = MlperfSet();
  data.resize(400);
  int64_t input = 0, output = 0;
  double context = 0;
  for (const auto& d : data) {
    input += d.input_tokens;
    output += d.output_tokens;
    context += d.output_tokens * (d.input_tokens + 0.5 * (d.output_tokens - 1));
  }
  Simulator sim(spec, OfflineSource(data, 400, 1));
  REQUIRE(sim.Advance(SimTime(0)).ok());
  const RemainingWork start = sim.Remaining();
  CHECK(start.requests == 400);
  CHECK(start.prompt_tokens == input);
  CHECK(start.output_tokens == output);
  CHECK(start.context_tokens == Approx(context).epsilon(1e-12));
  int64_t checked = 0;
  for (double t = 20; !sim.finished(); t += 20) {
    REQUIRE(sim.Advance(FromSeconds(t)).ok());
    const RemainingWork left = sim.Remaining();
    CHECK(left.requests == sim.in_system());
    CHECK(left.output_tokens + sim.Counters().generated_tokens == output);
    CHECK(left.in_flight_output <= left.output_tokens);
    CHECK(left.in_flight_prompt <= left.prompt_tokens);
    ++checked;
  }
  CHECK(checked > 10);
  CHECK(sim.Counters().preemptions > 0);
  const RemainingWork end = sim.Remaining();
  CHECK(end.requests == 0);
  CHECK(end.output_tokens == 0);
}

TEST_CASE("Simulator: reserve admission never preempts", "[sim]") {
  DeepSeek ds;
  SimulationSpec spec = ds.Spec(Scenario::kOffline, 60000);
  spec.engine.admission = AdmissionPolicy::kReserve;
  auto data = MlperfSet();
  data.resize(400);
  const SimulationResult r = RunOk(spec, OfflineSource(data, 400, 1));
  CHECK(r.completed_requests == 400);
  CHECK(r.preemptions == 0);
}

TEST_CASE("Simulator: the same seed gives byte-identical JSON", "[sim]") {
  DeepSeek ds;
  auto data = MlperfSet();
  auto run = [&] {
    SimulationSpec spec = ds.Spec(Scenario::kServer);
    return RunOk(spec, PoissonSource(data, 300, 3.0, 42)).ToJson().dump();
  };
  CHECK(run() == run());
}

TEST_CASE("Simulator: fast-forwarded decode runs match step-by-step simulation", "[sim]") {
  // A pipeline takes several steps at once only when one batch is all it has; at a low rate
  // that is most of the time.
  auto data = MlperfSet();
  struct Case {
    models::ParallelLayout layout;
    int64_t requests;
    double qps;
  };
  for (const Case& c : {Case{{8, 8, 1, 8, 8}, 500, 4.0}, Case{{8, 4, 2, 4, 1}, 120, 0.1},
                        Case{{8, 4, 2, 4, 1}, 120, 2.0}, Case{{8, 2, 4, 2, 1}, 120, 0.1},
                        Case{{8, 2, 4, 2, 1}, 120, 2.0}}) {
    INFO(c.layout.ToString() << " at " << c.qps << " QPS");
    const DeepSeek ds(c.layout);
    SimulationSpec spec = ds.Spec(Scenario::kServer);
    const SimulationResult fast = RunOk(spec, PoissonSource(data, c.requests, c.qps, 9));
    spec.engine.fast_forward = 1;
    const SimulationResult exact = RunOk(spec, PoissonSource(data, c.requests, c.qps, 9));
    CHECK(fast.iterations == exact.iterations);
    CHECK(fast.counters.decode_tokens == exact.counters.decode_tokens);
    CHECK(fast.throughput_tokens_per_s == Approx(exact.throughput_tokens_per_s).epsilon(1e-3));
    CHECK(fast.ttft_p99_ms == Approx(exact.ttft_p99_ms).epsilon(5e-3));
    CHECK(fast.tpot_p99_ms == Approx(exact.tpot_p99_ms).epsilon(1e-3));
    CHECK(fast.e2e_mean_ms == Approx(exact.e2e_mean_ms).epsilon(1e-3));
    CHECK(fast.drain_end_s == Approx(exact.drain_end_s).epsilon(1e-4));
  }
}

TEST_CASE("Simulator: a cost breakdown is the step-by-step run, its parts the GPUs' busy time",
          "[sim]") {
  auto data = MlperfSet();
  for (const Scenario scenario : {Scenario::kOffline, Scenario::kServer}) {
    for (const models::ParallelLayout layout :
         {models::ParallelLayout{8, 8, 1, 8, 8}, models::ParallelLayout{8, 4, 2, 4, 1}}) {
      INFO(layout.ToString() << " " << Name(scenario));
      const DeepSeek ds(layout);
      SimulationSpec spec = ds.Spec(scenario);
      spec.pool.stage_gpus = layout.tp;
      spec.engine.fast_forward = 1;
      auto source = [&] {
        return scenario == Scenario::kOffline ? OfflineSource(data, 300, 3)
                                              : PoissonSource(data, 300, 3.0, 3);
      };
      const SimulationResult exact = RunOk(spec, source());
      spec.engine.fast_forward = 64;
      spec.engine.cost_breakdown = true;
      const SimulationResult broken_down = RunOk(spec, source());
      // The same run: a breakdown only watches.
      CHECK(broken_down.ToJson().dump() == exact.ToJson().dump());
      const models::StageCost& c = broken_down.counters.cost;
      CHECK(exact.counters.cost.Total() == 0);
      CHECK(c.unattributed == Approx(0).margin(1e-6 * c.Total()));
      CHECK(c.grouped_gemm > 0);
      CHECK(c.attention > 0);
      CHECK(c.imbalance >= 0);
      // No GPU is busier than the run is long; one stage: its busy time on its 8 GPUs.
      CHECK(c.Total() <= 8 * broken_down.drain_end_s * (1 + 1e-9));
      if (layout.pp == 1)
        CHECK(c.Total() == Approx(8 * ToSeconds(broken_down.counters.busy)).epsilon(1e-6));
    }
  }
}

TEST_CASE("Simulator: implicit decode bookkeeping gives the explicit path's results", "[sim]") {
  DeepSeek ds;
  auto data = MlperfSet();
  data.resize(600);
  auto same = [&](SimulationSpec spec, auto make_source) {
    spec.engine.implicit_decode = spec.decode_engine.implicit_decode = true;
    const std::string implicit = RunOk(spec, make_source()).ToJson().dump();
    spec.engine.implicit_decode = spec.decode_engine.implicit_decode = false;
    const std::string explicit_ = RunOk(spec, make_source()).ToJson().dump();
    CHECK(implicit == explicit_);
  };
  for (SchedulerKind k : kSchedulers) {
    INFO(Name(k));
    SimulationSpec spec = ds.Spec(Scenario::kServer);
    spec.engine.scheduler = k;
    spec.engine.max_batch = 64;
    same(spec, [&] { return PoissonSource(data, 600, 3.0, 5); });
  }
  // KV pressure: cohorts dissolve for preemptions (recompute and swap) and re-form; step by step,
  // since fast-forward checks KV per rank more exactly with the cohort.
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    for (SchedulerKind k : {SchedulerKind::kChunked, SchedulerKind::kStatic}) {
      SimulationSpec spec = ds.Spec(Scenario::kOffline, /*kv_tokens=*/60000);
      spec.engine.preemption = mode;
      spec.engine.scheduler = k;
      spec.engine.fast_forward = 1;
      same(spec, [&] { return OfflineSource(data, 600, 1); });
    }
  }
  // Short sequences crowding a small cache: the cohort sheds its newest members, which come back
  // and can leave again within a few steps.
  {
    const std::vector<traces::Request> shorts = RandomRequests(3000, 3, 50, 400, 300);
    for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
      SimulationSpec spec = ds.Spec(Scenario::kOffline, /*kv_tokens=*/40000);
      spec.engine.preemption = mode;
      spec.engine.fast_forward = 1;
      same(spec, [&] { return OfflineSource(shorts, 3000, 2); });
    }
  }
  // More sequences than the token budget: the cohort steps only when they fit.
  SimulationSpec tight = ds.Spec(Scenario::kServer);
  tight.engine.max_batch = 256;
  tight.engine.max_num_tokens = 128;
  same(tight, [&] { return PoissonSource(data, 600, 6.0, 4); });
  SimulationSpec reserve = ds.Spec(Scenario::kOffline, 60000);
  reserve.engine.admission = AdmissionPolicy::kReserve;
  same(reserve, [&] { return OfflineSource(data, 600, 1); });
  // Disaggregated decode instances admit sequences ready to decode (KV allocated a block ahead
  // when the prompt fills whole blocks).
  SimulationSpec disagg = ds.Spec(Scenario::kServer, 200000);
  disagg.decode_pool = disagg.pool;
  disagg.decode_engine = disagg.engine;
  disagg.disagg.kv_link_bytes_per_s = 50e9;
  disagg.total_gpus = 16;
  same(disagg, [&] { return PoissonSource(data, 600, 3.0, 6); });
  disagg.decode_pool->kv_blocks_per_rank = 30000 / 32;  // decoders shed as they arrive
  disagg.decode_engine.fast_forward = 1;
  same(disagg, [&] { return PoissonSource(data, 600, 3.0, 6); });
  // Pipeline stages: one cohort per microbatch in flight; under KV pressure too.
  const DeepSeek pipelined({8, 4, 2, 4, 1});
  same(pipelined.Spec(Scenario::kServer), [&] { return PoissonSource(data, 600, 3.0, 7); });
  same(pipelined.Spec(Scenario::kOffline, 60000), [&] { return OfflineSource(data, 600, 1); });
  // Microbatches that together hold more decoders than one may step (a rank runs max_batch a
  // stage): the earliest admitted step and the others wait in a cohort of their own, with
  // attention-DP balancing holding prefills back, and with a token budget below the batch.
  const DeepSeek crowded({8, 4, 2, 4, 4});
  SimulationSpec wide = crowded.Spec(Scenario::kOffline);
  wide.engine.max_batch = 48;
  wide.engine.adp_balance = true;
  same(wide, [&] { return OfflineSource(data, 600, 1); });
  wide.engine.max_num_tokens = 40;
  same(wide, [&] { return OfflineSource(data, 600, 1); });
  // Four stages and two attention ranks under Poisson arrivals: members move between cohorts and
  // their slots are recycled; a stale entry of one rank's cohort must not complete a sequence in
  // another rank's cohort of the same number.
  const DeepSeek deep({8, 2, 4, 2, 2});
  SimulationSpec staged = deep.Spec(Scenario::kServer);
  staged.engine.max_batch = 48;
  same(staged, [&] { return PoissonSource(data, 600, 4.0, 9); });
}

TEST_CASE("Simulator: MTP decode cohorts give the explicit path's results", "[sim]") {
  // A cohort draws each member's tokens a step ahead and sums what they do; the explicit path
  // draws a run's total per sequence. Where the draws cannot differ (every step accepts the same
  // number of drafts) the two must agree byte for byte: runs of steps while every draft is
  // accepted (the explicit run's all-accepted bound is then exact), and step by step otherwise.
  DeepSeek ds;
  auto data = MlperfSet();
  data.resize(600);
  auto same = [&](SimulationSpec spec, std::vector<double> accept, auto make_source) {
    INFO("accepting " << accept[1] << " " << accept[2] << " " << accept[3]);
    spec.engine.mtp_depth = spec.decode_engine.mtp_depth = 3;
    spec.engine.acceptance_dist = spec.decode_engine.acceptance_dist = accept;
    if (accept.back() != 1.0) spec.engine.fast_forward = spec.decode_engine.fast_forward = 1;
    spec.engine.implicit_decode = spec.decode_engine.implicit_decode = true;
    const std::string implicit = RunOk(spec, make_source()).ToJson().dump();
    spec.engine.implicit_decode = spec.decode_engine.implicit_decode = false;
    const std::string explicit_ = RunOk(spec, make_source()).ToJson().dump();
    CHECK(implicit == explicit_);
  };
  const std::vector<std::vector<double>> accepts = {{0, 0, 0, 1}, {1, 0, 0, 0}, {0, 1, 0, 0}};
  for (const std::vector<double>& accept : accepts) {
    SimulationSpec server = ds.Spec(Scenario::kServer);
    server.engine.max_batch = 64;
    same(server, accept, [&] { return PoissonSource(data, 600, 3.0, 5); });
    // KV pressure: members shed, preempted (recompute and swap) and back; reserve admission.
    for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
      SimulationSpec spec = ds.Spec(Scenario::kOffline, /*kv_tokens=*/60000);
      spec.engine.preemption = mode;
      same(spec, accept, [&] { return OfflineSource(data, 600, 1); });
    }
    SimulationSpec reserve = ds.Spec(Scenario::kOffline, 60000);
    reserve.engine.admission = AdmissionPolicy::kReserve;
    same(reserve, accept, [&] { return OfflineSource(data, 600, 1); });
    // A token budget that holds fewer decoders than run: the earliest admitted step.
    SimulationSpec tight = ds.Spec(Scenario::kServer);
    tight.engine.max_num_tokens = 128;
    same(tight, accept, [&] { return PoissonSource(data, 600, 6.0, 4); });
    // Disaggregated decode instances, their cache short enough to shed arrivals.
    SimulationSpec disagg = ds.Spec(Scenario::kServer, 200000);
    disagg.decode_pool = disagg.pool;
    disagg.decode_engine = disagg.engine;
    disagg.disagg.kv_link_bytes_per_s = 50e9;
    disagg.total_gpus = 16;
    same(disagg, accept, [&] { return PoissonSource(data, 600, 3.0, 6); });
    disagg.decode_pool->kv_blocks_per_rank = 30000 / 32;
    same(disagg, accept, [&] { return PoissonSource(data, 600, 3.0, 6); });
    // Pipeline stages: a cohort per microbatch in flight, members moving between them.
    const DeepSeek deep({8, 2, 4, 2, 2});
    SimulationSpec staged = deep.Spec(Scenario::kServer);
    staged.engine.max_batch = 48;
    same(staged, accept, [&] { return PoissonSource(data, 600, 4.0, 9); });
  }
}

TEST_CASE("Simulator: MTP decode cohorts draw as the explicit path does", "[sim]") {
  // Each draft accepted with probability 0.7 until the first rejection: the two paths' runs are
  // two samples of one distribution (the draws differ), on a roomy cache and under KV pressure.
  DeepSeek ds;
  auto data = MlperfSet();
  data.resize(800);
  for (int64_t kv_tokens : {int64_t{0}, int64_t{150000}}) {
    INFO("KV tokens " << kv_tokens);
    SimulationSpec spec = ds.Spec(Scenario::kServer, kv_tokens);
    spec.engine.mtp_depth = 3;
    spec.engine.acceptance = 0.7;
    const SimulationResult cohort = RunOk(spec, PoissonSource(data, 800, 2.0, 5));
    spec.engine.implicit_decode = false;
    const SimulationResult walk = RunOk(spec, PoissonSource(data, 800, 2.0, 5));
    CHECK(cohort.counters.generated_tokens == walk.counters.generated_tokens);
    const double mean_step = 1 + 0.7 + 0.49 + 0.343;
    const double steps = static_cast<double>(cohort.counters.decode_tokens) / 4;
    CHECK(static_cast<double>(cohort.counters.generated_tokens - cohort.completed_requests) /
              steps ==
          Approx(mean_step).epsilon(0.01));
    CHECK(cohort.counters.decode_tokens == Approx(walk.counters.decode_tokens).epsilon(0.01));
    CHECK(cohort.tpot_mean_ms == Approx(walk.tpot_mean_ms).epsilon(0.01));
    CHECK(cohort.tpot_p99_ms == Approx(walk.tpot_p99_ms).epsilon(0.03));
    CHECK(cohort.e2e_mean_ms == Approx(walk.e2e_mean_ms).epsilon(0.01));
    CHECK(cohort.throughput_tokens_per_s == Approx(walk.throughput_tokens_per_s).epsilon(0.01));
  }
}

TEST_CASE("Simulator: implicit decode bookkeeping matches the explicit path with a sliding window",
          "[sim]") {
  // gpt-oss-120b alternates 128-token sliding-window layers with full ones: a decoding cohort
  // tracks its windowed KV, which grows until each member's context fills the window. Prompts as
  // short as 1 token fill it during decode; pipelines keep a cohort per microbatch.
  const models::ModelArch model = *models::LoadModel("gpt-oss-120b");
  REQUIRE(model.sliding_window == 128);
  const models::Hardware hw = *(*models::HardwareCatalog::LoadBuiltin()).Find("b200");
  const models::Precision precision{models::DType::kMxfp4, models::DType::kBf16,
                                    models::DType::kFp8};
  const std::vector<traces::Request> data = RandomRequests(800, 11, 1, 300, 400);
  for (const models::ParallelLayout& layout :
       {models::ParallelLayout{1, 1, 1, 1, 1}, models::ParallelLayout{2, 1, 2, 1, 1}}) {
    INFO(layout.ToString());
    const models::RooflineModel time(model, hw, layout, precision);
    auto same = [&](SimulationSpec spec, auto make_source) {
      spec.engine.implicit_decode = true;
      const SimulationResult implicit = RunOk(spec, make_source());
      spec.engine.implicit_decode = false;
      const SimulationResult explicit_ = RunOk(spec, make_source());
      CHECK(implicit.completed_requests == static_cast<int64_t>(data.size()));
      CHECK(implicit.ToJson().dump() == explicit_.ToJson().dump());
    };
    SimulationSpec spec;
    spec.pool.time = &time;
    spec.pool.sliding_window = model.sliding_window;
    spec.pool.kv_blocks_per_rank = 200000 / 32;
    spec.engine.max_batch = 256;
    spec.engine.max_num_tokens = 2048;
    spec.scenario.scenario = Scenario::kServer;
    spec.scenario.min_duration_s = 0;
    spec.total_gpus = layout.gpus;
    same(spec, [&] { return PoissonSource(data, 800, 40.0, 3); });
    // KV pressure: members leave the cohort (preempted) while still filling the window.
    spec.pool.kv_blocks_per_rank = 12000 / 32;
    spec.engine.fast_forward = 1;
    spec.scenario.scenario = Scenario::kOffline;
    same(spec, [&] { return OfflineSource(data, 800, 1); });
  }
}

TEST_CASE("Simulator: every scheduler serves every request", "[sim]") {
  DeepSeek ds;
  auto data = MlperfSet();
  data.resize(200);
  for (SchedulerKind k : kSchedulers) {
    INFO(Name(k));
    SimulationSpec spec = ds.Spec(Scenario::kServer);
    spec.engine.scheduler = k;
    spec.engine.max_batch = 16;
    const SimulationResult r = RunOk(spec, PoissonSource(data, 200, 4.0, 1));
    CHECK(r.completed_requests == 200);
  }
}

TEST_CASE("Simulator: static batching waits for the batch to drain", "[sim]") {
  FakeTime time(0.001, false);
  SimulationSpec spec = SingleSlot(&time);
  spec.engine.max_batch = 4;
  spec.engine.scheduler = SchedulerKind::kStatic;
  spec.scenario.scenario = Scenario::kOffline;
  // Outputs 2 and 10: the short request's slot stays empty until the long one ends.
  std::vector<traces::Request> data = Dataset(2, 10, 2);
  data[1].output_tokens = 10;
  SimulationResult r = RunOk(spec, OfflineSource(data, 8, 1));
  // Two batches of four, each a prefill and 9 decode iterations (the long requests set the pace).
  CHECK(r.iterations == 2 * 10);
  spec.engine.scheduler = SchedulerKind::kChunked;
  r = RunOk(spec, OfflineSource(data, 8, 1));
  CHECK(r.iterations < 2 * 10);
}

TEST_CASE("Simulator: mixed batching runs prompts whole, in what the decodes leave of the budget",
          "[sim]") {
  FakeTime time(0.001, false);
  SimulationSpec spec = SingleSlot(&time);
  spec.engine.max_batch = 4;
  spec.engine.max_num_tokens = 100;
  spec.scenario.scenario = Scenario::kOffline;
  // A 10-token prompt with 5 outputs, then a 150-token prompt with one.
  std::vector<traces::Request> data = Dataset(2, 10, 5);
  data[1].input_tokens = 150;
  data[1].output_tokens = 1;
  spec.engine.scheduler = SchedulerKind::kChunked;
  SimulationResult r = RunOk(spec, OfflineSource(data, 2, 1));
  // 10 + 90, then a decode + the last 60, then three decodes.
  CHECK(r.iterations == 5);
  CHECK(r.ttft_p99_ms == Approx(2.0));
  spec.engine.scheduler = SchedulerKind::kMixed;
  r = RunOk(spec, OfflineSource(data, 2, 1));
  // The long prompt never fits beside a decode: it waits for the four decodes, then runs alone.
  CHECK(r.iterations == 6);
  CHECK(r.ttft_p99_ms == Approx(6.0));
  CHECK(r.counters.generated_tokens == 6);
}

TEST_CASE("Simulator: MTP speculative decoding produces several tokens per step", "[sim]") {
  FakeTime time(0.001, false);
  SimulationSpec spec = SingleSlot(&time);
  spec.scenario.scenario = Scenario::kOffline;
  spec.engine.mtp_depth = 3;
  spec.engine.acceptance_dist = {0.0, 0.0, 0.0, 1.0};  // always accept all three drafts
  const SimulationResult r = RunOk(spec, OfflineSource(Dataset(1, 10, 401), 1, 1));
  CHECK(r.iterations == 1 + 100);  // prefill, then 100 steps of 4 tokens
  CHECK(r.counters.generated_tokens == 401);
  spec.engine.acceptance_dist.clear();
  spec.engine.acceptance = 0.0;
  const SimulationResult none = RunOk(spec, OfflineSource(Dataset(1, 10, 401), 1, 1));
  CHECK(none.iterations == 401);
}

TEST_CASE("Simulator: MTP runs of decode steps taken at once agree with step-by-step runs",
          "[sim]") {
  // A run of k steps draws its accepted drafts from the k-fold convolution of one step's, so the
  // tokens per step keep their mean 1 + p + p^2 + p^3 and the latencies their distribution.
  DeepSeek ds;
  auto data = MlperfSet();
  data.resize(400);
  SimulationSpec spec = ds.Spec(Scenario::kServer);
  spec.engine.mtp_depth = 3;
  spec.engine.acceptance = 0.7;
  const SimulationResult fast = RunOk(spec, PoissonSource(data, 400, 1.0, 5));
  spec.engine.fast_forward = 1;
  const SimulationResult exact = RunOk(spec, PoissonSource(data, 400, 1.0, 5));
  CHECK(fast.counters.generated_tokens == exact.counters.generated_tokens);
  const double mean_step = 1 + 0.7 + 0.49 + 0.343;
  const double steps =
      static_cast<double>(exact.counters.decode_tokens) / 4;  // each step verifies 4 tokens
  CHECK(static_cast<double>(exact.counters.generated_tokens - exact.completed_requests) / steps ==
        Approx(mean_step).epsilon(0.01));
  CHECK(fast.counters.decode_tokens == Approx(exact.counters.decode_tokens).epsilon(0.01));
  CHECK(fast.tpot_mean_ms == Approx(exact.tpot_mean_ms).epsilon(0.01));
  CHECK(fast.tpot_p99_ms == Approx(exact.tpot_p99_ms).epsilon(0.03));
  CHECK(fast.e2e_mean_ms == Approx(exact.e2e_mean_ms).epsilon(0.01));
}

TEST_CASE("Simulator: prefix caching reuses Mooncake's shared prefixes", "[sim]") {
  DeepSeek ds;
  auto run = [&](bool implicit_decode, int mtp_depth = 0) {
    auto reader =
        traces::OpenTrace(DataDir() + "/traces/data/mooncake_fast25/conversation_trace.jsonl", {});
    REQUIRE(reader.ok());
    traces::TransformOptions head;
    head.head = 2000;
    SimulationSpec spec = ds.Spec(Scenario::kReplay);
    spec.engine.prefix_caching = true;
    spec.engine.implicit_decode = implicit_decode;
    if (mtp_depth > 0) {  // every draft accepted: the MTP paths' draws cannot differ
      spec.engine.mtp_depth = mtp_depth;
      spec.engine.acceptance_dist.assign(mtp_depth + 1, 0.0);
      spec.engine.acceptance_dist.back() = 1.0;
    }
    spec.router = RouterKind::kPrefixAware;
    return RunOk(spec, ReplaySource(traces::Transform(std::move(*reader), head)));
  };
  const SimulationResult r = run(true);
  CHECK(r.completed_requests == 2000);
  CHECK(r.prefix_hit_rate > 0.2);
  CHECK(r.counters.cached_tokens > 0);
  CHECK(r.counters.prefill_tokens + r.counters.cached_tokens ==
        r.input_tokens + r.counters.recomputed_tokens);
  CHECK(r.ToJson().dump() == run(false).ToJson().dump());  // shared prefix blocks in the cohort
  CHECK(run(true, 3).ToJson().dump() == run(false, 3).ToJson().dump());  // and an MTP cohort
}

TEST_CASE("Simulator: disaggregated decode starts only after the KV arrives", "[sim]") {
  FakeTime time(0.01, false);
  SimulationSpec spec = SingleSlot(&time);
  spec.scenario.scenario = Scenario::kOffline;
  spec.pool.kv_bytes_per_token = 1e6;  // 1 MB per token
  spec.decode_pool = spec.pool;
  spec.decode_engine = spec.engine;
  spec.disagg.kv_link_bytes_per_s = 1e9;  // 100 tokens -> 0.1 s
  spec.disagg.kv_link_latency_s = 0;
  const std::string path = (std::filesystem::temp_directory_path() / "fathom_disagg.log").string();
  auto log = OutputFile::Create(path);
  REQUIRE(log.ok());
  const SimulationResult r = RunOk(spec, OfflineSource(Dataset(1, 100, 3), 1, 1), log->get());
  REQUIRE((*log)->Commit().ok());
  CHECK(r.ttft_mean_ms == Approx(10));                // prefill on the prefill instance
  CHECK(r.e2e_mean_ms == Approx(10 + 100 + 2 * 10));  // transfer, then two decode steps
  CHECK(ReadFile(path)->find("kv_transfer") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("Simulator: disaggregated decode runs stop where a KV transfer may arrive", "[sim]") {
  // A decode instance's run of steps must end where a request could join it: a prefill batch that
  // ends during the run starts a transfer which may arrive before the run would end. Taken as
  // runs, the decode steps are then the steps taken one by one.
  DeepSeek ds;
  auto data = MlperfSet();
  data.resize(400);
  SimulationSpec spec = ds.Spec(Scenario::kServer);
  spec.decode_pool = spec.pool;
  spec.decode_engine = spec.engine;
  spec.disagg.kv_link_bytes_per_s = 50e9;
  spec.total_gpus = 16;
  const SimulationResult fast = RunOk(spec, PoissonSource(data, 400, 3.0, 6));
  spec.decode_engine.fast_forward = 1;
  const SimulationResult exact = RunOk(spec, PoissonSource(data, 400, 3.0, 6));
  CHECK(fast.iterations == exact.iterations);
  CHECK(fast.counters.decode_tokens == exact.counters.decode_tokens);
  CHECK(fast.throughput_tokens_per_s == Approx(exact.throughput_tokens_per_s).epsilon(1e-4));
  CHECK(fast.ttft_p99_ms == Approx(exact.ttft_p99_ms).epsilon(1e-4));
  CHECK(fast.tpot_p99_ms == Approx(exact.tpot_p99_ms).epsilon(1e-4));
  CHECK(fast.e2e_mean_ms == Approx(exact.e2e_mean_ms).epsilon(1e-4));
}

TEST_CASE("Simulator: pipeline stages overlap microbatches; bubbles appear with one sequence",
          "[sim]") {
  FakeTime time(0.01, false, /*stages=*/2);
  SimulationSpec spec = SingleSlot(&time);
  spec.scenario.scenario = Scenario::kOffline;
  spec.engine.max_batch = 1;
  // One sequence: every step waits for both stages (a bubble of one stage per step).
  SimulationResult one = RunOk(spec, OfflineSource(Dataset(1, 10, 10), 1, 1));
  CHECK(one.duration_s == Approx(10 * 0.02));
  // Two sequences on two ranks' worth of slots: the second microbatch fills the bubble.
  spec.engine.max_batch = 1;
  spec.pool.ranks = 1;
  spec.engine.max_num_tokens = 16;
  spec.engine.max_batch = 2;
  spec.engine.chunk_size = 10;
  SimulationResult two = RunOk(spec, OfflineSource(Dataset(2, 10, 10), 2, 1));
  CHECK(two.duration_s < 2 * one.duration_s);
}

TEST_CASE("Simulator: a pipeline runs a microbatch of up to max_batch on every stage", "[sim]") {
  // TensorRT-LLM admits max_batch_size x pp_size sequences, one microbatch per stage in flight.
  FakeTime time(0.01, false, /*stages=*/2);
  SimulationSpec spec = SingleSlot(&time);  // max_batch 1
  spec.scenario.scenario = Scenario::kOffline;
  const SimulationResult one = RunOk(spec, OfflineSource(Dataset(1, 10, 10), 1, 1));
  CHECK(one.duration_s == Approx(10 * 0.02));
  // The second sequence runs beside the first, a stage behind it, not after it.
  const SimulationResult two = RunOk(spec, OfflineSource(Dataset(2, 10, 10), 2, 1));
  CHECK(two.duration_s == Approx(10 * 0.02 + 0.01));
  // A third waits for the first one's slot.
  const SimulationResult three = RunOk(spec, OfflineSource(Dataset(3, 10, 10), 3, 1));
  CHECK(three.duration_s == Approx(2 * 10 * 0.02));
}

TEST_CASE("Simulator: a pipeline's decoding microbatches step on together, as step by step",
          "[sim]") {
  // A run and how many iterations it recorded (a joint run records each microbatch's steps once).
  const std::string path = (std::filesystem::temp_directory_path() / "fathom_joint.log").string();
  auto run = [&](const SimulationSpec& spec, std::unique_ptr<RequestSource> source,
                 int64_t* iterations_logged) {
    auto log = OutputFile::Create(path);
    REQUIRE(log.ok());
    const SimulationResult r = RunOk(spec, std::move(source), log->get());
    REQUIRE((*log)->Commit().ok());
    const std::string text = *ReadFile(path);
    *iterations_logged = 0;
    for (size_t at = 0; (at = text.find(" iteration ", at)) != std::string::npos; ++at)
      ++*iterations_logged;
    std::filesystem::remove(path);
    return r;
  };
  // Microbatches of one sequence each (max_batch 1) on 2 and 4 stages, of different lengths so
  // that runs end at completions, with arrivals between them. Each stage's time is fixed, so the
  // joint run (Engine::JointRun) must give the step-by-step figures exactly.
  const std::vector<traces::Request> data = RandomRequests(40, 7, 20, 100, 900);
  for (const int stages : {2, 4}) {
    INFO(stages << " stages");
    FakeTime time(0.01, false, stages);
    SimulationSpec spec = SingleSlot(&time);
    int64_t joint_logged = 0, exact_logged = 0;
    spec.engine.fast_forward = 4096;
    const SimulationResult joint = run(spec, PoissonSource(data, 40, 0.1, 11), &joint_logged);
    spec.engine.fast_forward = 1;
    const SimulationResult exact = run(spec, PoissonSource(data, 40, 0.1, 11), &exact_logged);
    CHECK(joint.ToJson().dump() == exact.ToJson().dump());
    CHECK(joint_logged * 10 < exact_logged);
  }
  // Priced steps (gpt-oss-120b, TP1 PP2 on B200, its sliding window filling during decode):
  // within the interpolation's error of step by step, and the same with or without cohorts.
  const models::ModelArch model = *models::LoadModel("gpt-oss-120b");
  const models::Hardware hw = *(*models::HardwareCatalog::LoadBuiltin()).Find("b200");
  const models::ParallelLayout layout{2, 1, 2, 1, 1};
  const models::RooflineModel time(
      model, hw, layout, {models::DType::kMxfp4, models::DType::kBf16, models::DType::kFp8});
  SimulationSpec spec;
  spec.pool.time = &time;
  spec.pool.sliding_window = model.sliding_window;
  spec.pool.kv_blocks_per_rank = 200000 / 32;
  spec.engine.max_batch = 2;
  spec.scenario.scenario = Scenario::kServer;
  spec.scenario.min_duration_s = 0;
  spec.total_gpus = layout.gpus;
  const std::vector<traces::Request> long_ones = RandomRequests(200, 5, 1, 300, 2000);
  int64_t joint_logged = 0, exact_logged = 0, unused = 0;
  spec.engine.fast_forward = 4096;
  const SimulationResult joint = run(spec, PoissonSource(long_ones, 200, 0.5, 7), &joint_logged);
  spec.engine.implicit_decode = false;
  CHECK(run(spec, PoissonSource(long_ones, 200, 0.5, 7), &unused).ToJson().dump() ==
        joint.ToJson().dump());
  spec.engine.implicit_decode = true;
  spec.engine.fast_forward = 1;
  const SimulationResult exact = run(spec, PoissonSource(long_ones, 200, 0.5, 7), &exact_logged);
  CHECK(joint_logged * 10 < exact_logged);
  CHECK(joint.iterations == exact.iterations);
  CHECK(joint.counters.decode_tokens == exact.counters.decode_tokens);
  CHECK(joint.throughput_tokens_per_s == Approx(exact.throughput_tokens_per_s).epsilon(1e-4));
  CHECK(joint.tpot_p99_ms == Approx(exact.tpot_p99_ms).epsilon(1e-4));
  CHECK(joint.e2e_mean_ms == Approx(exact.e2e_mean_ms).epsilon(1e-4));
}

TEST_CASE("Simulator: attention DP ranks step together at the slowest rank's pace", "[sim]") {
  DeepSeek ds;
  std::vector<models::BatchShape> ranks(8);
  for (int i = 0; i < 64; ++i) ranks[0].Add({1, 2000, true, true}, 0);
  const SimTime one_busy = ds.time->StageTime(ranks, 0);
  for (int r = 1; r < 8; ++r) ranks[r].Add({1, 10, true, true}, 0);
  const SimTime all_busy = ds.time->StageTime(ranks, 0);
  std::vector<models::BatchShape> alone(1, ranks[0]);
  CHECK(all_busy >= one_busy);
  CHECK(ToSeconds(all_busy) <
        1.2 * ToSeconds(one_busy));  // the light ranks hide behind the heavy one
}

// Records the shapes of every iteration it prices.
class RecordingTime : public models::ExecutionTimeModel {
 public:
  SimTime StageTime(std::span<const models::BatchShape> ranks, int) const override {
    calls.emplace_back(ranks.begin(), ranks.end());
    return FromSeconds(0.01);
  }
  int num_stages() const override { return 1; }
  mutable std::vector<std::vector<models::BatchShape>> calls;
};

TEST_CASE("Simulator: decode-only iterations are padded to a captured CUDA graph's batch size",
          "[sim]") {
  RecordingTime time;
  SimulationSpec spec = SingleSlot(&time);
  spec.pool.ranks = 2;
  spec.engine.max_batch = 16;
  spec.engine.cuda_graph_batch_sizes = {1, 4, 8};
  const traces::Request r{
      .id = 0, .arrival_s = {}, .input_tokens = 10, .output_tokens = 20, .prefix_blocks = {}};
  using Items = std::vector<std::pair<traces::Request, double>>;
  // Four requests spread over the two ranks, all prefilled in the first iteration.
  auto items = [&](int n) {
    Items out;
    for (int i = 0; i < n; ++i) out.push_back({r, 0.0});
    return out;
  };
  RunOk(spec, TimedSource(items(4)));
  int padded = 0, eager = 0;
  for (const auto& ranks : time.calls) {
    REQUIRE(ranks.size() == 2);
    const bool prefill = ranks[0].prefill_tokens + ranks[1].prefill_tokens > 0;
    if (prefill) {
      // A context request runs the iteration eagerly: nothing padded.
      ++eager;
      CHECK(ranks[0].sequences + ranks[1].sequences <= 4);
      continue;
    }
    ++padded;
    // Both ranks, whatever they run, padded to 4 (the widest rank holds 2 to 4): one-token
    // dummies with no context.
    for (const auto& shape : ranks) {
      CHECK(shape.decode_sequences == 4);
      CHECK(shape.tokens == 4);
      CHECK(shape.decode_kv <= 4 * (10 + 20) + 4);
    }
  }
  CHECK(eager >= 1);
  CHECK(padded >= 1);

  // Past the largest graph, iterations run eagerly at their own size.
  time.calls.clear();
  RunOk(spec, TimedSource(items(20)));
  bool unpadded = false;
  for (const auto& ranks : time.calls) {
    const int64_t widest = std::max(ranks[0].decode_sequences, ranks[1].decode_sequences);
    if (ranks[0].prefill_tokens + ranks[1].prefill_tokens == 0 && widest > 8) {
      unpadded = true;
      CHECK(ranks[0].decode_sequences + ranks[1].decode_sequences == 20);
    }
  }
  CHECK(unpadded);
}

TEST_CASE(
    "Simulator: multi-step scheduling runs N decode steps at 1 / N of the host work each, "
    "prompts waiting for the run's end",
    "[sim]") {
  RecordingTime time;
  SimulationSpec spec = SingleSlot(&time);
  spec.engine.max_batch = 8;
  spec.engine.fast_forward = 1;  // every step priced on its own
  const traces::Request r{
      .id = 0, .arrival_s = {}, .input_tokens = 10, .output_tokens = 20, .prefix_blocks = {}};
  // Two prompts at once, a third 25 ms in: while the first run of decode steps goes on.
  auto third_prefill = [&](int steps) {
    spec.engine.scheduler_steps = steps;
    time.calls.clear();
    traces::Request late = r;
    late.id = 2;
    auto result = RunOk(spec, TimedSource(std::vector<std::pair<traces::Request, double>>{
                                  {r, 0.0}, {r, 0.0}, {late, 0.025}}));
    CHECK(result.completed_requests == 3);
    int index = -1;
    for (size_t i = 0; i < time.calls.size(); ++i) {
      const models::BatchShape& shape = time.calls[i][0];
      const bool decode_only = shape.prefill_tokens == 0;
      CHECK(shape.host_share == (decode_only ? 1.0 / steps : 1.0));
      if (i > 0 && !decode_only && index < 0) index = static_cast<int>(i);
    }
    return index;
  };
  // Each iteration takes 10 ms: the prompts at 0-10 ms, decodes from 10 ms. Scheduled one step at
  // a time, the third prompt joins the step from 30 ms; in runs of four, the step from 50 ms.
  CHECK(third_prefill(1) == 3);
  CHECK(third_prefill(4) == 5);
  // Async scheduling marks every iteration's host work as prepared beside the GPU.
  spec.engine.async_scheduling = true;
  third_prefill(1);
  for (const auto& ranks : time.calls) CHECK(ranks[0].host_ahead);
}

TEST_CASE(
    "Simulator: AMD's admission gate lets new requests join every N + 1 iterations while enough "
    "run",
    "[sim]") {
  RecordingTime time;
  SimulationSpec spec = SingleSlot(&time);
  spec.engine.max_batch = 8;
  const traces::Request r{
      .id = 0, .arrival_s = {}, .input_tokens = 10, .output_tokens = 40, .prefix_blocks = {}};
  // Two prompts at once, a third at 25 ms, while the first two decode (10 ms an iteration).
  double third_ttft_ms = 0;  // the slowest first token: the third prompt's
  auto third_prefill = [&](int gate_steps, int64_t min_running, int64_t fast_forward) {
    spec.engine.gate_steps = gate_steps;
    spec.engine.gate_min_running = min_running;
    spec.engine.fast_forward = fast_forward;
    time.calls.clear();
    traces::Request late = r;
    late.id = 2;
    auto result = RunOk(spec, TimedSource(std::vector<std::pair<traces::Request, double>>{
                                  {r, 0.0}, {r, 0.0}, {late, 0.025}}));
    CHECK(result.completed_requests == 3);
    third_ttft_ms = result.ttft_p99_ms;
    int64_t step = 0, index = -1;
    for (size_t i = 0; i < time.calls.size() && index < 0; ++i) {
      if (i > 0 && time.calls[i][0].prefill_tokens > 0) index = step;
      step += 1;
    }
    return index;
  };
  // Ungated, the third prompt joins the step from 30 ms (the fourth iteration, index 3). With a
  // counter cycling 0..4 (opened at iterations 0, 5, 10, ...), it waits for index 5.
  CHECK(third_prefill(0, 0, 1) == 3);
  CHECK(third_ttft_ms == Approx(15.0));
  CHECK(third_prefill(4, 0, 1) == 5);
  CHECK(third_ttft_ms == Approx(35.0));
  // Fast-forwarded decode runs stop where the gate opens: the same first token.
  third_prefill(4, 0, 64);
  CHECK(third_ttft_ms == Approx(35.0));
  // Fewer running than the gate's minimum: it stays open.
  CHECK(third_prefill(4, 3, 1) == 3);
}

TEST_CASE("CudaGraphSizes: the deployment's own, else the runtime's, then every 128 to the limit",
          "[sim]") {
  class Runtime : public RecordingTime {
   public:
    std::vector<int64_t> CudaGraphBatchSizes() const override { return {1, 2, 4, 8, 16}; }
  } runtime;
  RecordingTime none;
  EngineConfig e;
  e.max_batch = 6;
  CHECK(CudaGraphSizes(e, runtime) == std::vector<int64_t>{1, 2, 4, 6});
  e.max_batch = 8;
  CHECK(CudaGraphSizes(e, runtime) == std::vector<int64_t>{1, 2, 4, 8});
  e.max_batch = 40;
  CHECK(CudaGraphSizes(e, runtime) == std::vector<int64_t>{1, 2, 4, 8, 16, 40});
  // Past the runtime's largest size, every 128 up to the limit.
  e.max_batch = 400;
  CHECK(CudaGraphSizes(e, runtime) == std::vector<int64_t>{1, 2, 4, 8, 16, 144, 272, 400});
  e.max_batch = 401;
  CHECK(CudaGraphSizes(e, runtime) == std::vector<int64_t>{1, 2, 4, 8, 16, 144, 272, 400, 401});
  CHECK(CudaGraphSizes(e, none).empty());  // no graphs: every iteration eager
  e.cuda_graph_batch_sizes = {3, 5};
  CHECK(CudaGraphSizes(e, runtime) == std::vector<int64_t>{3, 5});
}

TEST_CASE("BatchShape: padding is n dummy decode sequences without context", "[sim]") {
  for (int64_t each : {1, 4}) {
    models::BatchShape added, padded;
    for (int i = 0; i < 5; ++i) added.Add({each, 0, true, true}, 0);
    padded.AddPadding(5, each);
    CHECK(added.tokens == padded.tokens);
    CHECK(added.sequences == padded.sequences);
    CHECK(added.sampled_tokens == padded.sampled_tokens);
    CHECK(added.decode_tokens == padded.decode_tokens);
    CHECK(added.decode_sequences == padded.decode_sequences);
    CHECK(added.decode_pairs == padded.decode_pairs);
    CHECK(added.decode_pairs_window == padded.decode_pairs_window);
    CHECK(added.decode_kv == padded.decode_kv);
    CHECK(added.decode_kv_window == padded.decode_kv_window);
  }
}

TEST_CASE("Simulator: the golden event log of a small scenario", "[sim][golden]") {
  DeepSeek ds;
  SimulationSpec spec = ds.Spec(Scenario::kServer);
  spec.pool.ranks = 2;
  spec.engine.max_num_tokens = 512;
  spec.engine.max_batch = 4;
  std::vector<traces::Request> data = Dataset(3, 700, 4);
  data[1].input_tokens = 200;
  data[2].output_tokens = 2;
  const std::string path = std::string(FATHOM_TEST_DATA_DIR) + "/../golden/small_chunked.expected";
  const std::string actual_path =
      (std::filesystem::temp_directory_path() / "fathom_golden.log").string();
  auto log = OutputFile::Create(actual_path);
  REQUIRE(log.ok());
  RunOk(spec, PoissonSource(data, 6, 50.0, 7), log->get());
  REQUIRE((*log)->Commit().ok());
  const std::string actual = *ReadFile(actual_path);
  if (std::getenv("FATHOM_UPDATE_GOLDEN") != nullptr) REQUIRE(WriteFileAtomic(path, actual).ok());
  auto expected = ReadFile(path);
  REQUIRE(expected.ok());
  CHECK(actual == *expected);
}

namespace {

// Input and output tokens of every request a source gives.
std::pair<int64_t, int64_t> StreamTokens(std::unique_ptr<RequestSource> source) {
  int64_t input = 0, output = 0;
  traces::Request req;
  SimTime t{};
  while (*source->Next(&req, &t)) input += req.input_tokens, output += req.output_tokens;
  return {input, output};
}

// A switch 30 s into the run to `to`'s layout on 8 GPUs, restarting for 20 s.
ConfigSwitch SwitchAt30(const SimulationSpec& to, KvMove kv) {
  ConfigSwitch sw;
  sw.when = {SwitchTrigger::Kind::kAfter, 30};
  sw.pool = to.pool;
  sw.engine = to.engine;
  sw.total_gpus = 8;
  sw.kv = kv;
  sw.restart_s = 20;
  sw.migrate_bytes_per_s = 900e9;
  return sw;
}

}  // namespace

TEST_CASE("Simulator: a layout switch mid-run loses and duplicates no token", "[sim][plan]") {
  DeepSeek adp, tp({8, 8, 1, 8, 1});
  auto data = MlperfSet();
  for (KvMove kv : {KvMove::kMigrate, KvMove::kRecompute}) {
    for (bool implicit : {true, false}) {
      SimulationSpec spec = adp.Spec(Scenario::kServer);
      spec.scenario.min_duration_s = 0;
      spec.engine.implicit_decode = implicit;
      const auto [input, output] = StreamTokens(PoissonSource(data, 400, 6.0, 7));
      Simulator sim(spec, PoissonSource(data, 400, 6.0, 7));
      ConfigSwitch sw = SwitchAt30(tp.Spec(Scenario::kServer), kv);
      sw.engine.implicit_decode = implicit;
      REQUIRE(sim.ScheduleSwitch(sw).ok());
      std::vector<double> first_tokens;
      sim.set_on_first_token(
          [&](const RequestRecord& r) { first_tokens.push_back(r.first_token_s); });
      auto r = sim.Run();
      REQUIRE(r.ok());
      CHECK(r->completed_requests == 400);
      CHECK(r->output_tokens == output);
      CHECK(r->counters.generated_tokens == output);
      CHECK(r->counters.prefill_tokens + r->counters.cached_tokens ==
            input + r->counters.recomputed_tokens);
      CHECK(r->mean_in_system ==
            Approx(r->arrival_rate_per_s * r->e2e_mean_ms / 1e3).epsilon(1e-6));
      REQUIRE(r->switches.size() == 1);
      const SwitchRecord& s = r->switches[0];
      CHECK(s.triggered_s == Approx(30));
      CHECK(s.stopped_s >= s.triggered_s);
      CHECK(s.stopped_s < s.triggered_s + 1);  // one iteration's drain
      CHECK(s.resumed_s == Approx(s.stopped_s + 20 + s.migrate_s));
      CHECK(s.moved > 50);
      CHECK(s.running > 0);
      // Recomputed KV is prefilled again; migrated KV moves at 900 GB/s from the busiest rank.
      if (kv == KvMove::kRecompute) {
        CHECK(r->counters.recomputed_tokens > 0);
        CHECK(s.migrate_s == 0);
      } else {
        CHECK(r->counters.recomputed_tokens == 0);
        CHECK(s.kv_bytes > 0);
        CHECK(s.migrate_s > 0);
        CHECK(s.migrate_s <= s.kv_bytes / 900e9);
      }
      // Engines down: no first token between the stop and the resume.
      for (double ft : first_tokens) CHECK_FALSE((ft > s.stopped_s && ft < s.resumed_s));
    }
  }
}

TEST_CASE("Simulator: a drain starts the new engines beside the old ones, which finish what ran",
          "[sim][plan]") {
  DeepSeek adp, tp({8, 8, 1, 8, 1});
  auto data = MlperfSet();
  SimulationSpec spec = adp.Spec(Scenario::kServer);
  spec.scenario.min_duration_s = 0;
  const auto [input, output] = StreamTokens(PoissonSource(data, 400, 6.0, 7));
  Simulator sim(spec, PoissonSource(data, 400, 6.0, 7));
  REQUIRE(sim.ScheduleSwitch(SwitchAt30(tp.Spec(Scenario::kServer), KvMove::kDrain)).ok());
  std::vector<RequestRecord> records;
  sim.set_on_complete([&](const RequestRecord& r) { records.push_back(r); });
  auto r = sim.Run();
  REQUIRE(r.ok());
  CHECK(r->completed_requests == 400);
  CHECK(r->output_tokens == output);
  CHECK(r->counters.generated_tokens == output);
  CHECK(r->counters.recomputed_tokens == 0);  // nothing moved that had started
  CHECK(r->counters.prefill_tokens + r->counters.cached_tokens == input);
  REQUIRE(r->switches.size() == 1);
  const SwitchRecord& s = r->switches[0];
  CHECK(s.triggered_s == Approx(30));
  // The old engines serve through the restart: first tokens keep coming while the new ones start.
  CHECK(s.stopped_s == Approx(50));
  CHECK(s.resumed_s == Approx(50));
  CHECK(s.kv_bytes == 0);
  CHECK(s.running > 0);  // left to finish where they ran
  bool served_during_restart = false;
  for (const RequestRecord& x : records) {
    served_during_restart = served_during_restart || (x.first_token_s > 31 && x.first_token_s < 49);
  }
  CHECK(served_during_restart);
}

TEST_CASE("Simulator: scaling adds instances beside the running ones and drains the last away",
          "[sim][plan]") {
  DeepSeek ds;
  auto data = MlperfSet();
  SimulationSpec spec = ds.Spec(Scenario::kServer);
  spec.scenario.min_duration_s = 0;
  const auto [input, output] = StreamTokens(PoissonSource(data, 600, 8.0, 7));
  Simulator sim(spec, PoissonSource(data, 600, 8.0, 7));
  ConfigSwitch up = SwitchAt30(spec, KvMove::kDrain);
  up.scale_only = true;
  up.pool.instances = 3;
  up.total_gpus = 24;
  ConfigSwitch down = up;
  down.when = {SwitchTrigger::Kind::kAfter, 60};
  down.pool.instances = 1;
  down.total_gpus = 8;
  REQUIRE(sim.ScheduleSwitch(up).ok());
  REQUIRE(sim.ScheduleSwitch(down).ok());
  auto r = sim.Run();
  REQUIRE(r.ok());
  CHECK(r->completed_requests == 600);
  CHECK(r->output_tokens == output);
  CHECK(r->counters.prefill_tokens + r->counters.cached_tokens == input);
  REQUIRE(r->switches.size() == 2);
  CHECK(r->switches[0].resumed_s == Approx(50));  // two instances added after the restart
  CHECK(r->switches[0].moved == 0);               // the running one keeps its queue
  CHECK(r->switches[1].resumed_s == Approx(60));  // two taken away at once
  CHECK(r->switches[1].running > 0);              // left to finish where they run
}

TEST_CASE("Simulator: an in-place switch is the batch limits set at the same moment",
          "[sim][plan]") {
  DeepSeek ds;
  SimulationSpec spec = ds.Spec(Scenario::kServer);
  spec.scenario.min_duration_s = 0;
  auto data = MlperfSet();
  Simulator by_hand(spec, PoissonSource(data, 400, 6.0, 7));
  REQUIRE(by_hand.Advance(FromSeconds(30)).ok());
  REQUIRE(by_hand.SetBatchLimits(4, 512).ok());
  auto a = by_hand.Run();
  Simulator planned(spec, PoissonSource(data, 400, 6.0, 7));
  ConfigSwitch sw;
  sw.when = {SwitchTrigger::Kind::kAfter, 30};
  sw.in_place = true;
  sw.engine = spec.engine;
  sw.engine.max_batch = 4;
  sw.engine.max_num_tokens = 512;
  REQUIRE(planned.ScheduleSwitch(sw).ok());
  auto b = planned.Run();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(b->switches.size() == 1);
  CHECK(b->switches[0].resumed_s == Approx(30));
  // The switch time bounds fast-forwarded decode runs, which sums their step times in another
  // order: equal to rounding.
  CHECK(b->throughput_tokens_per_s == Approx(a->throughput_tokens_per_s).epsilon(1e-9));
  CHECK(b->ttft_p99_ms == Approx(a->ttft_p99_ms).epsilon(1e-6));
  CHECK(b->tpot_p99_ms == Approx(a->tpot_p99_ms).epsilon(1e-6));
  CHECK(b->iterations == a->iterations);
}

TEST_CASE("Simulator: a tail trigger fires once a completion leaves that few in the system",
          "[sim][plan]") {
  DeepSeek ds;
  SimulationSpec spec = ds.Spec(Scenario::kOffline);
  spec.scenario.min_duration_s = 0;
  Simulator sim(spec, OfflineSource(MlperfSet(), 2000, 3));
  int64_t done = 0;
  sim.set_on_complete([&](const RequestRecord&) { ++done; });
  ConfigSwitch sw;
  sw.when = {SwitchTrigger::Kind::kInSystemAtMost, 100};
  sw.in_place = true;
  sw.engine = spec.engine;
  REQUIRE(sim.ScheduleSwitch(sw).ok());
  // Not at the first arrivals, when fewer than 100 are in yet: only on the way down.
  REQUIRE(sim.Advance(FromSeconds(1)).ok());
  auto r = sim.Run();
  REQUIRE(r.ok());
  REQUIRE(r->switches.size() == 1);
  CHECK(r->switches[0].triggered_s > 10);
  CHECK(r->switches[0].triggered_s < r->duration_s);

  Simulator disagg_sim(
      [&] {
        SimulationSpec d = spec;
        d.decode_pool = d.pool;
        return d;
      }(),
      OfflineSource(MlperfSet(), 10, 3));
  CHECK(disagg_sim.ScheduleSwitch(sw).message().find("aggregated") != std::string::npos);
  Simulator no_bandwidth(spec, OfflineSource(MlperfSet(), 10, 3));
  ConfigSwitch migrate;
  migrate.pool = spec.pool;
  migrate.engine = spec.engine;
  CHECK(no_bandwidth.ScheduleSwitch(migrate).message().find("bandwidth") != std::string::npos);
}

TEST_CASE("Simulator: a predicted queue order takes the longest or shortest outputs first",
          "[sim][plan]") {
  FakeTime time(0.01, false);
  std::vector<traces::Request> data = Dataset(6, 10, 0);
  const int64_t outputs[] = {30, 90, 10, 50, 70, 20};
  for (int i = 0; i < 6; ++i) data[i].output_tokens = outputs[i];
  auto order_of = [&](QueueOrder order, double sigma, Scenario scenario) {
    SimulationSpec spec = SingleSlot(&time);
    spec.scenario.scenario = scenario;
    spec.engine.queue_order = order;
    spec.engine.prediction_sigma = sigma;
    std::vector<std::pair<traces::Request, double>> items;
    // Server: the first request starts before the others arrive.
    for (const traces::Request& r : data)
      items.emplace_back(r, scenario == Scenario::kServer && r.id > 0 ? 0.001 : 0.0);
    Simulator sim(spec, TimedSource(items));
    std::vector<int64_t> done;
    sim.set_on_complete([&](const RequestRecord& r) { done.push_back(r.output); });
    REQUIRE(sim.Run().ok());
    return done;
  };
  using V = std::vector<int64_t>;
  for (Scenario scenario : {Scenario::kOffline, Scenario::kServer}) {
    CHECK(order_of(QueueOrder::kFifo, 0, scenario) == V{30, 90, 10, 50, 70, 20});
    const V longest = order_of(QueueOrder::kLongestFirst, 0, scenario);
    const V shortest = order_of(QueueOrder::kShortestFirst, 0, scenario);
    if (scenario == Scenario::kOffline) {
      CHECK(longest == V{90, 70, 50, 30, 20, 10});
      CHECK(shortest == V{10, 20, 30, 50, 70, 90});
    } else {
      CHECK(longest == V{30, 90, 70, 50, 20, 10});
      CHECK(shortest == V{30, 10, 20, 50, 70, 90});
    }
  }
  // A predictor's error reorders some, the same way on every run.
  const V noisy = order_of(QueueOrder::kLongestFirst, 1.0, Scenario::kOffline);
  CHECK(noisy != V{90, 70, 50, 30, 20, 10});
  CHECK(noisy == order_of(QueueOrder::kLongestFirst, 1.0, Scenario::kOffline));
  // By the prompt's length, which needs no predictor: exact whatever its error.
  const int64_t inputs[] = {3, 9, 1, 5, 7, 2};
  for (int i = 0; i < 6; ++i) data[i].input_tokens = inputs[i];
  CHECK(order_of(QueueOrder::kLongestInputFirst, 1.0, Scenario::kOffline) ==
        V{90, 70, 50, 30, 20, 10});
  CHECK(order_of(QueueOrder::kShortestInputFirst, 1.0, Scenario::kOffline) ==
        V{10, 20, 30, 50, 70, 90});
  CHECK(order_of(QueueOrder::kShortestInputFirst, 1.0, Scenario::kServer) ==
        V{30, 10, 20, 50, 70, 90});
}

TEST_CASE("Simulator: cycling switches fire each time their trigger holds again", "[sim][plan]") {
  DeepSeek ds;
  SimulationSpec spec = ds.Spec(Scenario::kServer);
  spec.scenario.min_duration_s = 0;
  Simulator sim(spec, PoissonSource(MlperfSet(), 2000, 4.0, 3));
  ConfigSwitch up, down;
  up.when = {SwitchTrigger::Kind::kInSystemAtLeast, 145};
  up.in_place = true;
  up.engine = spec.engine;
  up.engine.max_batch = 1024;
  down = up;
  down.when = {SwitchTrigger::Kind::kInSystemAtMost, 135};
  down.engine.max_batch = 512;
  REQUIRE(sim.ScheduleSwitch(up).ok());
  REQUIRE(sim.ScheduleSwitch(down).ok());
  sim.set_cycle_switches(true);
  auto r = sim.Run();
  REQUIRE(r.ok());
  CHECK(r->completed_requests == 2000);
  // The queue hovers around 140 at 4 QPS: the rule flips the batch limit back and forth.
  REQUIRE(r->switches.size() >= 6);
  for (size_t i = 1; i < r->switches.size(); ++i)
    CHECK(r->switches[i].triggered_s >= r->switches[i - 1].triggered_s);
}

}  // namespace fathom::sim
