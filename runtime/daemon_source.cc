#include "evotune/daemon_source.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "evotune/v1/evotune.grpc.pb.h"
#include "tuner/wire/credentials.h"
#include "tuner/wire/message_convert.h"

namespace evotune {

class DaemonSource::Stub {
 public:
  explicit Stub(std::shared_ptr<grpc::Channel> channel)
      : tuner(v1::Tuner::NewStub(std::move(channel))) {}
  const std::unique_ptr<v1::Tuner::Stub> tuner;
};

DaemonSource::DaemonSource(std::shared_ptr<grpc::Channel> channel,
                           std::string token)
    : stub_(std::make_unique<Stub>(std::move(channel))),
      token_(std::move(token)) {}

DaemonSource::~DaemonSource() = default;

absl::StatusOr<std::unique_ptr<DaemonSource>> DaemonSource::Connect(
    const std::string& address, const std::string& token,
    const DaemonTls& tls) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      DaemonChannel(address, ClientTls{tls.ca, tls.cert, tls.key, ""});
  if (!channel.ok()) return channel.status();
  // Connecting starts now, in the background: the first question (a
  // launch's, bounded by milliseconds) finds the connection made.
  (*channel)->GetState(/*try_to_connect=*/true);
  return std::make_unique<DaemonSource>(*std::move(channel), token);
}

namespace {

// The daemon's error as this interface's (FAILED_PRECONDITION: NOT_FOUND).
absl::Status FromGrpc(const grpc::Status& s, absl::string_view rpc) {
  const auto code = s.error_code() == grpc::FAILED_PRECONDITION
                        ? absl::StatusCode::kNotFound
                        : static_cast<absl::StatusCode>(s.error_code());
  return absl::Status(code,
                      absl::StrCat("evotuned ", rpc, ": ", s.error_message()));
}

// The request's deadline, `wait` from now, and the daemon's token if any.
void Prepare(grpc::ClientContext* ctx, std::chrono::seconds wait,
             const std::string& token) {
  ctx->set_deadline(std::chrono::system_clock::now() + wait);
  if (!token.empty()) {
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
}

}  // namespace

absl::StatusOr<v1::Kernel> DaemonSource::Find(const Problem& problem,
                                              const std::string& device,
                                              const std::string& arch) {
  v1::GetKernelRequest request;
  *request.mutable_problem() = ProblemToProto(problem);
  request.set_device(device);
  grpc::ClientContext ctx;
  // The first request for a config compiles it: seconds, not milliseconds.
  Prepare(&ctx, std::chrono::minutes(2), token_);
  v1::Kernel kernel;
  grpc::Status s = stub_->tuner->GetKernel(&ctx, request, &kernel);
  // FAILED_PRECONDITION: the daemon has no kernel for the problem (no
  // template supports it, or NVRTC cannot compile for the device).
  if (!s.ok()) return FromGrpc(s, "GetKernel");
  return kernel;
}

absl::StatusOr<std::vector<Problem>> DaemonSource::Recent(
    const std::string& device, int limit) {
  v1::RecentKernelsRequest request;
  request.set_device(device);
  request.set_limit(std::max(0, limit));
  grpc::ClientContext ctx;
  Prepare(&ctx, std::chrono::seconds(10), token_);
  v1::RecentKernelsResponse response;
  grpc::Status s = stub_->tuner->RecentKernels(&ctx, request, &response);
  if (!s.ok()) return FromGrpc(s, "RecentKernels");
  std::vector<Problem> out;
  for (const v1::Problem& p : response.problems()) {
    absl::StatusOr<Problem> problem = ProblemFromProto(p);
    if (problem.ok()) out.push_back(*std::move(problem));
  }
  return out;
}

}  // namespace evotune
