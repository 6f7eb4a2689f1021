#include "tuner/search/tuner.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "base/files.h"
#include "base/format.h"
#include "models/cost_model.h"
#include "models/memory.h"
#include "sim/mlperf.h"
#include "sim/simulator.h"
#include "sim/time_model.h"
#include "traces/benchmark.h"
#include "tuner/search/launch.h"

namespace fathom::tuner {
namespace {

// The v5.1 stack's calibration: a fixed one keeps the tests' figures put as newer stacks arrive.
models::CostParams ShippedParams() {
  return models::LoadCalibration(DataDir() + "/models/calibration/trtllm-1.0.json")->params;
}

// A host whose per-iteration work outlasts the operators: where async scheduling and multi-step
// runs show.
models::CostParams HostBoundParams() {
  models::CostParams p = ShippedParams();
  p.iteration_overhead_us = 20000;
  p.per_sequence_overhead_us = 0;
  return p;
}

TuneOptions SmallOptions(sim::Scenario scenario,
                         const models::CostParams& params = ShippedParams()) {
  TuneOptions o;
  o.space.model = "llama2-70b";
  o.space.hardware = "h200";
  o.space.gpus = 4;
  o.space.scenario = scenario;
  o.space.weights = {"fp8"};
  o.space.max_batch = {16, 64, 256};
  o.space.max_num_tokens = {2048, 8192};
  o.space.disaggregated = scenario != sim::Scenario::kOffline;
  o.benchmark = "llama2-70b";  // its p99 limits
  for (int i = 0; i < 120; ++i) {
    traces::Request r;
    r.id = i;
    r.input_tokens = 200 + (i * 37) % 800;
    r.output_tokens = 50 + (i * 53) % 300;
    o.dataset.push_back(r);
  }
  o.probe_duration_s = 60;
  o.qps_steps = 5;
  o.jobs = 2;
  o.make_time = sim::CalibratedFactory(params, nullptr);
  return o;
}

models::HardwareCatalog Catalog() { return *models::HardwareCatalog::LoadBuiltin(); }

}  // namespace

TEST_CASE("Tune: pruning by bound never loses the best candidate of an exhaustive search",
          "[tuner]") {
  // The shipped calibration, and one whose per-iteration host cost dwarfs the operators: there
  // pipelines run fewer, larger microbatches than they have stages, which the bound must allow.
  for (const models::CostParams& params : {ShippedParams(), HostBoundParams()}) {
    for (sim::Scenario scenario : {sim::Scenario::kOffline, sim::Scenario::kServer}) {
      TuneOptions o = SmallOptions(scenario, params);
      o.prune = false;
      auto exhaustive = Tune(o, Catalog());
      REQUIRE(exhaustive.ok());
      o.prune = true;
      auto pruned = Tune(o, Catalog());
      REQUIRE(pruned.ok());
      REQUIRE_FALSE(exhaustive->ranked.empty());
      CHECK(pruned->pruned > 0);
      CHECK(pruned->evaluated + pruned->pruned == exhaustive->evaluated);
      // Offline, the screen by shorter runs prunes some of what the bounds let through.
      if (scenario == sim::Scenario::kOffline) CHECK(pruned->screened > 0);
      const bool server = scenario != sim::Scenario::kOffline;
      const double found = pruned->ranked.front().Objective(server),
                   best = exhaustive->ranked.front().Objective(server);
      if (server) {
        // A QPS search of a few steps stops within a grid step (2%) of a candidate's capacity,
        // where it starts from the best found so far, which depends on which thread finished
        // first.
        CHECK(found >= best / 1.02 * (1 - 1e-9));
      } else {
        CHECK(found == best);
        CHECK(CandidateKey(pruned->ranked.front().config) ==
              CandidateKey(exhaustive->ranked.front().config));
        // What it ranks, the exhaustive search ranks with the same figures.
        for (const auto& c : pruned->ranked) {
          const auto same = std::find_if(
              exhaustive->ranked.begin(), exhaustive->ranked.end(),
              [&](const auto& e) { return CandidateKey(e.config) == CandidateKey(c.config); });
          REQUIRE(same != exhaustive->ranked.end());
          CHECK(c == *same);
        }
      }
      // Every candidate's bound is above what it achieved.
      for (const auto& c : exhaustive->ranked) {
        INFO(CandidateKey(c.config));
        CHECK(c.bound >= c.Objective(server));
      }
    }
  }
}

TEST_CASE("Evaluate: the bound counts the prompts' prefill, except with prefix caching",
          "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kOffline);
  o.offline_samples = 20;
  sim::DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.gpus = 1;
  d.tp = 1;
  d.ep = 1;
  d.attn_dp = 1;
  d.weights = "fp8";
  d.kv = "fp8";
  d.engine.max_batch = 64;
  auto bound = [&](int64_t input, bool prefix_caching) {
    for (auto& r : o.dataset) r.input_tokens = input;
    d.engine.prefix_caching = prefix_caching;
    auto c = Evaluate(d, o, Catalog());
    INFO(c.status().message());
    REQUIRE(c.ok());
    CHECK(c->bound >= c->Objective(false));
    return c->bound;
  };
  // Prefix caching makes no prompt token certain work, so its bound leaves the prefill out.
  CHECK(bound(2000, false) < bound(2000, true));
  CHECK(bound(2000, false) < bound(200, false));
}

TEST_CASE("Evaluate: a disaggregated deployment's bound counts what its prefill pool can take",
          "[tuner]") {
  // Long prompts, short answers: the prefill pool does most of the work, so moving a GPU from
  // decode to prefill raises the bound, where the decode side's alone would fall.
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  for (auto& r : o.dataset) {
    r.input_tokens = 3000;
    r.output_tokens = 40;
  }
  o.probe_duration_s = 30;
  sim::DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.gpus = 4;
  d.weights = "fp8";
  d.kv = "fp8";
  d.disaggregated = true;
  d.engine.max_batch = 64;
  d.engine.max_num_tokens = 4096;
  auto evaluate = [&](int prefill_instances) {
    d.prefill.instances = prefill_instances;
    d.decode.instances = 4 - prefill_instances;
    auto c = Evaluate(d, o, Catalog());
    INFO(c.status().message());
    REQUIRE(c.ok());
    REQUIRE(c->valid);
    CHECK(c->bound >= c->Objective(true));
    return *c;
  };
  const CandidateResult one = evaluate(1), two = evaluate(2);
  CHECK(one.bound < two.bound);
  CHECK(one.Objective(true) < two.Objective(true));
}

TEST_CASE("Tune: the progress callback hears of every candidate, the last with the final counts",
          "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kOffline);
  std::vector<TuneProgress> heard;
  o.progress = [&](const TuneProgress& p) { heard.push_back(p); };  // called one at a time
  auto r = Tune(o, Catalog());
  REQUIRE(r.ok());
  REQUIRE_FALSE(heard.empty());
  const TuneProgress& last = heard.back();
  CHECK(last.done == last.total);
  CHECK(static_cast<int64_t>(heard.size()) == last.total);
  CHECK(last.simulated + last.pruned == last.total);
  CHECK(last.simulated == r->evaluated);
  CHECK(last.best == r->ranked.front().Objective(false));
}

TEST_CASE("Tune: on_run hears of every simulation and changes nothing of the outcome", "[tuner]") {
  for (const sim::Scenario scenario : {sim::Scenario::kServer, sim::Scenario::kOffline}) {
    const bool server = scenario == sim::Scenario::kServer;
    TuneOptions o = SmallOptions(scenario);
    o.jobs = 1;  // one thread: the same runs every time
    const auto quiet = Tune(o, Catalog());
    std::mutex mu;
    std::vector<TuneRun> runs;
    o.on_run = [&](const TuneRun& r) {
      std::lock_guard<std::mutex> lock(mu);
      runs.push_back(r);
    };
    const auto heard = Tune(o, Catalog());
    REQUIRE(quiet.ok());
    REQUIRE(heard.ok());
    CHECK(heard->ranked == quiet->ranked);
    CHECK(heard->evaluated == quiet->evaluated);
    std::set<std::string> keys;
    for (const TuneRun& r : runs) {
      keys.insert(CandidateKey(r.config));
      CHECK(r.wall_s >= 0);
      CHECK(r.completed <= r.samples);
      if (server) {
        CHECK(r.qps > 0);
        // A probe stopped early broke a limit; one that passed ran every request.
        CHECK((r.outcome == "valid" || r.outcome == "TTFT" || r.outcome == "TPOT" ||
               r.outcome == "TTFT and TPOT"));
        if (r.outcome == "valid") CHECK((!r.stopped_early && r.completed == r.samples));
      } else {
        CHECK(r.qps == 0);
        CHECK((r.outcome == "done" || r.outcome == "gave up"));
        CHECK(r.simulated_s > 0);  // a run that gave up says how far it got
      }
    }
    // Every candidate simulated ran at least one simulation of its own or a batch sibling's, and
    // the best's figures come from a run that was heard.
    CHECK(static_cast<int64_t>(keys.size()) >= 1);
    CHECK(static_cast<int64_t>(runs.size()) >= static_cast<int64_t>(keys.size()));
    const CandidateResult& best = heard->ranked.front();
    const bool best_heard = std::any_of(runs.begin(), runs.end(), [&](const TuneRun& r) {
      return server ? r.outcome == "valid" && std::abs(r.qps - best.qps) < 1e-9 * best.qps
                    : r.outcome == "done" && r.completed == r.samples &&
                          best.run_samples % r.samples == 0;
    });
    CHECK(best_heard);
  }
}

TEST_CASE("Tune: the same outcome on 1, 2 and 5 threads, candidate for candidate", "[tuner]") {
  for (const sim::Scenario scenario : {sim::Scenario::kServer, sim::Scenario::kOffline}) {
    INFO(sim::Name(scenario));
    TuneOptions o = SmallOptions(scenario);
    o.jobs = 1;
    auto one = Tune(o, Catalog());
    REQUIRE(one.ok());
    for (const int jobs : {2, 5}) {
      o.jobs = jobs;
      auto many = Tune(o, Catalog());
      REQUIRE(many.ok());
      CHECK(many->simulated == one->simulated);
      CHECK(many->evaluated == one->evaluated);
      CHECK(many->pruned == one->pruned);
    }
  }
}

// Computes a SearchRun task as a worker would (a probe, or an evaluation from the probes run) and
// hands its result back.
void Compute(SearchRun* run, const PreparedTune& prepared, const TuneOptions& o,
             const SearchRun::Task& t) {
  const sim::DeploymentConfig& d = prepared.candidates.feasible[t.candidate];
  if (t.probe) {
    auto p = RunProbe(d, o, Catalog(), *t.probe);
    REQUIRE(p.ok());
    run->FinishProbe(t, *p);
    return;
  }
  auto r = Evaluate(d, o, Catalog(), t.beat, run->Memo(t.candidate));
  REQUIRE(r.ok());
  REQUIRE(run->Finish(t, *r).ok());
}

TEST_CASE("SearchRun: a probe dropped once the best passed its rate is never asked for again",
          "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  o.jobs = 1;
  auto prepared = Prepare(o, Catalog());
  REQUIRE(prepared.ok());
  const SearchLog none;
  auto want = Search(o, Catalog(), *prepared, none);
  REQUIRE(want.ok());
  auto run = SearchRun::Start(o, Catalog(), *prepared, none);
  REQUIRE(run.ok());
  // Up to 8 out at once, the earliest back first (so the best rises while later candidates' probes
  // are out); after each result the tasks still out are offered to Drop, as a work pool does.
  std::vector<SearchRun::Task> out;
  std::set<std::pair<size_t, int64_t>> dropped;
  while (!run->done()) {
    while (out.size() < 8) {
      std::optional<SearchRun::Task> t = run->Peek();
      if (!t) break;
      if (t->probe) CHECK_FALSE(dropped.contains({t->candidate, *t->probe}));
      run->Take(*t);
      out.push_back(*t);
    }
    REQUIRE_FALSE(out.empty());
    const SearchRun::Task t = out.front();
    out.erase(out.begin());
    Compute(&*run, *prepared, o, t);
    std::erase_if(out, [&](const SearchRun::Task& u) {
      if (!run->Drop(u)) return false;
      REQUIRE(u.probe);  // only probes are dropped
      dropped.insert({u.candidate, *u.probe});
      return true;
    });
  }
  CHECK_FALSE(dropped.empty());
  const TuneResult got = run->Outcome();
  CHECK(got.simulated == want->simulated);
  CHECK(got.evaluated == want->evaluated);
  CHECK(got.pruned == want->pruned);
  REQUIRE(got.ranked.size() == want->ranked.size());
  for (size_t i = 0; i < got.ranked.size(); ++i) CHECK(got.ranked[i].qps == want->ranked[i].qps);
}

TEST_CASE(
    "SearchRun: a probe waits while a batch sibling runs the same rate, if other work is at hand",
    "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  // Long contexts: the KV cache holds fewer sequences than either batch limit, so siblings are
  // bounded and ordered alike and their searches probe the same rates.
  o.space.max_batch = {256, 512};
  for (traces::Request& r : o.dataset) {
    r.input_tokens += 3000;
    r.output_tokens += 600;
  }
  auto prepared = Prepare(o, Catalog());
  REQUIRE(prepared.ok());
  auto siblings = [&](size_t a, size_t b) {
    sim::DeploymentConfig x = prepared->candidates.feasible[a];
    sim::DeploymentConfig y = prepared->candidates.feasible[b];
    x.engine.max_batch = y.engine.max_batch = 0;
    x.engine.max_concurrency = y.engine.max_concurrency = 0;
    return x == y;
  };
  const SearchLog none;
  auto run = SearchRun::Start(o, Catalog(), *prepared, none);
  REQUIRE(run.ok());
  // Two workers, the earlier task back first: no probe goes out beside its sibling's at its rate.
  std::vector<SearchRun::Task> out;
  int together = 0;
  while (!run->done()) {
    while (out.size() < 2) {
      std::optional<SearchRun::Task> t = run->Peek();
      if (!t) break;
      for (const SearchRun::Task& u : out) {
        together +=
            t->probe && u.probe && *t->probe == *u.probe && siblings(t->candidate, u.candidate);
      }
      run->Take(*t);
      out.push_back(*t);
    }
    REQUIRE_FALSE(out.empty());
    const SearchRun::Task t = out.front();
    out.erase(out.begin());
    if (t.probe) {  // into the candidate's memo, which shares it with the siblings
      const auto p = RunProbe(prepared->candidates.feasible[t.candidate], o, Catalog(), *t.probe,
                              run->Memo(t.candidate));
      REQUIRE(p.ok());
      run->FinishProbe(t, *p);
    } else {
      Compute(&*run, *prepared, o, t);
    }
  }
  CHECK(together == 0);
  CHECK(run->Outcome().shared_probes > 0);
}

TEST_CASE("SearchRun: results handed back in the worst order give the one-thread outcome",
          "[tuner]") {
  for (const sim::Scenario scenario : {sim::Scenario::kServer, sim::Scenario::kOffline}) {
    INFO(sim::Name(scenario));
    TuneOptions o = SmallOptions(scenario);
    o.jobs = 1;
    auto prepared = Prepare(o, Catalog());
    REQUIRE(prepared.ok());
    const SearchLog none;
    auto want = Search(o, Catalog(), *prepared, none);
    REQUIRE(want.ok());
    auto run = SearchRun::Start(o, Catalog(), *prepared, none);
    REQUIRE(run.ok());
    // Up to 4 candidates out at once, the latest handed back first: each is simulated against
    // the best taken when it went out, before the results ahead of it are in.
    std::vector<SearchRun::Task> out;
    while (!run->done()) {
      while (out.size() < 4) {
        std::optional<SearchRun::Task> t = run->Peek();
        if (!t) break;
        run->Take(*t);
        out.push_back(*t);
      }
      REQUIRE_FALSE(out.empty());
      const SearchRun::Task t = out.back();
      out.pop_back();
      Compute(&*run, *prepared, o, t);
    }
    const TuneResult got = run->Outcome();
    CHECK(got.simulated == want->simulated);
    CHECK(got.evaluated == want->evaluated);
    CHECK(got.pruned == want->pruned);
    // Some results were computed against a best that then changed, or for a candidate pruned
    // before its turn, and were not used.
    CHECK(run->wasted() > 0);
    // Server: searches went out a probe at a time, and workers ran probes ahead of them; results
    // that a new best made stale went back to be searched again before their turn.
    if (scenario == sim::Scenario::kServer) {
      CHECK(run->probes_ahead() > 0);
      CHECK(run->requeued() > 0);
    }
  }
}

TEST_CASE("Tune: a resumed sweep re-simulates nothing and answers as an uninterrupted one",
          "[tuner]") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string db = (dir / "fathom_tune_resume.db").string();
  const std::string fresh_db = (dir / "fathom_tune_fresh.db").string();
  std::filesystem::remove(db);
  std::filesystem::remove(fresh_db);
  TuneOptions o = SmallOptions(sim::Scenario::kOffline);
  o.prune = false;
  o.sweep_id = "resume-test";
  o.db_path = db;
  // An interrupted sweep: only part of the space got simulated and stored.
  TuneOptions partial = o;
  partial.space.max_batch = {16};
  auto first = Tune(partial, Catalog());
  INFO(first.status().message());
  REQUIRE(first.ok());
  CHECK(first->evaluated > 0);
  // Resuming: the stored candidates are read back, the rest simulated.
  auto resumed = Tune(o, Catalog());
  REQUIRE(resumed.ok());
  CHECK(resumed->reused == first->evaluated);
  CHECK(resumed->evaluated == resumed->candidates - first->evaluated);
  // Once more: everything comes from the store.
  auto again = Tune(o, Catalog());
  CHECK(again->evaluated == 0);
  CHECK(again->reused == again->candidates);
  // The same answer as an uninterrupted sweep.
  TuneOptions clean = o;
  clean.db_path = fresh_db;
  auto uninterrupted = Tune(clean, Catalog());
  REQUIRE(uninterrupted.ok());
  REQUIRE(resumed->ranked.size() == uninterrupted->ranked.size());
  CHECK(CandidateKey(resumed->ranked.front().config) ==
        CandidateKey(uninterrupted->ranked.front().config));
  CHECK(resumed->ranked.front().throughput_tokens_per_s ==
        Approx(uninterrupted->ranked.front().throughput_tokens_per_s).epsilon(1e-12));
  std::filesystem::remove(db);
  std::filesystem::remove(fresh_db);
}

