#include "tuner/daemon/auth.h"

#include "absl/strings/str_cat.h"

namespace evotune {
namespace {

// Whether `got` is "Bearer <token>", without an early exit, so that timing
// reveals nothing of the token.
bool CarriesToken(grpc::string_ref got, const std::string& token) {
  const std::string expected = absl::StrCat("Bearer ", token);
  unsigned char diff = got.size() != expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>((i < got.size() ? got.data()[i] : 0) ^
                                       expected[i]);
  }
  return diff == 0;
}

}  // namespace

grpc::Status Authorize(const grpc::ServerContextBase* ctx,
                       const AccessTokens& tokens, Role role) {
  const bool client = role == Role::kClient;
  const std::string& own = client ? tokens.client : tokens.worker;
  const std::string& other = client ? tokens.worker : tokens.client;
  if (own.empty()) return grpc::Status::OK;
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization: a bearer token is required");
  }
  if (CarriesToken(it->second, own)) return grpc::Status::OK;
  if (!other.empty() && CarriesToken(it->second, other)) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        client ? "authorization: a worker's token cannot call the Tuner service"
               : "authorization: a client's token cannot call the WorkerPool "
                 "service");
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "authorization: wrong bearer token");
}

}  // namespace evotune
