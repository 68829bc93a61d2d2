// The gRPC edge of the worker protocol (proto/evotune/v1/worker.proto):
// checks the worker's token, converts messages and delegates to WorkerPool.
#ifndef EVOTUNE_TUNER_DAEMON_WORKER_SERVICE_H_
#define EVOTUNE_TUNER_DAEMON_WORKER_SERVICE_H_

#include <string>

#include "evotune/v1/worker.grpc.pb.h"
#include "kernel_templates/template_registry.h"
#include "tuner/daemon/auth.h"
#include "tuner/jobs/worker_pool.h"

namespace evotune {

class GrpcWorkerPool final : public v1::WorkerPool::Service {
 public:
  // Calls must carry tokens.worker (none if empty; a client's token is
  // PERMISSION_DENIED). pool must outlive this.
  GrpcWorkerPool(WorkerPool* pool, AccessTokens tokens);

  grpc::Status RegisterWorker(grpc::ServerContext* ctx,
                              const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override;
  grpc::Status LeaseTrial(grpc::ServerContext* ctx,
                          const v1::LeaseTrialRequest* req,
                          v1::LeaseTrialResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx,
                         const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status CompleteTrial(grpc::ServerContext* ctx,
                             const v1::CompleteTrialRequest* req,
                             v1::CompleteTrialResponse* resp) override;

 private:
  grpc::Status Authorize(const grpc::ServerContextBase* ctx) const;

  WorkerPool* const pool_;
  const AccessTokens tokens_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_DAEMON_WORKER_SERVICE_H_
