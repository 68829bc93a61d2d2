// QueryBest under load: fills a store with synthetic trials, then sends
// QueryBest requests to a running evotuned at a fixed rate (open loop: each
// request's latency counts from when it was due, so a slow server cannot hide
// its queueing) and prints latency percentiles.
//
//   query_best_bench --db=PATH --trials=1000000 --populate_only
//   query_best_bench --db=PATH --address=127.0.0.1:PORT --rate=5000
//   --seconds=20
//   query_best_bench --db=PATH --in_process=20000   (the store alone, no RPC)
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "evotune/v1/evotune.grpc.pb.h"
#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/daemon/proto_convert.h"
#include "tuner/evaluator/synthetic_evaluator.h"

ABSL_FLAG(std::string, db, "", "database to fill (and that evotuned serves)");
ABSL_FLAG(int64_t, trials, 1000000, "trials to have in the store");
ABSL_FLAG(int, configs_per_problem, 100, "trials per problem");
ABSL_FLAG(bool, populate_only, false, "fill the store and exit");
ABSL_FLAG(int, confirmed_top, 0,
          "while filling, mark each problem's this many fastest trials timed "
          "in turns (at the times measured) and so its other trials passed "
          "over: every store read then finds a confirmation, the ranking "
          "rule's costliest case");
ABSL_FLAG(std::string, address, "", "evotuned address");
ABSL_FLAG(double, rate, 5000, "requests per second");
ABSL_FLAG(double, seconds, 20, "duration of the load");
ABSL_FLAG(int, threads, 16, "client connections");
ABSL_FLAG(double, untuned_fraction, 0,
          "fraction of requests for problems the store has no trials of "
          "(answered by transfer: the cost model's or the nearest problem's)");
ABSL_FLAG(int64_t, untuned_problems, 0,
          "distinct untuned problems asked (0: as many as tuned ones)");
ABSL_FLAG(double, model_wait_s, 120,
          "with untuned requests, wait this long at most for the daemon's "
          "cost model before the load");
ABSL_FLAG(bool, wait_for_model, true,
          "untuned requests wait for the cost model's first ranking of their "
          "problem; with false a first-time miss is answered at once with the "
          "defaults while the daemon ranks it in the background");
ABSL_FLAG(uint64_t, seed, 1,
          "seed of the requests' problems (another seed asks other untuned "
          "problems of the same daemon)");
ABSL_FLAG(int, in_process, 0,
          "instead of a load over gRPC, time this many ResultStore::TopK "
          "calls on one thread (with --untuned_fraction > 0, as many "
          "NearestTunedProblem calls for problems never tuned)");
ABSL_FLAG(int, write_every, 0,
          "with --in_process and --untuned_fraction: after every this many "
          "calls, store a trial of a tuned problem, a config it has not had "
          "(as a running job does); 0: none");
ABSL_FLAG(std::string, latency_csv, "",
          "also write each request's due time (s from the start), latency "
          "from due (us) and whether it was untuned to this CSV file");

