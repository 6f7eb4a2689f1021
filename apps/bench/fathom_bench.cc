// fathom's benchmark (not a test): times the hot paths and prints one line per figure.
//   fathom_bench [csv|offline|server|vidur|mtp|stream|activity|online|tune|serve|loadgen|all]
//   [--rows N] [--repeat R] [--only NAME-PART]  (tune: only the tunes whose name holds it)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/format.h"
#include "base/stats.h"
#include "models/cost_model.h"
#include "models/hardware.h"
#include "models/model_arch.h"
#include "models/roofline.h"
#include "profiler/activity.h"
#include "sim/deployment_config.h"
#include "sim/serving/loadgen.h"
#include "sim/serving/openai_server.h"
#include "sim/simulator.h"
#include "sim/time_model.h"
#include "traces/benchmark.h"
#include "traces/reader.h"
#include "traces/synth.h"
#include "traces/transforms.h"
#include "tuner/online/online.h"
#include "tuner/search/tuner.h"

namespace fathom {
namespace {

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

// Median wall time of `repeat` runs of `fn`, in seconds.
double Median(int repeat, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void CsvParse(int64_t rows, int repeat) {
  const std::string path = "/tmp/fathom_bench_trace.csv";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("input_length,output_length,timestamp\n", f);
    for (int64_t i = 0; i < rows; ++i) {
      std::fprintf(f, "%lld,%lld,%.3f\n", static_cast<long long>(100 + i % 3000),
                   static_cast<long long>(1 + i % 20000), i * 0.01);
    }
    std::fclose(f);
  }
  int64_t n = 0;
  const double s = Median(repeat, [&] {
    auto reader = traces::OpenTrace(path, {});
    traces::Request r;
    n = 0;
    while (*(*reader)->Next(&r)) ++n;
  });
  std::printf("csv_parse: %lld rows in %.3f s = %.2f M rows/s, peak RSS %.1f MB\n",
              static_cast<long long>(n), s, n / s / 1e6, PeakRssMb());
  std::remove(path.c_str());
}

std::unique_ptr<sim::ResolvedDeployment> DeepSeekB200() {
  sim::DeploymentConfig d;  // defaults: DeepSeek-R1, 8xB200, TP8/EP8/attention DP8, FP4, FP8 KV
  d.engine.max_batch = 512;
  d.engine.max_num_tokens = 4608;
  auto catalog = models::HardwareCatalog::LoadBuiltin();
  auto r = sim::Resolve(d, *catalog,
                        [](const auto& m, const auto& hw, const auto& l, const auto& p,
                           models::Runtime, models::Fusions) {
                          return std::unique_ptr<models::ExecutionTimeModel>(
                              std::make_unique<models::RooflineModel>(m, hw, l, p));
                        });
  return std::move(r).value();
}

std::vector<traces::Request> MlperfSet() {
  traces::ReadOptions o;
  o.max_output = 20000;
  return *traces::ReadAll(**traces::OpenTrace(traces::DefaultTracePath(), o));
}

void Scenario(const char* name, sim::Scenario scenario, double qps, int64_t samples, int repeat) {
  const auto data = MlperfSet();
  double sim_s = 0;
  int64_t done = 0;
  const double s = Median(repeat, [&] {
    auto d = DeepSeekB200();
    d->spec.scenario.scenario = scenario;
    d->spec.scenario.qps = qps;
    auto source =
        qps > 0 ? sim::PoissonSource(data, samples, qps, 1) : sim::OfflineSource(data, samples, 1);
    sim::Simulator simulator(std::move(d->spec), std::move(source));
    auto res = simulator.Run();
    sim_s = res->duration_s;
    done = res->completed_requests;
  });
  std::printf("%s: %lld requests, %.0f s simulated in %.3f s wall (median of %d)\n", name,
              static_cast<long long>(done), sim_s, s, repeat);
}

// A run's median wall time (seconds), its simulated seconds and the requests it completed.
struct TimedRun {
  double wall_s = 0, simulated_s = 0;
  int64_t completed = 0;
};

// `samples` requests of `data` on deployment `d` under its GPU's default stack (its calibrated
// step times), in `scenario` at `qps` (Poisson arrivals; all at once where 0): the median of
// `repeat` runs.
TimedRun RunDefaultStack(const sim::DeploymentConfig& d, sim::Scenario scenario, double qps,
                         const std::vector<traces::Request>& data, int64_t samples, int repeat) {
  auto catalog = models::HardwareCatalog::LoadBuiltin();
  const sim::TimeModel time_model = *sim::MakeTimeModel({}, *catalog, d.hardware);
  TimedRun t;
  t.wall_s = Median(repeat, [&] {
    auto r = sim::Resolve(d, *catalog, time_model.factory);
    sim::SimulationSpec spec = std::move((*r)->spec);
    spec.scenario.scenario = scenario;
    spec.scenario.qps = qps;
    auto source =
        qps > 0 ? sim::PoissonSource(data, samples, qps, 1) : sim::OfflineSource(data, samples, 1);
    sim::Simulator simulator(std::move(spec), std::move(source));
    auto res = simulator.Run();
    t.simulated_s = res->duration_s;
    t.completed = res->completed_requests;
  });
  return t;
}

// MTP's decode path (its cohorts' draws) at rack scale: DeepSeek-R1 Interactive on 288 GB300s, four
// TP4 prefill instances beside 17 TP16 attention-DP decode instances with three MTP tokens (the
// layout the four-rack Interactive tune picks), `samples` requests at 280 QPS under the GPU's
// default stack (the decode pool holds as many sequences as the tuned deployment's runs do).
void Mtp(int64_t samples, int repeat) {
  sim::DeploymentConfig d;
  d.hardware = "gb300";
  d.gpus = 288;
  d.disaggregated = true;
  d.prefill = {4, 4, 1, 4, 4};
  d.decode = {17, 16, 1, 16, 16};
  d.engine.max_batch = 128;
  d.engine.max_num_tokens = 12288;
  d.engine.mtp_depth = 3;
  d.engine.acceptance = 0.7;
  const TimedRun t =
      RunDefaultStack(d, sim::Scenario::kInteractive, 280, MlperfSet(), samples, repeat);
  std::printf("mtp_288xgb300: %lld requests, %.0f s simulated in %.3f s wall (median of %d)\n",
              static_cast<long long>(t.completed), t.simulated_s, t.wall_s, repeat);
}

// The workload Vidur's simulator was timed on (107 s in Python): Llama 2 70B, TP2 PP2 on four
// H100 SXMs, `samples` requests of the model's MLPerf data set, all at once (Offline) and in
// Poisson arrivals at 10 QPS (about four fifths of what the deployment serves), under the GPU's
// default stack.
void Vidur(int64_t samples, int repeat) {
  constexpr double kVidurSeconds = 107;
  const std::vector<traces::Request> data =
      *traces::BenchmarkDataset(*traces::FindBenchmark(traces::MlperfBenchmarks(), "llama2-70b"));
  sim::DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h100-sxm";
  d.gpus = 4;
  d.tp = 2;
  d.pp = 2;
  d.ep = 1;
  d.attn_dp = 1;
  d.weights = "bf16";  // as Vidur ran it (fp16)
  d.kv = "bf16";
  for (const double qps : {0.0, 10.0}) {
    const TimedRun t = RunDefaultStack(
        d, qps > 0 ? sim::Scenario::kServer : sim::Scenario::kOffline, qps, data, samples, repeat);
    std::printf(
        "vidur_llama2-70b_tp2pp2_4xh100_%s: %lld requests, %.0f s simulated in %.3f s wall "
        "(median of %d), %.0fx Vidur's %.0f s\n",
        qps > 0 ? "10qps" : "offline", static_cast<long long>(t.completed), t.simulated_s, t.wall_s,
        repeat, kVidurSeconds / t.wall_s, kVidurSeconds);
  }
}

void Stream(int64_t requests) {
  traces::SynthSpec spec;
  spec.requests = requests;
  spec.arrivals.rate_per_s = 60;
  spec.lengths.input = {6.0, 0.5};
  spec.lengths.output = {3.0, 0.5};
  auto d = DeepSeekB200();
  d->spec.scenario.scenario = sim::Scenario::kReplay;
  sim::Simulator simulator(std::move(d->spec),
                           sim::ReplaySource(std::move(*traces::Synthesize(spec))));
  const auto start = std::chrono::steady_clock::now();
  auto res = simulator.Run();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "stream: %lld synthetic requests (%.0f s simulated) in %.1f s wall, peak RSS %.1f MB\n",
      static_cast<long long>(res->completed_requests), res->duration_s, s, PeakRssMb());
}

// The tracer's assembly of CUPTI activity, as a serving process produces it: iterations of 60
// NVTX layer ranges with 10 kernel launches each (100,000 a second) on one thread, each kernel's
// record arriving 2 ms after its launch, taken in batches of 64k as the injected tracer does.
void Activity(int64_t kernels, int repeat) {
  const std::vector<std::string> names = {
      "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "flash_fwd_splitkv_kernel",
      "triton_poi_fused_add_rmsnorm_0", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"};
  const std::vector<std::string> layers = [] {
    std::vector<std::string> v;
    for (int i = 0; i < 60; ++i) v.push_back("layer." + std::to_string(i));
    return v;
  }();
  int64_t taken = 0;
  const double s = Median(repeat, [&] {
    profiler::ActivityLog log;
    std::vector<std::pair<int64_t, int64_t>> in_flight;  // (launch time, correlation)
    int64_t correlation = 0, id = 0, t = 0;
    taken = 0;
    auto arrive = [&](int64_t now) {
      size_t i = 0;
      for (; i < in_flight.size() && in_flight[i].first + 2'000'000 <= now; ++i) {
        models::KernelRecord r;
        r.name = names[in_flight[i].second % names.size()];
        r.correlation = in_flight[i].second;
        r.start_ns = in_flight[i].first + 2'000'000;
        r.end_ns = r.start_ns + 10'000;
        log.AddRecord(std::move(r));
      }
      in_flight.erase(in_flight.begin(), in_flight.begin() + static_cast<std::ptrdiff_t>(i));
      if (log.pending_records() >= (1 << 16)) taken += static_cast<int64_t>(log.Take(false).size());
    };
    while (correlation < kernels) {
      const int64_t step = ++id;
      log.OpenRange(step, 1, t, "decode_step");
      for (const auto& layer : layers) {
        log.OpenRange(++id, 1, t += 100, layer);
        for (int j = 0; j < 10; ++j) {
          log.AddLaunch(++correlation, 1, t += 10'000);
          in_flight.emplace_back(t, correlation);
        }
        log.CloseRange(id, t += 100);
      }
      log.CloseRange(step, t += 100);
      arrive(t);
    }
    arrive(t + 10'000'000);
    taken += static_cast<int64_t>(log.Take(true).size());
  });
  std::printf("activity: %lld kernels assembled in %.3f s = %.2f M kernels/s, peak RSS %.1f MB\n",
              static_cast<long long>(taken), s, taken / s / 1e6, PeakRssMb());
}

}  // namespace
// One decision of the online tuner: 12 batch-limit choices, each simulated for 900 s of DeepSeek-R1
// Poisson traffic at 6 QPS (5 forecast x 1.2 headroom) on 2,000 finished requests' lengths.
void Online(int repeat) {
  const auto data = MlperfSet();
  tuner::Window w;
  w.end_s = 60;
  w.arrived = 300;
  w.completed = 2000;
  w.finished.assign(data.begin(), data.begin() + 2000);
  auto catalog = models::HardwareCatalog::LoadBuiltin();
  tuner::OnlineOptions o;
  o.max_batch = {32, 64, 128, 256};
  o.max_num_tokens = {2048, 4096, 8192};
  std::string reason;
  const double s = Median(repeat, [&] {
    auto c = tuner::Controller::Create(sim::DeploymentConfig{}, {256, 8192}, o, *catalog,
                                       [](const auto& m, const auto& hw, const auto& l,
                                          const auto& p, models::Runtime, models::Fusions) {
                                         return std::unique_ptr<models::ExecutionTimeModel>(
                                             std::make_unique<models::RooflineModel>(m, hw, l, p));
                                       });
    reason = (*c)->Step(w)->reason;
  });
  std::printf("online_step: 12 choices predicted in %.3f s wall (median of %d): %s\n", s, repeat,
              reason.c_str());
}

// A default tune (the calibrated cost model, the benchmark's data set and run rules) of each
// system: seconds per tune and what it found. The default pair first, then the held-out systems'
// tunes (DeepSeek-R1 on 8xB300, a GB300 NVL72 rack and four; Llama 3.1 405B on the rack), then
// other models.
void Tunes(int repeat, const std::string& only) {
  struct System {
    const char* model;
    const char* hardware;
    int gpus;
    sim::Scenario scenario;
  };
  using enum sim::Scenario;
  const System systems[] = {
      {"deepseek-r1", "b200", 8, kOffline},        {"deepseek-r1", "b200", 8, kServer},
      {"deepseek-r1", "b300", 8, kOffline},        {"deepseek-r1", "b300", 8, kServer},
      {"deepseek-r1", "b300", 8, kInteractive},    {"deepseek-r1", "gb300", 72, kOffline},
      {"deepseek-r1", "gb300", 72, kServer},       {"deepseek-r1", "gb300", 72, kInteractive},
      {"deepseek-r1", "gb300", 288, kOffline},     {"deepseek-r1", "gb300", 288, kServer},
      {"deepseek-r1", "gb300", 288, kInteractive}, {"llama3.1-405b", "gb300", 72, kOffline},
      {"llama3.1-405b", "gb300", 72, kServer},     {"llama2-70b", "h200", 8, kOffline},
      {"llama2-70b", "h200", 8, kServer},          {"gpt-oss-120b", "b200", 8, kServer}};
  auto catalog = models::HardwareCatalog::LoadBuiltin();
  for (const System& sys : systems) {
    const std::string name = StrFormat("tune_%s_%dx%s_%s", sys.model, sys.gpus, sys.hardware,
                                       std::string(sim::Name(sys.scenario)).c_str());
    if (name.find(only) == std::string::npos) continue;
    // As `fathom tune` sets it up: the GPU's default stack, and what it offers the search.
    const sim::TimeModel time_model = *sim::MakeTimeModel({}, *catalog, sys.hardware);
    tuner::TuneOptions o;
    o.space.model = sys.model;
    o.space.hardware = sys.hardware;
    o.space.gpus = sys.gpus;
    o.space.scenario = sys.scenario;
    const traces::Benchmark* b = traces::FindBenchmark(traces::MlperfBenchmarks(), sys.model);
    o.benchmark = b->name;
    o.dataset = *traces::BenchmarkDataset(*b);
    o.make_time = time_model.factory;
    tuner::FollowStack(time_model, models::LoadModel(sys.model)->model_type, &o.space);
    tuner::TuneResult r;
    const double s = Median(repeat, [&] { r = *tuner::Tune(o, *catalog); });
    const bool server = sys.scenario != sim::Scenario::kOffline;
    const std::string at =
        server && !r.ranked.empty() ? " at " + std::to_string(r.ranked.front().qps) + " QPS" : "";
    std::printf("%s: %.2f s, %lld simulated of %lld; best %.0f tok/s (%.0f per GPU)%s\n",
                name.c_str(), s, static_cast<long long>(r.evaluated),
                static_cast<long long>(r.candidates),
                r.ranked.empty() ? 0.0 : r.ranked.front().throughput_tokens_per_s,
                r.ranked.empty() ? 0.0 : r.ranked.front().tokens_per_s_per_gpu, at.c_str());
    std::fflush(stdout);
  }
}

// The live path against the simulator: `n` identical requests through fathom serve (in this
// process, on loopback) and loadgen, and the same load simulated. Per request, the measured TTFT
// and time per output token minus the simulated ones is what HTTP, SSE and pacing add.
void Live(const char* name, sim::DeploymentConfig d, sim::ScenarioConfig sc, int n, int64_t input,
          int64_t output) {
  auto catalog = models::HardwareCatalog::LoadBuiltin();
  auto roofline = [](const auto& m, const auto& hw, const auto& l, const auto& p, models::Runtime,
                     models::Fusions) {
    return std::unique_ptr<models::ExecutionTimeModel>(
        std::make_unique<models::RooflineModel>(m, hw, l, p));
  };
  std::vector<traces::Request> requests;
  for (int i = 0; i < n; ++i) requests.push_back({i, std::nullopt, input, output, {}});
  auto source = [&] {
    return sc.scenario == sim::Scenario::kOffline ? sim::OfflineSource(requests, n, 7)
                                                  : sim::PoissonSource(requests, n, sc.qps, 7);
  };
  auto for_engine = sim::Resolve(d, *catalog, roofline);
  auto resolved = sim::Resolve(d, *catalog, roofline);
  if (!for_engine.ok() || !resolved.ok()) {
    std::printf("%s: %s\n", name,
                (for_engine.ok() ? resolved : for_engine).status().message().c_str());
    return;
  }
  sim::LiveEngine engine(std::move(*for_engine), 1.0);
  sim::ServeOptions so;
  so.port = 0;
  so.served_model_name = "bench";
  sim::OpenAiServer server(&engine, so);
  if (!server.Bind().ok()) return;
  std::thread http([&] { server.Serve(); });
  server.WaitReady();
  sim::LoadgenOptions lo;
  lo.url = "http://127.0.0.1:" + std::to_string(server.port());
  lo.max_in_flight = n;
  auto load = source();
  const auto t0 = std::chrono::steady_clock::now();
  auto report = sim::RunLoad(*load, sc, std::nullopt, d.gpus, lo);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  server.Stop();
  http.join();
  if (!report.ok()) {
    std::printf("%s: %s\n", name, report.status().message().c_str());
    return;
  }
  sim::SimulationSpec spec = (*resolved)->spec;
  spec.scenario = sc;
  sim::Simulator simulator(spec, source());
  std::map<int64_t, sim::RequestRecord> predicted;
  simulator.set_on_complete([&](const sim::RequestRecord& r) { predicted[r.id] = r; });
  auto sim_result = simulator.Run();
  std::vector<double> ttft_extra_ms, tpot_extra_ms;
  for (const sim::RequestRecord& m : report->answered) {
    const sim::RequestRecord& p = predicted[m.id];
    ttft_extra_ms.push_back(1e3 * ((m.first_token_s - m.issue_s) - (p.first_token_s - p.issue_s)));
    if (m.output > 1) {
      tpot_extra_ms.push_back(1e3 * ((m.done_s - m.first_token_s) - (p.done_s - p.first_token_s)) /
                              (m.output - 1));
    }
  }
  std::printf(
      "%s: %d requests (%lld in, %lld out), %lld answered, %lld failed in %.1f s wall; measured vs "
      "simulated "
      "p99 TTFT %.1f vs %.1f ms, p99 TPOT %.2f vs %.2f ms; per request, extra TTFT p50 %.2f p99 "
      "%.2f ms, "
      "extra per output token p50 %.3f p99 %.3f ms; schedule error p99 %.3f ms\n",
      name, n, static_cast<long long>(input), static_cast<long long>(output),
      static_cast<long long>(report->answered.size()), static_cast<long long>(report->failed), wall,
      report->result.ttft_p99_ms, sim_result->ttft_p99_ms, report->result.tpot_p99_ms,
      sim_result->tpot_p99_ms, Percentile(ttft_extra_ms, 0.5), Percentile(ttft_extra_ms, 0.99),
      Percentile(tpot_extra_ms, 0.5), Percentile(tpot_extra_ms, 0.99),
      report->schedule_error_p99_ms);
}

// 1,000 streams at once: DeepSeek-R1 on 8xB200 (8 attention ranks x 128 sequences), Offline.
void Serve() {
  sim::DeploymentConfig d;
  d.engine.max_batch = 128;
  sim::ScenarioConfig sc;
  sc.scenario = sim::Scenario::kOffline;
  Live("serve_1000_streams", d, sc, 1000, 1000, 200);
}

// Poisson arrivals at 200 a second for 10 s, short answers (Llama 2 70B on 2xH200, FP8).
void Loadgen() {
  sim::DeploymentConfig d;
  d.model = "llama2-70b";
  d.hardware = "h200";
  d.gpus = d.tp = 2;
  d.ep = d.attn_dp = 1;
  d.weights = d.kv = "fp8";
  sim::ScenarioConfig sc;
  sc.scenario = sim::Scenario::kServer;
  sc.qps = 200;
  Live("loadgen_200_qps", d, sc, 2000, 100, 4);
}

}  // namespace fathom

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "all";
  int64_t rows = 10'000'000;
  int repeat = 5;
  std::string only;  // tunes whose name holds this, e.g. "gb300" or "_server"
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rows") == 0) rows = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  if (what == "csv" || what == "all") fathom::CsvParse(rows, repeat);
  if (what == "offline" || what == "all")
    fathom::Scenario("offline", fathom::sim::Scenario::kOffline, 0, 4388, repeat);
  if (what == "server" || what == "all")
    fathom::Scenario("server_600s_5qps", fathom::sim::Scenario::kServer, 5, 3000, repeat);
  if (what == "vidur" || what == "all") fathom::Vidur(4388, repeat);
  if (what == "mtp" || what == "all") fathom::Mtp(35104, repeat);
  if (what == "stream" || what == "all") fathom::Stream(rows);
  if (what == "activity" || what == "all") fathom::Activity(rows / 5, repeat);
  if (what == "online" || what == "all") fathom::Online(repeat);
  if (what == "tune" || what == "all") fathom::Tunes(std::min(repeat, 3), only);
  if (what == "serve" || what == "all") fathom::Serve();
  if (what == "loadgen" || what == "all") fathom::Loadgen();
  return 0;
}
