#include "tuner/daemon/auth.h"

#include "absl/strings/str_cat.h"

namespace evotune {

grpc::Status CheckBearerToken(const grpc::ServerContextBase* ctx,
                              const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization: a bearer token is required");
  }
  const std::string expected = absl::StrCat("Bearer ", token);
  const grpc::string_ref got = it->second;
  // Compare without an early exit so timing reveals nothing of the token.
  unsigned char diff = got.size() != expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>((i < got.size() ? got.data()[i] : 0) ^
                                       expected[i]);
  }
  if (diff != 0) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization: wrong bearer token");
  }
  return grpc::Status::OK;
}

}  // namespace evotune
