// The stage thread: one at a time, oldest first, at the worker's priority.
#include "stage_computer.hpp"

#include <algorithm>
#include <chrono>
#include <new>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mha::studio {

namespace {

bool same(const std::weak_ptr<const ForwardResult<float>>& a, const ForwardResult<float>* b) {
  const std::shared_ptr<const ForwardResult<float>> x = a.lock();
  return x && x.get() == b;
}

// Values a stage of `r` holds: (N, H, L, S'), or (N, L, S') for the head average.
double stage_values(const ForwardResult<float>& r, const std::string& name) {
  const Dims& d = r.dims;
  return double(d.N) * double(name == "attn_weights_avg" ? 1 : d.H) * double(d.L) * double(d.S_total);
}

}  // namespace

StageComputer::StageComputer() : thread_([this] { loop(); }) {}

StageComputer::~StageComputer() {
  stop();
}

void StageComputer::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool StageComputer::failed(const ForwardResult<float>* r, const std::string& name) const {
  return std::any_of(failed_.begin(), failed_.end(),
                     [&](const Job& j) { return j.name == name && same(j.result, r); });
}

bool StageComputer::ready(const std::shared_ptr<const ForwardResult<float>>& r,
                          const std::vector<std::string>& names) {
  if (!r || r->backend != Backend::eigen) return true;  // nothing a view may compute
  std::vector<std::string> missing;
  double values = 0;
  for (const std::string& name : names)
    if (!find_stage(*r, name, false)) missing.push_back(name), values += stage_values(*r, name);
  if (missing.empty()) return true;
  if (values < kSyncValues) {
    for (const std::string& name : missing) find_stage(*r, name);
    return true;
  }
  bool all_failed = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_.erase(
        std::remove_if(failed_.begin(), failed_.end(), [](const Job& j) { return j.result.expired(); }),
        failed_.end());
    for (const std::string& name : missing) {
      if (failed(r.get(), name)) continue;
      all_failed = false;
      auto is_it = [&](const Job& j) { return j.name == name && same(j.result, r.get()); };
      if ((working_ && is_it(running_)) || std::any_of(queue_.begin(), queue_.end(), is_it)) continue;
      queue_.push_back({r, name});
    }
  }
  cv_.notify_all();
  return all_failed;
}

bool StageComputer::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return working_ || !queue_.empty();
}

bool StageComputer::wait_idle(double ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_cv_.wait_for(lock, std::chrono::duration<double, std::milli>(ms),
                           [this] { return !working_ && queue_.empty(); });
}

void StageComputer::loop() {
#ifdef __linux__
  // As the compute worker: a third of the UI thread's share of a core when both want one.
  setpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)), 5);
#endif
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return quit_ || !queue_.empty(); });
    if (quit_) return;
    running_ = queue_.front();
    queue_.erase(queue_.begin());
    working_ = true;
    lock.unlock();
    bool ok = true;
    if (const std::shared_ptr<const ForwardResult<float>> r = running_.result.lock()) {
      try {
        ok = find_stage(*r, running_.name) != nullptr;
      } catch (const std::bad_alloc&) {
        ok = false;
      }
    }
    lock.lock();
    if (!ok) failed_.push_back(running_);
    if (on_done) {  // before it counts as idle: whoever waits for that finds the app woken too
      lock.unlock();
      on_done();
      lock.lock();
    }
    working_ = false;
    running_ = {};
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace mha::studio
