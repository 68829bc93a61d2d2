// TaskQueue: a fixed set of threads running tasks in the order they were
// queued, with a bound on how many may wait: work taken off a request path
// (a first-time ranking) must not pile up without limit when it arrives
// faster than it runs. Thread-safe; the destructor runs what is queued and
// joins the threads.
#ifndef EVOTUNE_TUNER_COMMON_TASK_QUEUE_H_
#define EVOTUNE_TUNER_COMMON_TASK_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace evotune {

class TaskQueue {
 public:
  // `threads` >= 1; at most `max_queued` tasks wait beside those running.
  TaskQueue(int threads, size_t max_queued);
  ~TaskQueue();
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  // Queues `task`; false (and `task` dropped) when max_queued are waiting.
  bool TrySchedule(std::function<void()> task);

 private:
  void Run();

  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_COMMON_TASK_QUEUE_H_
