// The coordinator's own limit: stand-in workers (threads, each on its own
// connection) register with a running evotuned, lease trials and report
// each at once with the synthetic evaluator's result, so nothing but the
// daemon (leasing, the search, the store's commits) sets the pace. Runs
// `--rounds` of `--jobs` exhaustive searches at once on distinct problems
// and prints trial completions per second and the latency percentiles of
// LeaseTrial (leases that got a trial) and CompleteTrial, as one JSON line.
//
//   coordinator_bench --daemon=127.0.0.1:PORT --workers=64 --jobs=4
//       --trials=2000 [--token=T]   (evotuned --evaluator=synthetic)
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "evotune/v1/evotune.grpc.pb.h"
#include "evotune/v1/worker.grpc.pb.h"
#include "kernel_templates/template_registry.h"
#include "tuner/evaluator/evaluate_task.h"
#include "tuner/evaluator/synthetic_evaluator.h"
#include "tuner/wire/message_convert.h"

ABSL_FLAG(std::string, daemon, "127.0.0.1:7433", "evotuned's address");
ABSL_FLAG(std::string, token, "", "bearer token for both services");
ABSL_FLAG(int, workers, 64, "stand-in workers");
ABSL_FLAG(int, jobs, 4, "searches at once (evotuned runs up to 4)");
ABSL_FLAG(int, trials, 2000, "trials per search (at most its space)");
ABSL_FLAG(int, rounds, 5, "rounds of --jobs searches, one after another");
ABSL_FLAG(std::string, template_name, "flash_fwd", "template searched");

