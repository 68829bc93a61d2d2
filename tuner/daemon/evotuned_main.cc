// evotuned: the evotune tuning daemon.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/common/help.h"
#include "tuner/common/log.h"
#include "tuner/common/xdg.h"
#include "tuner/daemon/grpc_service.h"
#include "tuner/daemon/server.h"
#include "tuner/daemon/worker_service.h"
#include "tuner/evaluator/replay_evaluator.h"
#include "tuner/jobs/in_process_runner.h"
#include "tuner/jobs/job_manager.h"
#include "tuner/jobs/supervisor.h"
#include "tuner/jobs/worker_pool.h"
#include "tuner/serving/tuning_service.h"
#include "tuner/wire/credentials.h"
#include "tuner/wire/grpc_lifetime.h"
#include "tuner/wire/message_convert.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7433",
          "address to serve gRPC on; port 0 picks a free port");
ABSL_FLAG(std::string, db, "",
          "SQLite database path (default: $XDG_STATE_HOME/evotune/evotune.db, "
          "or ~/.local/state/evotune/evotune.db)");
ABSL_FLAG(std::string, token, "",
          "bearer token of clients: every call of the Tuner service must "
          "carry it (default: $EVOTUNE_TOKEN; empty disables "
          "authentication); also the workers' unless --worker_token is given");
ABSL_FLAG(std::string, token_file, "",
          "read --token from this file instead (keeps it off the command "
          "line)");
ABSL_FLAG(std::string, worker_token, "",
          "bearer token of workers (the WorkerPool service; default: "
          "$EVOTUNE_WORKER_TOKEN, else --token's): with it, a worker's token "
          "cannot submit or cancel jobs and a client's cannot register "
          "workers or report trials");
ABSL_FLAG(std::string, worker_token_file, "",
          "read --worker_token from this file instead");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve --listen over TLS (with --tls_key); "
          "local workers then use a plaintext port on 127.0.0.1");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates: with TLS, require client certificates signed "
          "by them (mutual TLS)");
ABSL_FLAG(std::string, evaluator, "cuda",
          "what local workers evaluate with: cuda (compile, validate and time "
          "on the GPU) or synthetic (a deterministic stand-in for machines "
          "without one; results are stored under a device named \"synthetic "
          "(not a GPU)\")");
ABSL_FLAG(std::string, simulate, "",
          "answer trials from this recorded landscape (CSV from "
          "bench/record_landscapes.sh) inside the daemon instead of running "
          "workers");
ABSL_FLAG(int, workers, -1,
          "local worker processes to run: -1 runs one per GPU, 0 none (remote "
          "workers only)");
ABSL_FLAG(std::string, worker_binary, "",
          "the evotune-worker executable (default: next to evotuned)");
ABSL_FLAG(std::string, worker_flags, "",
          "extra flags for local workers, separated by spaces");
ABSL_FLAG(std::string, cache_dir, "",
          "local workers' compiled-kernel cache (default: "
          "$XDG_CACHE_HOME/evotune/cubins); \"none\" disables it");
ABSL_FLAG(int, compile_threads, 0,
          "background NVRTC compile threads per local worker (0: half the "
          "CPU cores)");
ABSL_FLAG(int, synthetic_delay_ms, 0,
          "synthetic evaluator: milliseconds per evaluation");
ABSL_FLAG(std::string, synthetic_cc, "",
          "synthetic evaluator: the compute capability it reports, MAJOR.MINOR "
          "(e.g. 9.0: kernels exported for it compile for sm_90a)");
ABSL_FLAG(std::string, synthetic_log, "",
          "synthetic evaluator: append one line per evaluation to this file");
ABSL_FLAG(double, trial_slack_s, 20,
          "a trial's deadline is 4x the slowest recent trial on its device "
          "(30 s before any) plus this many seconds; past it the worker is "
          "killed and the trial recorded as timeout");
ABSL_FLAG(double, lease_timeout_s, 5,
          "a worker silent this long is presumed dead and its trial goes to "
          "another one");
ABSL_FLAG(std::string, health_listen, "",
          "also serve gRPC health checking alone, in plaintext, on this "
          "address (e.g. 0.0.0.0:7434 for Kubernetes probes, which cannot "
          "speak TLS); it says SERVING once the daemon serves");
