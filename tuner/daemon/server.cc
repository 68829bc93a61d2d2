#include "tuner/daemon/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"

namespace evotune {

absl::StatusOr<BuiltServer> BuildServer(
    const std::string& address, const std::vector<grpc::Service*>& services) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  BuiltServer built;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &built.port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  built.server = builder.BuildAndStart();
  if (built.server == nullptr || built.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  return built;
}

}  // namespace evotune
