#include "tuner/wire/credentials.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace evotune {
namespace {

// The whole file; INVALID_ARGUMENT naming `flag` when it cannot be read.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read ", path));
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A PEM file's contents, or empty for no path.
absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    const std::string& flag) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> pem = ReadFile(path, flag);
  if (pem.ok() && pem->find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return pem;
}

absl::Status Missing(const std::string& flag, const std::string& with) {
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": required with ", with));
}

}  // namespace

absl::StatusOr<std::string> ResolveToken(const std::string& value,
                                         const std::string& flag,
                                         const std::string& file,
                                         const std::string& file_flag,
                                         const char* env) {
  if (!value.empty() && !file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_flag, ": give either ", flag, " or ", file_flag));
  }
  if (!value.empty()) return value;
  if (!file.empty()) {
    absl::StatusOr<std::string> token = ReadFile(file, file_flag);
    if (!token.ok()) return token.status();
    const std::string stripped(absl::StripAsciiWhitespace(*token));
    if (stripped.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_flag, ": ", file, " holds no token"));
    }
    return stripped;
  }
  const char* from_env = std::getenv(env);
  return std::string(from_env != nullptr ? from_env : "");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerTls& tls) {
  if (!tls.enabled()) {
    if (!tls.client_ca.empty()) return Missing("--tls_cert", "--tls_client_ca");
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert.empty()) return Missing("--tls_cert", "--tls_key");
  if (tls.key.empty()) return Missing("--tls_key", "--tls_cert");
  absl::StatusOr<std::string> cert = ReadPem(tls.cert, "--tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(tls.key, "--tls_key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadPem(tls.client_ca, "--tls_client_ca");
  if (!ca.ok()) return ca.status();
  grpc::SslServerCredentialsOptions options(
      ca->empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = *ca;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ClientTls& tls) {
  if (!tls.enabled()) {
    if (!tls.key.empty()) return Missing("--tls_cert", "--tls_key");
    if (!tls.server_name.empty()) {
      return Missing("--tls_ca", "--tls_server_name");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.ca.empty()) return Missing("--tls_ca", "--tls_cert");
  if (tls.cert.empty() != tls.key.empty()) {
    return tls.cert.empty() ? Missing("--tls_cert", "--tls_key")
                            : Missing("--tls_key", "--tls_cert");
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadPem(tls.ca, "--tls_ca");
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> cert = ReadPem(tls.cert, "--tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(tls.key, "--tls_key");
  if (!key.ok()) return key.status();
  options.pem_root_certs = *ca;
  options.pem_cert_chain = *cert;
  options.pem_private_key = *key;
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> DaemonChannel(
    const std::string& address, const ClientTls& tls) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::CreateCustomChannel(address, *credentials, args);
}

}  // namespace evotune
