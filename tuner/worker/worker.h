// Worker: the loop of evotune-worker. Registers with evotuned, leases one
// trial at a time, evaluates it and reports the result, with heartbeats while
// it works (proto/evotune/v1/worker.proto).
//
// It outlives the daemon: when evotuned is unreachable it retries, registers
// again when it is back, and delivers a result it finished meanwhile. A trial
// that poisons the CUDA context (a crashed result) is reported as lost and
// Run returns kExitContextLost so the process can start afresh. When the
// daemon says a trial passed its deadline, or the trial runs well past it,
// the process exits at once: a kernel that never ends cannot be stopped any
// other way.
#ifndef EVOTUNE_TUNER_WORKER_WORKER_H_
#define EVOTUNE_TUNER_WORKER_WORKER_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "evotune/v1/worker.grpc.pb.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/evaluator.h"
#include "tuner/wire/worker_exit.h"

namespace evotune {

struct WorkerOptions {
  std::string daemon;  // host:port of evotuned.
  std::string token;   // Bearer token; empty for none.
  // The channel to the daemon (DaemonChannel: TLS or plaintext); null: a
  // plaintext one to `daemon`.
  std::shared_ptr<grpc::Channel> channel;
  std::string name;  // Unique among the daemon's workers.
  absl::Duration lease_wait = absl::Seconds(5);
  // Longest pause between attempts to reach the daemon.
  absl::Duration max_retry = absl::Seconds(5);
  // The worker exits this long after a trial's deadline if still running.
  absl::Duration abort_grace = absl::Seconds(5);
};

class Worker {
 public:
  // evaluator and templates must outlive the worker.
  Worker(WorkerOptions options, Evaluator* evaluator,
         const TemplateRegistry* templates);

  // Serves until `stop` is notified (kExitOk), a trial loses the CUDA
  // context (kExitContextLost) or the daemon refuses the token
  // (kExitUnauthenticated: retrying cannot help, so it is not retried).
  int Run(absl::Notification* stop);

 private:
  class Heartbeats;
  // Registers, retrying while the daemon is unreachable or refuses for a
  // reason that may pass, until it works (kExitOk with worker_id set),
  // `stop` (kExitOk, worker_id empty) or the token is refused
  // (kExitUnauthenticated).
  int Register(absl::Notification* stop, std::string* worker_id);
  v1::CompleteTrialRequest Evaluate(const v1::TrialTask& task);
  // Delivers a result, retrying while the daemon is unreachable.
  void Deliver(v1::CompleteTrialRequest request, absl::Notification* stop);
  void Prefetch(const v1::LeaseTrialResponse& response);
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;

  const WorkerOptions options_;
  Evaluator* const evaluator_;
  const TemplateRegistry* const templates_;
  std::unique_ptr<v1::WorkerPool::Stub> stub_;
  absl::Duration heartbeat_ = absl::Seconds(1);
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_WORKER_WORKER_H_