TEST_CASE(
    "Tune: a resumed pruned sweep prunes what the first run pruned, whatever the thread order",
    "[tuner]") {
  const std::string db =
      (std::filesystem::temp_directory_path() / "fathom_tune_resume_pruned.db").string();
  std::filesystem::remove(db);
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  o.sweep_id = "resume-pruned";
  o.db_path = db;
  auto first = Tune(o, Catalog());
  INFO(first.status().message());
  REQUIRE(first.ok());
  REQUIRE(first->pruned > 0);
  // Many threads reach unstored (pruned) candidates before the stored best is read back.
  o.jobs = 16;
  for (int run = 0; run < 5; ++run) {
    auto again = Tune(o, Catalog());
    REQUIRE(again.ok());
    CHECK(again->evaluated == 0);
    CHECK(again->reused == first->evaluated);
    CHECK(again->pruned == first->pruned);
    CHECK(CandidateKey(again->ranked.front().config) == CandidateKey(first->ranked.front().config));
  }
  std::filesystem::remove(db);
}

TEST_CASE(
    "Evaluate: an Offline run is whole data sets lasting LoadGen's 1.1 x 600 s or the benchmark's "
    "run",
    "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kOffline);
  auto cands = Enumerate(o.space, Catalog());
  REQUIRE(cands.ok());
  REQUIRE_FALSE(cands->feasible.empty());
  const sim::DeploymentConfig& d = cands->feasible.front();
  const auto size = static_cast<int64_t>(o.dataset.size());
  o.offline_samples = size;  // one pass: mostly ramp and drain
  auto one = Evaluate(d, o, Catalog());
  o.offline_samples = 0;  // the default
  auto run = Evaluate(d, o, Catalog());
  REQUIRE(one.ok());
  REQUIRE(run.ok());
  CHECK(run->run_s >= 660);
  CHECK(run->run_samples % size == 0);
  CHECK(run->throughput_tokens_per_s > one->throughput_tokens_per_s);  // less of the drain
  // Fewer whole data sets would not have lasted long enough.
  const int64_t instances = d.gpus / (d.tp * d.pp);
  o.offline_samples = run->run_samples - size * instances;
  auto shorter = Evaluate(d, o, Catalog());
  REQUIRE(shorter.ok());
  CHECK(shorter->run_s < 660 * 1.5);

  // DeepSeek-R1's benchmark runs as long as the published v6.0 runs (4,520 s).
  TuneOptions r1 = o;
  r1.offline_samples = 0;
  r1.benchmark = "deepseek-r1";
  r1.space.model = "deepseek-r1";
  r1.space.hardware = "b200";
  r1.space.gpus = 8;
  r1.space.weights = {"fp4"};
  r1.space.kv = {"fp8"};
  r1.space.max_batch = {512};
  r1.space.max_num_tokens = {4096};
  r1.dataset =
      *traces::BenchmarkDataset(*traces::FindBenchmark(traces::MlperfBenchmarks(), "deepseek-r1"));
  sim::DeploymentConfig adp;
  adp.engine.max_batch = 512;
  auto dsr1 = Evaluate(adp, r1, Catalog());
  REQUIRE(dsr1.ok());
  CHECK(dsr1->run_s >= 4520);
  CHECK(dsr1->run_samples % 4388 == 0);
}

