#include "tuner/common/task_queue.h"

#include <utility>

namespace evotune {

TaskQueue::TaskQueue(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

TaskQueue::~TaskQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool TaskQueue::TrySchedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stop_ || queue_.size() >= max_queued_) return false;
  queue_.push_back(std::move(task));
  return true;
}

void TaskQueue::Run() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // Stopping, and nothing left to run.
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace evotune
