#include "tuner/daemon/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"

namespace evotune {

absl::StatusOr<BuiltServer> BuildServer(
    const std::string& address, const std::vector<grpc::Service*>& services,
    std::shared_ptr<grpc::ServerCredentials> credentials, bool loopback_port,
    int max_threads) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  grpc::ResourceQuota quota("evotuned");
  quota.SetMaxThreads(max_threads);
  builder.SetResourceQuota(quota);
  BuiltServer built;
  builder.AddListeningPort(
      address,
      credentials != nullptr ? credentials : grpc::InsecureServerCredentials(),
      &built.port);
  if (loopback_port) {
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &built.loopback_port);
  }
  for (grpc::Service* service : services) builder.RegisterService(service);
  built.server = builder.BuildAndStart();
  if (built.server == nullptr || built.port == 0 ||
      (loopback_port && built.loopback_port == 0)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  return built;
}

}  // namespace evotune