namespace {

// `instances` aggregated TP2 instances of Llama 2 70B on H200.
sim::DeploymentConfig Llama2Tp2Instances(int instances) {
  sim::DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.weights = "fp8";
  d.tp = 2;
  d.ep = 1;
  d.attn_dp = 1;
  d.engine.max_batch = 64;
  d.engine.max_num_tokens = 4096;
  d.gpus = 2 * instances;
  return d;
}

// One Llama 2 70B TP2 instance of `stages` pipeline stages at batch limit `max_batch`: batch
// siblings of each other.
sim::DeploymentConfig Llama2Tp2WithBatch(int64_t max_batch, int stages = 1) {
  sim::DeploymentConfig d = Llama2Tp2Instances(1);
  d.pp = stages;
  d.gpus = 2 * stages;
  d.engine.max_batch = max_batch;
  return d;
}

RunLimits LimitsOf(const sim::DeploymentConfig& d, const TuneOptions& o) {
  return RunLimits::Of(**sim::Resolve(d, Catalog(), o.make_time));
}

// The memos of three batch siblings of `stages` stages joined to `siblings`: the one a probe runs
// on (batch limit 256), one with more room (384) and one whose limit a light load reaches (2).
struct SiblingMemos {
  ProbeMemo ran, wider, narrow;
  SiblingMemos(const TuneOptions& o, int stages, const std::shared_ptr<BatchSiblings>& siblings) {
    ran.JoinSiblings(siblings, LimitsOf(Llama2Tp2WithBatch(256, stages), o));
    wider.JoinSiblings(siblings, LimitsOf(Llama2Tp2WithBatch(384, stages), o));
    narrow.JoinSiblings(siblings, LimitsOf(Llama2Tp2WithBatch(2, stages), o));
  }
};

TEST_CASE("Evaluate: a QPS search takes its probes from the memo and adds those it runs",
          "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  o.probe_duration_s = 300;
  const sim::DeploymentConfig d = Llama2Tp2Instances(1);
  const auto plain = Evaluate(d, o, Catalog());
  REQUIRE(plain.ok());
  REQUIRE(plain->valid);
  ProbeMemo memo;
  const auto first = Evaluate(d, o, Catalog(), 0, &memo);
  REQUIRE(first.ok());
  CHECK(*first == *plain);
  const std::map<int64_t, ProbeOutcome> probes = memo.Probes();
  CHECK(probes.size() >= 2);  // a bisection: at least one rate failed and one passed
  // A memo whose outcomes were altered answers with them: nothing was simulated again.
  ProbeMemo altered;
  for (auto [k, p] : probes) {
    p.duration_s = 12345;
    altered.Put(k, p);
  }
  const auto again = Evaluate(d, o, Catalog(), 0, &altered);
  REQUIRE(again.ok());
  CHECK(again->qps == plain->qps);
  CHECK(again->run_s == 12345);
  // Against a best, the search reads the probe above it from the memo too.
  const auto above = Evaluate(d, o, Catalog(), plain->qps / 1.03, &altered);
  REQUIRE(above.ok());
  CHECK(altered.Probes().size() >= probes.size());
  // The memo goes over the wire (a sweep's workers) and back unchanged.
  ProbeMemo read;
  REQUIRE(read.AddJson(Json::parse(memo.ToJson().dump()), "memo").ok());
  CHECK(read.Probes() == probes);
  ProbeMemo bad;
  const Status s = bad.AddJson(Json::parse(R"({"x1": {"valid": true}})"), "unit 7");
  CHECK(s.message().find("unit 7: probes: key 'x1': must be a grid rate index") !=
        std::string::npos);
}

}  // namespace

TEST_CASE(
    "RunProbe: a probe stands for a batch sibling's only where it stayed clear of both's limits",
    "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  auto with_batch = [](int64_t max_batch) { return Llama2Tp2WithBatch(max_batch); };
  auto limits = [&](const sim::DeploymentConfig& d) { return LimitsOf(d, o); };
  auto siblings = std::make_shared<BatchSiblings>();
  SiblingMemos memos(o, /*stages=*/1, siblings);
  ProbeMemo &ran = memos.ran, &wider = memos.wider, &narrow = memos.narrow;
  constexpr int64_t k = 0;  // 1 QPS: a few sequences at a time, more than 2
  const auto probe = RunProbe(with_batch(256), o, Catalog(), k, &ran);
  REQUIRE(probe.ok());
  // A sibling with room for more sequences, a smaller KV cache (a larger logits buffer) and one
  // more CUDA graph (384, beyond the batches run) gets the probe, equal to its own run.
  const std::optional<ProbeOutcome> shared = wider.Find(k);
  REQUIRE(shared.has_value());
  const auto own = RunProbe(with_batch(384), o, Catalog(), k);
  REQUIRE(own.ok());
  CHECK(*shared == *own);
  CHECK(wider.Probes().count(k) == 1);  // taken as its own (it goes over the wire with it)
  // A sweep's worker sends the run's slack with the probe, and the memo that reads it shares it.
  auto coordinator = std::make_shared<BatchSiblings>();
  ProbeMemo read, sibling;
  read.JoinSiblings(coordinator, limits(with_batch(256)));
  sibling.JoinSiblings(coordinator, limits(with_batch(384)));
  REQUIRE(read.AddJson(Json::parse(ran.ToJson().dump()), "a worker").ok());
  CHECK(sibling.Find(k) == shared);
  const Status bad = ProbeMemo().AddJson(
      Json::parse(R"({"3": {"valid": true, "slack": {"peak_running": "x"}}})"), "a worker");
  CHECK(bad.message().find("a worker: probe 3: slack") != std::string::npos);
  CHECK(bad.message().find("peak_running") != std::string::npos);
  // One whose limit the run passed does not, and its own run differs.
  CHECK_FALSE(narrow.Find(k).has_value());
  const auto capped = RunProbe(with_batch(2), o, Catalog(), k);
  REQUIRE(capped.ok());
  CHECK_FALSE(*capped == *probe);

  // The client's limit on requests in flight (the tuner sizes it from max_batch): one above the
  // most the run had in flight on its instance holds nothing back, one below it does.
  const int64_t peak = ran.ToJson()[std::to_string(k)]["slack"]["peak_instance_in_flight"];
  REQUIRE(peak > 2);
  auto with_client_limit = [&](int64_t limit) {
    sim::DeploymentConfig d = with_batch(384);
    d.engine.max_concurrency = limit;
    return d;
  };
  ProbeMemo roomy, held;
  roomy.JoinSiblings(siblings, limits(with_client_limit(peak + 1)));
  held.JoinSiblings(siblings, limits(with_client_limit(peak - 1)));
  const std::optional<ProbeOutcome> unheld = roomy.Find(k);
  REQUIRE(unheld.has_value());
  const auto roomy_own = RunProbe(with_client_limit(peak + 1), o, Catalog(), k);
  REQUIRE(roomy_own.ok());
  CHECK(*unheld == *roomy_own);
  CHECK_FALSE(held.Find(k).has_value());
  const auto held_own = RunProbe(with_client_limit(peak - 1), o, Catalog(), k);
  REQUIRE(held_own.ok());
  CHECK_FALSE(*held_own == *probe);
  // A probe from a store that did not record it stands for no sibling with another client limit.
  Json old = ran.ToJson();
  old[std::to_string(k)]["slack"].erase("peak_instance_in_flight");
  auto older = std::make_shared<BatchSiblings>();
  ProbeMemo old_read, old_sibling;
  old_read.JoinSiblings(older, limits(with_batch(256)));
  old_sibling.JoinSiblings(older, limits(with_client_limit(peak + 1)));
  REQUIRE(old_read.AddJson(Json::parse(old.dump()), "a store").ok());
  CHECK_FALSE(old_sibling.Find(k).has_value());
}