ABSL_FLAG(std::string, port_file, "",
          "write the port actually listened on to this file once serving");
ABSL_FLAG(bool, tune_on_miss, false,
          "QueryBest for a problem with no results of its own starts a "
          "background search for it (a query may say otherwise)");
ABSL_FLAG(int, tune_on_miss_trials, 40,
          "trial budget of a tune-on-miss search");
ABSL_FLAG(int, confirm_turns, evotune::JobManager::kDefaultConfirmTurns,
          "once a search ends, its five fastest configs are timed again "
          "together with the five fastest of each other template near them "
          "on the problem, one sample each per turn in a new random order, "
          "for this many turns, and those times replace theirs (configs timed "
          "one after another minutes apart differ by the GPU's drift as much "
          "as by their speed); 0: not at all");
ABSL_FLAG(bool, cost_model, true,
          "rank the configs served for untuned problems with a cost model "
          "trained on the device's trials (retrained in the background as "
          "trials arrive); without it, the nearest tuned problem's");
ABSL_FLAG(bool, wait_for_model, true,
          "a QueryBest for a problem the cost model has not ranked waits for "
          "its ranking (a few milliseconds); with false it is answered at "
          "once with the templates' defaults, flagged as ranking, while the "
          "model ranks it in the background (a query may say otherwise)");
ABSL_FLAG(int, ranking_threads, 0,
          "threads ranking problems in the background for queries that do "
          "not wait for the cost model (0: a quarter of the CPU cores)");
ABSL_FLAG(int, cost_model_min_trials, 50,
          "OK trials a device needs before its cost model is trained");

namespace evotune {
namespace {

// Flags every local worker gets; `loopback`: the port is on 127.0.0.1.
std::vector<std::string> WorkerFlags(int port, bool loopback) {
  std::string host = "127.0.0.1";
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (!loopback &&
      (absl::StartsWith(listen, "[") || absl::StartsWith(listen, "ipv6:"))) {
    host = "[::1]";
  }
  std::vector<std::string> flags = {
      absl::StrCat("--daemon=", host, ":", port),
      absl::StrCat("--evaluator=", absl::GetFlag(FLAGS_evaluator))};
  if (const std::string dir = absl::GetFlag(FLAGS_cache_dir); !dir.empty()) {
    flags.push_back(absl::StrCat("--cache_dir=", dir));
  }
  if (int n = absl::GetFlag(FLAGS_compile_threads); n > 0) {
    flags.push_back(absl::StrCat("--compile_threads=", n));
  }
  if (int ms = absl::GetFlag(FLAGS_synthetic_delay_ms); ms > 0) {
    flags.push_back(absl::StrCat("--synthetic_delay_ms=", ms));
  }
  if (const std::string cc = absl::GetFlag(FLAGS_synthetic_cc); !cc.empty()) {
    flags.push_back(absl::StrCat("--synthetic_cc=", cc));
  }
  if (const std::string log = absl::GetFlag(FLAGS_synthetic_log);
      !log.empty()) {
    flags.push_back(absl::StrCat("--synthetic_log=", log));
  }
  for (absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_worker_flags),
                                            ' ', absl::SkipEmpty())) {
    flags.emplace_back(f);
  }
  return flags;
}

std::string WorkerBinary() {
  if (std::string flag = absl::GetFlag(FLAGS_worker_binary); !flag.empty()) {
    return flag;
  }
  std::error_code ec;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "evotune-worker").string();
}

// Blocks the shutdown signals in every thread (the ones started later
// inherit the mask); Run waits for them.
sigset_t BlockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

std::string DbPath() {
  std::string path = absl::GetFlag(FLAGS_db);
  if (path.empty()) {
    path = (XdgDir("XDG_STATE_HOME", ".local/state") / "evotune.db").string();
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(),
                                      ec);
  return path;
}