namespace evotune {
namespace {

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  const std::string token = absl::GetFlag(FLAGS_token);
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

std::shared_ptr<grpc::Channel> Connect(int n) {
  grpc::ChannelArguments args;
  args.SetInt("evotune.bench_connection", n);  // A connection of its own.
  return grpc::CreateCustomChannel(absl::GetFlag(FLAGS_daemon),
                                   grpc::InsecureChannelCredentials(), args);
}

struct Samples {
  absl::Mutex mu;
  std::vector<double> lease_us, complete_us;
  int64_t completed = 0;
  absl::Time first = absl::InfiniteFuture(), last = absl::InfinitePast();
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// One stand-in worker: register, then lease and report until `done`.
void RunWorker(int n, const std::atomic<bool>& done, Samples* samples) {
  SyntheticEvaluator evaluator({});
  auto stub = v1::WorkerPool::NewStub(Connect(n));
  v1::RegisterWorkerRequest reg;
  reg.set_name(absl::StrCat("bench-", n));
  *reg.mutable_device() = WorkerDeviceToProto(evaluator.device());
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    v1::TemplateVersion* v = reg.add_templates();
    v->set_name(t.name);
    v->set_source_hash(t.hash);
  }
  v1::RegisterWorkerResponse registered;
  grpc::Status s = stub->RegisterWorker(Context().get(), reg, &registered);
  if (!s.ok()) {
    std::fprintf(stderr, "register: %s\n", s.error_message().c_str());
    return;
  }
  std::vector<double> lease_us, complete_us;
  while (!done.load()) {
    v1::LeaseTrialRequest lease;
    lease.set_worker_id(registered.worker_id());
    lease.set_wait_ms(200);
    v1::LeaseTrialResponse leased;
    const absl::Time t0 = absl::Now();
    if (!stub->LeaseTrial(Context().get(), lease, &leased).ok()) break;
    const absl::Time t1 = absl::Now();
    if (!leased.has_task()) continue;
    lease_us.push_back(absl::ToDoubleMicroseconds(t1 - t0));
    absl::StatusOr<TrialTask> task = TaskFromProto(leased.task());
    v1::CompleteTrialRequest complete;
    complete.set_worker_id(registered.worker_id());
    *complete.mutable_task() = leased.task();
    // Timed fully even when asked for a quick timing, so that no trial is
    // timed again and each task but a confirmation is one trial.
    if (task.ok()) task->quick = false;
    absl::StatusOr<TrialResult> r =
        task.ok() ? EvaluateTask(evaluator, TemplateRegistry::Builtin(), *task)
                  : task.status();
    if (r.ok()) {
      SetResult(*r, &complete);
    } else {
      complete.set_status(v1::TRIAL_STATUS_CRASHED);
    }
    v1::CompleteTrialResponse ack;
    const absl::Time t2 = absl::Now();
    if (!stub->CompleteTrial(Context().get(), complete, &ack).ok()) break;
    const absl::Time t3 = absl::Now();
    complete_us.push_back(absl::ToDoubleMicroseconds(t3 - t2));
    absl::MutexLock lock(&samples->mu);
    // A job's closing confirmation (its fastest timed again together) is
    // no trial of its own.
    if (task.ok() && task->rivals.empty()) ++samples->completed;
    samples->first = std::min(samples->first, t0);
    samples->last = std::max(samples->last, t3);
  }
  absl::MutexLock lock(&samples->mu);
  samples->lease_us.insert(samples->lease_us.end(), lease_us.begin(),
                           lease_us.end());
  samples->complete_us.insert(samples->complete_us.end(), complete_us.begin(),
                              complete_us.end());
}

// Submits round `round`'s exhaustive searches, each on a problem of its own.
std::vector<std::string> SubmitJobs(v1::Tuner::Stub* tuner, int round) {
  std::vector<std::string> ids;
  const int jobs = absl::GetFlag(FLAGS_jobs);
  for (int j = round * jobs; j < (round + 1) * jobs; ++j) {
    v1::SubmitSearchRequest r;
    r.set_template_name(absl::GetFlag(FLAGS_template_name));
    r.set_strategy("exhaustive");
    Problem p;
    p.heads = p.kv_heads = 8;
    p.seq_q = 512 + 64 * j;
    p.seq_k = 512;
    *r.mutable_problem() = ProblemToProto(p);
    r.mutable_budget()->set_max_trials(absl::GetFlag(FLAGS_trials));
    r.mutable_budget()->set_max_seconds(3600);
    v1::SubmitSearchResponse resp;
    grpc::Status s = tuner->SubmitSearch(Context().get(), r, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      std::exit(1);
    }
    ids.push_back(resp.job_id());
  }
  return ids;
}

bool AllFinal(v1::Tuner::Stub* tuner, const std::vector<std::string>& ids,
              int64_t* trials) {
  *trials = 0;
  bool final = true;
  for (const std::string& id : ids) {
    v1::GetJobRequest get;
    get.set_job_id(id);
    v1::Job job;
    if (!tuner->GetJob(Context().get(), get, &job).ok()) return false;
    *trials += job.trials_done();
    final = final && (job.state() == v1::JOB_STATE_SUCCEEDED ||
                      job.state() == v1::JOB_STATE_FAILED ||
                      job.state() == v1::JOB_STATE_CANCELLED);
  }
  return final;
}

int Run() {
  auto tuner = v1::Tuner::NewStub(Connect(-1));
  std::atomic<bool> done{false};
  Samples samples;
  std::vector<std::thread> workers;
  for (int i = 0; i < absl::GetFlag(FLAGS_workers); ++i) {
    workers.emplace_back(RunWorker, i, std::cref(done), &samples);
  }
  absl::SleepFor(absl::Seconds(1));  // Registered before the jobs start.
  int64_t trials = 0;
  size_t jobs = 0;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    const std::vector<std::string> ids = SubmitJobs(tuner.get(), round);
    jobs += ids.size();
    int64_t done_in_round = 0;
    while (!AllFinal(tuner.get(), ids, &done_in_round)) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    trials += done_in_round;
  }
  done = true;
  for (std::thread& t : workers) t.join();
  const double seconds = absl::ToDoubleSeconds(samples.last - samples.first);
  std::printf(
      "{\"workers\": %d, \"jobs\": %zu, \"trials\": %lld, \"seconds\": %.3f, "
      "\"completions_per_s\": %.1f, \"lease_us\": {\"p50\": %.0f, \"p99\": "
      "%.0f, \"max\": %.0f}, \"complete_us\": {\"p50\": %.0f, \"p99\": %.0f, "
      "\"max\": %.0f}}\n",
      absl::GetFlag(FLAGS_workers), jobs,
      static_cast<long long>(samples.completed), seconds,
      samples.completed / std::max(seconds, 1e-9),
      Percentile(samples.lease_us, 0.5), Percentile(samples.lease_us, 0.99),
      Percentile(samples.lease_us, 1.0), Percentile(samples.complete_us, 0.5),
      Percentile(samples.complete_us, 0.99),
      Percentile(samples.complete_us, 1.0));
  if (samples.completed != trials) {
    std::fprintf(stderr, "reported %lld trials, jobs counted %lld\n",
                 static_cast<long long>(samples.completed),
                 static_cast<long long>(trials));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return evotune::Run();
}
