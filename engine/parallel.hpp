// The CPU paths' one way to use threads: a forward splits its rows into contiguous ranges, one per
// thread, and problems too small to repay waking a thread run on the caller's thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace mha::detail {

// Waking a thread costs some µs and starting one some tens of µs, more than a whole teaching-size
// forward (~20 µs), so problems under a few MFLOP run on the caller's thread.
inline int thread_count(int requested, double flops) {
  if (flops < 4e6) return 1;
  const int n = requested > 0 ? requested : int(std::thread::hardware_concurrency());
  return std::max(n, 1);
}

// Runs job(context, t) for t in [1, threads) on other threads while the caller runs its own share,
// and returns once every call has returned; job must not throw. Threads are kept between calls:
// a model's forward makes hundreds of these calls, and starting a thread for each cost more than
// the work (each new thread faults in its stack and Eigen's packing buffers, and freeing them
// flushes every core's TLB). The kept threads serve one caller at a time: a call made while they
// are busy (from another thread, or from inside a job) starts threads of its own instead.
// Returns false, having run nothing, when the kept threads cannot be used; the caller then runs
// the calls itself.
bool run_on_pool(int threads, void (*job)(const void* context, int t), const void* context,
                 void (*own_share)(const void* context), const void* own_context);

// Runs fn(thread, begin, end) over [0, count) cut into `threads` contiguous ranges, the first on
// the calling thread. If no other thread can be had, the caller runs every range. An exception
// from any range is rethrown once all have finished.
template <class F>
void parallel_ranges(int threads, std::int64_t count, const F& fn) {
  threads = int(std::min<std::int64_t>(threads, count));
  if (threads <= 1) {
    fn(0, std::int64_t(0), count);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
  struct Context {
    const F& fn;
    std::int64_t count;
    int threads;
    std::vector<std::exception_ptr>& errors;
    void run(int t) const {
      try {
        fn(t, count * t / threads, count * (t + 1) / threads);
      } catch (...) {
        errors[std::size_t(t)] = std::current_exception();
      }
    }
  } context{fn, count, threads, errors};
  auto job = [](const void* c, int t) { static_cast<const Context*>(c)->run(t); };
  auto own = [](const void* c) { static_cast<const Context*>(c)->run(0); };
  if (!run_on_pool(threads, job, &context, own, &context))
    for (int t = 0; t < threads; ++t) context.run(t);
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace mha::detail
