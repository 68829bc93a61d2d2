#include "tuner/daemon/grpc_service.h"

#include "tuner/daemon/auth.h"
#include "tuner/daemon/proto_convert.h"

namespace evotune {

GrpcTuner::GrpcTuner(TuningService* service, AccessTokens tokens,
                     KernelService* kernels)
    : service_(service), tokens_(std::move(tokens)), kernels_(kernels) {}

grpc::Status GrpcTuner::Authorize(const grpc::ServerContextBase* ctx) const {
  return evotune::Authorize(ctx, tokens_, Role::kClient);
}

grpc::Status GrpcTuner::TuneModel(grpc::ServerContext* ctx,
                                  const v1::TuneModelRequest* req,
                                  v1::TuneModelResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<ModelTuneRequest> request = ModelTuneFromProto(*req);
  if (!request.ok()) return ToGrpcStatus(request.status());
  absl::StatusOr<std::vector<ModelBucket>> buckets =
      service_->TuneModel(*request);
  if (!buckets.ok()) return ToGrpcStatus(buckets.status());
  *resp = ModelBucketsToProto(*buckets);
  return grpc::Status::OK;
}

grpc::Status GrpcTuner::SubmitSearch(grpc::ServerContext* ctx,
                                     const v1::SubmitSearchRequest* req,
                                     v1::SubmitSearchResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<SearchRequest> request = SearchFromProto(*req);
  if (!request.ok()) return ToGrpcStatus(request.status());
  absl::StatusOr<JobRecord> job = service_->SubmitSearch(*request);
  if (!job.ok()) return ToGrpcStatus(job.status());
  resp->set_job_id(job->job_id);
  return grpc::Status::OK;
}

grpc::Status GrpcTuner::WatchJob(grpc::ServerContext* ctx,
                                 const v1::WatchJobRequest* req,
                                 grpc::ServerWriter<v1::JobUpdate>* writer) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  auto send = [writer](const JobUpdateView& update) {
    v1::JobUpdate msg;
    *msg.mutable_job() = JobToProto(update.job);
    if (update.event) {
      v1::TrialEvent* e = msg.mutable_event();
      e->set_sequence(update.event->sequence);
      *e->mutable_trial() = TrialToProto(update.event->trial);
      e->set_cached(update.event->cached);
    }
    return writer->Write(msg);
  };
  return ToGrpcStatus(service_->WatchJob(req->job_id(), req->from_sequence(),
                                         send,
                                         [ctx] { return ctx->IsCancelled(); }));
}

grpc::Status GrpcTuner::GetJob(grpc::ServerContext* ctx,
                               const v1::GetJobRequest* req, v1::Job* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<JobView> job = service_->GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = JobToProto(*job);
  return grpc::Status::OK;
}

grpc::Status GrpcTuner::ListJobs(grpc::ServerContext* ctx,
                                 const v1::ListJobsRequest* req,
                                 v1::ListJobsResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<std::optional<JobState>> state =
      StateFilterFromProto(req->state());
  if (!state.ok()) return ToGrpcStatus(state.status());
  absl::StatusOr<std::vector<JobView>> jobs = service_->ListJobs(*state);
  if (!jobs.ok()) return ToGrpcStatus(jobs.status());
  for (const JobView& job : *jobs) *resp->add_jobs() = JobToProto(job);
  return grpc::Status::OK;
}

grpc::Status GrpcTuner::CancelJob(grpc::ServerContext* ctx,
                                  const v1::CancelJobRequest* req,
                                  v1::Job* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<JobView> job = service_->CancelJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = JobToProto(*job);
  return grpc::Status::OK;
}

grpc::Status GrpcTuner::QueryBest(grpc::ServerContext* ctx,
                                  const v1::QueryBestRequest* req,
                                  v1::QueryBestResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<BestQuery> query = BestQueryFromProto(*req);
  if (!query.ok()) return ToGrpcStatus(query.status());
  absl::StatusOr<BestAnswer> answer = service_->QueryBest(*query);
  if (!answer.ok()) return ToGrpcStatus(answer.status());
  *resp = BestToProto(*answer);
  return grpc::Status::OK;
}

grpc::Status GrpcTuner::ListTemplates(grpc::ServerContext* ctx,
                                      const v1::ListTemplatesRequest*,
                                      v1::ListTemplatesResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  for (const KernelTemplate& t : service_->templates().templates()) {
    *resp->add_templates() = TemplateToProto(t);
  }
  return grpc::Status::OK;
}

grpc::Status GrpcTuner::EvaluateConfig(grpc::ServerContext* ctx,
                                       const v1::EvaluateConfigRequest* req,
                                       v1::EvaluateConfigResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<EvaluateRequest> request = EvaluateFromProto(*req);
  if (!request.ok()) return ToGrpcStatus(request.status());
  absl::StatusOr<EvaluateAnswer> answer = service_->EvaluateConfig(*request);
  if (!answer.ok()) return ToGrpcStatus(answer.status());
  *resp = EvaluateToProto(*answer);
  return grpc::Status::OK;
}

grpc::Status GrpcTuner::GetKernel(grpc::ServerContext* ctx,
                                  const v1::GetKernelRequest* req,
                                  v1::Kernel* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  if (kernels_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "this daemon serves no kernels");
  }
  absl::StatusOr<BestQuery> query = KernelQueryFromProto(*req);
  if (!query.ok()) return ToGrpcStatus(query.status());
  absl::StatusOr<ServedKernel> kernel = kernels_->GetKernel(*query);
  if (!kernel.ok()) return ToGrpcStatus(kernel.status());
  *resp = KernelToProto(*kernel);
  return grpc::Status::OK;
}

grpc::Status GrpcTuner::RecentKernels(grpc::ServerContext* ctx,
                                      const v1::RecentKernelsRequest* req,
                                      v1::RecentKernelsResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  if (kernels_ == nullptr) return grpc::Status::OK;  // Served none.
  const uint32_t limit =
      req->limit() == 0 ? kDefaultRecentKernels : req->limit();
  for (const Problem& p : kernels_->Recent(req->device(), limit)) {
    *resp->add_problems() = ProblemToProto(p);
  }
  return grpc::Status::OK;
}

}  // namespace evotune
