#include "tuner/jobs/in_process_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tuner/evaluator/evaluate_task.h"

namespace evotune {

InProcessRunner::InProcessRunner(std::unique_ptr<Evaluator> evaluator,
                                 const TemplateRegistry* templates)
    : evaluator_(std::move(evaluator)), templates_(templates) {
  thread_ = std::thread([this] { Loop(); });
}

InProcessRunner::~InProcessRunner() {
  std::deque<Queued> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  {
    absl::MutexLock lock(&mu_);
    left.swap(queue_);
  }
  for (Queued& q : left) q.done(absl::UnavailableError("shutting down"));
}

absl::StatusOr<DeviceInfo> InProcessRunner::FindDevice(
    const std::string& name) {
  const DeviceInfo& device = evaluator_->device();
  if (!name.empty() && name != device.name) {
    return absl::InvalidArgumentError(
        absl::StrCat("device: this daemon tunes on \"", device.name,
                     "\", not \"", name, "\""));
  }
  return device;
}

absl::Status InProcessRunner::CanEvaluate(const DeviceInfo& device,
                                          const KernelTemplate& t) const {
  return evaluator_->CanEvaluate(t);
}

bool InProcessRunner::Covers(const KernelTemplate& t, const Config& config,
                             const Problem& problem) const {
  return evaluator_->Covers(t, config, problem);
}

uint64_t InProcessRunner::Start(TrialTask task, TrialDone done) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  queue_.push_back({id, std::move(task), std::move(done)});
  return id;
}

void InProcessRunner::Withdraw(uint64_t id) {
  TrialDone done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->id == id) {
        done = std::move(it->done);
        queue_.erase(it);
        break;
      }
    }
  }
  if (done) done(absl::CancelledError("withdrawn"));
}

absl::StatusOr<TrialResult> InProcessRunner::Run(const TrialTask& task) {
  return EvaluateTask(*evaluator_, *templates_, task);
}

void InProcessRunner::Loop() {
  while (true) {
    Queued next;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      // Compiles of what follows can start while this one runs.
      for (const Queued& q : queue_) {
        PrefetchTask(*evaluator_, *templates_, q.task);
      }
    }
    next.done(Run(next.task));
  }
}

}  // namespace evotune
