// Assembles kernel records from activity: the GPU's kernel, memcpy and memset records, the API
// calls that launched them (matched by correlation id) and NVTX ranges per host thread. Each
// record gets its innermost NVTX range: the latest-starting range open on the launching thread
// when the launch call began. The CUPTI tracer feeds it as activity arrives; the Nsight Systems
// import feeds it a whole export.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/perf_db.h"

namespace fathom::profiler {

struct NamedRange {
  int64_t start = 0, end = 0;
  std::string name;
};

// The innermost range (latest start) containing `t`, among `ranges` sorted by start; "" if none.
std::string InnermostRange(const std::vector<NamedRange>& ranges, int64_t t);

class ActivityLog {
 public:
  // Records may be taken while activity still arrives (Take(false)): a launch call older than
  // `horizon_ns` behind the newest timestamp seen is forgotten, so memory stays bounded on long
  // traces. A kernel runs within the horizon of its launch, and activity of one thread arrives
  // in order, as CUPTI delivers it.
  explicit ActivityLog(int64_t horizon_ns = 10'000'000'000);

  void AddRecord(models::KernelRecord record);  // a kernel, memcpy or memset
  // A runtime or driver API call; for a correlation id seen twice (a runtime call and the driver
  // call it makes) the earlier start counts.
  void AddLaunch(int64_t correlation, int64_t thread, int64_t start_ns);
  void OpenRange(int64_t id, int64_t thread, int64_t start_ns, std::string name);
  void CloseRange(int64_t id, int64_t end_ns);
  void AddRange(int64_t thread, int64_t start_ns, int64_t end_ns,
                std::string name);  // a complete one

  // Hands over the records whose launch call is known, with their range; records whose launch
  // call is still unknown wait, until `final` or until they ended a horizon ago (then with no
  // range). Sorted by start.
  std::vector<models::KernelRecord> Take(bool final);

  size_t pending_records() const { return records_.size(); }
  size_t launches() const { return launches_.size(); }
  size_t ranges() const;  // open and closed ranges held

 private:
  struct Launch {
    int64_t thread = 0, start_ns = 0;
  };
  struct OpenRangeInfo {
    int64_t thread = 0, start_ns = 0;
    std::string name;
  };
  std::string RangeOf(int64_t thread, int64_t t) const;
  void Saw(int64_t t) { latest_ns_ = std::max(latest_ns_, t); }

  int64_t horizon_ns_;
  int64_t latest_ns_ = 0;
  std::vector<models::KernelRecord> records_;
  std::unordered_map<int64_t, Launch> launches_;
  std::deque<std::pair<int64_t, int64_t>>
      launch_order_;  // (start, correlation), to forget old calls
  struct ClosedRange {
    NamedRange range;
    int64_t max_end = 0;  // latest end of this range and every one before it in the list
  };
  std::unordered_map<int64_t, OpenRangeInfo> open_;    // by range id
  std::map<int64_t, std::deque<ClosedRange>> closed_;  // by thread, sorted by start
};

}  // namespace fathom::profiler