// The clients' and workers' tokens; INVALID_ARGUMENT naming a bad flag.
absl::StatusOr<AccessTokens> Tokens() {
  AccessTokens tokens;
  absl::StatusOr<std::string> client = ResolveToken(
      absl::GetFlag(FLAGS_token), "--token", absl::GetFlag(FLAGS_token_file),
      "--token_file", "EVOTUNE_TOKEN");
  if (!client.ok()) return client.status();
  absl::StatusOr<std::string> worker =
      ResolveToken(absl::GetFlag(FLAGS_worker_token), "--worker_token",
                   absl::GetFlag(FLAGS_worker_token_file),
                   "--worker_token_file", "EVOTUNE_WORKER_TOKEN");
  if (!worker.ok()) return worker.status();
  tokens.client = *client;
  tokens.worker = worker->empty() ? *client : *worker;
  return tokens;
}

// Where trials run: worker processes (pool set), or for --simulate a
// recorded landscape inside the daemon (pool null). INVALID_ARGUMENT for a
// bad flag.
struct Trials {
  std::unique_ptr<TrialRunner> runner;
  WorkerPool* pool = nullptr;
};

std::unique_ptr<WorkerPool> MakeWorkerPool(ResultStore* store,
                                           const TemplateRegistry* templates) {
  WorkerPool::Options options;
  options.deadline_slack =
      absl::Seconds(std::max(0.0, absl::GetFlag(FLAGS_trial_slack_s)));
  options.lease_timeout =
      absl::Seconds(std::max(0.5, absl::GetFlag(FLAGS_lease_timeout_s)));
  options.heartbeat = std::min(absl::Seconds(1), options.lease_timeout / 4);
  auto pool = std::make_unique<WorkerPool>(options);
  // So that a device's limits are known for serving as soon as one of its
  // workers says them (a worker from before says none), not only once a job
  // runs on it: stores from before schema 8 have none.
  pool->AddOnRegister([store](const WorkerInfo& w) {
    const DeviceLimits& l = w.device.limits;
    if (l.smem_per_block_bytes <= 0 && l.multiprocessors <= 0) return;
    if (absl::Status s = store->RecordDeviceLimits(w.device); !s.ok()) {
      LogError(absl::StrCat("recording the limits of ", w.device.name, ": ",
                            s.ToString()));
    }
  });
  // So that the first queries the nearest rule answers for a GPU do not
  // wait for its tuned problems to be read.
  pool->AddOnRegister([store, templates](const WorkerInfo& w) {
    if (absl::Status s =
            store->LoadTunedProblems(w.device, templates->Versions());
        !s.ok()) {
      LogError(absl::StrCat("reading the tuned problems of ", w.device.name,
                            ": ", s.ToString()));
    }
  });
  // Results that workers finished for an earlier daemon are still results.
  pool->SetOrphanSink([store, templates](const TrialTask& task,
                                         const TrialResult& result) {
    const KernelTemplate* t = templates->Find(task.template_name);
    if (t == nullptr || t->hash != task.template_hash) return;
    const TrialScope scope{task.device, task.template_name, task.template_hash,
                           task.problem};
    if (absl::StatusOr<StoredTrial> s =
            store->InsertTrial(scope, task.config, result);
        !s.ok()) {
      LogError(absl::StrCat("storing a late result: ", s.status().message()));
    }
  });
  return pool;
}

absl::StatusOr<Trials> MakeTrials(ResultStore* store,
                                  const TemplateRegistry* templates) {
  Trials trials;
  if (const std::string file = absl::GetFlag(FLAGS_simulate); !file.empty()) {
    absl::StatusOr<std::unique_ptr<ReplayEvaluator>> replay =
        ReplayEvaluator::Load(file);
    if (!replay.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--simulate: ", replay.status().message()));
    }
    trials.runner =
        std::make_unique<InProcessRunner>(*std::move(replay), templates);
    return trials;
  }
  const std::string kind = absl::GetFlag(FLAGS_evaluator);
  if (kind != "cuda" && kind != "synthetic") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--evaluator: unknown evaluator \"", kind, "\" (cuda or synthetic)"));
  }
  std::unique_ptr<WorkerPool> pool = MakeWorkerPool(store, templates);
  trials.pool = pool.get();
  trials.runner = std::move(pool);
  return trials;
}

