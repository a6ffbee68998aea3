// The threads parallel_ranges keeps between calls.
#include "parallel.hpp"

#include <pthread.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <system_error>

namespace mha::detail {
namespace {

// Set on the kept threads and on a caller while it runs its own share: a parallel call from
// inside a job runs on its own thread, since the outer call already has every core busy.
thread_local bool t_inside_job = false;

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
    const int shared = std::min(threads, int(workers_.size()) + 1);
    {
      std::lock_guard<std::mutex> lock(m_);
      job_ = job;
      context_ = context;
      threads_ = shared;
      pending_ = shared - 1;
      ++generation_;
    }
    wake_.notify_all();
    t_inside_job = true;
    own_share(own_context);
    for (int t = shared; t < threads; ++t) job(context, t);
    t_inside_job = false;
    std::unique_lock<std::mutex> lock(m_);
    done_.wait(lock, [&] { return pending_ == 0; });
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
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (index >= threads_) continue;
      void (*job)(const void*, int) = job_;
      const void* context = context_;
      lock.unlock();
      job(context, index);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex use_;                    // held by the one caller the kept threads serve
  std::vector<std::thread> workers_;  // worker i runs share i + 1
  std::mutex m_;                      // guards everything below
  std::condition_variable wake_, done_;
  std::uint64_t generation_ = 0;  // one more for each call
  void (*job_)(const void*, int) = nullptr;
  const void* context_ = nullptr;
  int threads_ = 0;  // shares in the current call
  int pending_ = 0;  // kept threads still running their share of it
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
