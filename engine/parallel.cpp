// The threads parallel_ranges keeps between calls.
#include "parallel.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <system_error>

namespace mha::detail {
namespace {

// Set on the kept threads and on a caller while it runs its own share: a parallel call from
// inside a job runs on its own thread, since the outer call already has every core busy.
thread_local bool t_inside_job = false;

// Waits until ready() or, after spinning for kSpin, until `cv` is notified and ready() under `m`.
// Between the calls of one forward the kept threads are idle for microseconds: spinning through
// that gap spares the futex wake-up, which on a virtual machine is an interrupt to another core
// costing more than many of the calls' work.
constexpr auto kSpin = std::chrono::microseconds(200);

template <class Ready>
void spin_then_wait(std::mutex& m, std::condition_variable& cv, const Ready& ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0; !ready(); ++i) {
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, ready);
      return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

class Pool {
 public:
  Pool() {
    // A child made by fork has none of the kept threads: it runs every call itself.
    pthread_atfork(nullptr, nullptr, [] { forked_child() = true; });
  }

  // Returns false when the kept threads are busy with another caller.
  bool run(int threads, void (*job)(const void*, int), const void* context, void (*own_share)(const void*),
           const void* own_context) {
    std::unique_lock<std::mutex> use(use_, std::try_to_lock);
    if (!use.owns_lock()) return false;
    try {
      while (int(workers_.size()) < threads - 1) {
        const int index = int(workers_.size()) + 1;
        workers_.emplace_back([this, index] { serve(index); });
      }
    } catch (const std::system_error&) {
      // Fewer threads than asked for: the caller runs the shares nobody takes.
    }
    const int shared = std::min({threads, int(workers_.size()) + 1, kMaxShares});
    job_ = job;
    context_ = context;
    pending_.store(shared - 1, std::memory_order_relaxed);
    {
      // Under the lock, so that a thread about to sleep either sees the new call or is woken.
      std::lock_guard<std::mutex> lock(m_);
      const std::uint64_t generation = (call_.load(std::memory_order_relaxed) >> 16) + 1;
      call_.store(generation << 16 | std::uint64_t(shared), std::memory_order_release);
    }
    wake_.notify_all();
    t_inside_job = true;
    own_share(own_context);
    for (int t = shared; t < threads; ++t) job(context, t);
    t_inside_job = false;
    spin_then_wait(m_, done_, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    return true;
  }

  static bool& forked_child() {
    static bool forked = false;
    return forked;
  }

 private:
  void serve(int index) {
    t_inside_job = true;
    std::uint64_t seen = 0;
    for (;;) {
      spin_then_wait(m_, wake_, [&] { return call_.load(std::memory_order_acquire) >> 16 != seen; });
      // The generation and its share count in one read: a thread that was not needed in a call may
      // wake only once the next has begun, and must not take that one's count for the old call's.
      const std::uint64_t call = call_.load(std::memory_order_acquire);
      seen = call >> 16;
      if (index >= int(call & 0xFFFF)) continue;
      job_(context_, index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(m_);  // the caller checks pending_ under it before sleeping
        done_.notify_one();
      }
    }
  }

  std::mutex use_;                    // held by the one caller the kept threads serve
  std::vector<std::thread> workers_;  // worker i runs share i + 1
  std::mutex m_;                      // for sleeping and waking only
  std::condition_variable wake_, done_;
  // The current call: its generation (one more for each call) << 16 | its share count. Storing it
  // publishes job_ and context_, which stay as they are until every share has returned.
  std::atomic<std::uint64_t> call_{0};
  static constexpr int kMaxShares = 0xFFFF;
  void (*job_)(const void*, int) = nullptr;
  const void* context_ = nullptr;
  std::atomic<int> pending_{0};  // kept threads still running their share of the current call
};

// Threads started for one call, for a caller that found the kept ones busy.
bool run_on_new_threads(int threads, void (*job)(const void*, int), const void* context,
                        void (*own_share)(const void*), const void* own_context) {
  std::vector<std::thread> started;
  int t = 1;
  try {
    for (; t < threads; ++t) started.emplace_back(job, context, t);
  } catch (const std::system_error&) {
  }
  for (int rest = t; rest < threads; ++rest) job(context, rest);
  t_inside_job = true;
  own_share(own_context);
  t_inside_job = false;
  for (std::thread& th : started) th.join();
  return true;
}

}  // namespace

bool run_on_pool(int threads, void (*job)(const void*, int), const void* context,
                 void (*own_share)(const void*), const void* own_context) {
  if (t_inside_job || threads <= 1) return false;
  // Never destroyed: a thread may still be finishing a forward while the process exits.
  static Pool* pool = new Pool;
  if (Pool::forked_child()) return false;
  if (pool->run(threads, job, context, own_share, own_context)) return true;
  return run_on_new_threads(threads, job, context, own_share, own_context);
}

}  // namespace mha::detail
