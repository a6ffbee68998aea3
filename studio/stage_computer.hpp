// Stages a result left out (mha::find_stage), computed on a thread of their own when they are large:
// a view that reads every weight, opened at L = 2048, would otherwise hold its frame for the 230 ms
// they take. The view asks each frame whether its stages are there, and says what is being computed
// until they are; the app is woken when they land.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mha.hpp"

namespace mha::studio {

class StageComputer {
 public:
  StageComputer();
  ~StageComputer();
  StageComputer(const StageComputer&) = delete;
  StageComputer& operator=(const StageComputer&) = delete;

  // Whether `r` can hand out every stage named without computing: it holds them, they were computed,
  // or they cannot be (a GPU result, too large: find_stage then returns null, and the view says so).
  // Stages under kSyncValues values in all are computed here, at once. Larger ones are queued for the
  // thread (once) and this returns false until they are there.
  bool ready(const std::shared_ptr<const ForwardResult<float>>& r, const std::vector<std::string>& names);
  // A stage is being computed or waits to be.
  bool busy() const;
  // Waits until nothing is computed or waiting, at most `ms` milliseconds; returns !busy().
  bool wait_idle(double ms);
  // Called on the thread after each stage it computed (the app wakes its event loop with it). Set
  // before the first ready().
  std::function<void()> on_done;
  // Joins the thread (idempotent; the destructor calls it).
  void stop();

  // About 7 ms of find_stage on this machine's two cores (230 ms for 33.5M values at L = 2048).
  static constexpr double kSyncValues = double(1 << 20);

 private:
  struct Job {
    std::weak_ptr<const ForwardResult<float>> result;
    std::string name;
  };
  // Whether a stage of `r` was tried on the thread and came back null (it cannot be computed).
  bool failed(const ForwardResult<float>* r, const std::string& name) const;  // under mutex_
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::vector<Job> queue_;
  Job running_;
  bool working_ = false, quit_ = false;
  std::vector<Job> failed_;  // results still alive whose stage could not be computed
  std::thread thread_;
};

}  // namespace mha::studio