TEST_CASE("RunProbe: a pipeline's probe stands for a batch sibling's too, below both's limits",
          "[tuner]") {
  // Fewer sequences running than max_batch leave every microbatch below it: the same run.
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  auto with_batch = [](int64_t max_batch) { return Llama2Tp2WithBatch(max_batch, /*stages=*/2); };
  SiblingMemos memos(o, /*stages=*/2, std::make_shared<BatchSiblings>());
  constexpr int64_t k = 0;  // 1 QPS: a few sequences at a time, more than 2
  REQUIRE(RunProbe(with_batch(256), o, Catalog(), k, &memos.ran).ok());
  const std::optional<ProbeOutcome> shared = memos.wider.Find(k);
  REQUIRE(shared.has_value());
  const auto own = RunProbe(with_batch(384), o, Catalog(), k);
  REQUIRE(own.ok());
  CHECK(*shared == *own);
  CHECK_FALSE(memos.narrow.Find(k).has_value());
  const auto capped = RunProbe(with_batch(2), o, Catalog(), k);
  REQUIRE(capped.ok());
  CHECK_FALSE(*capped == *own);
}

// Tunes `o` unpruned (every candidate searched from nothing, as Evaluate searches it alone) with
// batch limits past the stack's smallest CUDA graph (128), so that light loads pad alike under
// each: siblings share runs, and every candidate's figures are those of its own search.
TuneResult TuneSharingAsAlone(TuneOptions o) {
  o.prune = false;
  o.space.max_batch = {256, 512, 1024};
  const auto res = Tune(o, Catalog());
  REQUIRE(res.ok());
  CHECK(res->shared_probes > 0);
  REQUIRE_FALSE(res->simulated.empty());
  for (const CandidateResult& c : res->simulated) {
    INFO(CandidateKey(c.config));
    const auto alone = Evaluate(c.config, o, Catalog());
    REQUIRE(alone.ok());
    CHECK(c == *alone);
  }
  return *res;
}

TEST_CASE("Tune: batch siblings' shared probes answer as each candidate's own search would",
          "[tuner]") {
  TuneSharingAsAlone(SmallOptions(sim::Scenario::kInteractive));
}

// A data set's one pass (120 samples) stays below each limit; the longer runs reach them.
TEST_CASE("Tune: batch siblings' shared Offline runs answer as each candidate's own search would",
          "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kOffline);
  const TuneResult all = TuneSharingAsAlone(o);
  // Pruned, the same best and figures.
  o.space.max_batch = {256, 512, 1024};
  const auto pruned = Tune(o, Catalog());
  REQUIRE(pruned.ok());
  REQUIRE_FALSE(pruned->ranked.empty());
  CHECK(pruned->ranked.front() == all.ranked.front());
}

TEST_CASE("RunLimits: a run stands for other limits only where every rule reading them agrees",
          "[tuner]") {
  RunLimits a;
  a.pool = {256, 1, false, 1000, {1, 2, 4, 8, 16}};
  const sim::LimitSlack slack{5, 100};  // 5 sequences at most, 100 blocks to spare
  auto other = [&](auto change) {
    RunLimits b = a;
    b.pool.max_batch = 512;
    change(b.pool);
    return a.SameRun(slack, {}, b);
  };
  CHECK(other([](RunLimits::Pool&) {}));
  CHECK(other([](RunLimits::Pool& p) { p.kv_blocks_per_rank = 900; }));  // 100 fewer blocks
  CHECK_FALSE(other([](RunLimits::Pool& p) { p.kv_blocks_per_rank = 899; }));
  CHECK_FALSE(other([](RunLimits::Pool& p) { p.max_batch = 5; }));  // the run reached it
  CHECK(other([](RunLimits::Pool& p) { p.max_batch = 6; }));
  CHECK_FALSE(other([](RunLimits::Pool& p) { p.stages = 2; }));
  // Pipelines alike: below both limits no microbatch reaches either.
  a.pool.stages = 2;
  CHECK(other([](RunLimits::Pool& p) { p.stages = 2; }));
  CHECK_FALSE(other([](RunLimits::Pool& p) {
    p.stages = 2;
    p.max_batch = 5;
  }));
  a.pool.stages = 1;
  // Batches of up to 5 sequences replay the graph of 8 under a, of 6 under these.
  CHECK_FALSE(other([](RunLimits::Pool& p) { p.graph_sizes = {1, 2, 4, 6}; }));
  CHECK(other([](RunLimits::Pool& p) { p.graph_sizes = {1, 2, 4, 8}; }));
  // Decode-first counts the batch crowded past half the limit.
  a.pool.decode_first = true;
  CHECK(other([](RunLimits::Pool& p) { p.decode_first = true; }));
  CHECK_FALSE(other([](RunLimits::Pool& p) {
    p.decode_first = true;
    p.max_batch = 9;
  }));
  a.pool.decode_first = false;
  // A run that waited for blocks, or evicted cached ones, stands only for its own limits.
  CHECK_FALSE(a.SameRun({5, -1}, {}, [&] {
    RunLimits b = a;
    b.pool.max_batch = 512;
    return b;
  }()));
  CHECK(a.SameRun({5, -1}, {}, a));
  // A disaggregated deployment's decode pool is held to the same rules with its own slack.
  a.decode = a.pool;
  RunLimits b = a;
  b.decode->max_batch = 4;
  CHECK_FALSE(a.SameRun(slack, slack, b));
  CHECK(a.SameRun(slack, {3, 100}, b));
}

// Identical replicas must add up: an Offline run of k instances is k times one instance's, and
// the tuner's one-instance shortcut agrees with simulating all of them.
TEST_CASE("Evaluate: n identical replicas give n x Offline throughput", "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kOffline);
  sim::DeploymentConfig d = Llama2Tp2Instances(1);
  auto single = Evaluate(d, o, Catalog());
  REQUIRE(single.ok());
  REQUIRE(single->valid);
  for (int k : {2, 4}) {
    d = Llama2Tp2Instances(k);
    auto many = Evaluate(d, o, Catalog());
    REQUIRE(many.ok());
    CHECK(many->throughput_tokens_per_s ==
          Approx(k * single->throughput_tokens_per_s).epsilon(0.03));
    CHECK(many->tokens_per_s_per_gpu == Approx(single->tokens_per_s_per_gpu).epsilon(0.03));
    // All k instances simulated together, behind the router, on as many samples.
    auto resolved = sim::Resolve(d, Catalog(), o.make_time);
    REQUIRE(resolved.ok());
    sim::ScenarioConfig sc;
    sc.scenario = sim::Scenario::kOffline;
    sc.min_duration_s = 0;
    (*resolved)->spec.scenario = sc;
    sim::Simulator whole(std::move((*resolved)->spec),
                         sim::OfflineSource(o.dataset, many->run_samples, o.seed));
    auto res = whole.Run();
    REQUIRE(res.ok());
    CHECK(res->throughput_tokens_per_s == Approx(many->throughput_tokens_per_s).epsilon(0.03));
  }
}

TEST_CASE(
    "Evaluate: an Offline candidate's first two runs predict its full-length tokens/s, and a best "
    "the prediction cannot reach stops it there",
    "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kOffline);
  for (const int instances : {1, 2}) {
    INFO(instances << " instances");
    const sim::DeploymentConfig d = Llama2Tp2Instances(instances);
    auto full = Evaluate(d, o, Catalog());
    REQUIRE(full.ok());
    REQUIRE(full->valid);
    REQUIRE(full->predicted_tokens_per_s > 0);
    CHECK_FALSE(full->screened);
    // Within the margin the screen allows, on this deployment much closer.
    CHECK(full->throughput_tokens_per_s < full->predicted_tokens_per_s * kScreenMargin);
    CHECK(full->throughput_tokens_per_s == Approx(full->predicted_tokens_per_s).epsilon(0.05));
    // A best just beyond the prediction's reach: stopped, with its bound and prediction only.
    const double reach = full->predicted_tokens_per_s * kScreenMargin;
    auto screened = Evaluate(d, o, Catalog(), reach * 1.001);
    REQUIRE(screened.ok());
    CHECK(screened->screened);
    CHECK(screened->PrunedByRun());
    CHECK_FALSE(screened->valid);
    CHECK(screened->run_samples == 0);
    CHECK(screened->predicted_tokens_per_s == 0);  // its second run stopped on its clock
    CHECK(screened->bound == full->bound);
    // Just within reach, of the prediction and of the full run's own tokens/s (the clock's
    // screen, next test): the whole run, as without a best.
    const double clock_reach = full->throughput_tokens_per_s * kScreenMargin;
    auto within = Evaluate(d, o, Catalog(), std::min(reach, clock_reach) * 0.999);
    REQUIRE(within.ok());
    CHECK(*within == *full);
  }
}

