// Test support: the recorded-activity fixture (tests/data/cupti_activity.json) and the check of
// assembled records against its "expected" list. Used by the activity log's tests and, in CUDA
// builds, by the CUPTI decoder's.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "base/json_fields.h"
#include "models/perf_db.h"

namespace fathom::profiler {

inline Json ActivityFixture() {
  auto doc = ReadJsonFile(std::string(FATHOM_TEST_DATA_DIR) + "/cupti_activity.json");
  REQUIRE(doc.ok());
  return *doc;
}

inline void CheckExpected(const std::vector<models::KernelRecord>& records, const Json& expected) {
  REQUIRE(records.size() == expected.size());
  for (size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    CHECK(records[i].kind == expected[i]["kind"].get<std::string>());
    CHECK(records[i].name == expected[i]["name"].get<std::string>());
    CHECK(records[i].start_ns == expected[i]["start"].get<int64_t>());
    CHECK(records[i].nvtx_range == expected[i]["nvtx_range"].get<std::string>());
  }
}

}  // namespace fathom::profiler
