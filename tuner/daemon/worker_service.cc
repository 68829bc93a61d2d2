#include "tuner/daemon/worker_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tuner/daemon/auth.h"
#include "tuner/daemon/proto_convert.h"

namespace evotune {
namespace {

// The longest a LeaseTrial call waits for a trial.
constexpr absl::Duration kMaxLeaseWait = absl::Seconds(30);

// A registration's names go to logs and answers: printable ASCII, bounded.
absl::Status CheckName(absl::string_view field, absl::string_view value,
                       size_t max_length, bool spaces) {
  if (value.empty())
    return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  if (value.size() > max_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": at most ", max_length, " characters, got ", value.size()));
  }
  for (char c : value) {
    if (c < ' ' || c > '~' || (c == ' ' && !spaces)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": printable ASCII",
                       spaces ? "" : " without spaces", " only"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRegistration(const v1::RegisterWorkerRequest& req) {
  if (absl::Status s = CheckName("name", req.name(), 128, false); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckName("device.device.name",
                                 req.device().device().name(), 256, true);
      !s.ok()) {
    return s;
  }
  if (req.templates_size() > 1024) {
    return absl::InvalidArgumentError("templates: at most 1024");
  }
  return absl::OkStatus();
}

}  // namespace

GrpcWorkerPool::GrpcWorkerPool(WorkerPool* pool, AccessTokens tokens)
    : pool_(pool), tokens_(std::move(tokens)) {}

grpc::Status GrpcWorkerPool::Authorize(
    const grpc::ServerContextBase* ctx) const {
  return evotune::Authorize(ctx, tokens_, Role::kWorker);
}

grpc::Status GrpcWorkerPool::RegisterWorker(
    grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
    v1::RegisterWorkerResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  if (absl::Status s = CheckRegistration(*req); !s.ok()) {
    return ToGrpcStatus(s);
  }
  WorkerInfo info;
  info.name = req->name();
  absl::StatusOr<DeviceInfo> device = DeviceFromProto(req->device());
  if (!device.ok()) return ToGrpcStatus(device.status());
  info.device = *std::move(device);
  for (const v1::TemplateVersion& t : req->templates()) {
    info.templates.push_back({t.name(), t.source_hash()});
  }
  info.compile_ahead = static_cast<int>(
      std::min<uint32_t>(req->compile_ahead(), WorkerPool::kMaxCompileAhead));
  absl::StatusOr<std::string> id = pool_->Register(std::move(info));
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_worker_id(*id);
  resp->set_heartbeat_ms(static_cast<uint32_t>(
      absl::ToInt64Milliseconds(pool_->options().heartbeat)));
  resp->set_lease_timeout_ms(static_cast<uint32_t>(
      absl::ToInt64Milliseconds(pool_->options().lease_timeout)));
  return grpc::Status::OK;
}

grpc::Status GrpcWorkerPool::LeaseTrial(grpc::ServerContext* ctx,
                                        const v1::LeaseTrialRequest* req,
                                        v1::LeaseTrialResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  const absl::Duration wait =
      std::min(absl::Milliseconds(req->wait_ms()), kMaxLeaseWait);
  std::vector<LeasedTask> upcoming;
  absl::StatusOr<std::optional<LeasedTask>> leased =
      pool_->Lease(req->worker_id(), wait, &upcoming);
  if (!leased.ok()) return ToGrpcStatus(leased.status());
  if (leased->has_value()) {
    const LeasedTask& t = **leased;
    *resp->mutable_task() = TaskToProto(t.task_id, t.task, t.deadline);
    for (const LeasedTask& u : upcoming) {
      *resp->add_upcoming() = TaskToProto(u.task_id, u.task, u.deadline);
    }
  }
  return grpc::Status::OK;
}

grpc::Status GrpcWorkerPool::Heartbeat(grpc::ServerContext* ctx,
                                       const v1::HeartbeatRequest* req,
                                       v1::HeartbeatResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  absl::StatusOr<bool> abort =
      pool_->Heartbeat(req->worker_id(), req->task_id());
  if (!abort.ok()) return ToGrpcStatus(abort.status());
  resp->set_abort(*abort);
  return grpc::Status::OK;
}

grpc::Status GrpcWorkerPool::CompleteTrial(grpc::ServerContext* ctx,
                                           const v1::CompleteTrialRequest* req,
                                           v1::CompleteTrialResponse* resp) {
  if (grpc::Status s = Authorize(ctx); !s.ok()) return s;
  LeasedTask leased;
  leased.task_id = req->task().task_id();
  absl::StatusOr<TrialTask> task = TaskFromProto(req->task());
  if (!task.ok()) return ToGrpcStatus(task.status());
  leased.task = *std::move(task);
  absl::StatusOr<TrialResult> result = ResultFromProto(*req);
  if (!result.ok()) return ToGrpcStatus(result.status());
  return ToGrpcStatus(pool_->Complete(req->worker_id(), leased,
                                      *std::move(result), req->worker_lost()));
}

}  // namespace evotune