TEST_CASE(
    "ScreenedPastS: past it the second run's prediction stays below the floor, and just before it "
    "does not",
    "[tuner]") {
  // DeepSeek-R1-like runs (one pass ~600-900 s, a 4,520 s target) and short ones whose line's pass
  // count jumps often; floors from far below to far above what the runs predict.
  struct Runs {
    int64_t passes2;
    double s1, tokens_per_pass, target_s;
  };
  for (const Runs& r : {Runs{7, 729, 16.4e6, 4520}, Runs{5, 983, 16.4e6, 4520},
                        Runs{2, 300, 1e5, 700}, Runs{12, 120, 3e5, 2000}}) {
    // Predictions over every duration of the second run between the first's and the target.
    std::vector<std::pair<double, double>> line;
    const double step = (r.target_s - r.s1) / 200000;
    for (double s2 = r.s1 + step; s2 < r.target_s; s2 += step) {
      line.emplace_back(s2,
                        PredictedTokensPerS(1, r.s1, r.passes2, s2, r.tokens_per_pass, r.target_s));
    }
    const double highest = line.front().second, lowest = line.back().second;
    for (const double f : {0.5, 0.9, 0.99, 1.0, 1.01, 1.1, 2.0, 10.0}) {
      for (const double floor : {lowest * f, highest * f}) {
        INFO("passes2 " << r.passes2 << ", floor " << floor);
        const double past = ScreenedPastS(1, r.s1, r.passes2, r.tokens_per_pass, r.target_s, floor);
        CHECK(past > r.s1);
        CHECK(past <= r.target_s);
        double last_above = r.s1;  // the longest run still predicting the floor or more
        for (const auto& [s2, predicted] : line) {
          if (predicted >= floor) last_above = s2;
        }
        CHECK(last_above <= past * (1 + 1e-9));
        // Exact, not merely safe: within a grid step of the last duration at or above the floor,
        // or the target where it reaches that far.
        CHECK(past <= std::max(last_above + step, line.front().first));
      }
    }
  }
  // A data set with no output tokens predicts nothing: no early stop, and no endless search.
  CHECK(ScreenedPastS(1, 729, 7, 0, 4520, 1000) == 4520);
}

TEST_CASE("LeastSecondsLeft: never more than an Offline run has left, and most of it at first",
          "[tuner]") {
  const auto make_time = sim::CalibratedFactory(ShippedParams(), nullptr);
  const models::HardwareCatalog catalog = Catalog();
  // DeepSeek-R1 on 8xB200 (attention DP: decode cohorts, fast-forwarded steps) on its data set,
  // whose long outputs end the run in a thin drain the bound cannot see, and on equal requests
  // that keep its batches full, where the bound is nearly the run; Llama 2 70B over two H200s.
  const traces::Benchmark* b = traces::FindBenchmark(traces::MlperfBenchmarks(), "deepseek-r1");
  REQUIRE(b != nullptr);
  std::vector<traces::Request> equal(20000);
  for (size_t i = 0; i < equal.size(); ++i) {
    equal[i] = {static_cast<int64_t>(i), std::nullopt, 1000, 1000, {}};
  }
  struct Case {
    sim::DeploymentConfig d;
    std::vector<traces::Request> data;
    double least_share;  // of the whole run, at its start
    sim::TimeModelFactory make_time;
  };
  // And where the host's work rules, as vLLM's async scheduling (beside the GPU's) and multi-step
  // runs (a share of it a step) pay it.
  const auto host_time = sim::CalibratedFactory(HostBoundParams(), nullptr);
  sim::DeploymentConfig async = Llama2Tp2Instances(1), stepped = async;
  async.engine.async_scheduling = true;
  stepped.engine.scheduler_steps = 8;
  const std::vector<traces::Request> small = SmallOptions(sim::Scenario::kOffline).dataset;
  std::vector<traces::Request> many;  // enough to keep the batches full
  for (int copy = 0; copy < 20; ++copy) {
    for (traces::Request r : small) {
      r.id += copy * static_cast<int64_t>(small.size());
      many.push_back(r);
    }
  }
  const std::vector<Case> cases = {
      {sim::DeploymentConfig{}, *traces::BenchmarkDataset(*b), 0.3, make_time},
      {sim::DeploymentConfig{}, equal, 0.9, make_time},
      {Llama2Tp2Instances(1), small, 0.5, make_time},
      {async, many, 0.3, host_time},
      {stepped, many, 0.3, host_time}};
  for (const Case& c : cases) {
    INFO(c.d.model << ", async " << c.d.engine.async_scheduling << ", steps "
                   << c.d.engine.scheduler_steps);
    auto start = [&](std::unique_ptr<sim::ResolvedDeployment>* keep) {
      *keep = std::move(sim::Resolve(c.d, catalog, c.make_time)).value();
      (*keep)->spec.scenario.scenario = sim::Scenario::kOffline;
      (*keep)->spec.scenario.min_duration_s = 0;
      const auto n = static_cast<int64_t>(c.data.size());
      return std::make_unique<sim::Simulator>(std::move((*keep)->spec),
                                              sim::OfflineSource(c.data, n, 1));
    };
    std::unique_ptr<sim::ResolvedDeployment> whole_keep, keep;
    auto whole = start(&whole_keep);
    REQUIRE(whole->Run().ok());
    const double end_s = ToSeconds(whole->now());
    auto run = start(&keep);
    REQUIRE(run->Advance(SimTime(0)).ok());
    const double at_start = LeastSecondsLeft(*run);
    CHECK(at_start <= end_s);
    CHECK(at_start > c.least_share * end_s);
    for (int k = 1; k < 40; ++k) {
      const double t = end_s * k / 40;
      REQUIRE(run->Advance(FromSeconds(t)).ok());
      INFO("at " << t << " s of " << end_s);
      CHECK(t + LeastSecondsLeft(*run) <= end_s);
    }
    REQUIRE(run->Advance(FromSeconds(end_s)).ok());
    CHECK(LeastSecondsLeft(*run) == 0);
  }
}

TEST_CASE(
    "Evaluate: an Offline run that cannot come within kScreenMargin of the best stops on its clock",
    "[tuner]") {
  // A data set whose one pass already lasts the target: no shorter runs, so nothing predicted.
  TuneOptions o = SmallOptions(sim::Scenario::kOffline);
  const std::vector<traces::Request> pass = o.dataset;
  for (int copy = 1; copy < 40; ++copy) {
    for (traces::Request r : pass) {
      r.id += copy * static_cast<int64_t>(pass.size());
      o.dataset.push_back(r);
    }
  }
  const sim::DeploymentConfig d = Llama2Tp2Instances(1);
  auto full = Evaluate(d, o, Catalog());
  REQUIRE(full.ok());
  REQUIRE(full->valid);
  REQUIRE(full->predicted_tokens_per_s == 0);
  CHECK(full->run_samples == static_cast<int64_t>(o.dataset.size()));
  const double reach = full->throughput_tokens_per_s * kScreenMargin;
  auto stopped = Evaluate(d, o, Catalog(), reach * 1.001);
  REQUIRE(stopped.ok());
  CHECK(stopped->screened);
  CHECK_FALSE(stopped->valid);
  CHECK(stopped->run_samples == 0);
  auto within = Evaluate(d, o, Catalog(), reach * 0.999);
  REQUIRE(within.ok());
  CHECK(*within == *full);
}

TEST_CASE("Evaluate: the bound counts the host's work as async and multi-step scheduling pay it",
          "[tuner]") {
  // The host's 20 ms an iteration: beside the GPU's time under async scheduling, an eighth of it
  // a step in a multi-step run. A bound that added it in full would sit below what the engine
  // holds, and cap the QPS search there.
  TuneOptions o = SmallOptions(sim::Scenario::kServer, HostBoundParams());
  o.ttft_limit_ms = 5000;  // loose enough that throughput rules
  o.tpot_limit_ms = 500;
  o.qps_steps = 9;
  sim::DeploymentConfig async = Llama2Tp2Instances(1), stepped = async;
  async.engine.async_scheduling = true;
  stepped.engine.scheduler_steps = 8;
  for (const sim::DeploymentConfig& d : {async, stepped}) {
    INFO("async " << d.engine.async_scheduling << ", steps " << d.engine.scheduler_steps);
    auto r = Evaluate(d, o, Catalog());
    REQUIRE(r.ok());
    REQUIRE(r->valid);
    // The search found where the limits break, below the ceiling the bound sets it.
    CHECK(r->qps < r->bound);
    // 5% past the bound, a probe breaks the limits.
    const auto past = static_cast<int64_t>(std::ceil(std::log(1.05 * r->bound) / std::log(1.02)));
    auto probe = RunProbe(d, o, Catalog(), past);
    REQUIRE(probe.ok());
    CHECK_FALSE(probe->valid);
  }
}

TEST_CASE("Evaluate: a server-type bound counts what the serving fronts can stream", "[tuner]") {
  // Every token a response, 2 ms of the front's time each: 500 tokens a second an instance.
  models::CostParams params = ShippedParams();
  params.stream_interval = 1;
  params.response_us = 2000;
  TuneOptions o = SmallOptions(sim::Scenario::kServer, params);
  double output = 0;
  for (const traces::Request& r : o.dataset) output += static_cast<double>(r.output_tokens);
  output /= static_cast<double>(o.dataset.size());
  for (const int instances : {1, 2}) {
    INFO(instances << " instances");
    // Each request's tokens after its first pass through the fronts: the grid rate above that.
    const double fronts = instances * 500.0 / (output - 1);
    auto c = Evaluate(Llama2Tp2Instances(instances), o, Catalog());
    REQUIRE(c.ok());
    CHECK(c->bound >= fronts);
    CHECK(c->bound <= fronts * 1.02 * (1 + 1e-9));
    CHECK(c->qps <= c->bound);
    CHECK(c->qps > 0);
    // A front that costs nothing bounds nothing: the GPUs' bound, far above.
    TuneOptions free_front = SmallOptions(sim::Scenario::kServer, ShippedParams());
    auto gpus = Evaluate(Llama2Tp2Instances(instances), free_front, Catalog());
    REQUIRE(gpus.ok());
    CHECK(gpus->bound > 2 * c->bound);
  }
}

