// Clock: where the daemon's units read the time, so that tests can move it
// instead of sleeping past a deadline (leveldb's Env::NowMicros in spirit).
//
// Only timestamps and the comparisons made with them go through a Clock:
// lease and heartbeat ages, trial deadlines and durations, a job's elapsed
// time. Waiting itself (condition variables, poll ticks) stays in real time.
#ifndef EVOTUNE_TUNER_COMMON_CLOCK_H_
#define EVOTUNE_TUNER_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace evotune {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // absl::Now(); shared, never destroyed.
  static Clock* Real();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1))
      : now_(start) {}
  absl::Time Now() const override;
  void Advance(absl::Duration d);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_COMMON_CLOCK_H_
