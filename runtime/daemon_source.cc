#include "evotune/daemon_source.h"

#include <grpcpp/grpcpp.h>

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

absl::StatusOr<v1::Kernel> DaemonSource::Find(const Problem& problem,
                                              const std::string& device,
                                              const std::string& arch) {
  v1::GetKernelRequest request;
  *request.mutable_problem() = ProblemToProto(problem);
  request.set_device(device);
  grpc::ClientContext ctx;
  // The first request for a config compiles it: seconds, not milliseconds.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  if (!token_.empty()) {
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  }
  v1::Kernel kernel;
  grpc::Status s = stub_->tuner->GetKernel(&ctx, request, &kernel);
  if (!s.ok()) {
    // The daemon has no kernel for the problem (no template supports it, or
    // NVRTC cannot compile for the device): the NOT_FOUND of the interface.
    const auto code = s.error_code() == grpc::FAILED_PRECONDITION
                          ? absl::StatusCode::kNotFound
                          : static_cast<absl::StatusCode>(s.error_code());
    return absl::Status(
        code, absl::StrCat("evotuned GetKernel: ", s.error_message()));
  }
  return kernel;
}

}  // namespace evotune
