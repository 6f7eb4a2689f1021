// Runs fn(0) .. fn(n - 1) on worker threads, each taking the next index as it frees up.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace fathom {

// `jobs` <= 0: one thread per core. Returns when every call has returned.
template <typename Fn>
void ParallelFor(size_t n, int jobs, Fn fn) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int workers =
      static_cast<int>(std::min<size_t>(n, static_cast<size_t>(jobs > 0 ? jobs : cores)));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < workers; ++j) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

}  // namespace fathom