// Little's law on the requests a p99 keeps: their mean batch is at most the TPOT limit x their
// tokens a second, which a batch past the least round within the limit cannot give. Aggregated,
// with drafts, and disaggregated, on a stack that captures graphs for small batches (so a lone
// sequence's step is as the bound prices it) and pays its host time per sequence (so the round
// grows with the batch).
TEST_CASE("Evaluate: a server-type bound counts the TPOT limit, and no probe past it holds",
          "[tuner]") {
  models::CostParams params = ShippedParams();
  params.iteration_overhead_us = 0;
  params.per_sequence_overhead_us = 300;
  params.cuda_graph_batch_sizes = {1, 2, 4, 8, 16, 32, 64};
  TuneOptions o = SmallOptions(sim::Scenario::kServer, params);
  o.probe_duration_s = 300;
  for (auto& r : o.dataset) r.output_tokens = 400 + (r.id * 53) % 200;
  sim::DeploymentConfig aggregated = Llama2Tp2Instances(2);
  sim::DeploymentConfig drafts = aggregated;
  drafts.engine.mtp_depth = 2;
  drafts.engine.acceptance = 0.6;
  sim::DeploymentConfig split = aggregated;
  split.disaggregated = true;
  split.prefill = {1, 2, 1, 1, 1};
  split.decode = {1, 2, 1, 1, 1};
  for (const sim::DeploymentConfig& d : {aggregated, drafts, split}) {
    INFO(CandidateKey(d));
    o.tpot_limit_ms = std::nullopt;
    auto loose = Evaluate(d, o, Catalog());
    REQUIRE(loose.ok());
    o.tpot_limit_ms = 15;
    auto c = Evaluate(d, o, Catalog());
    REQUIRE(c.ok());
    REQUIRE(c->valid);
    CHECK(c->bound < loose->bound);
    CHECK(c->qps <= c->bound);
    // The grid rate past the ceiling breaks the TPOT limit.
    const auto above = std::lround(std::log(c->bound) / std::log(1.02)) + 1;
    auto probe = RunProbe(d, o, Catalog(), above);
    REQUIRE(probe.ok());
    CHECK_FALSE(probe->valid);
    CHECK(probe->failure.find("TPOT") != std::string::npos);
  }
  // A shorter probe's start and end weigh more, so its bound is higher; a probe cut short by its
  // sample cap takes none.
  auto bound = [&](double duration_s, int64_t max_samples) {
    o.probe_duration_s = duration_s;
    o.probe_max_samples = max_samples;
    auto c = Evaluate(split, o, Catalog());
    REQUIRE(c.ok());
    return c->bound;
  };
  const double long_run = bound(300, 250000);
  CHECK(bound(20, 250000) > long_run);
  o.tpot_limit_ms = std::nullopt;
  const double untimed = bound(300, 250000);
  o.tpot_limit_ms = 15;
  CHECK(bound(300, 10) == untimed);
}

// Server capacity adds up too, and a little more: behind a router each replica sees smoother
// arrivals than one replica alone does (round robin deals every k-th Poisson arrival, Erlang-k
// gaps; least-outstanding also steers around busy replicas), so p99 TTFT holds at a higher rate
// per replica. Never less than n times one.
TEST_CASE("Evaluate: n identical replicas give at least n x Server capacity", "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  o.qps_steps = 9;
  o.probe_duration_s = 300;
  sim::DeploymentConfig d = Llama2Tp2Instances(1);
  auto single = Evaluate(d, o, Catalog());
  REQUIRE(single.ok());
  REQUIRE(single->valid);
  d = Llama2Tp2Instances(3);
  for (sim::RouterKind router :
       {sim::RouterKind::kRoundRobin, sim::RouterKind::kLeastOutstanding}) {
    d.router = router;
    auto three = Evaluate(d, o, Catalog());
    REQUIRE(three.ok());
    REQUIRE(three->valid);
    CHECK(three->qps >= 0.97 * 3 * single->qps);
    CHECK(three->qps <= 1.25 * 3 * single->qps);
  }
}

TEST_CASE(
    "Evaluate: the Server capacity is the highest rate on the QPS grid that passes, wherever the "
    "search starts",
    "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  o.qps_steps = 20;
  const sim::DeploymentConfig d = Llama2Tp2Instances(1);
  auto found = Evaluate(d, o, Catalog());
  REQUIRE(found.ok());
  REQUIRE(found->valid);
  // Each probe issues whole data sets, as LoadGen does.
  CHECK(found->run_samples % static_cast<int64_t>(o.dataset.size()) == 0);
  // The next rate of the grid fails: a search told to beat the capacity stops there.
  auto above = Evaluate(d, o, Catalog(), found->qps);
  REQUIRE(above.ok());
  CHECK_FALSE(above->valid);
  CHECK(above->below_qps == Approx(found->qps * 1.02));
  // Searches started lower, from a rate on the grid and from one between, find the same rate.
  for (double start : {found->qps / std::pow(1.02, 5), found->qps / 1.3}) {
    auto again = Evaluate(d, o, Catalog(), start);
    REQUIRE(again.ok());
    REQUIRE(again->valid);
    CHECK(again->qps == Approx(found->qps).epsilon(1e-9));
  }
}

TEST_CASE(
    "Evaluate: a Server candidate's tokens/s and cost are the rate it sustains, QPS x mean output",
    "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  o.space.disaggregated = false;
  auto cands = Enumerate(o.space, Catalog());
  REQUIRE(cands.ok());
  REQUIRE_FALSE(cands->feasible.empty());
  auto c = Evaluate(cands->feasible.front(), o, Catalog());
  REQUIRE(c.ok());
  REQUIRE(c->valid);
  double output = 0;
  for (const auto& r : o.dataset) output += static_cast<double>(r.output_tokens);
  const double mean_output = output / static_cast<double>(o.dataset.size());
  // Token conservation, within the sampling error of a probe's Poisson arrivals.
  CHECK(c->throughput_tokens_per_s == Approx(c->qps * mean_output).epsilon(0.15));
  CHECK(c->tokens_per_s_per_gpu ==
        Approx(c->throughput_tokens_per_s / cands->feasible.front().TotalGpus()));
  CHECK(c->cost_per_million_tokens ==
        Approx(models::CostPerMillionTokens(3.8, c->tokens_per_s_per_gpu)));
  CHECK(c->loadgen_tokens_per_s > 0);
}

TEST_CASE("Enumerate: by default fp4 and fp8 weights where fp4 runs natively, and fp8 and bf16 KV",
          "[tuner]") {
  auto formats = [](const std::string& hardware) {
    SearchSpace space;
    space.hardware = hardware;
    space.gpus = 8;
    auto cands = Enumerate(space, Catalog());
    REQUIRE(cands.ok());
    std::set<std::string> seen;
    for (const auto& d : cands->feasible) seen.insert(d.weights + "/" + d.kv);
    return seen;
  };
  CHECK(formats("b200") == std::set<std::string>{"fp4/bf16", "fp4/fp8", "fp8/bf16", "fp8/fp8"});
  CHECK(formats("h200") == std::set<std::string>{"fp8/bf16", "fp8/fp8"});
  // gpt-oss also runs as it ships: MXFP4 experts, BF16 attention.
  SearchSpace oss;
  oss.model = "gpt-oss-120b";
  oss.hardware = "h200";
  oss.gpus = 1;
  oss.disaggregated = false;
  auto cands = Enumerate(oss, Catalog());
  REQUIRE(cands.ok());
  std::set<std::string> seen;
  for (const auto& d : cands->feasible) seen.insert(d.weights + "/" + d.dense_weights);
  CHECK(seen == std::set<std::string>{"mxfp4/bf16", "fp8/"});
}

TEST_CASE("Prepare: batch limits are tried where the KV cache holds the workload's sequences",
          "[tuner]") {
  // Llama 2 70B in FP4 on one B200 holds about 800k FP8 KV tokens: 2,048 sequences of 512
  // tokens do not fit, 2,048 of MLPerf's (190-token prompts, 294-token answers) do, and there a
  // batch limit of 2,048 holds more Server QPS than 1,024 (fathom simulate: 355 against 338 QPS).
  SearchSpace space;
  space.model = "llama2-70b";
  space.hardware = "b200";
  space.gpus = 1;
  space.weights = {"fp4"};
  space.kv = {"fp8"};
  space.max_num_tokens = {2048};
  space.disaggregated = false;
  auto batches = [&](int64_t input, int64_t output) {
    TuneOptions o;
    o.space = space;
    o.dataset.assign(64, traces::Request{});
    for (traces::Request& r : o.dataset) {
      r.input_tokens = input;
      r.output_tokens = output;
    }
    auto p = Prepare(o, Catalog());
    REQUIRE(p.ok());
    std::set<int64_t> seen;
    for (const auto& d : p->candidates.feasible) seen.insert(d.engine.max_batch);
    return seen;
  };
  CHECK(batches(190, 294).count(2048) == 1);
  CHECK(batches(2000, 2000).count(2048) == 0);  // at most 512 tokens a sequence are assumed
  CHECK(batches(2000, 2000).count(1024) == 1);
  space.max_batch = {2048};
  CHECK(Enumerate(space, Catalog())->feasible.empty());  // 512 tokens a sequence by default
}