namespace evotune {
namespace {

Problem ProblemNumber(int64_t i) {
  Problem p;
  p.batch = 1 + i % 16;
  p.heads = 8;
  p.kv_heads = 8;
  p.seq_q = 64 + (i / 16);
  p.seq_k = p.seq_q;
  p.head_dim = 64;
  return p;
}

// Results asked for per query, of this template.
constexpr int kTopK = 5;
constexpr char kTemplate[] = "flash_fwd";

// The store's best k trials for p, under the device and template the
// benchmark fills it with (looked up once: the in-process timing is TopK's).
absl::StatusOr<std::vector<RankedTrial>> TopK(ResultStore& store,
                                              const Problem& p, int k) {
  static const DeviceInfo* device =
      new DeviceInfo(SyntheticEvaluator({}).device());
  static const KernelTemplate* t = TemplateRegistry::Builtin().Find(kTemplate);
  return store.TopK(*device, p, {{t->name, t->hash}}, k);
}

// True when the store has trials, but none of the current template version.
bool IsStale(ResultStore& store) {
  absl::StatusOr<std::vector<RankedTrial>> top =
      TopK(store, ProblemNumber(0), 1);
  return *store.CountTrials() > 0 && top.ok() && top->empty();
}

// Records the `n` fastest ok trials of `batch` as timed in turns against
// each other, at the times they were measured.
absl::Status Confirm(ResultStore& store, const TrialScope& scope,
                     std::vector<std::pair<Config, TrialResult>> batch, int n) {
  if (n <= 0) return absl::OkStatus();
  batch.erase(std::remove_if(batch.begin(), batch.end(),
                             [](const auto& e) {
                               return e.second.status != TrialStatus::kOk;
                             }),
              batch.end());
  std::sort(batch.begin(), batch.end(), [](const auto& a, const auto& b) {
    return a.second.median_us < b.second.median_us;
  });
  batch.resize(std::min<size_t>(batch.size(), n));
  std::vector<TimedTrial> timed;
  for (auto& [config, result] : batch) {
    result.timed_against = static_cast<int>(batch.size());
    timed.push_back({scope, std::move(config), result});
  }
  return store.RecordTimedInTurns(timed);
}

// Problem `number`'s feasible configs of the template in the order the
// benchmark stores them: Populate stores the first `per_problem`, and
// StoreJobTrial the ones after.
std::vector<Config> ConfigsInOrder(const KernelTemplate& t, int64_t number,
                                   const DeviceLimits& limits) {
  std::vector<Config> configs =
      FeasibleConfigs(t, ProblemNumber(number), limits);
  std::shuffle(configs.begin(), configs.end(), std::mt19937_64(number));
  return configs;
}

// Real configs of the template, as the synthetic evaluator measures them,
// so that answers for untuned problems (transfers) have runnable configs to
// rank and the daemon's cost model something to learn.
int Populate(ResultStore& store, int64_t want, int per_problem, int confirmed) {
  const int64_t have = *store.CountTrials();
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find(kTemplate);
  SyntheticEvaluator synthetic({});
  const absl::Time start = absl::Now();
  for (int64_t problem = have / per_problem; problem * per_problem < want;
       ++problem) {
    const Problem p = ProblemNumber(problem);
    std::vector<Config> configs =
        ConfigsInOrder(t, problem, synthetic.device().limits);
    configs.resize(std::min<size_t>(configs.size(), per_problem));
    std::vector<std::pair<Config, TrialResult>> batch;
    for (const Config& c : configs) {
      batch.push_back({c, *synthetic.Evaluate(t, c, p)});
    }
    const TrialScope scope{synthetic.device(), t.name, t.hash, p};
    absl::Status s = store.BulkInsertTrials(scope, batch);
    if (s.ok()) s = Confirm(store, scope, std::move(batch), confirmed);
    if (!s.ok()) {
      std::fprintf(stderr, "populate: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::printf("store holds %lld trials (filled in %.1f s)\n",
              static_cast<long long>(*store.CountTrials()),
              absl::ToDoubleSeconds(absl::Now() - start));
  return 0;
}

void Report(const char* what, std::vector<double> all) {
  std::sort(all.begin(), all.end());
  auto pct = [&](double q) {
    return all[std::min(all.size() - 1, static_cast<size_t>(q * all.size()))];
  };
  std::printf("%s us: p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
              what, pct(0.5), pct(0.9), pct(0.99), pct(0.999), all.back());
}

// The store alone: TopK for random problems, one after another.
int InProcess(ResultStore& store, int64_t problems, int queries) {
  std::mt19937_64 gen(1);
  std::vector<double> us;
  for (int i = 0; i < queries; ++i) {
    const Problem p = ProblemNumber(gen() % problems);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::vector<RankedTrial>> top = TopK(store, p, kTopK);
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    if (!top.ok() || top->size() != kTopK) {
      std::fprintf(stderr, "TopK: %s\n",
                   top.ok() ? "wrong answer" : top.status().ToString().c_str());
      return 1;
    }
  }
  Report("ResultStore::TopK", us);
  return 0;
}

// Stores the `n`th trial a job tuning one of the first `problems` problems
// would add: a feasible config Populate did not give that problem.
absl::Status StoreJobTrial(ResultStore& store, int64_t problems, int n,
                           int per_problem) {
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find(kTemplate);
  SyntheticEvaluator synthetic({});
  const int64_t number = n % problems;
  const Problem p = ProblemNumber(number);
  const std::vector<Config> configs =
      ConfigsInOrder(t, number, synthetic.device().limits);
  const size_t next = per_problem + n / problems;
  if (next >= configs.size()) {
    return absl::OutOfRangeError("--write_every: no configs left to store");
  }
  const TrialScope scope{synthetic.device(), t.name, t.hash, p};
  return store
      .InsertTrial(scope, configs[next],
                   *synthetic.Evaluate(t, configs[next], p))
      .status();
}

// The nearest-rule search an untuned query makes when the daemon has no cost
// model yet, each for a problem never asked before (none is cached); with
// --write_every, as trials of tuned problems are stored.
int InProcessNearest(ResultStore& store, int64_t problems, int queries,
                     int per_problem) {
  const DeviceInfo device = SyntheticEvaluator({}).device();
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find(kTemplate);
  const int write_every = absl::GetFlag(FLAGS_write_every);
  std::vector<double> us;
  for (int i = 0; i < queries; ++i) {
    if (write_every > 0 && i % write_every == write_every - 1) {
      if (absl::Status s =
              StoreJobTrial(store, problems, i / write_every, per_problem);
          !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
    }
    const Problem p = ProblemNumber(problems + i);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::optional<Problem>> nearest =
        store.NearestTunedProblem(device, p, {{t.name, t.hash}}, true);
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    if (!nearest.ok() || !nearest->has_value()) {
      std::fprintf(
          stderr, "NearestTunedProblem: %s\n",
          nearest.ok() ? "no answer" : nearest.status().ToString().c_str());
      return 1;
    }
  }
  Report("ResultStore::NearestTunedProblem", us);
  return 0;
}

// CPU time the hypervisor gave to other guests, summed over all CPUs, in ms
// (the "steal" column of /proc/stat); -1 where the kernel does not say. On a
// VM, steal during a run shows as stalls that no server design can avoid.
double StealMs() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  int64_t user, nice, system, idle, iowait, irq, softirq, steal;
  if (!(stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >>
        softirq >> steal) ||
      cpu != "cpu") {
    return -1;
  }
  return 1000.0 * steal / sysconf(_SC_CLK_TCK);
}

struct Call {
  grpc::ClientContext ctx;
  v1::QueryBestRequest req;
  v1::QueryBestResponse resp;
  absl::Time due, sent;
  bool untuned = false;
};

// A tuned problem gets its own top k; an untuned one a transferred answer.
bool RightAnswer(const Call& c) {
  if (c.untuned) {
    return c.resp.ranking()
               ? c.resp.defaults() && c.resp.results_size() > 0
               : c.resp.transferred() && c.resp.results_size() == kTopK;
  }
  return c.resp.results_size() == kTopK && !c.resp.transferred();
}

// Asks an untuned problem until the answer is ranked by the daemon's cost
// model (trained off the request path once asked for), at most `limit`.
void WaitForModel(v1::Tuner::Stub* stub, int64_t problems,
                  absl::Duration limit) {
  const absl::Time start = absl::Now();
  while (absl::Now() - start < limit) {
    grpc::ClientContext ctx;
    v1::QueryBestRequest req;
    *req.mutable_problem() = ProblemToProto(ProblemNumber(problems));
    req.set_template_name(kTemplate);
    v1::QueryBestResponse resp;
    if (stub->QueryBest(&ctx, req, &resp).ok() && resp.predicted()) {
      std::printf("cost model ready after %.1f s\n",
                  absl::ToDoubleSeconds(absl::Now() - start));
      return;
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
  std::printf("no cost model after %.0f s: transfers by nearest problem\n",
              absl::ToDoubleSeconds(limit));
}

// `channels` stubs to --address, each on a connection of its own.
std::vector<std::unique_ptr<v1::Tuner::Stub>> Connect(int channels) {
  std::vector<std::unique_ptr<v1::Tuner::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(v1::Tuner::NewStub(
        grpc::CreateCustomChannel(absl::GetFlag(FLAGS_address),
                                  grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

// The latencies of the requests for untuned problems, how many answers the
// model ranked, and how many were answered while it ranked.
// Each request on a line, in the order due, so stalls can be placed in time.
void WriteLatencies(const std::string& path, double rate,
                    const std::vector<double>& from_due,
                    const std::vector<char>& untuned) {
  std::ofstream out(path);
  out << "due_s,latency_us,untuned\n";
  for (size_t i = 0; i < from_due.size(); ++i) {
    out << absl::StrFormat("%.6f,%.1f,%d\n", i / rate, from_due[i],
                           untuned[i] ? 1 : 0);
  }
}

void ReportUntuned(const std::vector<char>& untuned,
                   const std::vector<double>& from_due, int64_t predicted,
                   int64_t ranking) {
  std::vector<double> transfers;
  for (size_t i = 0; i < untuned.size(); ++i) {
    if (untuned[i]) transfers.push_back(from_due[i]);
  }
  if (transfers.empty()) return;
  std::printf(
      "untuned problems: %zu requests, %lld ranked by the model, %lld "
      "answered while it ranked\n",
      transfers.size(), static_cast<long long>(predicted),
      static_cast<long long>(ranking));
  Report("untuned, from due", transfers);
}

// One sender thread issues each request when it is due through the callback
// API, so a slow answer never delays the next request (open loop).
int Load(int64_t problems) {
  const double rate = absl::GetFlag(FLAGS_rate);
  const int64_t total =
      static_cast<int64_t>(rate * absl::GetFlag(FLAGS_seconds));
  const int channels = absl::GetFlag(FLAGS_threads);
  std::vector<std::unique_ptr<v1::Tuner::Stub>> stubs = Connect(channels);
  std::vector<double> from_due(total), from_sent(total);
  std::vector<char> untuned(total);
  const int64_t untuned_problems = absl::GetFlag(FLAGS_untuned_problems) > 0
                                       ? absl::GetFlag(FLAGS_untuned_problems)
                                       : problems;
  std::atomic<int64_t> predicted{0}, ranking{0};
  if (absl::GetFlag(FLAGS_untuned_fraction) > 0) {
    WaitForModel(stubs[0].get(), problems,
                 absl::Seconds(absl::GetFlag(FLAGS_model_wait_s)));
  }
  std::atomic<int64_t> errors{0}, wrong{0}, finished{0};
  std::mt19937_64 gen(absl::GetFlag(FLAGS_seed));
  const double steal_before = StealMs();
  const absl::Time start = absl::Now() + absl::Milliseconds(200);
  for (int64_t i = 0; i < total; ++i) {
    // Each call is freed as it completes: a finished call kept alive holds its
    // arena, and a client whose memory grows all run long stalls on page
    // faults, which would be charged to the server.
    auto call = std::make_unique<Call>();
    untuned[i] = std::uniform_real_distribution<double>()(gen) <
                 absl::GetFlag(FLAGS_untuned_fraction);
    // Problem numbers past the filled ones were never tuned.
    call->untuned = untuned[i];
    *call->req.mutable_problem() = ProblemToProto(
        untuned[i] ? ProblemNumber(problems + gen() % untuned_problems)
                   : ProblemNumber(gen() % problems));
    call->req.set_template_name(kTemplate);
    call->req.set_k(kTopK);
    call->req.set_wait_for_model(absl::GetFlag(FLAGS_wait_for_model));
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(30));
    call->due = start + absl::Seconds(i / rate);
    absl::SleepFor(call->due - absl::Now());
    call->sent = absl::Now();
    Call* c = call.release();
    stubs[i % channels]->async()->QueryBest(
        &c->ctx, &c->req, &c->resp, [&, c, i](grpc::Status s) {
          const absl::Time done = absl::Now();
          from_due[i] = absl::ToDoubleMicroseconds(done - c->due);
          from_sent[i] = absl::ToDoubleMicroseconds(done - c->sent);
          if (!s.ok() && errors++ == 0) {
            std::fprintf(stderr, "first error: %s\n",
                         s.error_message().c_str());
          }
          if (s.ok() && !RightAnswer(*c)) ++wrong;
          predicted += c->resp.predicted();
          ranking += c->resp.ranking();
          delete c;
          ++finished;
        });
  }
  while (finished < total) absl::SleepFor(absl::Milliseconds(1));
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf(
      "requests %lld  achieved %.0f req/s  errors %lld  wrong answers %lld\n",
      static_cast<long long>(total), total / wall,
      static_cast<long long>(errors.load()),
      static_cast<long long>(wrong.load()));
  Report("latency from due ", from_due);
  Report("latency from sent", from_sent);
  ReportUntuned(untuned, from_due, predicted.load(), ranking.load());
  if (const std::string csv = absl::GetFlag(FLAGS_latency_csv); !csv.empty()) {
    WriteLatencies(csv, rate, from_due, untuned);
  }
  if (const double steal = StealMs(); steal >= 0 && steal_before >= 0) {
    std::printf("hypervisor steal during the run: %.0f CPU-ms\n",
                steal - steal_before);
  }
  return errors == 0 && wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string db = absl::GetFlag(FLAGS_db);
  if (db.empty()) {
    std::fprintf(stderr, "query_best_bench: --db is required\n");
    return 2;
  }
  const int per_problem = absl::GetFlag(FLAGS_configs_per_problem);
  const int64_t problems = absl::GetFlag(FLAGS_trials) / per_problem;
  if (absl::GetFlag(FLAGS_populate_only)) {
    auto store = evotune::ResultStore::Open(db);
    if (store.ok() && evotune::IsStale(**store)) {
      // Trials are keyed on the template version: after a template change
      // the old store answers nothing, so start a new one.
      store->reset();
      for (const char* suffix : {"", "-wal", "-shm"}) {
        std::remove((db + suffix).c_str());
      }
      store = evotune::ResultStore::Open(db);
    }
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
      return 1;
    }
    return evotune::Populate(**store, absl::GetFlag(FLAGS_trials), per_problem,
                             absl::GetFlag(FLAGS_confirmed_top));
  }
  if (const int queries = absl::GetFlag(FLAGS_in_process); queries > 0) {
    auto store = evotune::ResultStore::Open(db);
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
      return 1;
    }
    if (absl::GetFlag(FLAGS_untuned_fraction) > 0) {
      return evotune::InProcessNearest(**store, problems, queries, per_problem);
    }
    return evotune::InProcess(**store, problems, queries);
  }
  return evotune::Load(problems);
}
