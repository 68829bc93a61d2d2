#include "tuner/common/task_queue.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

TEST(TaskQueueTest, RunsEveryTaskOnItsThreads) {
  std::atomic<int> ran{0};
  std::atomic<bool> on_caller{false};
  const std::thread::id caller = std::this_thread::get_id();
  {
    TaskQueue queue(3, 100);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(queue.TrySchedule([&] {
        if (std::this_thread::get_id() == caller) on_caller = true;
        ++ran;
      }));
    }
  }  // The destructor runs what is queued.
  EXPECT_EQ(ran.load(), 50);
  EXPECT_FALSE(on_caller.load());
}

TEST(TaskQueueTest, RefusesBeyondTheBoundAndRecovers) {
  absl::Notification started, release;
  TaskQueue queue(1, 2);
  ASSERT_TRUE(queue.TrySchedule([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();  // The thread is busy; two may wait.
  std::atomic<int> ran{0};
  EXPECT_TRUE(queue.TrySchedule([&] { ++ran; }));
  EXPECT_TRUE(queue.TrySchedule([&] { ++ran; }));
  EXPECT_FALSE(queue.TrySchedule([&] { ran += 100; }));
  release.Notify();
  absl::Notification done;
  while (!queue.TrySchedule([&] { done.Notify(); })) std::this_thread::yield();
  done.WaitForNotification();
  EXPECT_EQ(ran.load(), 2);
}

}  // namespace
}  // namespace evotune
