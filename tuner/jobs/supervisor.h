// Supervisor: starts one evotune-worker process per local GPU, restarts a
// worker that dies (after min_backoff if it had registered with the pool, else
// with exponential backoff, so that a worker that cannot start does not spin),
// and kills one on the pool's request. Workers die with the daemon (they get
// SIGKILL when it exits, even by kill -9); remote workers are not its
// business.
#ifndef EVOTUNE_TUNER_JOBS_SUPERVISOR_H_
#define EVOTUNE_TUNER_JOBS_SUPERVISOR_H_

#include <sys/types.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tuner/common/clock.h"
#include "tuner/jobs/worker_pool.h"

namespace evotune {

class Supervisor {
 public:
  struct Options {
    std::string worker_binary;
    // Flags for every worker (the daemon's address, evaluator flags, ...).
    std::vector<std::string> worker_flags;
    // Handed to workers in the environment, never on the command line.
    std::string token;
    // Workers to run; -1 runs one per device that `worker_binary --probe`
    // finds.
    int workers = -1;
    // Each worker i sees one GPU through CUDA_VISIBLE_DEVICES: entry i of
    // this list (default: the daemon's own CUDA_VISIBLE_DEVICES, else 0, 1,
    // ...). Empty entries leave the variable alone.
    std::vector<std::string> visible_devices;
    absl::Duration min_backoff = absl::Milliseconds(100);
    absl::Duration max_backoff = absl::Seconds(10);
    // Restart times and down times (the shutdown wait stays in real time).
    Clock* clock = Clock::Real();
  };

  // pool must outlive the supervisor.
  Supervisor(Options options, WorkerPool* pool);
  // Stops every worker (SIGTERM, then SIGKILL after two seconds).
  ~Supervisor();

  // Probes for devices when asked to, then starts the workers. With no device
  // it starts none and tells the pool why ("no CUDA device: ..."). Errors only
  // when the worker binary cannot run at all.
  absl::Status Start();
  // SIGKILLs the local worker called `name`, if there is one.
  void Kill(const std::string& name);
  // Local workers it runs.
  int workers() const;

 private:
  struct Slot {
    std::string visible_device;
    pid_t pid = 0;
    std::string name;  // Of the running process: local-<slot>#<start>.
    int starts = 0;
    absl::Time restart_at;
    absl::Time down_since = absl::InfinitePast();
    absl::Duration backoff;
    bool gave_up = false;
  };
  void Loop();
  void Spawn(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRegister(const std::string& name);

  const Options options_;
  WorkerPool* const pool_;
  mutable absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_JOBS_SUPERVISOR_H_
