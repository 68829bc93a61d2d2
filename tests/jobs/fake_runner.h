// FakeRunner: a TrialRunner for the daemon's unit tests whose trials finish
// when the test says (ninja's FakeCommandRunner in spirit). Thread-safe, for
// the job threads of JobManager as for TrialLoop on the test's thread.
//
// A task is answered at once by `answer` unless the runner holds it
// (HoldAfter). A held task waits, queued, until Withdraw ends it with
// CANCELLED or the test finishes it (FinishOldest); MarkHeldRunning makes
// the held tasks running ones, which Withdraw leaves alone (as a real runner
// leaves a trial already on the GPU) so that they finish later. A task with
// rivals (a confirmation in turns) gets `answer` for each of its configs,
// unless `answer` itself gives the rivals' results or fails the task.
#ifndef EVOTUNE_TESTS_JOBS_FAKE_RUNNER_H_
#define EVOTUNE_TESTS_JOBS_FAKE_RUNNER_H_

#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tuner/evaluator/evaluator.h"
#include "tuner/jobs/trial_runner.h"

namespace evotune {

class FakeRunner : public TrialRunner {
 public:
  using Answer = std::function<absl::StatusOr<TrialResult>(const TrialTask&)>;

  // A correct result whose latency is the config's KV_TILE + WARPS, timed
  // as the task asked (quickly or fully).
  static absl::StatusOr<TrialResult> AsAsked(const TrialTask& t) {
    TrialResult r;
    r.median_us = r.min_us = r.p90_us =
        static_cast<double>(t.config.at("KV_TILE") + t.config.at("WARPS"));
    r.samples = t.quick ? kQuickTimingSamples : kFullTimingSamples;
    return r;
  }
  // The same, always fully timed: no trial is ever timed again.
  static absl::StatusOr<TrialResult> FullyTimed(const TrialTask& t) {
    absl::StatusOr<TrialResult> r = AsAsked(t);
    r->samples = kFullTimingSamples;
    return r;
  }

  explicit FakeRunner(Answer answer = AsAsked, int parallelism = 1)
      : parallelism_(parallelism), answer_(std::move(answer)) {}

  void set_answer(Answer answer) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }
  // Holds every task started after the first n (0: all).
  void HoldAfter(int n) {
    absl::MutexLock lock(&mu_);
    answer_first_ = n;
  }
  void MarkHeldRunning() {
    absl::MutexLock lock(&mu_);
    for (HeldTask& h : held_) h.running = true;
  }
  // Answers the oldest held task; false when none is held.
  bool FinishOldest() {
    HeldTask h;
    Answer answer;
    {
      absl::MutexLock lock(&mu_);
      if (held_.empty()) return false;
      h = std::move(held_.front());
      held_.pop_front();
      answer = answer_;
    }
    Finish(std::move(h.done), answer, h.task);
    return true;
  }

