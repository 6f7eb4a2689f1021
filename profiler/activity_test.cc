#include "profiler/activity.h"

#include <catch2/catch.hpp>

#include "base/json_fields.h"
#include "profiler/activity_fixture.h"
#include "profiler/summary.h"

namespace fathom::profiler {
namespace {

// One record of the fixture, given to the log as the CUPTI tracer decodes it.
void Feed(const Json& e, ActivityLog* log) {
  const std::string kind = e["kind"];
  if (kind == "CONCURRENT_KERNEL" || kind == "MEMCPY" || kind == "MEMSET") {
    models::KernelRecord r;
    r.kind = kind == "CONCURRENT_KERNEL" ? "kernel" : (kind == "MEMCPY" ? "memcpy" : "memset");
    r.name = e.value("name", r.kind);
    r.start_ns = e["start"];
    r.end_ns = e["end"];
    r.device = e["deviceId"];
    r.stream = e["streamId"];
    r.correlation = e["correlationId"];
    r.grid[0] = e.value("gridX", 0);
    r.block[0] = e.value("blockX", 0);
    log->AddRecord(std::move(r));
  } else if (kind == "RUNTIME" || kind == "DRIVER") {
    log->AddLaunch(e["correlationId"], e["threadId"], e["start"]);
  } else if (kind == "MARKER" && e["flags"] == "START") {
    log->OpenRange(e["id"], e["threadId"], e["timestamp"], e["name"]);
  } else if (kind == "MARKER" && e["flags"] == "END") {
    log->CloseRange(e["id"], e["timestamp"]);
  }
}

}  // namespace

TEST_CASE("ActivityLog: each record gets the innermost NVTX range open on its launching thread",
          "[profiler]") {
  const Json fixture = ActivityFixture();
  ActivityLog log;
  for (const auto& e : fixture["activity"]) Feed(e, &log);
  const auto records = log.Take(/*final=*/true);
  CheckExpected(records, fixture["expected"]);
  CHECK(records[0].grid[0] == 132);
  CHECK(records[0].block[0] == 384);
  CHECK(log.pending_records() == 0);
}

TEST_CASE("ActivityLog: records taken as activity arrives match those taken at the end",
          "[profiler]") {
  const Json fixture = ActivityFixture();
  ActivityLog log;
  std::vector<models::KernelRecord> streamed;
  bool attention_waited = false;
  for (const auto& e : fixture["activity"]) {
    Feed(e, &log);
    for (auto& r : log.Take(/*final=*/false)) streamed.push_back(std::move(r));
    // The attention kernel arrives before its launch call: it waits for it.
    if (e["kind"] == "CONCURRENT_KERNEL" && e["correlationId"] == 21)
      attention_waited = log.pending_records() == 1;
  }
  CHECK(attention_waited);
  CHECK(log.Take(/*final=*/true).empty());
  std::stable_sort(streamed.begin(), streamed.end(),
                   [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  CheckExpected(streamed, fixture["expected"]);
}

TEST_CASE("ActivityLog: a long trace taken as it goes keeps memory bounded and every range right",
          "[profiler]") {
  // 20,000 iterations of 1 ms on one thread: a range per iteration, four layer ranges inside
  // with three launches each; each kernel's record arrives 5 ms after its launch. 20 s of
  // activity with a 1 s horizon.
  const int64_t ms = 1'000'000;
  ActivityLog log(1000 * ms);
  std::vector<std::pair<int64_t, models::KernelRecord>> in_flight;  // (arrival, record)
  size_t taken = 0, wrong = 0, max_launches = 0, max_ranges = 0, max_pending = 0;
  int64_t correlation = 0, range_id = 0;
  auto take = [&](bool final) {
    for (const auto& r : log.Take(final)) {
      ++taken;
      wrong += r.nvtx_range != r.name;  // each kernel is named after the range it was launched in
    }
    max_launches = std::max(max_launches, log.launches());
    max_ranges = std::max(max_ranges, log.ranges());
    max_pending = std::max(max_pending, log.pending_records());
  };
  const int iterations = 20000;
  for (int it = 0; it < iterations; ++it) {
    const int64_t t0 = it * ms;
    const int64_t outer = ++range_id;
    log.OpenRange(outer, 1, t0, "iteration");
    for (int layer = 0; layer < 4; ++layer) {
      const int64_t id = ++range_id;
      const int64_t start = t0 + 10 + layer * 200'000;
      const std::string name = "layer." + std::to_string(layer);
      log.OpenRange(id, 1, start, name);
      for (int j = 0; j < 3; ++j) {
        const int64_t launch = start + 100 + j * 1000;
        log.AddLaunch(++correlation, 1, launch);
        models::KernelRecord r;
        r.name = name;
        r.correlation = correlation;
        r.start_ns = launch + 5 * ms;
        r.end_ns = r.start_ns + 20'000;
        in_flight.emplace_back(r.end_ns, std::move(r));
      }
      log.CloseRange(id, start + 150'000);
    }
    log.CloseRange(outer, t0 + ms - 10);
    // Records of kernels that finished by the end of this iteration arrive, then a take.
    auto arrived = std::stable_partition(in_flight.begin(), in_flight.end(),
                                         [&](const auto& f) { return f.first <= t0 + ms; });
    for (auto i = in_flight.begin(); i != arrived; ++i) log.AddRecord(std::move(i->second));
    in_flight.erase(in_flight.begin(), arrived);
    if (it % 10 == 9) take(false);
  }
  for (auto& f : in_flight) log.AddRecord(std::move(f.second));
  take(true);
  CHECK(taken == static_cast<size_t>(iterations) * 12);
  CHECK(wrong == 0);
  // About a horizon's worth: 1,000 iterations of 12 launches and 5 ranges.
  CHECK(max_launches <= 1100 * 12);
  CHECK(max_ranges <= 1100 * 5);
  CHECK(max_pending <= 20 * 12);
}

TEST_CASE("Summarize: GPU time per NVTX range of assembled CUPTI activity", "[profiler]") {
  const Json fixture = ActivityFixture();
  ActivityLog log;
  for (const auto& e : fixture["activity"]) Feed(e, &log);
  const ProfileSummary s = Summarize(log.Take(/*final=*/true));
  CHECK(s.records == 7);
  CHECK(s.total_us == Approx((60 + 40 + 10 + 20 + 4 + 20 + 5) / 1e3));
  std::map<std::string, double> ranges;
  for (const auto& r : s.ranges) ranges[r.key] = r.total_us;
  CHECK(ranges["layer.0"] == Approx(0.070));
  CHECK(ranges["layer.1"] == Approx(0.024));
  CHECK(ranges["prefill"] == Approx(0.040));
  CHECK(ranges["step"] == Approx(0.020));
  CHECK(ranges["(none)"] == Approx(0.005));
  std::map<std::string, double> kinds;
  for (const auto& k : s.kinds) kinds[k.key] = k.total_us;
  CHECK(kinds["gemm"] == Approx(0.060));
  CHECK(kinds["attention"] == Approx(0.064));
}

}  // namespace fathom::profiler
