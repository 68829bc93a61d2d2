// evotuned: the evotune tuning daemon.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/common/log.h"
#include "tuner/daemon/grpc_service.h"
#include "tuner/daemon/job_manager.h"
#include "tuner/daemon/server.h"
#include "tuner/daemon/tuning_service.h"
#include "tuner/evaluator/cuda_evaluator.h"
#include "tuner/evaluator/replay_evaluator.h"
#include "tuner/evaluator/synthetic_evaluator.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7433",
          "address to serve gRPC on; port 0 picks a free port");
ABSL_FLAG(std::string, db, "",
          "SQLite database path (default: $XDG_STATE_HOME/evotune/evotune.db, "
          "or ~/.local/state/evotune/evotune.db)");
ABSL_FLAG(std::string, token, "",
          "bearer token every call must carry (default: $EVOTUNE_TOKEN; "
          "empty disables authentication)");
ABSL_FLAG(std::string, evaluator, "cuda",
          "cuda: compile, validate and time on the GPU; synthetic: a "
          "deterministic stand-in for machines without one (results are "
          "stored under a device named \"synthetic (not a GPU)\")");
ABSL_FLAG(std::string, simulate, "",
          "answer trials from this recorded landscape (CSV from "
          "bench/record_landscapes.sh) instead of a GPU; implies "
          "--evaluator=replay");
ABSL_FLAG(int, gpu, 0, "ordinal of the CUDA device to tune on");
ABSL_FLAG(std::string, cache_dir, "",
          "compiled-kernel cache (default: $XDG_CACHE_HOME/evotune/cubins, or "
          "~/.cache/evotune/cubins); \"none\" disables it");
ABSL_FLAG(int, compile_threads, 0,
          "background NVRTC compile threads (0: half the CPU cores, at least "
          "1)");
ABSL_FLAG(int, synthetic_delay_ms, 0,
          "synthetic evaluator: milliseconds per evaluation");
ABSL_FLAG(std::string, synthetic_log, "",
          "synthetic evaluator: append one line per evaluation to this file");
ABSL_FLAG(std::string, port_file, "",
          "write the port actually listened on to this file once serving");

namespace evotune {
namespace {

// $<xdg_variable>/evotune, or ~/<fallback>/evotune.
std::filesystem::path XdgDir(const char* xdg_variable, const char* fallback) {
  const char* value = std::getenv(xdg_variable);
  if (value != nullptr && *value != '\0') {
    return std::filesystem::path(value) / "evotune";
  }
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home ? home : ".") / fallback / "evotune";
}

absl::StatusOr<std::unique_ptr<Evaluator>> MakeEvaluator() {
  const std::string kind = absl::GetFlag(FLAGS_evaluator);
  if (const std::string file = absl::GetFlag(FLAGS_simulate); !file.empty()) {
    absl::StatusOr<std::unique_ptr<ReplayEvaluator>> replay =
        ReplayEvaluator::Load(file);
    if (!replay.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--simulate: ", replay.status().message()));
    }
    return std::unique_ptr<Evaluator>(*std::move(replay));
  }
  if (kind == "synthetic") {
    SyntheticEvaluator::Options options;
    options.delay = absl::Milliseconds(absl::GetFlag(FLAGS_synthetic_delay_ms));
    options.log_path = absl::GetFlag(FLAGS_synthetic_log);
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

int Run() {
  // Block the shutdown signals in every thread; one thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::string db_path = absl::GetFlag(FLAGS_db);
  if (db_path.empty()) {
    db_path =
        (XdgDir("XDG_STATE_HOME", ".local/state") / "evotune.db").string();
  }
  std::error_code ec;
  std::filesystem::create_directories(
      std::filesystem::path(db_path).parent_path(), ec);
  absl::StatusOr<std::unique_ptr<ResultStore>> store =
      ResultStore::Open(db_path);
  if (!store.ok()) {
    LogError(absl::StrCat("evotuned: ", store.status().message()));
    return 1;
  }

  std::unique_ptr<Evaluator> evaluator;
  absl::Status no_device;
  absl::StatusOr<std::unique_ptr<Evaluator>> made = MakeEvaluator();
  if (absl::IsInvalidArgument(made.status())) {
    LogError(absl::StrCat("evotuned: ", made.status().message()));
    return 2;
  }
  if (made.ok()) {
    evaluator = *std::move(made);
    const DeviceInfo& d = evaluator->device();
    LogInfo(absl::StrCat("device: ", d.name, " (sm_", d.cc_major, d.cc_minor,
                         ", driver ", d.driver_version, ", NVRTC ",
                         d.nvrtc_version, ")"));
  } else {
    no_device = made.status();
    LogError(absl::StrCat(no_device.message(),
                          "; serving queries only, searches are refused"));
  }

  std::string token = absl::GetFlag(FLAGS_token);
  if (token.empty() && std::getenv("EVOTUNE_TOKEN") != nullptr) {
    token = std::getenv("EVOTUNE_TOKEN");
  }

  const TemplateRegistry& templates = TemplateRegistry::Builtin();
  JobManager jobs(store->get(), &templates, std::move(evaluator), no_device);
  TuningService service(store->get(), &templates, &jobs);
  GrpcTuner grpc_service(&service, token);

  absl::StatusOr<BuiltServer> built =
      BuildServer(absl::GetFlag(FLAGS_listen), &grpc_service);
  if (!built.ok()) {
    LogError(absl::StrCat("evotuned: ", built.status().message()));
    return 1;
  }
  std::unique_ptr<grpc::Server> server = std::move(built->server);
  const int port = built->port;
  if (absl::Status s = jobs.Start(); !s.ok()) {
    LogError(absl::StrCat("evotuned: ", s.message()));
    return 1;
  }
  LogInfo(absl::StrCat("evotuned serving on port ", port, ", database ",
                       db_path, token.empty() ? "" : ", token required"));
  if (const std::string port_file = absl::GetFlag(FLAGS_port_file);
      !port_file.empty()) {
    // Write then rename, so that a reader never sees a partial file.
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::filesystem::rename(tmp, port_file, ec);
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LogInfo(absl::StrCat("signal ", signal_number, ": shutting down"));
  // Streams get a few seconds to end; the trial in progress is finished and
  // stored, and a running job goes back to queued.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  jobs.Shutdown();
  LogInfo("evotuned stopped");
  return 0;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  // Cycle detection on every lock is a debugging aid; it costs the hot
  // QueryBest path measurably.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "evotuned: the evotune tuning daemon.\n"
      "  evotuned [--listen=127.0.0.1:7433] [--db=PATH] [--token=T] "
      "[--evaluator=cuda|synthetic]");
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