TEST_CASE(
    "Enumerate: attention-DP layouts also run with balancing, at each of the scenario's counts",
    "[tuner]") {
  for (sim::Scenario scenario : {sim::Scenario::kOffline, sim::Scenario::kServer}) {
    SearchSpace space;
    space.scenario = scenario;
    space.disaggregated = false;
    auto cands = Enumerate(space, Catalog());
    REQUIRE(cands.ok());
    // Each aggregated layout with attention DP appears once without balancing and once with each
    // pair of the harnesses' counts: Offline 10/500, Server 2/6 and 3/9.
    const bool offline = scenario == sim::Scenario::kOffline;
    int64_t plain = 0, single_rank = 0;
    std::map<std::pair<int64_t, int64_t>, int64_t> balanced;
    for (const auto& d : cands->feasible) {
      if (d.attn_dp == 1) {
        CHECK_FALSE(d.engine.adp_balance);
        ++single_rank;
      } else if (d.engine.adp_balance) {
        ++balanced[{d.engine.adp_batching_wait_iters, d.engine.adp_timeout_iters}];
      } else {
        ++plain;
      }
    }
    CHECK(single_rank > 0);
    CHECK(plain > 0);
    using Counts = std::map<std::pair<int64_t, int64_t>, int64_t>;
    CHECK(balanced ==
          (offline ? Counts{{{10, 500}, plain}} : Counts{{{2, 6}, plain}, {{3, 9}, plain}}));
    space.adp_balance = false;
    auto without = Enumerate(space, Catalog());
    REQUIRE(without.ok());
    CHECK(static_cast<int64_t>(without->feasible.size()) == plain + single_rank);
  }
}

TEST_CASE("Enumerate: each runtime the stack offers, TensorRT engines without attention DP",
          "[tuner]") {
  SearchSpace space;  // DeepSeek-R1: attention-DP layouts among them
  space.disaggregated = false;
  auto python = Enumerate(space, Catalog());
  REQUIRE(python.ok());
  for (const auto& d : python->feasible) CHECK(d.runtime == models::Runtime::kPython);
  space.runtimes = {models::Runtime::kPython, models::Runtime::kCpp};
  auto both = Enumerate(space, Catalog());
  REQUIRE(both.ok());
  int64_t cpp = 0, single_rank = 0;
  for (const auto& d : python->feasible) single_rank += d.attn_dp == 1;
  for (const auto& d : both->feasible) {
    if (d.runtime != models::Runtime::kCpp) {
      // The harness keeps each instance's seats full, and no more.
      CHECK(d.engine.max_concurrency == d.engine.max_batch * d.pp * d.attn_dp);
      continue;
    }
    ++cpp;
    CHECK(d.attn_dp == 1);
    CHECK_FALSE(d.engine.adp_balance);
    CHECK(d.engine.max_concurrency == 0);
  }
  // The C++ runtime adds a copy of every single-rank layout, and nothing else.
  CHECK(cpp == single_rank);
  CHECK(both->feasible.size() == python->feasible.size() + static_cast<size_t>(cpp));
  std::set<std::string> keys;
  for (const auto& d : both->feasible) keys.insert(CandidateKey(d));
  CHECK(keys.size() == both->feasible.size());  // the runtime is part of a candidate's key
  // No TensorRT engines on AMD GPUs.
  space.hardware = "mi355x";
  auto amd = Enumerate(space, Catalog());
  REQUIRE(amd.ok());
  REQUIRE_FALSE(amd->feasible.empty());
  for (const auto& d : amd->feasible) CHECK(d.runtime == models::Runtime::kPython);
}

TEST_CASE(
    "Enumerate: a stack's multi-step counts copy each aggregated layout, disaggregated "
    "pools untouched",
    "[tuner]") {
  SearchSpace space;
  space.model = "llama2-70b";
  space.hardware = "mi300x";
  space.scenario = sim::Scenario::kServer;
  auto single = Enumerate(space, Catalog());
  REQUIRE(single.ok());
  space.scheduler_steps = {1, 7, 13};
  auto multi = Enumerate(space, Catalog());
  REQUIRE(multi.ok());
  int64_t aggregated = 0, disaggregated = 0;
  for (const auto& d : single->feasible) (d.disaggregated ? disaggregated : aggregated) += 1;
  REQUIRE(aggregated > 0);
  REQUIRE(disaggregated > 0);
  CHECK(static_cast<int64_t>(multi->feasible.size()) == 3 * aggregated + disaggregated);
  std::map<int, int64_t> by_steps;
  std::set<std::string> keys;
  for (const auto& d : multi->feasible) {
    ++by_steps[d.engine.scheduler_steps];
    if (d.disaggregated) CHECK(d.engine.scheduler_steps == 1);
    keys.insert(CandidateKey(d));
  }
  CHECK(by_steps ==
        std::map<int, int64_t>{{1, aggregated + disaggregated}, {7, aggregated}, {13, aggregated}});
  CHECK(keys.size() == multi->feasible.size());  // the count is part of a candidate's key
  // The stack decides: vLLM 0.9 (V0) on ROCm tries its multi-step counts, 0.14 (V1) schedules
  // asynchronously, neither has TensorRT-LLM's attention-DP balancing; TensorRT-LLM the reverse.
  SearchSpace followed;
  sim::TimeModelOptions v0;
  v0.stack = "vllm-0.9-rocm";
  FollowStack(*sim::MakeTimeModel(v0, Catalog(), "mi300x"), "llama", &followed);
  CHECK(followed.scheduler_steps == std::vector<int>{1, 7, 13});
  CHECK_FALSE(followed.async_scheduling);
  CHECK_FALSE(followed.adp_balance);
  FollowStack(*sim::MakeTimeModel({}, Catalog(), "mi355x"), "llama", &followed);
  CHECK(followed.scheduler_steps == std::vector<int>{1});
  CHECK(followed.async_scheduling);
  CHECK_FALSE(followed.adp_balance);
  followed.model = "llama2-70b";
  followed.hardware = "mi355x";
  auto async = Enumerate(followed, Catalog());
  REQUIRE(async.ok());
  REQUIRE_FALSE(async->feasible.empty());
  for (const auto& d : async->feasible) CHECK(d.engine.async_scheduling);
  followed = {};
  FollowStack(*sim::MakeTimeModel({}, Catalog(), "b200"), "llama", &followed);
  CHECK(followed.scheduler_steps == std::vector<int>{1});
  CHECK_FALSE(followed.async_scheduling);
  CHECK(followed.adp_balance);
  CHECK(followed.runtimes ==
        std::vector<models::Runtime>{models::Runtime::kPython, models::Runtime::kCpp});
  CHECK_FALSE(followed.prefill_first);
  // SGLang runs prompts in prefill-only batches with its overlap scheduler: every candidate too.
  followed = {};
  sim::TimeModelOptions sglang;
  sglang.engine = "sglang";
  FollowStack(*sim::MakeTimeModel(sglang, Catalog(), "h100-sxm"), "qwen3", &followed);
  CHECK(followed.prefill_first);
  CHECK(followed.async_scheduling);
  CHECK_FALSE(followed.adp_balance);
  followed.model = "qwen3-32b";
  followed.hardware = "h100-sxm";
  auto prefill_first = Enumerate(followed, Catalog());
  REQUIRE(prefill_first.ok());
  REQUIRE_FALSE(prefill_first->feasible.empty());
  for (const auto& d : prefill_first->feasible) {
    CHECK(d.engine.scheduler == sim::SchedulerKind::kPrefillFirst);
    CHECK(d.engine.async_scheduling);
  }
}

TEST_CASE("PlanCapacity: the fewest GPUs that sustain the target load", "[tuner]") {
  TuneOptions o = SmallOptions(sim::Scenario::kServer);
  o.space.disaggregated = false;
  o.space.max_batch = {64};
  o.space.max_num_tokens = {4096};
  // What one GPU sustains, then ask for 1.5 times that.
  o.space.gpus = 1;
  auto one = Tune(o, Catalog());
  REQUIRE(one.ok());
  REQUIRE_FALSE(one->ranked.empty());
  const double target = 1.5 * one->ranked.front().qps;
  auto plan = PlanCapacity(o, target, {4, 1, 2}, Catalog());
  INFO(plan.status().message());
  REQUIRE(plan.ok());
  REQUIRE(plan->chosen.has_value());
  CHECK(plan->steps.front().gpus == 1);
  CHECK_FALSE(plan->steps.front().meets);
  CHECK(plan->chosen->gpus == 2);
  CHECK(plan->chosen->best->qps >= target);
  CHECK(plan->chosen->cost_per_hour == Approx(2 * 3.8));
  CHECK_FALSE(PlanCapacity(o, target, {1}, Catalog())->chosen.has_value());
}

