// Decoding of CUPTI's activity record structs, on the recorded-activity fixture: no GPU needed.
#include <catch2/catch.hpp>
#include <cstring>
#include <deque>

#include "base/json_fields.h"
#include "profiler/activity_fixture.h"
#include "profiler/cupti/cupti_tracer.h"

namespace fathom::profiler {
namespace {

template <typename Transfer>
void FillTransfer(const Json& e, Transfer* t) {
  t->start = e["start"];
  t->end = e["end"];
  t->deviceId = e["deviceId"];
  t->streamId = e["streamId"];
  t->correlationId = e["correlationId"];
}

// Hands `record` to the decoder from a byte buffer, as CUPTI delivers records.
template <typename Record>
void Decode(const Record& record, ActivityLog* log) {
  alignas(8) unsigned char buffer[sizeof(Record)];
  std::memcpy(buffer, &record, sizeof(Record));
  DecodeActivity(*reinterpret_cast<const CUpti_Activity*>(buffer), log);
}

// Decodes one fixture record as CUPTI would hand it over: in its record struct.
void DecodeFixtureRecord(const Json& e, std::deque<std::string>* names, ActivityLog* log) {
  const std::string kind = e["kind"];
  if (kind == "CONCURRENT_KERNEL") {
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    names->push_back(e["name"]);
    k.name = names->back().c_str();
    FillTransfer(e, &k);
    k.gridX = e["gridX"];
    k.gridY = e["gridY"];
    k.gridZ = e["gridZ"];
    k.blockX = e["blockX"];
    k.blockY = e["blockY"];
    k.blockZ = e["blockZ"];
    Decode(k, log);
  } else if (kind == "MEMCPY") {
    CUpti_ActivityMemcpy6 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    FillTransfer(e, &m);
    Decode(m, log);
  } else if (kind == "MEMSET") {
    CUpti_ActivityMemset4 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    FillTransfer(e, &m);
    Decode(m, log);
  } else if (kind == "RUNTIME" || kind == "DRIVER") {
    CUpti_ActivityAPI a{};
    a.kind = kind == "RUNTIME" ? CUPTI_ACTIVITY_KIND_RUNTIME : CUPTI_ACTIVITY_KIND_DRIVER;
    a.correlationId = e["correlationId"];
    a.threadId = e["threadId"];
    a.start = e["start"];
    a.end = e["end"];
    Decode(a, log);
  } else if (kind == "MARKER") {
    CUpti_ActivityMarker2 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MARKER;
    const std::string flags = e["flags"];
    m.flags = flags == "START" ? CUPTI_ACTIVITY_FLAG_MARKER_START
                               : (flags == "END" ? CUPTI_ACTIVITY_FLAG_MARKER_END
                                                 : CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS);
    m.id = e["id"];
    m.timestamp = e["timestamp"];
    m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    m.objectId.pt.threadId = e["threadId"];
    if (e.contains("name")) {
      names->push_back(e["name"]);
      m.name = names->back().c_str();
    }
    Decode(m, log);
  } else {
    FAIL("unknown fixture kind " << kind);
  }
}

}  // namespace

TEST_CASE("DecodeActivity: CUPTI records to kernel records with their NVTX ranges", "[profiler]") {
  const Json fixture = ActivityFixture();
  std::deque<std::string> names;
  ActivityLog log;
  for (const auto& e : fixture["activity"]) DecodeFixtureRecord(e, &names, &log);
  const auto records = log.Take(/*final=*/true);
  CheckExpected(records, fixture["expected"]);
  for (const auto& r : records) CHECK(r.source == "cupti");
  const auto& splitkv = records[3];
  CHECK(splitkv.end_ns == 1300);
  CHECK(splitkv.stream == 7);
  CHECK(splitkv.correlation == 13);
  CHECK((std::array<int32_t, 3>{splitkv.grid[0], splitkv.grid[1], splitkv.grid[2]} ==
         std::array<int32_t, 3>{16, 8, 4}));
  CHECK(splitkv.block[0] == 128);
  CHECK(records[1].stream == 9);
}

}  // namespace fathom::profiler
