// The CPU paths' one way to use threads: a forward splits its rows into contiguous ranges, one per
// thread, and problems too small to repay starting a thread run on the caller's thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace mha::detail {

// Starting a thread costs some tens of µs, more than a whole teaching-size forward (~20 µs), so
// problems under a few MFLOP run on the caller's thread.
inline int thread_count(int requested, double flops) {
  if (flops < 4e6) return 1;
  const int n = requested > 0 ? requested : int(std::thread::hardware_concurrency());
  return std::max(n, 1);
}

// Runs fn(thread, begin, end) over [0, count) cut into `threads` contiguous ranges, the first on
// the calling thread. If a thread cannot be started, the caller runs its range. An exception from
// any range is rethrown once all have finished.
template <class F>
void parallel_ranges(int threads, std::int64_t count, const F& fn) {
  threads = int(std::min<std::int64_t>(threads, count));
  if (threads <= 1) {
    fn(0, std::int64_t(0), count);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
  auto run = [&](int t) {
    try {
      fn(t, count * t / threads, count * (t + 1) / threads);
    } catch (...) {
      errors[std::size_t(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  int started = 1;
  try {
    for (; started < threads; ++started) pool.emplace_back(run, started);
  } catch (const std::system_error&) {
  }
  for (int t = started; t < threads; ++t) run(t);
  run(0);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace mha::detail
