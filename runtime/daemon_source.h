// Kernels from a running evotuned (Tuner.GetKernel): any problem, its best
// config compiled by the daemon on the first request (and kept in its
// store). For a runtime that should follow the daemon's tuning as it
// improves; a bundle file (BundleSource) needs no daemon.
#ifndef EVOTUNE_RUNTIME_DAEMON_SOURCE_H_
#define EVOTUNE_RUNTIME_DAEMON_SOURCE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "evotune/runtime.h"
#include "evotune/v1/evotune.grpc.pb.h"
#include "tuner/wire/credentials.h"

namespace evotune {

// Thread-safe.
class DaemonSource : public KernelSource {
 public:
  // `token`: the daemon's bearer token, empty when it has none.
  DaemonSource(std::shared_ptr<grpc::Channel> channel, std::string token);
  // A channel to `address` (host:port): plaintext, or TLS when `tls` names
  // the CA that signed the daemon's certificate (and, for mutual TLS, this
  // client's certificate and key). INVALID_ARGUMENT naming the file's flag
  // (--tls_ca, --tls_cert, --tls_key) when one cannot be read.
  static absl::StatusOr<std::unique_ptr<DaemonSource>> Connect(
      const std::string& address, const std::string& token,
      const ClientTls& tls = {});

  // GetKernel for the problem with the configs tuned on `device`. NOT_FOUND
  // when the daemon has no kernel for it (its FAILED_PRECONDITION: no
  // template supports the problem, or NVRTC cannot compile for the device);
  // otherwise the daemon's error (code and message) when it refuses.
  absl::StatusOr<v1::Kernel> Find(const Problem& problem,
                                  const std::string& device,
                                  const std::string& arch) override;

 private:
  std::unique_ptr<v1::Tuner::Stub> stub_;
  const std::string token_;
};

}  // namespace evotune

#endif  // EVOTUNE_RUNTIME_DAEMON_SOURCE_H_