// The local worker processes, once the server's port is known.
absl::StatusOr<std::unique_ptr<Supervisor>> StartWorkers(
    WorkerPool* pool, const BuiltServer& built, const std::string& token) {
  Supervisor::Options options;
  options.worker_binary = WorkerBinary();
  options.worker_flags = built.loopback_port != 0
                             ? WorkerFlags(built.loopback_port, true)
                             : WorkerFlags(built.port, false);
  options.token = token;
  options.workers = absl::GetFlag(FLAGS_workers);
  if (absl::GetFlag(FLAGS_evaluator) != "cuda") {
    // Stand-in workers use no GPU: one unless told otherwise.
    if (options.workers < 0) options.workers = 1;
    options.visible_devices.assign(std::max(options.workers, 0), "");
  }
  auto supervisor = std::make_unique<Supervisor>(options, pool);
  if (absl::Status s = supervisor->Start(); !s.ok()) return s;
  return supervisor;
}

void WritePortFile(int port) {
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (port_file.empty()) return;
  // Write then rename, so that a reader never sees a partial file.
  const std::string tmp = port_file + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::error_code ec;
  std::filesystem::rename(tmp, port_file, ec);
}

// How queries meet the cost model's first ranking of a problem
// (--wait_for_model, --ranking_threads).
ModelRanking Ranking() {
  ModelRanking ranking;
  ranking.wait = absl::GetFlag(FLAGS_wait_for_model);
  ranking.threads = absl::GetFlag(FLAGS_ranking_threads);
  if (ranking.threads <= 0) {
    ranking.threads =
        std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 4);
  }
  return ranking;
}

// The cost models of --cost_model, started and used by `jobs`; null without.
std::unique_ptr<CostModels> StartCostModels(ResultStore* store,
                                            const TemplateRegistry* templates,
                                            JobManager* jobs) {
  if (!absl::GetFlag(FLAGS_cost_model)) return nullptr;
  CostModelsOptions options;
  options.min_trials = std::max(1, absl::GetFlag(FLAGS_cost_model_min_trials));
  auto models = std::make_unique<CostModels>(store, templates, options);
  models->Start();
  jobs->UseCostModels(models.get());
  return models;
}

bool IsLoopback(const std::string& address) {
  return absl::StartsWith(address, "127.") ||
         absl::StartsWith(address, "localhost:") ||
         absl::StartsWith(address, "[::1]:") ||
         absl::StartsWith(address, "ipv6:[::1]:") ||
         absl::StartsWith(address, "unix:");
}

ServerTls TlsFromFlags() {
  return {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
          absl::GetFlag(FLAGS_tls_client_ca)};
}

// The server of `services` on --listen with `credentials` (over TLS when the
// --tls_ flags say so); then with `local_workers` also a plaintext port on
// 127.0.0.1 for them.
absl::StatusOr<BuiltServer> Serve(
    const std::vector<grpc::Service*>& services,
    std::shared_ptr<grpc::ServerCredentials> credentials, bool local_workers) {
  const bool tls = TlsFromFlags().enabled();
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (!tls && !IsLoopback(listen)) {
    LogInfo(absl::StrCat(
        "warning: serving ", listen,
        " in plaintext: tokens and results cross the network readable by "
        "anyone on the path; give --tls_cert and --tls_key"));
  }
  return BuildServer(listen, services, std::move(credentials),
                     tls && local_workers);
}

// The plaintext health-only server of --health_listen, or null without it.
absl::StatusOr<std::unique_ptr<grpc::Server>> ServeHealth() {
  const std::string address = absl::GetFlag(FLAGS_health_listen);
  if (address.empty()) return nullptr;
  absl::StatusOr<BuiltServer> built = BuildServer(address, {});
  if (!built.ok()) return built.status();
  LogInfo(absl::StrCat("health checking on port ", built->port));
  return std::move(built->server);
}

// What the startup line says of authentication.
std::string Describe(const AccessTokens& tokens) {
  if (tokens.client.empty() && tokens.worker.empty()) return "";
  if (tokens.client == tokens.worker) return ", token required";
  return absl::StrCat(tokens.client.empty() ? "" : ", client token required",
                      ", worker token required");
}

// Logs a failed step; exit status 2 for a bad flag, else 1.
int Fail(const absl::Status& s) {
  LogError(absl::StrCat("evotuned: ", s.message()));
  return absl::IsInvalidArgument(s) ? 2 : 1;
}

