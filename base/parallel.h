// Running independent work on threads: a fixed range of calls (ParallelFor), or tasks that become
// ready as others finish (ParallelTasks).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

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
// run(task) and hands its result to done(task, result). next and done are called one at a time,
// never beside each other; run concurrently with them and itself. Returns once next() has no task
// and none is under way.
template <typename Next, typename Run, typename Done>
void ParallelTasks(int jobs, Next next, Run run, Done done) {
  std::mutex mu;
  std::condition_variable changed;
  int running = 0;
  auto worker = [&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      auto task = next();
      if (!task) {
        if (running == 0) break;
        changed.wait(lock);
        continue;
      }
      ++running;
      lock.unlock();
      auto result = run(*task);
      lock.lock();
      done(*task, std::move(result));
      --running;
      changed.notify_all();
    }
    changed.notify_all();
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < Workers(jobs); ++j) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

}  // namespace fathom
