// evotune-worker: evaluates trials for evotuned on one GPU.
//
// evotuned starts one per local GPU; on other machines start it with the
// daemon's address (and token). It compiles, validates and times the
// candidates it leases, so a kernel that faults or hangs takes down only this
// process.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "kernel_templates/template_registry.h"
#include "launch/cuda_driver.h"
#include "tuner/common/help.h"
#include "tuner/common/log.h"
#include "tuner/common/xdg.h"
#include "tuner/evaluator/cuda_evaluator.h"
#include "tuner/evaluator/device_header.h"
#include "tuner/evaluator/synthetic_evaluator.h"
#include "tuner/wire/client_flags.h"
#include "tuner/wire/grpc_lifetime.h"
#include "tuner/worker/worker.h"

ABSL_FLAG(std::string, daemon, "127.0.0.1:7433", "evotuned's address");
ABSL_FLAG(std::string, name, "",
          "name of this worker, unique among the daemon's workers (default: "
          "HOST:gpuN)");
ABSL_FLAG(std::string, evaluator, "cuda",
          "cuda: compile, validate and time on the GPU; synthetic: a "
          "deterministic stand-in for machines without one");
ABSL_FLAG(int, gpu, 0, "ordinal of the CUDA device (of the visible ones)");
ABSL_FLAG(std::string, cache_dir, "",
          "compiled-kernel cache (default: $XDG_CACHE_HOME/evotune/cubins, or "
          "~/.cache/evotune/cubins); \"none\" disables it");
ABSL_FLAG(int, compile_threads, 0,
          "background NVRTC compile threads (0: half the CPU cores, at least "
          "1)");
ABSL_FLAG(bool, probe, false,
          "print the number of usable devices and exit (status 3 with the "
          "reason when there is none)");
ABSL_FLAG(bool, describe, false,
          "print the device of --gpu (its compute capability, multiprocessors "
          "and shared memory per block, as a landscape recording's header "
          "holds them) and exit");
ABSL_FLAG(std::string, synthetic_cc, "",
          "synthetic evaluator: the compute capability it reports, MAJOR.MINOR "
          "(e.g. 9.0: kernels exported for it compile for sm_90a)");
ABSL_FLAG(int, synthetic_delay_ms, 0,
          "synthetic evaluator: milliseconds per evaluation");
ABSL_FLAG(std::string, synthetic_log, "",
          "synthetic evaluator: append one line per evaluation to this file");
ABSL_FLAG(std::string, synthetic_crash, "",
          "synthetic evaluator: die on configs holding these NAME=value "
          "pairs (comma-separated)");
ABSL_FLAG(std::string, synthetic_hang, "",
          "synthetic evaluator: never return on configs holding these pairs");
ABSL_FLAG(std::string, synthetic_flaky, "",
          "synthetic evaluator: die the first time only on configs holding "
          "these pairs (remembered in --synthetic_fault_dir)");
ABSL_FLAG(std::string, synthetic_fault_dir, "/tmp",
          "synthetic evaluator: where --synthetic_flaky remembers crashes");

namespace evotune {
namespace {

absl::StatusOr<Config> FaultFlag(const char* flag, const std::string& value) {
  if (value.empty()) return Config();
  absl::StatusOr<Config> c = ParseConfigKey(value);
  if (!c.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", c.status().message()));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<Evaluator>> MakeEvaluator() {
  const std::string kind = absl::GetFlag(FLAGS_evaluator);
  if (kind == "synthetic") {
    SyntheticEvaluator::Options options;
    options.delay = absl::Milliseconds(absl::GetFlag(FLAGS_synthetic_delay_ms));
    options.log_path = absl::GetFlag(FLAGS_synthetic_log);
    options.fault_dir = absl::GetFlag(FLAGS_synthetic_fault_dir);
    if (const std::string cc = absl::GetFlag(FLAGS_synthetic_cc); !cc.empty()) {
      std::pair<std::string, std::string> parts = absl::StrSplit(cc, '.');
      if (!absl::SimpleAtoi(parts.first, &options.cc_major) ||
          !absl::SimpleAtoi(parts.second, &options.cc_minor) ||
          options.cc_major < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--synthetic_cc: MAJOR.MINOR, e.g. 9.0; got \"", cc, "\""));
      }
    }
    const std::pair<const char*, Config*> faults[] = {
        {"synthetic_crash", &options.crash_on},
        {"synthetic_hang", &options.hang_on},
        {"synthetic_flaky", &options.flaky_on}};
    const std::string values[] = {absl::GetFlag(FLAGS_synthetic_crash),
                                  absl::GetFlag(FLAGS_synthetic_hang),
                                  absl::GetFlag(FLAGS_synthetic_flaky)};
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<Config> c = FaultFlag(faults[i].first, values[i]);
      if (!c.ok()) return c.status();
      *faults[i].second = *std::move(c);
    }
    return std::make_unique<SyntheticEvaluator>(options);
  }
  if (kind == "cuda") {
    CudaEvaluatorOptions options;
    options.ordinal = absl::GetFlag(FLAGS_gpu);
    options.cache_dir = absl::GetFlag(FLAGS_cache_dir);
    if (options.cache_dir.empty()) {
      options.cache_dir =
          (XdgDir("XDG_CACHE_HOME", ".cache") / "cubins").string();
    } else if (options.cache_dir == "none") {
      options.cache_dir.clear();
    }
    options.compile_threads = absl::GetFlag(FLAGS_compile_threads);
    if (options.compile_threads <= 0) {
      options.compile_threads =
          std::max(1u, std::thread::hardware_concurrency() / 2);
    }
    return MakeCudaEvaluator(options);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--evaluator: unknown evaluator \"", kind, "\" (cuda or synthetic)"));
}

