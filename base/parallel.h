// Running independent work on threads: a fixed range of calls (ParallelFor), or tasks that become
// ready as others finish (ParallelTasks).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "base/cancel.h"

namespace fathom {

// Threads for `jobs` (<= 0: one per core).
inline int Workers(int jobs) {
  return jobs > 0 ? jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Runs fn(0) .. fn(n - 1) on worker threads, each taking the next index as it frees up.
// `jobs` <= 0: one thread per core. Returns when every call has returned.
template <typename Fn>
void ParallelFor(size_t n, int jobs, Fn fn) {
  const int workers = static_cast<int>(std::min<size_t>(n, static_cast<size_t>(Workers(jobs))));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < workers; ++j) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

// Runs tasks on `jobs` threads as they become ready: a free thread takes next() (a
// std::optional<Task>; empty when no task can start until one under way finishes), runs
// run(task) and hands its result to done(task, result). After each done(), drop(task) is asked of
// every task under way: true stops it (run sees CancelRequested(), base/cancel.h, and may give up)
// and its result goes nowhere (done is not called for it). next, done and drop are called one at
// a time, never beside each other; run concurrently with them and itself. Returns once next() has
// no task and none is under way.
template <typename Next, typename Run, typename Done, typename Drop>
void ParallelTasks(int jobs, Next next, Run run, Done done, Drop drop) {
  using Task = typename decltype(next())::value_type;
  struct UnderWay {
    explicit UnderWay(Task t) : task(std::move(t)) {}
    Task task;
    std::atomic<bool> dropped{false};
  };
  std::mutex mu;
  std::condition_variable changed;
  std::list<UnderWay> under_way;
  auto worker = [&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      auto task = next();
      if (!task) {
        if (under_way.empty()) break;
        changed.wait(lock);
        continue;
      }
      const auto mine = under_way.emplace(under_way.end(), std::move(*task));
      lock.unlock();
      auto result = [&] {
        CancelCheck check([&] { return mine->dropped.load(std::memory_order_relaxed); });
        return run(std::as_const(mine->task));
      }();
      lock.lock();
      if (!mine->dropped.load()) {
        done(std::as_const(mine->task), std::move(result));
        for (UnderWay& other : under_way) {
          if (&other != &*mine && !other.dropped.load() && drop(std::as_const(other.task)))
            other.dropped.store(true);
        }
      }
      under_way.erase(mine);
      changed.notify_all();
    }
    changed.notify_all();
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < Workers(jobs); ++j) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

// The same, never dropping a task.
template <typename Next, typename Run, typename Done>
void ParallelTasks(int jobs, Next next, Run run, Done done) {
  ParallelTasks(jobs, next, run, done, [](const auto&) { return false; });
}

}  // namespace fathom
