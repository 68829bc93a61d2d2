#include "tuner/worker/worker.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "tuner/common/log.h"
#include "tuner/evaluator/evaluate_task.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

bool Unreachable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

bool Refused(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
}

int ExitRefused(const std::string& daemon, const grpc::Status& s) {
  LogError(absl::StrCat("evotuned at ", daemon,
                        " refused this worker: ", s.error_message(),
                        " (set --token or EVOTUNE_TOKEN to the daemon's)"));
  return kExitUnauthenticated;
}

}  // namespace

// Sends a heartbeat every interval while a trial is in progress, and ends the
// process when the daemon aborts the trial or it runs far past its deadline.
class Worker::Heartbeats {
 public:
  Heartbeats(Worker* worker, std::string worker_id, const v1::TrialTask& task)
      : worker_(worker),
        worker_id_(std::move(worker_id)),
        task_id_(task.task_id()),
        give_up_(absl::Now() + absl::Seconds(task.deadline_seconds()) +
                 worker->options_.abort_grace) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Heartbeats() {
    done_.Notify();
    thread_.join();
  }

 private:
  void Loop() {
    while (!done_.WaitForNotificationWithTimeout(worker_->heartbeat_)) {
      if (absl::Now() > give_up_) {
        LogError(absl::StrCat("trial ", task_id_,
                              " is far past its deadline; exiting"));
        std::_Exit(kExitAborted);
      }
      v1::HeartbeatRequest request;
      request.set_worker_id(worker_id_);
      request.set_task_id(task_id_);
      v1::HeartbeatResponse response;
      std::unique_ptr<grpc::ClientContext> ctx =
          worker_->Context(worker_->heartbeat_);
      const grpc::Status s =
          worker_->stub_->Heartbeat(ctx.get(), request, &response);
      if (s.ok() && response.abort()) {
        LogError(absl::StrCat("evotuned aborted trial ", task_id_,
                              " (past its deadline); exiting"));
        std::_Exit(kExitAborted);
      }
    }
  }

  Worker* const worker_;
  const std::string worker_id_;
  const std::string task_id_;
  const absl::Time give_up_;
  absl::Notification done_;
  std::thread thread_;
};