// Prints how many devices this worker could serve.
int Probe() {
  if (absl::GetFlag(FLAGS_evaluator) != "cuda") {
    std::printf("1\n");
    return kExitOk;
  }
  absl::StatusOr<const CudaDriver*> d = CudaDriver::Get();
  int count = 0;
  if (d.ok()) {
    absl::Status s =
        (*d)->Check((*d)->cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (!s.ok()) d = s;
  }
  if (!d.ok() || count == 0) {
    std::printf("%s\n", d.ok() ? "no CUDA device: none is visible"
                               : std::string(d.status().message()).c_str());
    return kExitNoDevice;
  }
  std::printf("%d\n", count);
  return kExitOk;
}

// Prints the device this worker would serve, as DeviceHeader writes it.
int Describe() {
  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator = MakeEvaluator();
  if (!evaluator.ok()) {
    LogError(absl::StrCat("evotune-worker: ", evaluator.status().message()));
    return absl::IsInvalidArgument(evaluator.status()) ? kExitUsage
                                                       : kExitNoDevice;
  }
  std::printf("%s", DeviceHeader((*evaluator)->device()).c_str());
  return kExitOk;
}

// The daemon's address, the token and the channel's credentials from the
// flags and environment; INVALID_ARGUMENT naming a bad flag.
absl::StatusOr<WorkerOptions> ConnectionFromFlags() {
  WorkerOptions options;
  options.daemon = absl::GetFlag(FLAGS_daemon);
  absl::StatusOr<DaemonCredentials> credentials = DaemonCredentialsFromFlags();
  if (!credentials.ok()) return credentials.status();
  options.token = credentials->token;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      DaemonChannel(options.daemon, credentials->tls);
  if (!channel.ok()) return channel.status();
  options.channel = *std::move(channel);
  return options;
}

int Run() {
  if (absl::GetFlag(FLAGS_probe)) return Probe();
  if (absl::GetFlag(FLAGS_describe)) return Describe();
  absl::StatusOr<WorkerOptions> connection = ConnectionFromFlags();
  if (!connection.ok()) {
    LogError(absl::StrCat("evotune-worker: ", connection.status().message()));
    return kExitUsage;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator = MakeEvaluator();
  if (!evaluator.ok()) {
    LogError(absl::StrCat("evotune-worker: ", evaluator.status().message()));
    return absl::IsInvalidArgument(evaluator.status()) ? kExitUsage
                                                       : kExitNoDevice;
  }
  WorkerOptions options = *std::move(connection);
  options.name = absl::GetFlag(FLAGS_name);
  if (options.name.empty()) {
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    options.name = absl::StrCat(host, ":gpu", absl::GetFlag(FLAGS_gpu));
  }
  const DeviceInfo& device = (*evaluator)->device();
  LogInfo(absl::StrCat("evotune-worker ", options.name, ": ", device.name,
                       " (sm_", device.cc_major, device.cc_minor, "), daemon ",
                       options.daemon));

  Worker worker(options, evaluator->get(), &TemplateRegistry::Builtin());
  absl::Notification stop;
  std::thread signal_waiter([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    stop.Notify();
  });
  signal_waiter.detach();
  const int code = worker.Run(&stop);
  // Skip destructors: the CUDA context may be poisoned, and the signal
  // thread is still waiting.
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  const std::string usage =
      "evotune-worker: evaluates trials for evotuned on one GPU.\n"
      "  evotune-worker --daemon=HOST:PORT [--token=T] [--gpu=N] "
      "[--name=NAME]";
  if (evotune::HelpRequested(argc, argv)) {
    std::cout << evotune::HelpText(usage);
    return 0;
  }
  absl::SetProgramUsageMessage(usage);
  absl::ParseCommandLine(argc, argv);
  const evotune::GrpcLifetime grpc;  // Ends with no gRPC thread left.
  return evotune::Run();
}
