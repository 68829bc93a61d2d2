// The gRPC edge of evotuned: checks the client's token, converts messages and
// statuses, and delegates to TuningService.
#ifndef EVOTUNE_TUNER_DAEMON_GRPC_SERVICE_H_
#define EVOTUNE_TUNER_DAEMON_GRPC_SERVICE_H_

#include <string>

#include "evotune/v1/evotune.grpc.pb.h"
#include "tuner/daemon/auth.h"
#include "tuner/serving/kernel_service.h"
#include "tuner/serving/tuning_service.h"

namespace evotune {

// Every method uses the synchronous API: with gRPC 1.51 it answers QueryBest,
// the hot read path, faster than the callback API (bench/RESULTS.md).
class GrpcTuner final : public v1::Tuner::Service {
 public:
  // Calls must carry tokens.client (none if empty; a worker's token is
  // PERMISSION_DENIED). service and kernels must outlive this; without
  // kernels, GetKernel is UNIMPLEMENTED.
  GrpcTuner(TuningService* service, AccessTokens tokens,
            KernelService* kernels = nullptr);

  grpc::Status TuneModel(grpc::ServerContext* ctx,
                         const v1::TuneModelRequest* req,
                         v1::TuneModelResponse* resp) override;
  grpc::Status SubmitSearch(grpc::ServerContext* ctx,
                            const v1::SubmitSearchRequest* req,
                            v1::SubmitSearchResponse* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx,
                        const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobUpdate>* writer) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx,
                        const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx,
                         const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status QueryBest(grpc::ServerContext* ctx,
                         const v1::QueryBestRequest* req,
                         v1::QueryBestResponse* resp) override;
  grpc::Status ListTemplates(grpc::ServerContext* ctx,
                             const v1::ListTemplatesRequest* req,
                             v1::ListTemplatesResponse* resp) override;
  grpc::Status EvaluateConfig(grpc::ServerContext* ctx,
                              const v1::EvaluateConfigRequest* req,
                              v1::EvaluateConfigResponse* resp) override;
  grpc::Status GetKernel(grpc::ServerContext* ctx,
                         const v1::GetKernelRequest* req,
                         v1::Kernel* resp) override;
  // A limit past what the daemon keeps (RecentProblems) answers them all.
  grpc::Status RecentKernels(grpc::ServerContext* ctx,
                             const v1::RecentKernelsRequest* req,
                             v1::RecentKernelsResponse* resp) override;

  static constexpr uint32_t kDefaultRecentKernels = 64;

 private:
  grpc::Status Authorize(const grpc::ServerContextBase* ctx) const;

  TuningService* const service_;
  const AccessTokens tokens_;
  KernelService* const kernels_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_DAEMON_GRPC_SERVICE_H_
