// Kernels from a running evotuned (Tuner.GetKernel): any problem, its best
// config compiled by the daemon on the first request (and kept in its
// store). For a runtime that should follow the daemon's tuning as it
// improves; a bundle file (BundleSource) needs no daemon.
//
//   auto source = evotune::DaemonSource::Connect("127.0.0.1:7433", token);
//   evotune::Runtime runtime(*std::move(source));
#ifndef EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_DAEMON_SOURCE_H_
#define EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_DAEMON_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "evotune/runtime.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace evotune {

// TLS to the daemon: PEM files of the CA that signed its certificate and,
// for mutual TLS, this client's certificate and key. All empty: plaintext.
struct DaemonTls {
  std::string ca, cert, key;
};

// Thread-safe.
class DaemonSource : public KernelSource {
 public:
  // `token`: the daemon's bearer token, empty when it has none.
  DaemonSource(std::shared_ptr<grpc::Channel> channel, std::string token);
  ~DaemonSource() override;
  // A channel to `address` (host:port), plaintext or over `tls`.
  // INVALID_ARGUMENT naming the file's flag (--tls_ca, --tls_cert,
  // --tls_key) when one cannot be read.
  static absl::StatusOr<std::unique_ptr<DaemonSource>> Connect(
      const std::string& address, const std::string& token,
      const DaemonTls& tls = {});

  // GetKernel for the problem with the configs tuned on `device`. NOT_FOUND
  // when the daemon has no kernel for it (its FAILED_PRECONDITION: no
  // template supports the problem, or NVRTC cannot compile for the device);
  // otherwise the daemon's error (code and message) when it refuses.
  absl::StatusOr<v1::Kernel> Find(const Problem& problem,
                                  const std::string& device,
                                  const std::string& arch) override;
  // RecentKernels: the problems the daemon served for `device` lately.
  absl::StatusOr<std::vector<Problem>> Recent(const std::string& device,
                                              int limit) override;
  // The daemon tunes, transfers or defaults any problem a template takes.
  bool AnswersEveryProblem() const override { return true; }
  // kRefreshInterval: kernels tuned since reach a running program.
  absl::Duration RefreshInterval() const override { return kRefreshInterval; }
  static constexpr absl::Duration kRefreshInterval = absl::Seconds(30);
  std::string About() const override {
    return "a daemon: kernels tuned, transferred or defaulted on demand";
  }

 private:
  class Stub;  // The gRPC stub, out of this header.
  const std::unique_ptr<Stub> stub_;
  const std::string token_;
};

}  // namespace evotune

#endif  // EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_DAEMON_SOURCE_H_
