#include "profiler/activity.h"

#include <algorithm>
#include <iterator>

namespace fathom::profiler {

std::string InnermostRange(const std::vector<NamedRange>& ranges, int64_t t) {
  const NamedRange* best = nullptr;
  for (const NamedRange& r : ranges) {
    if (r.start > t) break;
    if (r.end >= t && (best == nullptr || r.start >= best->start)) best = &r;
  }
  return best ? best->name : "";
}

ActivityLog::ActivityLog(int64_t horizon_ns) : horizon_ns_(horizon_ns) {}

void ActivityLog::AddRecord(models::KernelRecord record) {
  Saw(record.end_ns);
  records_.push_back(std::move(record));
}

void ActivityLog::AddLaunch(int64_t correlation, int64_t thread, int64_t start_ns) {
  Saw(start_ns);
  auto [it, added] = launches_.try_emplace(correlation, Launch{thread, start_ns});
  if (added) {
    launch_order_.emplace_back(start_ns, correlation);
  } else if (start_ns < it->second.start_ns) {
    it->second = Launch{thread, start_ns};
  }
}

void ActivityLog::OpenRange(int64_t id, int64_t thread, int64_t start_ns, std::string name) {
  Saw(start_ns);
  open_[id] = OpenRangeInfo{thread, start_ns, std::move(name)};
}

void ActivityLog::CloseRange(int64_t id, int64_t end_ns) {
  Saw(end_ns);
  auto it = open_.find(id);
  if (it == open_.end()) return;
  AddRange(it->second.thread, it->second.start_ns, end_ns, std::move(it->second.name));
  open_.erase(it);
}

void ActivityLog::AddRange(int64_t thread, int64_t start_ns, int64_t end_ns, std::string name) {
  Saw(end_ns);
  auto& list = closed_[thread];
  // Nested ranges close inner first, so an outer one lands before its children.
  auto at = std::upper_bound(list.begin(), list.end(), start_ns,
                             [](int64_t t, const ClosedRange& c) { return t < c.range.start; });
  at = list.insert(at, ClosedRange{NamedRange{start_ns, end_ns, std::move(name)}, 0});
  int64_t max_end = at == list.begin() ? end_ns : std::max(std::prev(at)->max_end, end_ns);
  for (; at != list.end(); ++at) {
    max_end = std::max(max_end, at->range.end);
    at->max_end = max_end;
  }
}

size_t ActivityLog::ranges() const {
  size_t n = open_.size();
  for (const auto& [thread, list] : closed_) n += list.size();
  return n;
}

std::string ActivityLog::RangeOf(int64_t thread, int64_t t) const {
  const NamedRange* best = nullptr;
  if (auto it = closed_.find(thread); it != closed_.end()) {
    const auto& list = it->second;
    auto at = std::upper_bound(list.begin(), list.end(), t,
                               [](int64_t v, const ClosedRange& c) { return v < c.range.start; });
    // Walking back, the first range still open at t is the latest-starting one that contains t.
    while (at != list.begin()) {
      --at;
      if (at->max_end < t) break;  // nothing this early reaches t
      if (at->range.end >= t) {
        best = &at->range;
        break;
      }
    }
  }
  const OpenRangeInfo* open = nullptr;
  for (const auto& [id, r] : open_) {
    if (r.thread == thread && r.start_ns <= t && (open == nullptr || r.start_ns > open->start_ns))
      open = &r;
  }
  if (open != nullptr && (best == nullptr || open->start_ns >= best->start)) return open->name;
  return best ? best->name : "";
}

std::vector<models::KernelRecord> ActivityLog::Take(bool final) {
  const int64_t cutoff = latest_ns_ - horizon_ns_;
  std::vector<models::KernelRecord> ready;
  size_t kept = 0;  // records still waiting are compacted to the front (the buffer is reused)
  for (auto& r : records_) {
    auto launch = launches_.find(r.correlation);
    if (launch != launches_.end()) {
      r.nvtx_range = RangeOf(launch->second.thread, launch->second.start_ns);
      ready.push_back(std::move(r));
    } else if (final || r.end_ns < cutoff) {
      ready.push_back(std::move(r));
    } else {
      if (&records_[kept] != &r) records_[kept] = std::move(r);  // never onto itself
      ++kept;
    }
  }
  records_.resize(kept);
  // Forget what no record still to come can need.
  while (!launch_order_.empty() && launch_order_.front().first < cutoff) {
    auto it = launches_.find(launch_order_.front().second);
    if (it != launches_.end() && it->second.start_ns < cutoff) launches_.erase(it);
    launch_order_.pop_front();
  }
  for (auto& [thread, list] : closed_) {
    while (!list.empty() && list.front().range.end < cutoff) list.pop_front();
  }
  // Sorted by start: the order is sorted, then each record moved once.
  std::vector<size_t> order(ready.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ready[a].start_ns < ready[b].start_ns; });
  std::vector<models::KernelRecord> out;
  out.reserve(ready.size());
  for (size_t i : order) out.push_back(std::move(ready[i]));
  return out;
}

}  // namespace fathom::profiler
