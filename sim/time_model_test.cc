#include "sim/time_model.h"

#include <catch2/catch.hpp>

namespace fathom::sim {

TEST_CASE("MakeTimeModel: the newest stack's calibration by default; bad choices name the flags",
          "[sim]") {
  auto calibrated = MakeTimeModel({}, "b200");
  INFO(calibrated.status().message());
  REQUIRE(calibrated.ok());
  CHECK_FALSE(calibrated->roofline);
  CHECK_FALSE(calibrated->stack.empty());
  CHECK(calibrated->factory);
  TimeModelOptions o;
  o.cost_model = "roofline";
  auto roofline = MakeTimeModel(o, "b200");
  REQUIRE(roofline.ok());
  CHECK(roofline->roofline);
  o.stack = calibrated->stack;
  CHECK(MakeTimeModel(o, "b200").status().message() ==
        "--stack and --calibration apply to the calibrated cost model, not the roofline");
  o = {};
  o.cost_model = "fitted";
  CHECK(MakeTimeModel(o, "b200").status().message() ==
        "--cost-model = \"fitted\": must be calibrated or roofline");
  o = {};
  o.perf_db = "/nonexistent/perf.db";
  CHECK(MakeTimeModel(o, "b200").status().message() ==
        "--perf-db = \"/nonexistent/perf.db\": no such file");
}

}  // namespace fathom::sim