TEST_CASE("MakeLaunchCommands: the commands carry the chosen degrees and limits", "[tuner]") {
  sim::DeploymentConfig d;  // DeepSeek-R1, TP8 / EP8 / attention DP8, FP4, FP8 KV
  d.engine.max_batch = 512;
  d.engine.max_num_tokens = 4608;
  const LaunchCommands c = MakeLaunchCommands(d, Catalog());
  CHECK(c.trtllm.find("nvidia/DeepSeek-R1-FP4") != std::string::npos);
  CHECK(c.trtllm.find(
            "--tp_size 8 --pp_size 1 --ep_size 8 --max_batch_size 512 --max_num_tokens 4608") !=
        std::string::npos);
  CHECK(c.trtllm_yaml.find("enable_attention_dp: true") != std::string::npos);
  CHECK(c.trtllm_yaml.find("moe_expert_parallel_size: 8") != std::string::npos);
  CHECK(c.trtllm_yaml.find("  dtype: fp8") != std::string::npos);
  CHECK(c.sglang.find("--tp 8 --dp 8 --enable-dp-attention --ep-size 8") != std::string::npos);
  CHECK(c.sglang.find("--chunked-prefill-size 4608") != std::string::npos);
  CHECK(c.vllm.find("--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel") !=
        std::string::npos);
  CHECK(c.vllm.find("--max-num-seqs 512 --max-num-batched-tokens 4608") != std::string::npos);
  CHECK(c.vllm.find("--kv-cache-dtype fp8") != std::string::npos);
  CHECK(c.trtllm_yaml.find("attention_dp_config") == std::string::npos);
  CHECK(c.vllm.find("--num-scheduler-steps") == std::string::npos);
  CHECK(c.vllm.find("--async-scheduling") == std::string::npos);
  // vLLM's multi-step and asynchronous scheduling, where the deployment uses them.
  sim::DeploymentConfig stepped = d;
  stepped.engine.scheduler_steps = 13;
  stepped.engine.async_scheduling = true;
  const LaunchCommands s = MakeLaunchCommands(stepped, Catalog());
  CHECK(s.vllm.find(" --num-scheduler-steps 13 --async-scheduling") != std::string::npos);
  // Each engine's memory flag gives it the KV cache the memory plan holds: TensorRT-LLM a share
  // of the memory the weights leave (the deployment's when it names one), vLLM and SGLang a share
  // of HBM, rounded down to the hundredth.
  const models::ModelArch ds = *models::LoadModel("deepseek-r1");
  const models::Hardware b200 = *Catalog().Find("b200");
  auto plan = [&](double kv_free_fraction) {
    models::MemoryOptions o;
    o.max_num_tokens = 4608;
    o.max_batch = 512;
    o.kv_free_fraction = kv_free_fraction;
    return models::PlanMemory(ds, b200, {8, 8, 1, 8, 8},
                              {models::DType::kNvfp4, models::DType::kNvfp4, models::DType::kFp8},
                              o);
  };
  auto hundredths = [](double x) { return StrFormat("%.2f", std::floor(x * 100 + 1e-6) / 100); };
  const models::MemoryPlan by_reserve = plan(0);
  const std::string trt_share = hundredths(by_reserve.kv_budget_bytes /
                                           (by_reserve.kv_budget_bytes + by_reserve.reserve_bytes));
  CHECK(trt_share < "0.90");  // 10% of HBM is more than 10% of what the weights leave
  CHECK(c.trtllm.find("--kv_cache_free_gpu_memory_fraction " + trt_share) != std::string::npos);
  CHECK(c.vllm.find("--gpu-memory-utilization 0.90") != std::string::npos);
  CHECK(c.sglang.find("--mem-fraction-static 0.90") != std::string::npos);
  d.engine.kv_free_fraction = 0.95;
  const LaunchCommands by_free = MakeLaunchCommands(d, Catalog());
  const std::string hbm_share = hundredths(1 - plan(0.95).reserve_bytes / b200.memory_bytes);
  CHECK(hbm_share > "0.90");
  CHECK(by_free.trtllm.find("--kv_cache_free_gpu_memory_fraction 0.95") != std::string::npos);
  CHECK(by_free.trtllm_yaml.find("free_gpu_memory_fraction: 0.95") != std::string::npos);
  CHECK(by_free.vllm.find("--gpu-memory-utilization " + hbm_share) != std::string::npos);
  CHECK(by_free.sglang.find("--mem-fraction-static " + hbm_share) != std::string::npos);
  // A layout that is not one (EP 8 on TP 1) has no memory plan: the reserve's share.
  sim::DeploymentConfig broken;
  broken.tp = 1;
  CHECK(MakeLaunchCommands(broken, Catalog()).vllm.find("--gpu-memory-utilization 0.90") !=
        std::string::npos);
  d.engine.kv_free_fraction = 0;
  d.engine.adp_balance = true;
  d.engine.adp_batching_wait_iters = 10;
  d.engine.adp_timeout_iters = 500;
  CHECK(MakeLaunchCommands(d, Catalog())
            .trtllm_yaml.find("attention_dp_config:\n  enable_balance: true\n  "
                              "batching_wait_iters: 10\n  timeout_iters: 500\n") !=
        std::string::npos);
  // The deployment file keeps it, and the runtime.
  d.runtime = models::Runtime::kCpp;
  auto back = sim::DeploymentFromJson(Json::parse(sim::ToJson(d).dump()), "round trip");
  REQUIRE(back.ok());
  CHECK(back->engine.adp_balance);
  CHECK(back->engine.adp_timeout_iters == 500);
  CHECK(back->runtime == models::Runtime::kCpp);
  auto bad_runtime = sim::DeploymentFromJson(Json::parse(R"({"runtime": "java"})"), "x.json");
  REQUIRE_FALSE(bad_runtime.ok());
  CHECK(bad_runtime.status().message() ==
        "x.json: runtime = \"java\": unknown (one of python, cpp)");
  // TensorRT engines: trtllm-serve's tensorrt backend, no PyTorch-flow CUDA-graph options.
  CHECK(MakeLaunchCommands(d, Catalog()).trtllm.find("--backend tensorrt") != std::string::npos);
  CHECK(MakeLaunchCommands(d, Catalog()).trtllm_yaml.find("cuda_graph_config") ==
        std::string::npos);
  CHECK(MakeLaunchCommands(d, Catalog()).trtllm_yaml.find("gemm_allreduce_plugin") ==
        std::string::npos);
  d.fusions.gemm_allreduce = true;  // built with the GEMM + all-reduce fusion
  CHECK(MakeLaunchCommands(d, Catalog())
            .trtllm_yaml.find("build_config:\n  plugin_config:\n    gemm_allreduce_plugin: "
                              "bfloat16\n") != std::string::npos);
  d.fusions.gemm_allreduce = false;
  d.runtime = models::Runtime::kPython;
  CHECK(MakeLaunchCommands(d, Catalog()).trtllm.find("--backend pytorch") != std::string::npos);
  CHECK(MakeLaunchCommands(d, Catalog()).trtllm_yaml.find("cuda_graph_config") !=
        std::string::npos);
  // Layout numbers as typed: never truncated to int (4294967304 read as 8), never overflowing one.
  CHECK(
      sim::DeploymentFromJson(Json::parse(R"({"tp": 4294967304})"), "x.json").status().message() ==
      "x.json: field 'tp' = 4294967304: must be in [1, 65536]");
  CHECK(sim::DeploymentFromJson(Json::parse(R"({"gpus": 0})"), "x.json").status().message() ==
        "x.json: field 'gpus' = 0: must be in [1, 65536]");
  CHECK(
      sim::DeploymentFromJson(Json::parse(R"({"mtp": 4294967299})"), "x.json").status().message() ==
      "x.json: field 'mtp' = 4294967299: must be in [0, 16]");
  auto bad = sim::DeploymentFromJson(Json::parse(R"({"adp_balance": {"wait": 3}})"), "x.json");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("adp_balance") != std::string::npos);
  d.engine.mtp_depth = 3;
  CHECK(MakeLaunchCommands(d, Catalog())
            .trtllm_yaml.find("decoding_type: MTP\n  num_nextn_predict_layers: 3") !=
        std::string::npos);
  d.disaggregated = true;
  d.prefill = {2, 4, 1, 4, 1};
  d.decode = {1, 8, 1, 8, 8};
  const LaunchCommands dis = MakeLaunchCommands(d, Catalog());
  CHECK(dis.sglang.find("--disaggregation-mode prefill") != std::string::npos);
  CHECK(dis.sglang.find("--disaggregation-mode decode") != std::string::npos);
}

TEST_CASE("RunRecord: a deployment file carries the run behind its figures, checked on reading",
          "[tuner]") {
  sim::DeploymentConfig d;
  sim::RunRecord run;
  run.scenario = sim::Scenario::kServer;
  run.qps = 13.143582031768943;
  run.samples = 26382;
  run.seed = 7;
  run.benchmark = "deepseek-r1";
  run.stack = "trtllm-1.2";
  run.tpot_limit_ms = 60;
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_run_record.json").string();
  REQUIRE(WriteFileAtomic(path, sim::ToJson(d, run).dump(2)).ok());
  auto file = sim::LoadDeploymentFile(path);
  REQUIRE(file.ok());
  REQUIRE(file->run.has_value());
  CHECK(file->run->scenario == sim::Scenario::kServer);
  CHECK(file->run->qps == run.qps);  // exactly: the same arrivals again
  CHECK(file->run->samples == 26382);
  CHECK(file->run->seed == 7);
  CHECK(file->run->stack == "trtllm-1.2");
  CHECK(!file->run->ttft_limit_ms);
  CHECK(file->run->tpot_limit_ms == 60);
  REQUIRE(
      WriteFileAtomic(path, R"({"run": {"scenario": "server", "samples": 10, "qps": -1}})").ok());
  CHECK(sim::LoadDeploymentFile(path).status().message() ==
        path + ": run: field 'qps' = -1: must be > 0 and finite");
  REQUIRE(WriteFileAtomic(path, R"({"run": {"scenario": "offline", "samples": 10, "sample": 3}})")
              .ok());
  CHECK(sim::LoadDeploymentFile(path).status().message().find("run: field 'sample': unknown") !=
        std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("OfflineRunSamples: the fewest whole data sets lasting the target, extrapolated",
          "[tuner]") {
  // A run lasting 100 s per data set plus a 50 s drain: 660 s needs ceil(6.1) = 7 passes.
  std::vector<int64_t> tried;
  auto lasted = [&](int64_t samples) -> Result<std::optional<double>> {
    tried.push_back(samples);
    return std::optional<double>(50 + 100.0 * static_cast<double>(samples / 10));
  };
  auto samples = sim::OfflineRunSamples(10, sim::OfflineRunTargetS(nullptr), lasted);
  REQUIRE(samples.ok());
  CHECK(*samples == 70);
  CHECK(tried.back() == 70);  // the answer is the last run simulated
  CHECK(sim::OfflineRunTargetS(traces::FindBenchmark(traces::MlperfBenchmarks(), "deepseek-r1")) ==
        4520);
  // A deployment that cannot serve the data set ends the search at once.
  auto never = [](int64_t) -> Result<std::optional<double>> { return std::optional<double>(); };
  CHECK(*sim::OfflineRunSamples(10, 660, never) == 10);
}

}  // namespace fathom::tuner