// Open the store, make the trial runner, serve, start the workers and the
// job loop; then wait for SIGTERM or SIGINT and shut down in reverse.
int Run() {
  sigset_t signals = BlockShutdownSignals();
  // Bad flags are refused before the store is created.
  const int confirm_turns = absl::GetFlag(FLAGS_confirm_turns);
  if (confirm_turns < 0 || confirm_turns > kMaxTurns) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--confirm_turns must be 0 to ", kMaxTurns, ", got ", confirm_turns)));
  }
  absl::StatusOr<AccessTokens> tokens = Tokens();
  if (!tokens.ok()) return Fail(tokens.status());
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentials(TlsFromFlags());
  if (!credentials.ok()) return Fail(credentials.status());
  const std::string db_path = DbPath();
  absl::StatusOr<std::unique_ptr<ResultStore>> store =
      ResultStore::Open(db_path);
  if (!store.ok()) return Fail(store.status());
  const TemplateRegistry& templates = TemplateRegistry::Builtin();
  absl::StatusOr<Trials> trials = MakeTrials(store->get(), &templates);
  if (!trials.ok()) return Fail(trials.status());
  WorkerPool* pool = trials->pool;

  JobManager jobs(store->get(), &templates, trials->runner.get());
  jobs.SetConfirmTurns(confirm_turns);
  std::unique_ptr<CostModels> models =
      StartCostModels(store->get(), &templates, &jobs);
  TuningService service(
      store->get(), &templates, &jobs,
      {absl::GetFlag(FLAGS_tune_on_miss),
       std::clamp<int64_t>(absl::GetFlag(FLAGS_tune_on_miss_trials), 1,
                           kMaxTrialsLimit)},
      models.get(), Ranking());
  KernelService kernels(&service, store->get());
  GrpcTuner grpc_service(&service, *tokens, &kernels);
  std::unique_ptr<GrpcWorkerPool> worker_service;
  std::vector<grpc::Service*> services = {&grpc_service};
  if (pool != nullptr) {
    worker_service = std::make_unique<GrpcWorkerPool>(pool, *tokens);
    services.push_back(worker_service.get());
  }
  absl::StatusOr<BuiltServer> built =
      Serve(services, *credentials,
            pool != nullptr && absl::GetFlag(FLAGS_workers) != 0);
  if (!built.ok()) return Fail(built.status());
  std::unique_ptr<grpc::Server> server = std::move(built->server);
  std::unique_ptr<Supervisor> supervisor;
  if (pool != nullptr) {
    absl::StatusOr<std::unique_ptr<Supervisor>> s =
        StartWorkers(pool, *built, tokens->worker);
    if (!s.ok()) return Fail(s.status());
    supervisor = *std::move(s);
  }
  if (absl::Status s = jobs.Start(); !s.ok()) return Fail(s);
  absl::StatusOr<std::unique_ptr<grpc::Server>> health = ServeHealth();
  if (!health.ok()) return Fail(health.status());
  LogInfo(absl::StrCat("evotuned serving on port ", built->port, ", database ",
                       db_path, Describe(*tokens)));
  WritePortFile(built->port);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LogInfo(absl::StrCat("signal ", signal_number, ": shutting down"));
  if (*health != nullptr) (*health)->Shutdown();
  // Running jobs go back to queued (trials in flight are measured again after
  // a restart), workers stop, and streams get a few seconds to end.
  jobs.Shutdown();
  if (pool != nullptr) pool->Close();
  supervisor.reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  LogInfo("evotuned stopped");
  return 0;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  // Cycle detection on every lock is a debugging aid; it costs the hot
  // QueryBest path measurably.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const std::string usage =
      "evotuned: the evotune tuning daemon.\n"
      "  evotuned [--listen=127.0.0.1:7433] [--db=PATH] [--token=T] "
      "[--evaluator=cuda|synthetic]";
  if (evotune::HelpRequested(argc, argv)) {
    std::cout << evotune::HelpText(usage);
    return 0;
  }
  absl::SetProgramUsageMessage(usage);
  absl::ParseCommandLine(argc, argv);
  const evotune::GrpcLifetime grpc;  // Ends with no gRPC thread left.
  return evotune::Run();
}
