// TrialLoop: one run of a job's search, in named steps.
//
//   Resume  the strategy and the elite learn the trials the job already has;
//   Fill    ask the strategy for configs; one the store already measured is
//           recorded at once, the others are launched on the TrialRunner
//           (timed quickly first) until enough are in flight to keep
//           every worker of the device busy and compiling ahead
//           (TrialRunner::Parallelism + QueuedAhead);
//   Await   the next finished trial;
//   Tell    a quick timing that could enter the job's elite is launched
//           again to be timed fully; anything else is recorded;
//   Record  append the trial to the job in the store (a failure fails the
//           job), then hand it to every measure callback: the strategy,
//           the elite, the watchers (further ones, such as a cost model,
//           are one more entry);
//   Confirm once the search ended (budget or strategy exhausted), the
//           elite's configs are timed again together, in turns, as one
//           task (TrialTask::rivals), with the problem's fastest configs of
//           the other templates (Hooks::rival_templates) whose fastest is
//           near (when one worker has every template of the task,
//           TrialRunner::CanRun), and their stored latencies replaced: they
//           were timed one after another, minutes (or jobs) apart, and clocks
//           drift by a few percent over that time, which is the size of the
//           differences among the fastest configs, of one template or of
//           several;
//   Abandon on the way out, queued trials are withdrawn and running ones
//           store their result when it comes.
//
// Ends when the budget or the strategy is exhausted, the job must stop
// (shutdown or cancel) or a step fails. Not thread-safe: one job thread
// runs it; runner callbacks only touch its shared Inbox.
#ifndef EVOTUNE_TUNER_JOBS_TRIAL_LOOP_H_
#define EVOTUNE_TUNER_JOBS_TRIAL_LOOP_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernel_templates/kernel_template.h"
#include "storage/result_store.h"
#include "tuner/common/clock.h"
#include "tuner/jobs/trial_runner.h"
#include "tuner/search/search_strategy.h"

namespace evotune {

// Multi-fidelity: every correct candidate is timed quickly; only one that
// could enter the job's elite (its kSize fastest fully timed configs, with
// a margin for the quick timing's noise) is timed fully.
class Elite {
 public:
  static constexpr int kSize = 5;
  static constexpr double kMargin = 1.10;

  bool Admits(double median_us) const;
  // Counts only correct, fully timed results (rows from before timing
  // fidelity was recorded count as full).
  void Add(const Config& config, const TrialResult& r);
  // (median_us, config), fastest first.
  const std::vector<std::pair<double, Config>>& members() const {
    return fastest_;
  }

 private:
  std::vector<std::pair<double, Config>> fastest_;  // Ascending, <= kSize.
};

class TrialLoop {
 public:
  struct Hooks {
    // Whether the job must stop now; sets *cancelled when it was cancelled.
    std::function<bool(bool* cancelled)> should_stop;
    // After each recorded trial (wakes the job's watchers).
    std::function<void()> notify;
    // Times the job against its budget in seconds.
    Clock* clock = Clock::Real();
    // Turns of the Confirm step (samples per config); 0: no Confirm.
    int confirm_turns = 0;
    // Other template versions (name, hash) that the runner can evaluate on
    // the device: Confirm times each one's fastest configs for the problem
    // beside the job's.
    std::vector<std::pair<std::string, std::string>> rival_templates;
  };
  using MeasureCallback =
      std::function<void(const Config& config, const TrialResult& result)>;

  // `job` must outlive the loop; `t` is the job's template at its hash.
  TrialLoop(ResultStore* store, TrialRunner* runner, Hooks hooks,
            const JobRecord& job, const KernelTemplate& t,
            const DeviceInfo& device, std::unique_ptr<SearchStrategy> strategy);
  ~TrialLoop();

  // Runs the job's trials; OK when it ended without a failure (check
  // `cancelled` for a cancel).
  absl::Status Run(bool& cancelled);

 private:
  struct Flight {
    Config config;
    uint64_t runner_id = 0;
  };
  // A finished trial, by launch number.
  struct Arrival {
    uint64_t id;
    absl::StatusOr<TrialResult> result;
  };
  struct Inbox;

  absl::Status Search(bool& cancelled);
  absl::Status Resume();
  absl::Status Fill();
  std::optional<Config> Next(int target);
  // What Confirm times: the elite, then the other templates' fastest (at
  // most 1 + kMaxRivals), each with its latency as stored.
  absl::StatusOr<std::vector<std::pair<Contender, double>>> ToConfirm() const;
  // The task timing `confirm` in turns: the first config, the others its
  // rivals.
  TrialTask ConfirmTask(
      const std::vector<std::pair<Contender, double>>& confirm) const;
  absl::Status Confirm(bool& cancelled);
  void Launch(const Config& config, bool quick);
  void Launch(TrialTask task);
  std::optional<Arrival> Await();
  absl::Status Tell(const Config& config, const TrialResult& result);
  absl::Status Record(const Config& config, const TrialResult& result,
                      bool cached);
  void Abandon();

  bool BudgetLeft() const;
  int64_t InFlight() const { return static_cast<int64_t>(in_flight_.size()); }
  double Elapsed() const;

  ResultStore* const store_;
  TrialRunner* const runner_;
  const Hooks hooks_;
  const JobRecord& job_;
  const KernelTemplate& template_;
  const DeviceInfo device_;
  const TrialScope scope_;
  std::unique_ptr<SearchStrategy> strategy_;
  std::vector<MeasureCallback> measured_;

  Elite elite_;
  int64_t trials_done_ = 0;
  std::deque<Config> pending_;  // Proposed, not yet launched.
  bool exhausted_ = false;      // The strategy has nothing more.
  std::shared_ptr<Inbox> inbox_;
  std::map<uint64_t, Flight> in_flight_;  // By launch number.
  uint64_t launches_ = 0;
  const absl::Time start_;
  bool abandoned_ = false;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_JOBS_TRIAL_LOOP_H_