  // Configs it was asked to run alone (ConfigKey), in order.
  std::vector<std::string> Ran() const {
    absl::MutexLock lock(&mu_);
    return ran_;
  }
  // Tasks with rivals it was asked to run: each the task's configs.
  std::vector<std::vector<Config>> Confirmations() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::vector<Config>> out;
    for (const std::vector<Contender>& task : confirmations_) {
      out.emplace_back();
      for (const Contender& c : task) out.back().push_back(c.config);
    }
    return out;
  }
  // The same with each config's template.
  std::vector<std::vector<Contender>> ConfirmedContenders() const {
    absl::MutexLock lock(&mu_);
    return confirmations_;
  }
  size_t Held() const {
    absl::MutexLock lock(&mu_);
    return held_.size();
  }
  // Withdraw calls, including those for tasks it had already answered.
  size_t Withdrawals() const {
    absl::MutexLock lock(&mu_);
    return withdrawals_;
  }
  // Tasks answered, and of those how many asked for a quick timing.
  int Finished() const {
    absl::MutexLock lock(&mu_);
    return finished_;
  }
  int Quick() const {
    absl::MutexLock lock(&mu_);
    return quick_;
  }

  absl::StatusOr<DeviceInfo> FindDevice(const std::string&) override {
    DeviceInfo d;
    d.name = "fake";
    return d;
  }
  absl::Status CanEvaluate(const DeviceInfo&,
                           const KernelTemplate&) const override {
    return absl::OkStatus();
  }
  int Parallelism(const DeviceInfo&) const override { return parallelism_; }
  // Tasks with configs of several templates only while told it has a worker
  // with them all.
  bool CanRun(const TrialTask& task) const override {
    absl::MutexLock lock(&mu_);
    for (const Contender& c : task.rivals) {
      if (c.template_name != task.template_name && !mixes_templates_) {
        return false;
      }
    }
    return true;
  }
  void set_mixes_templates(bool mixes) {
    absl::MutexLock lock(&mu_);
    mixes_templates_ = mixes;
  }
  uint64_t Start(TrialTask task, TrialDone done) override {
    Answer answer;
    uint64_t id;
    {
      absl::MutexLock lock(&mu_);
      id = ++ids_;
      if (task.rivals.empty()) {
        ran_.push_back(ConfigKey(task.config));
      } else {
        confirmations_.push_back(TaskContenders(task));
      }
      if (static_cast<int>(id) > answer_first_) {
        held_.push_back({id, std::move(task), std::move(done), false});
        return id;
      }
      answer = answer_;
    }
    Finish(std::move(done), answer, task);
    return id;
  }
  void Withdraw(uint64_t id) override {
    TrialDone done;
    {
      absl::MutexLock lock(&mu_);
      ++withdrawals_;
      auto it = held_.begin();
      while (it != held_.end() && it->id != id) ++it;
      if (it == held_.end() || it->running) return;
      done = std::move(it->done);
      held_.erase(it);
    }
    done(absl::CancelledError("withdrawn"));
  }

 private:
  struct HeldTask {
    uint64_t id = 0;
    TrialTask task;
    TrialDone done;
    bool running = false;
  };

  void Finish(TrialDone done, const Answer& answer, const TrialTask& task) {
    {
      absl::MutexLock lock(&mu_);
      ++finished_;
      quick_ += task.quick ? 1 : 0;
    }
    absl::StatusOr<TrialResult> result = answer(task);
    if (!task.rivals.empty() && result.ok() &&
        result->status == TrialStatus::kOk && result->rival_results.empty()) {
      AnswerInTurns(answer, task, *result);
    }
    done(std::move(result));
  }
  // `result` (task.config's) and its rivals' as timed in turns.
  static void AnswerInTurns(const Answer& answer, const TrialTask& task,
                            TrialResult& result) {
    for (const Contender& rival : task.rivals) {
      TrialTask alone = task;
      alone.template_name = rival.template_name;
      alone.template_hash = rival.template_hash;
      alone.config = rival.config;
      alone.rivals.clear();
      absl::StatusOr<TrialResult> r = answer(alone);
      if (!r.ok()) {
        r = TrialResult();
        r->status = TrialStatus::kCrashed;
      }
      result.rival_results.push_back(*std::move(r));
    }
    int timed = 1;
    for (const TrialResult& r : result.rival_results) {
      timed += r.status == TrialStatus::kOk;
    }
    result.samples = task.turns;
    result.timed_against = timed - 1;
    for (TrialResult& r : result.rival_results) {
      if (r.status != TrialStatus::kOk) continue;
      r.samples = task.turns;
      r.timed_against = timed - 1;
    }
  }

  const int parallelism_;
  mutable absl::Mutex mu_;
  Answer answer_ ABSL_GUARDED_BY(mu_);
  int answer_first_ ABSL_GUARDED_BY(mu_) = 1 << 30;
  bool mixes_templates_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t ids_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> ran_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<Contender>> confirmations_ ABSL_GUARDED_BY(mu_);
  std::deque<HeldTask> held_ ABSL_GUARDED_BY(mu_);
  size_t withdrawals_ ABSL_GUARDED_BY(mu_) = 0;
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  int quick_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace evotune

#endif  // EVOTUNE_TESTS_JOBS_FAKE_RUNNER_H_