Worker::Worker(WorkerOptions options, Evaluator* evaluator,
               const TemplateRegistry* templates)
    : options_(std::move(options)),
      evaluator_(evaluator),
      templates_(templates) {
  stub_ = v1::WorkerPool::NewStub(
      options_.channel != nullptr
          ? options_.channel
          : grpc::CreateChannel(options_.daemon,
                                grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> Worker::Context(
    absl::Duration timeout) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!options_.token.empty()) {
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
  }
  return ctx;
}

int Worker::Register(absl::Notification* stop, std::string* worker_id) {
  v1::RegisterWorkerRequest request;
  request.set_name(options_.name);
  *request.mutable_device() = WorkerDeviceToProto(evaluator_->device());
  request.set_compile_ahead(
      static_cast<uint32_t>(std::max(0, evaluator_->CompileAhead())));
  for (const KernelTemplate& t : templates_->templates()) {
    if (!evaluator_->CanEvaluate(t).ok()) continue;
    v1::TemplateVersion* v = request.add_templates();
    v->set_name(t.name);
    v->set_source_hash(t.hash);
  }
  absl::Duration pause = absl::Milliseconds(100);
  bool said = false;
  while (!stop->HasBeenNotified()) {
    v1::RegisterWorkerResponse response;
    std::unique_ptr<grpc::ClientContext> ctx = Context(absl::Seconds(10));
    const grpc::Status s = stub_->RegisterWorker(ctx.get(), request, &response);
    if (s.ok()) {
      *worker_id = response.worker_id();
      heartbeat_ = absl::Milliseconds(std::max(100u, response.heartbeat_ms()));
      LogInfo(absl::StrCat("registered with evotuned at ", options_.daemon,
                           " as ", options_.name));
      return kExitOk;
    }
    if (Refused(s)) return ExitRefused(options_.daemon, s);
    if (!said || !Unreachable(s)) {
      LogError(absl::StrCat("cannot register with evotuned at ",
                            options_.daemon, ": ", s.error_message(),
                            "; retrying"));
      said = true;
    }
    stop->WaitForNotificationWithTimeout(pause);
    pause = std::min(2 * pause, options_.max_retry);
  }
  return kExitOk;
}

void Worker::Prefetch(const v1::LeaseTrialResponse& response) {
  for (const v1::TrialTask& u : response.upcoming()) {
    absl::StatusOr<TrialTask> task = TaskFromProto(u);
    if (task.ok()) PrefetchTask(*evaluator_, *templates_, *task);
  }
}

v1::CompleteTrialRequest Worker::Evaluate(const v1::TrialTask& proto) {
  v1::CompleteTrialRequest out;
  *out.mutable_task() = proto;
  const absl::StatusOr<TrialTask> task = TaskFromProto(proto);
  const absl::StatusOr<TrialResult> result =
      task.ok() ? EvaluateTask(*evaluator_, *templates_, *task) : task.status();
  if (!result.ok()) {
    // The evaluator itself cannot work: count it against the trial, and let
    // a fresh process try.
    out.set_status(v1::TRIAL_STATUS_CRASHED);
    out.set_error(result.status().ToString());
    out.set_worker_lost(true);
    return out;
  }
  SetResult(*result, &out);
  bool lost = result->status == TrialStatus::kCrashed;
  for (const TrialResult& rival : result->rival_results) {
    lost = lost || rival.status == TrialStatus::kCrashed;
  }
  // A crash poisons the CUDA context for good.
  out.set_worker_lost(lost);
  return out;
}

void Worker::Deliver(v1::CompleteTrialRequest request,
                     absl::Notification* stop) {
  absl::Duration pause = absl::Milliseconds(100);
  while (true) {
    v1::CompleteTrialResponse response;
    std::unique_ptr<grpc::ClientContext> ctx = Context(absl::Seconds(10));
    const grpc::Status s = stub_->CompleteTrial(ctx.get(), request, &response);
    if (s.ok()) return;
    if (!Unreachable(s)) {
      LogError(absl::StrCat("evotuned refused the result of trial ",
                            request.task().task_id(), ": ", s.error_message()));
      return;
    }
    // Keep it until the daemon is back: a finished trial is never dropped
    // unless the worker is told to stop.
    if (stop->WaitForNotificationWithTimeout(pause)) return;
    pause = std::min(2 * pause, options_.max_retry);
  }
}

int Worker::Run(absl::Notification* stop) {
  std::string worker_id;
  absl::Duration pause = absl::Milliseconds(100);
  while (!stop->HasBeenNotified()) {
    if (worker_id.empty()) {
      if (int exit = Register(stop, &worker_id); exit != kExitOk) return exit;
      if (worker_id.empty()) break;  // Stopped.
    }
    v1::LeaseTrialRequest request;
    request.set_worker_id(worker_id);
    request.set_wait_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.lease_wait)));
    v1::LeaseTrialResponse response;
    std::unique_ptr<grpc::ClientContext> ctx =
        Context(options_.lease_wait + absl::Seconds(10));
    const grpc::Status s = stub_->LeaseTrial(ctx.get(), request, &response);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      worker_id.clear();  // The daemon restarted or dropped us.
      continue;
    }
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      LogError(absl::StrCat("evotuned: ", s.error_message()));
      return kExitAborted;
    }
    if (Refused(s)) return ExitRefused(options_.daemon, s);
    if (!s.ok()) {
      stop->WaitForNotificationWithTimeout(pause);
      pause = std::min(2 * pause, options_.max_retry);
      if (!Unreachable(s)) {
        LogError(absl::StrCat("lease: ", s.error_message()));
      }
      continue;
    }
    pause = absl::Milliseconds(100);
    if (!response.has_task()) continue;
    Prefetch(response);
    v1::CompleteTrialRequest result;
    {
      Heartbeats heartbeats(this, worker_id, response.task());
      result = Evaluate(response.task());
    }
    result.set_worker_id(worker_id);
    const bool lost = result.worker_lost();
    if (lost) {
      LogError(absl::StrCat("trial ", response.task().task_id(),
                            " left this worker unusable: ", result.error()));
    }
    Deliver(std::move(result), stop);
    if (lost) return kExitContextLost;
  }
  return kExitOk;
}

}  // namespace evotune
