// The API end to end in one process: GrpcTuner over a real server, a real
// SQLite store on a temporary file and the synthetic evaluator.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "absl/time/clock.h"
#include "evotune/daemon_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tuner/daemon/grpc_service.h"
#include "tuner/evaluator/synthetic_evaluator.h"
#include "tuner/jobs/in_process_runner.h"
#include "tuner/jobs/job_manager.h"
#include "tuner/jobs/trial_loop.h"
#include "tuner/jobs/worker_pool.h"
#include "tuner/search/strategy_registry.h"
#include "tuner/serving/kernel_service.h"
#include "tuner/serving/tuning_service.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Counts evaluations, so tests can tell measured trials from stored ones.
class CountingEvaluator : public Evaluator {
 public:
  explicit CountingEvaluator(std::atomic<int>* count)
      : inner_(SyntheticEvaluator::Options{}), count_(count) {}
  const DeviceInfo& device() const override { return inner_.device(); }
  absl::StatusOr<TrialResult> Evaluate(const KernelTemplate& t, const Config& c,
                                       const Problem& p) override {
    ++*count_;
    return inner_.Evaluate(t, c, p);
  }
  absl::StatusOr<TrialResult> QuickEvaluate(const KernelTemplate& t,
                                            const Config& c,
                                            const Problem& p) override {
    ++*count_;
    return inner_.QuickEvaluate(t, c, p);
  }
  // Each config evaluated fully, as a GPU whose clocks moved since the
  // search: the first (the search's fastest) measures half again as long.
  absl::StatusOr<std::vector<TrialResult>> TimeInTurns(
      const std::vector<TemplateConfig>& configs, const Problem& p,
      int turns) override {
    absl::StatusOr<std::vector<TrialResult>> r =
        Evaluator::TimeInTurns(configs, p, turns);
    if (r.ok() && !r->empty() && r->front().status == TrialStatus::kOk) {
      r->front().median_us *= 1.5;
    }
    return r;
  }

 private:
  SyntheticEvaluator inner_;
  std::atomic<int>* count_;
};

class Daemon {
 public:
  Daemon(const std::string& db, const std::string& token,
         std::atomic<int>* evaluations, bool with_device = true,
         bool cost_model = false, ModelRanking ranking = {}) {
    store_ = *ResultStore::Open(db);
    if (cost_model) {
      CostModelsOptions options;
      options.min_trials = 10;
      options.model.booster.rounds = 50;
      models_ = std::make_unique<CostModels>(
          store_.get(), &TemplateRegistry::Builtin(), options);
    }
    if (with_device) {
      runner_ = std::make_unique<InProcessRunner>(
          std::make_unique<CountingEvaluator>(evaluations),
          &TemplateRegistry::Builtin());
    } else {
      // A pool that no worker joins.
      WorkerPool::Options options;
      options.startup_wait = absl::ZeroDuration();
      auto pool = std::make_unique<WorkerPool>(options);
      pool->SetNoWorkerReason("no CUDA device: none in this test");
      runner_ = std::move(pool);
    }
    jobs_ = std::make_unique<JobManager>(
        store_.get(), &TemplateRegistry::Builtin(), runner_.get());
    service_ = std::make_unique<TuningService>(
        store_.get(), &TemplateRegistry::Builtin(), jobs_.get(), TuneOnMiss{},
        models_.get(), ranking);
    kernels_ = std::make_unique<KernelService>(service_.get(), store_.get());
    grpc_ = std::make_unique<GrpcTuner>(
        service_.get(), AccessTokens{token, token}, kernels_.get());
    grpc::ServerBuilder builder;
    builder.RegisterService(grpc_.get());
    server_ = builder.BuildAndStart();
    EXPECT_TRUE(jobs_->Start().ok());
    stub_ = v1::Tuner::NewStub(server_->InProcessChannel({}));
  }
  ~Daemon() {
    server_->Shutdown();
    jobs_->Shutdown();
  }
  v1::Tuner::Stub* stub() { return stub_.get(); }
  std::shared_ptr<grpc::Channel> channel() {
    return server_->InProcessChannel({});
  }
  ResultStore* store() { return store_.get(); }
  JobManager* jobs() { return jobs_.get(); }
  CostModels* models() { return models_.get(); }

 private:
  std::unique_ptr<ResultStore> store_;
  std::unique_ptr<CostModels> models_;
  std::unique_ptr<TrialRunner> runner_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<TuningService> service_;
  std::unique_ptr<KernelService> kernels_;
  std::unique_ptr<GrpcTuner> grpc_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Tuner::Stub> stub_;
};

v1::SubmitSearchRequest SeedRequest(int max_trials = 8) {
  v1::SubmitSearchRequest r;
  r.set_template_name("naive");
  v1::Problem* p = r.mutable_problem();
  p->set_batch(1);
  p->set_heads(8);
  p->set_kv_heads(8);
  p->set_seq_q(512);
  p->set_seq_k(512);
  p->set_head_dim(64);
  p->set_dtype(v1::DTYPE_FP16);
  r.mutable_budget()->set_max_trials(max_trials);
  r.mutable_budget()->set_max_seconds(600);
  r.set_seed(3);
  return r;
}

// A trial of the seed problem at 40 us on an NVIDIA L4 (sm_89), which makes
// the L4 a device the daemon knows.
void StoreL4Trial(Daemon& d, const KernelTemplate& t, const Config& config,
                  std::optional<Problem> problem = std::nullopt) {
  DeviceInfo l4;
  l4.name = "NVIDIA L4";
  l4.cc_major = 8;
  l4.cc_minor = 9;
  l4.driver_version = "580.1";
  l4.nvrtc_version = "13.0";
  absl::StatusOr<Problem> seed = ProblemFromProto(SeedRequest().problem());
  TrialResult r;
  r.median_us = r.min_us = r.p90_us = 40;
  ASSERT_TRUE(d.store()
                  ->InsertTrial({l4, t.name, t.hash, problem.value_or(*seed)},
                                config, r)
                  .ok());
}

class GrpcApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("api_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    db_ = (dir_ / "evotune.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Watches to the end; returns the updates.
  static std::vector<v1::JobUpdate> WatchAll(Daemon& d, const std::string& id,
                                             uint64_t from = 0) {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_from_sequence(from);
    auto reader = d.stub()->WatchJob(&ctx, req);
    std::vector<v1::JobUpdate> out;
    v1::JobUpdate u;
    while (reader->Read(&u)) out.push_back(u);
    EXPECT_TRUE(reader->Finish().ok());
    return out;
  }

  std::filesystem::path dir_;
  std::string db_;
  std::atomic<int> evaluations_{0};
};

TEST_F(GrpcApiTest, BadRequestsGetTheRightCodeNamingTheFieldAndWriteNothing) {
  Daemon d(db_, "", &evaluations_);
  struct Case {
    std::string what;
    std::function<void(v1::SubmitSearchRequest&)> mutate;
    grpc::StatusCode code;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"no template, and none serves the problem",
       [](auto& r) {
         r.clear_template_name();
         r.mutable_problem()->set_head_dim(40);
       },
       grpc::INVALID_ARGUMENT, "template_name:"},
      {"unknown template", [](auto& r) { r.set_template_name("flash9"); },
       grpc::INVALID_ARGUMENT, "template_name:"},
      {"no problem", [](auto& r) { r.clear_problem(); }, grpc::INVALID_ARGUMENT,
       "problem:"},
      {"head_dim the template lacks",
       [](auto& r) { r.mutable_problem()->set_head_dim(40); },
       grpc::INVALID_ARGUMENT, "problem.head_dim:"},
      {"kv_heads not dividing heads",
       [](auto& r) { r.mutable_problem()->set_kv_heads(3); },
       grpc::INVALID_ARGUMENT, "problem.kv_heads:"},
      {"kv_heads above heads",
       [](auto& r) { r.mutable_problem()->set_kv_heads(16); },
       grpc::INVALID_ARGUMENT, "problem.kv_heads:"},
      {"seq_q zero", [](auto& r) { r.mutable_problem()->set_seq_q(0); },
       grpc::INVALID_ARGUMENT, "problem.seq_q:"},
      {"seq_k above the limit",
       [](auto& r) { r.mutable_problem()->set_seq_k(kMaxSeqLen + 1); },
       grpc::INVALID_ARGUMENT, "problem.seq_k:"},
      {"batch zero", [](auto& r) { r.mutable_problem()->set_batch(0); },
       grpc::INVALID_ARGUMENT, "problem.batch:"},
      {"heads zero", [](auto& r) { r.mutable_problem()->set_heads(0); },
       grpc::INVALID_ARGUMENT, "problem.heads:"},
      {"dtype unspecified",
       [](auto& r) { r.mutable_problem()->set_dtype(v1::DTYPE_UNSPECIFIED); },
       grpc::INVALID_ARGUMENT, "problem.dtype:"},
      {"dtype out of enum",
       [](auto& r) {
         r.mutable_problem()->set_dtype(static_cast<v1::DType>(7));
       },
       grpc::INVALID_ARGUMENT, "problem.dtype:"},
      {"dtype e4m3 (only K and V may be)",
       [](auto& r) { r.mutable_problem()->set_dtype(v1::DTYPE_E4M3); },
       grpc::INVALID_ARGUMENT, "problem.dtype:"},
      {"kv_dtype bf16 under fp16",
       [](auto& r) { r.mutable_problem()->set_kv_dtype(v1::DTYPE_BF16); },
       grpc::INVALID_ARGUMENT, "problem.kv_dtype:"},
      {"an FP8 KV cache for a template that does not read one",
       [](auto& r) { r.mutable_problem()->set_kv_dtype(v1::DTYPE_E4M3); },
       grpc::INVALID_ARGUMENT, "problem.kv_dtype:"},
      {"max_trials zero",
       [](auto& r) { r.mutable_budget()->set_max_trials(0); },
       grpc::INVALID_ARGUMENT, "budget.max_trials:"},
      {"max_seconds zero",
       [](auto& r) { r.mutable_budget()->set_max_seconds(0); },
       grpc::INVALID_ARGUMENT, "budget.max_seconds:"},
      {"max_seconds negative",
       [](auto& r) { r.mutable_budget()->set_max_seconds(-5); },
       grpc::INVALID_ARGUMENT, "budget.max_seconds:"},
      {"max_seconds NaN",
       [](auto& r) { r.mutable_budget()->set_max_seconds(NAN); },
       grpc::INVALID_ARGUMENT, "budget.max_seconds:"},
      {"unknown strategy", [](auto& r) { r.set_strategy("annealing"); },
       grpc::INVALID_ARGUMENT, "strategy:"},
      {"unknown strategy option",
       [](auto& r) { (*r.mutable_strategy_options())["temperature"] = 1; },
       grpc::INVALID_ARGUMENT, "strategy_options:"},
      {"strategy option out of range",
       [](auto& r) { (*r.mutable_strategy_options())["population"] = 0; },
       grpc::INVALID_ARGUMENT, "strategy_options.population:"},
      {"an option of another strategy",
       [](auto& r) {
         r.set_strategy("random");
         (*r.mutable_strategy_options())["population"] = 8;
       },
       grpc::INVALID_ARGUMENT, "strategy_options:"},
      {"other device", [](auto& r) { r.set_device("NVIDIA L4"); },
       grpc::INVALID_ARGUMENT, "device:"},
  };
  for (const Case& c : cases) {
    v1::SubmitSearchRequest req = SeedRequest();
    c.mutate(req);
    grpc::ClientContext ctx;
    v1::SubmitSearchResponse resp;
    grpc::Status s = d.stub()->SubmitSearch(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), StartsWith(c.field)) << c.what;
  }
  EXPECT_EQ(*d.store()->CountTrials(), 0);
  EXPECT_TRUE(d.store()->ListJobs(std::nullopt)->empty());

  // Ids and other calls.
  grpc::ClientContext c1;
  v1::GetJobRequest get;
  get.set_job_id("j000000000000");
  v1::Job job;
  EXPECT_EQ(d.stub()->GetJob(&c1, get, &job).error_code(), grpc::NOT_FOUND);
  grpc::ClientContext c2;
  get.clear_job_id();
  EXPECT_EQ(d.stub()->GetJob(&c2, get, &job).error_code(),
            grpc::INVALID_ARGUMENT);
  grpc::ClientContext c3;
  v1::CancelJobRequest cancel;
  cancel.set_job_id("nope");
  EXPECT_EQ(d.stub()->CancelJob(&c3, cancel, &job).error_code(),
            grpc::NOT_FOUND);
  grpc::ClientContext c4;
  v1::QueryBestRequest best;
  *best.mutable_problem() = SeedRequest().problem();
  best.set_k(1000);
  v1::QueryBestResponse best_resp;
  grpc::Status s = d.stub()->QueryBest(&c4, best, &best_resp);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("k:"));
  grpc::ClientContext c5;
  v1::ListJobsRequest list;
  list.set_state(static_cast<v1::JobState>(42));
  v1::ListJobsResponse list_resp;
  s = d.stub()->ListJobs(&c5, list, &list_resp);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("state:"));
  EXPECT_TRUE(d.store()->ListJobs(std::nullopt)->empty());
}

TEST_F(GrpcApiTest, WithoutADeviceSearchesAreRefusedPlainly) {
  Daemon d(db_, "", &evaluations_, /*with_device=*/false);
  grpc::ClientContext ctx;
  v1::SubmitSearchResponse resp;
  grpc::Status s = d.stub()->SubmitSearch(&ctx, SeedRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), StartsWith("no CUDA device"));
  EXPECT_TRUE(d.store()->ListJobs(std::nullopt)->empty());
}

TEST_F(GrpcApiTest, TokenIsRequiredWhenSet) {
  Daemon d(db_, "s3cret", &evaluations_);
  v1::ListTemplatesResponse resp;
  grpc::ClientContext none;
  EXPECT_EQ(d.stub()->ListTemplates(&none, {}, &resp).error_code(),
            grpc::UNAUTHENTICATED);
  grpc::ClientContext wrong;
  wrong.AddMetadata("authorization", "Bearer s3cre");
  EXPECT_EQ(d.stub()->ListTemplates(&wrong, {}, &resp).error_code(),
            grpc::UNAUTHENTICATED);
  grpc::ClientContext right;
  right.AddMetadata("authorization", "Bearer s3cret");
  EXPECT_TRUE(d.stub()->ListTemplates(&right, {}, &resp).ok());
  ASSERT_EQ(resp.templates_size(),
            static_cast<int>(TemplateRegistry::Builtin().templates().size()));
  std::set<std::string> names;
  for (const v1::TemplateInfo& t : resp.templates()) {
    names.insert(t.name());
    EXPECT_EQ(t.source_hash().size(), 16u);
    EXPECT_GE(t.params_size(), 2);
    EXPECT_GE(t.constraints_size(), 1);
  }
  std::set<std::string> registered;
  for (const KernelTemplate& t : TemplateRegistry::Builtin().templates()) {
    registered.insert(t.name);
  }
  EXPECT_EQ(names, registered);
  for (const v1::TemplateInfo& t : resp.templates()) {
    const KernelTemplate* mine = TemplateRegistry::Builtin().Find(t.name());
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(t.q_fp8(), mine->q_fp8) << t.name();
    const auto& on = t.q_fp8_compute_capabilities();
    EXPECT_EQ(std::vector<int>(on.begin(), on.end()),
              mine->q_fp8_compute_capabilities)
        << t.name();
  }
}

// Options reach the job (stored with it, every default filled in) and its
// search: a patience of 1 on a flat landscape stops long before the budget.
// A decode problem: 8 heads on 2, one query, `seq_k` keys, bf16.
Problem Decode(int64_t seq_k, int64_t head_dim) {
  Problem p;
  p.heads = 8;
  p.kv_heads = 2;
  p.seq_q = 1;
  p.seq_k = seq_k;
  p.head_dim = head_dim;
  p.dtype = DType::kBf16;
  return p;
}

// QueryBest on the daemon.
v1::QueryBestResponse Best(Daemon& d, const Problem& p,
                           const std::string& template_name = "", int k = 100,
                           std::optional<bool> wait_for_model = std::nullopt) {
  v1::QueryBestRequest q;
  *q.mutable_problem() = ProblemToProto(p);
  q.set_template_name(template_name);
  q.set_k(k);
  if (wait_for_model.has_value()) q.set_wait_for_model(*wait_for_model);
  grpc::ClientContext ctx;
  v1::QueryBestResponse resp;
  EXPECT_TRUE(d.stub()->QueryBest(&ctx, q, &resp).ok());
  return resp;
}

std::vector<std::string> Configs(const v1::QueryBestResponse& resp) {
  std::vector<std::string> out;
  for (const v1::RankedConfig& r : resp.results()) {
    out.push_back(r.template_name() + " " +
                  ConfigKey(*ConfigFromProto(r.trial().config())));
  }
  return out;
}

// With nothing tuned, defaults come from the templates that suit the
// problem best (KernelTemplate::default_rank): the decode template for one
// query, the Hopper prefill template for many (this synthetic device runs
// every template), the naive baseline last.
TEST_F(GrpcApiTest, DefaultsComeFromTheTemplateThatSuitsTheProblem) {
  Daemon d(db_, "", &evaluations_);
  v1::QueryBestResponse decode = Best(d, Decode(8192, 128));
  ASSERT_TRUE(decode.defaults());
  EXPECT_EQ(decode.results(0).template_name(), "decode_fwd");
  Problem prefill = Decode(4096, 128);
  prefill.seq_q = 4096;
  v1::QueryBestResponse best = Best(d, prefill);
  ASSERT_TRUE(best.defaults());
  EXPECT_EQ(best.results(0).template_name(), "flash_fwd_tma");
  EXPECT_EQ(best.results(best.results_size() - 1).template_name(), "naive");
}

// Every valid problem gets configs that run on it: its own, else those of
// the nearest tuned problem that run on it (of its class first, then of
// any), else the templates' defaults, flagged as never measured.
TEST_F(GrpcApiTest, EveryProblemGetsConfigsThatRunOnIt) {
  Daemon d(db_, "", &evaluations_);
  const Problem decode = Decode(8192, 128);
  v1::QueryBestResponse resp = Best(d, decode, "decode_fwd");
  EXPECT_TRUE(resp.defaults());
  EXPECT_FALSE(resp.transferred());
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  // The configs fitted to the problem, then those of its defaults that run
  // on it (one packs more rows than the problem has).
  DeviceLimits any;
  any.smem_per_block_bytes = int64_t{1} << 40;
  std::vector<std::string> runnable;
  for (const Config& c : t.fitted_defaults(decode, any)) {
    runnable.push_back("decode_fwd " + ConfigKey(c));
  }
  for (const Config& c : t.defaults) {
    if (CheckConfig(t, c, decode, any).ok()) {
      runnable.push_back("decode_fwd " + ConfigKey(c));
    }
  }
  ASSERT_LT(runnable.size(),
            t.fitted_defaults(decode, any).size() + t.defaults.size());
  EXPECT_EQ(Configs(resp), runnable);
  for (const v1::RankedConfig& r : resp.results()) {
    EXPECT_FALSE(r.trial().has_latency());
    EXPECT_EQ(r.trial().status(), v1::TRIAL_STATUS_UNSPECIFIED);
  }

  // Measured on the long decode problem: a config with 64 key splits (the
  // fastest) and one without.
  const DeviceInfo device = DeviceKeyFromProto(resp.device());
  const TrialScope scope{device, t.name, t.hash, decode};
  auto config = [](int64_t splits, int64_t rows) {
    return Config{{"KV_SPLITS", splits}, {"Q_IN_REGS", 1}, {"ROWS", rows},
                  {"STAGES", 3},         {"TILE_N", 32},   {"WARPS", 4}};
  };
  TrialResult fast, slow;
  fast.median_us = fast.min_us = fast.p90_us = 10;
  slow.median_us = slow.min_us = slow.p90_us = 30;
  ASSERT_TRUE(d.store()->InsertTrial(scope, config(64, 16), fast).ok());
  ASSERT_TRUE(d.store()->InsertTrial(scope, config(1, 16), slow).ok());

  // 100 keys: 64 splits of 32-key tiles leave most splits idle, which the
  // template refuses; only the other config is served.
  resp = Best(d, Decode(100, 128), "decode_fwd");
  EXPECT_TRUE(resp.transferred());
  EXPECT_FALSE(resp.defaults());
  EXPECT_EQ(resp.source_problem().seq_k(), 8192u);
  EXPECT_EQ(Configs(resp),
            std::vector<std::string>{"decode_fwd " + ConfigKey(config(1, 16))});

  // Nothing of head_dim 96 is tuned: the nearest problem of any class of
  // its width (96 is computed as 128).
  resp = Best(d, Decode(8192, 96));
  EXPECT_TRUE(resp.transferred());
  EXPECT_EQ(resp.source_problem().head_dim(), 128u);
  EXPECT_EQ(resp.results_size(), 2);
  EXPECT_EQ(resp.results(0).trial().latency().median_us(), 10);
  // Of another width (64): the defaults fitted to it.
  resp = Best(d, Decode(8192, 64));
  EXPECT_FALSE(resp.transferred());
  EXPECT_TRUE(resp.defaults());
}

// Once the device's cost model is trained, a problem never tuned is served
// the configs of every tuned problem that run on it, fastest predicted
// first; before that, the nearest tuned problem's.
// A decode_fwd config with `splits` key splits.
Config DecodeConfig(int64_t splits) {
  return Config{{"KV_SPLITS", splits}, {"Q_IN_REGS", 1}, {"ROWS", 16},
                {"STAGES", 3},         {"TILE_N", 32},   {"WARPS", 4}};
}

// decode_fwd measured on four key lengths other than `asked`'s, where more
// key splits are faster.
void StoreDecodeTrials(Daemon& d, const Problem& asked) {
  const DeviceInfo device =
      DeviceKeyFromProto(Best(d, asked, "decode_fwd").device());
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  const DeviceLimits limits = ServingLimits(*d.jobs()->Device(""));
  for (int64_t seq_k : {2048, 4096, 16384, 32768}) {
    const TrialScope scope{device, t.name, t.hash, Decode(seq_k, 128)};
    for (int64_t splits : {1, 2, 4, 8, 16, 32}) {
      const Config c = DecodeConfig(splits);
      if (!CheckConfig(t, c, scope.problem, limits).ok()) continue;
      TrialResult r;
      r.median_us = r.min_us = r.p90_us = seq_k / 64.0 / splits;
      ASSERT_TRUE(d.store()->InsertTrial(scope, c, r).ok());
    }
  }
}

TEST_F(GrpcApiTest, TheCostModelRanksTransfersOnceTrained) {
  Daemon d(db_, "", &evaluations_, true, /*cost_model=*/true);
  const Problem asked = Decode(8192, 128);
  const KernelTemplate& t = *TemplateRegistry::Builtin().Find("decode_fwd");
  const DeviceLimits limits = ServingLimits(*d.jobs()->Device(""));
  StoreDecodeTrials(d, asked);
  // No model yet: the nearest tuned problem's fastest that run.
  v1::QueryBestResponse before = Best(d, asked, "decode_fwd", 3);
  EXPECT_TRUE(before.transferred());
  EXPECT_FALSE(before.predicted());

  ASSERT_TRUE(d.models()->Refresh().ok());
  v1::QueryBestResponse after = Best(d, asked, "decode_fwd", 3);
  EXPECT_TRUE(after.transferred());
  EXPECT_TRUE(after.predicted());
  ASSERT_EQ(after.results_size(), 3);
  std::set<std::string> seen;
  double last = 0;
  for (const v1::RankedConfig& r : after.results()) {
    const Config c = *ConfigFromProto(r.trial().config());
    EXPECT_TRUE(CheckConfig(t, c, asked, limits).ok()) << ConfigKey(c);
    EXPECT_TRUE(seen.insert(ConfigKey(c)).second) << "served twice";
    EXPECT_GT(r.predicted_us(), 0);
    EXPECT_GE(r.predicted_us(), last);  // Fastest first (configs may tie).
    last = r.predicted_us();
  }
  EXPECT_EQ(ConfigFromProto(after.results(0).trial().config())->at("KV_SPLITS"),
            32);
  // The same question is answered again (from the cache) alike.
  v1::QueryBestResponse again = Best(d, asked, "decode_fwd", 3);
  EXPECT_EQ(Configs(again), Configs(after));

  // A new problem asked by many at once (one ranks it, the others wait for
  // that ranking): every one gets the same predicted answer.
  const Problem burst = Decode(12288, 128);
  std::vector<v1::QueryBestResponse> answers(8);
  std::vector<std::thread> askers;
  for (v1::QueryBestResponse& a : answers) {
    askers.emplace_back([&] { a = Best(d, burst, "decode_fwd", 3); });
  }
  for (std::thread& t : askers) t.join();
  for (const v1::QueryBestResponse& a : answers) {
    EXPECT_TRUE(a.predicted());
    EXPECT_FALSE(a.ranking());
    EXPECT_EQ(a.results_size(), 3);
    EXPECT_EQ(Configs(a), Configs(answers[0]));
  }

  // A query that does not wait: answered at once with the defaults while the
  // model ranks in the background; a later query gets the model's answer.
  const Problem hurried = Decode(24576, 128);
  v1::QueryBestResponse now = Best(d, hurried, "decode_fwd", 3, false);
  EXPECT_TRUE(now.ranking());
  EXPECT_FALSE(now.predicted());
  EXPECT_TRUE(now.defaults());
  EXPECT_GT(now.results_size(), 0);
  v1::QueryBestResponse later;
  for (int i = 0; i < 500 && !later.predicted(); ++i) {
    if (i > 0) absl::SleepFor(absl::Milliseconds(10));
    later = Best(d, hurried, "decode_fwd", 3, false);
  }
  EXPECT_TRUE(later.predicted());
  EXPECT_FALSE(later.ranking());
  ASSERT_EQ(later.results_size(), 3);
  // The model predicts decode_fwd's config fitted to the problem (64 splits)
  // within 5% of the tuned 32 splits: it comes first, never measured, and
  // the source is the problem of the first transferred config.
  EXPECT_TRUE(later.results(0).fitted());
  EXPECT_FALSE(later.results(0).trial().has_latency());
  EXPECT_EQ(*ConfigFromProto(later.results(0).trial().config()),
            t.fitted_defaults(hurried, limits).front());
  EXPECT_FALSE(later.results(1).fitted());
  EXPECT_EQ(ConfigFromProto(later.results(1).trial().config())->at("KV_SPLITS"),
            32);
  EXPECT_EQ((std::set<uint32_t>{2048, 4096, 16384, 32768})
                .count(later.source_problem().seq_k()),
            1u);
  // One that waits is ranked before its answer.
  EXPECT_TRUE(Best(d, Decode(20480, 128), "decode_fwd", 3, true).predicted());
}

// With the background queue full (here it holds none), a query that does not
// wait still gets the defaults at once; one that waits ranks it itself.
TEST_F(GrpcApiTest, AFullRankingQueueStillAnswersAtOnce) {
  Daemon d(db_, "", &evaluations_, true, /*cost_model=*/true,
           ModelRanking{true, 1, /*max_queued=*/0});
  StoreDecodeTrials(d, Decode(8192, 128));
  const Problem asked = Decode(24576, 128);
  EXPECT_FALSE(Best(d, asked, "decode_fwd", 3).predicted());  // No model yet.
  ASSERT_TRUE(d.models()->Refresh().ok());
  for (int i = 0; i < 2; ++i) {
    v1::QueryBestResponse now = Best(d, asked, "decode_fwd", 3, false);
    EXPECT_TRUE(now.ranking());
    EXPECT_TRUE(now.defaults());
    EXPECT_FALSE(now.predicted());
    EXPECT_GT(now.results_size(), 0);
  }
  EXPECT_TRUE(Best(d, asked, "decode_fwd", 3, true).predicted());
}

// Tune on miss: a query for a problem without results of its own starts one
// background search for it however many queries ask; once it has run, the
// problem is answered from its own results.
TEST_F(GrpcApiTest, AMissStartsOneBackgroundSearch) {
  Daemon d(db_, "", &evaluations_);
  Problem p = *ProblemFromProto(SeedRequest().problem());
  // Off by default (this daemon's --tune_on_miss).
  EXPECT_EQ(Best(d, p, "naive").tuning_job_id(), "");
  auto ask = [&] {
    v1::QueryBestRequest q;
    *q.mutable_problem() = ProblemToProto(p);
    q.set_template_name("naive");
    q.set_tune_on_miss(true);
    grpc::ClientContext ctx;
    v1::QueryBestResponse resp;
    EXPECT_TRUE(d.stub()->QueryBest(&ctx, q, &resp).ok());
    return resp;
  };
  v1::QueryBestResponse first = ask();
  EXPECT_TRUE(first.defaults());
  const std::string job_id = first.tuning_job_id();
  ASSERT_FALSE(job_id.empty());
  // The same job, or (once it has results) the problem's own answer.
  for (int i = 0; i < 5; ++i) {
    const v1::QueryBestResponse again = ask();
    if (again.defaults() || again.transferred()) {
      EXPECT_EQ(again.tuning_job_id(), job_id);
    } else {
      EXPECT_EQ(again.tuning_job_id(), "");
    }
  }
  std::vector<v1::JobUpdate> updates = WatchAll(d, job_id);
  ASSERT_FALSE(updates.empty());
  const v1::Job job = updates.back().job();
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(job.background());
  EXPECT_EQ(job.template_name(), "naive");
  EXPECT_EQ(d.store()->ListJobs(std::nullopt)->size(), 1u);
  // Now the problem's own results, and nothing more to tune.
  v1::QueryBestResponse later = ask();
  EXPECT_FALSE(later.transferred());
  EXPECT_FALSE(later.defaults());
  EXPECT_EQ(later.tuning_job_id(), "");
  ASSERT_GE(later.results_size(), 1);
  EXPECT_TRUE(later.results(0).trial().has_latency());
}

TEST_F(GrpcApiTest, StrategyOptionsAreStoredWithTheJobAndUsed) {
  Daemon d(db_, "", &evaluations_);
  v1::SubmitSearchRequest req = SeedRequest(200);
  (*req.mutable_strategy_options())["patience"] = 1;
  (*req.mutable_strategy_options())["population"] = 4;
  grpc::ClientContext ctx;
  v1::SubmitSearchResponse submitted;
  ASSERT_TRUE(d.stub()->SubmitSearch(&ctx, req, &submitted).ok());
  std::vector<v1::JobUpdate> updates = WatchAll(d, submitted.job_id());
  ASSERT_FALSE(updates.empty());
  const v1::Job job = updates.back().job();
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.strategy_options().at("patience"), 1);
  EXPECT_EQ(job.strategy_options().at("population"), 4);
  EXPECT_EQ(job.strategy_options().size(),
            FindStrategy("evolutionary")->options.size());
  EXPECT_EQ(d.store()->GetJob(submitted.job_id())->strategy_options,
            "local_prob=0.65,min_concordance=0.65,min_gain=0.002,parents=6,"
            "patience=1,population=4,prescreen=1,reset_prob=0.08,"
            "seed_margin=0.15,step_prob=0.35,tournament=2");
  // The same search with the defaults (on another problem, so nothing is
  // answered from the store) runs longer.
  v1::SubmitSearchRequest defaults = SeedRequest(200);
  defaults.mutable_problem()->set_seq_q(1024);
  grpc::ClientContext ctx2;
  ASSERT_TRUE(d.stub()->SubmitSearch(&ctx2, defaults, &submitted).ok());
  updates = WatchAll(d, submitted.job_id());
  ASSERT_FALSE(updates.empty());
  EXPECT_LT(job.trials_done(), updates.back().job().trials_done());
  EXPECT_EQ(updates.back().job().strategy_options().at("patience"), 8);
}

TEST_F(GrpcApiTest, JobRunsWatchReplaysAndBestIsRanked) {
  Daemon d(db_, "", &evaluations_);
  grpc::ClientContext ctx;
  v1::SubmitSearchResponse submitted;
  ASSERT_TRUE(d.stub()->SubmitSearch(&ctx, SeedRequest(12), &submitted).ok());

  std::vector<v1::JobUpdate> updates = WatchAll(d, submitted.job_id());
  ASSERT_GE(updates.size(), 2u);
  EXPECT_FALSE(updates.front().has_event());  // Snapshot first.
  EXPECT_EQ(updates.back().job().state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<uint64_t> seqs;
  std::set<std::string> configs;
  for (const v1::JobUpdate& u : updates) {
    if (!u.has_event()) continue;
    seqs.push_back(u.event().sequence());
    std::string key;
    for (const auto& p : u.event().trial().config().params()) {
      key += p.name() + "=" + std::to_string(p.value()) + ",";
    }
    configs.insert(key);
  }
  ASSERT_EQ(seqs.size(), 12u);
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], i + 1);
  EXPECT_EQ(configs.size(), 12u);
  const int evaluations_after_first_job = evaluations_;
  EXPECT_GE(evaluations_after_first_job, 12);

  // A client that reconnects after event 5 gets exactly 6..12.
  std::vector<v1::JobUpdate> rest = WatchAll(d, submitted.job_id(), 5);
  std::vector<uint64_t> rest_seqs;
  for (const auto& u : rest) {
    if (u.has_event()) rest_seqs.push_back(u.event().sequence());
  }
  EXPECT_EQ(rest_seqs, (std::vector<uint64_t>{6, 7, 8, 9, 10, 11, 12}));

  grpc::ClientContext c2;
  v1::QueryBestRequest best;
  *best.mutable_problem() = SeedRequest().problem();
  best.set_k(3);
  v1::QueryBestResponse resp;
  ASSERT_TRUE(d.stub()->QueryBest(&c2, best, &resp).ok());
  EXPECT_FALSE(resp.transferred());
  ASSERT_EQ(resp.results_size(), 3);
  EXPECT_LE(resp.results(0).trial().latency().median_us(),
            resp.results(1).trial().latency().median_us());
  EXPECT_EQ(resp.results(0).trial().trial_id(),
            updates.back().job().best().trial_id());

  // A different shape of the same class is answered by transfer within the
  // tuned template...
  grpc::ClientContext c3;
  best.mutable_problem()->set_seq_q(1000);
  best.set_template_name("naive");
  ASSERT_TRUE(d.stub()->QueryBest(&c3, best, &resp).ok());
  EXPECT_TRUE(resp.transferred());
  EXPECT_EQ(resp.source_problem().seq_q(), 512u);
  EXPECT_GE(resp.results_size(), 1);
  // ... and, of every template, by the defaults of the one that suits it
  // best (naive ranks last), never tuned here.
  grpc::ClientContext c3b;
  best.clear_template_name();
  ASSERT_TRUE(d.stub()->QueryBest(&c3b, best, &resp).ok());
  EXPECT_FALSE(resp.transferred());
  EXPECT_TRUE(resp.defaults());
  ASSERT_GE(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).template_name(), "flash_fwd_tma");

  // Cancelling the finished job is refused and changes nothing.
  grpc::ClientContext c4;
  v1::CancelJobRequest cancel;
  cancel.set_job_id(submitted.job_id());
  v1::Job job;
  grpc::Status s = d.stub()->CancelJob(&c4, cancel, &job);
  EXPECT_EQ(s.error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_EQ(d.store()->GetJob(submitted.job_id())->state, JobState::kSucceeded);

  // A second job on the same problem reuses what the store knows.
  grpc::ClientContext c5;
  v1::SubmitSearchResponse second;
  v1::SubmitSearchRequest again = SeedRequest(12);
  ASSERT_TRUE(d.stub()->SubmitSearch(&c5, again, &second).ok());
  updates = WatchAll(d, second.job_id());
  // Trials finish in any order, so the second search may go elsewhere; but
  // what the store holds is answered from it, and only the rest measured.
  int cached = 0;
  int measured = 0;
  std::set<std::string> all = configs;
  for (const auto& u : updates) {
    if (!u.has_event()) continue;
    std::string key;
    for (const auto& p : u.event().trial().config().params()) {
      key += p.name() + "=" + std::to_string(p.value()) + ",";
    }
    EXPECT_EQ(u.event().cached(), configs.count(key) == 1) << key;
    cached += u.event().cached();
    measured += !u.event().cached();
    all.insert(key);
  }
  EXPECT_GE(cached, 1);  // At least the seeds: the first job's best configs.
  // Each measured once or twice, and the job's fastest once more, together.
  EXPECT_GE(evaluations_ - evaluations_after_first_job, measured);
  EXPECT_LE(evaluations_ - evaluations_after_first_job,
            2 * measured + Elite::kSize);
  EXPECT_EQ(*d.store()->CountTrials(), static_cast<int64_t>(all.size()));
}

// A bucket with lengths on the device is a problem of its own: searched,
// stored and ranked apart from the dense problem of the same sizes, which a
// query answers by transfer (never as if tuned).
// A search that names no template tunes the one serving ranks first for
// the problem among those the device runs: decode_fwd for a decode step,
// flash_fwd_tma for the seed problem.
TEST_F(GrpcApiTest, ASearchWithoutATemplateTunesTheOneRankedFirst) {
  Daemon d(db_, "", &evaluations_);
  for (const auto& [seq_q, want] :
       {std::pair<int, std::string>{1, "decode_fwd"}, {512, "flash_fwd_tma"}}) {
    v1::SubmitSearchRequest req = SeedRequest(4);
    req.clear_template_name();
    req.mutable_problem()->set_seq_q(seq_q);
    grpc::ClientContext ctx;
    v1::SubmitSearchResponse submitted;
    grpc::Status s = d.stub()->SubmitSearch(&ctx, req, &submitted);
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::vector<v1::JobUpdate> updates = WatchAll(d, submitted.job_id());
    ASSERT_FALSE(updates.empty());
    EXPECT_EQ(updates.back().job().template_name(), want) << seq_q;
    EXPECT_EQ(updates.back().job().state(), v1::JOB_STATE_SUCCEEDED);
  }
}

grpc::Status TuneModel(Daemon& d, const v1::TuneModelRequest& req,
                       v1::TuneModelResponse* out) {
  grpc::ClientContext ctx;
  return d.stub()->TuneModel(&ctx, req, out);
}

v1::ListJobsResponse ListJobs(Daemon& d) {
  grpc::ClientContext ctx;
  v1::ListJobsResponse resp;
  EXPECT_TRUE(d.stub()->ListJobs(&ctx, {}, &resp).ok());
  return resp;
}

// A small model's TuneModel request: 6 buckets of two trials each.
v1::TuneModelRequest SmallModelRequest() {
  v1::TuneModelRequest req;
  req.set_heads(8);
  req.set_kv_heads(2);
  req.set_head_dim(64);
  req.set_dtype(v1::DTYPE_FP16);
  v1::Envelope* e = req.mutable_envelope();
  e->set_max_batch(2);
  e->set_max_context(256);
  e->set_prefill_chunk(0);
  e->set_max_prefill_tokens(128);
  e->add_decode_queries(1);
  req.mutable_budget()->set_max_trials(2);
  req.mutable_budget()->set_max_seconds(60);
  return req;
}

// TuneModel submits one search per bucket of the envelope; asked again it
// submits nothing and answers with the same jobs; a dry run submits nothing;
// a bad request names the field and submits nothing.
TEST_F(GrpcApiTest, TuneModelSearchesEachBucketOnceAndResumes) {
  Daemon d(db_, "", &evaluations_);
  const v1::TuneModelRequest req = SmallModelRequest();
  auto call = [&](const v1::TuneModelRequest& r, v1::TuneModelResponse* out) {
    return TuneModel(d, r, out);
  };
  auto jobs = [&] { return ListJobs(d).jobs_size(); };
  v1::TuneModelRequest bad = req;
  bad.set_kv_heads(3);
  v1::TuneModelResponse resp;
  grpc::Status s = call(bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("kv_heads:"));
  bad = req;
  bad.mutable_envelope()->set_max_batch(0);
  EXPECT_THAT(call(bad, &resp).error_message(),
              StartsWith("envelope.max_batch:"));
  v1::TuneModelRequest dry = req;
  dry.set_dry_run(true);
  ASSERT_TRUE(call(dry, &resp).ok());
  // Decode at batches 1, 2 on 32 .. 256 keys; prompts of up to 128 tokens
  // (one sequence of up to 32, 64 or 128, two of up to 32 or 64).
  EXPECT_EQ(resp.buckets_size(), 13);
  EXPECT_EQ(jobs(), 0);
  // Layers of two kinds (gpt-oss's): each kind's buckets, its mods on each.
  v1::TuneModelRequest kinds = dry;
  kinds.add_layer_kinds()->set_sinks(true);
  v1::LayerKind* windowed = kinds.add_layer_kinds();
  windowed->set_window_left(127);
  windowed->set_sinks(true);
  v1::TuneModelResponse two;
  ASSERT_TRUE(call(kinds, &two).ok());
  ASSERT_EQ(two.buckets_size(), 26);
  EXPECT_TRUE(two.buckets(0).problem().sinks());
  EXPECT_FALSE(two.buckets(0).problem().has_window_left());
  EXPECT_EQ(two.buckets(13).problem().window_left(), 127u);
  EXPECT_TRUE(two.buckets(25).problem().sinks());
  kinds.mutable_layer_kinds(1)->set_softcap(-1);
  EXPECT_THAT(call(kinds, &two).error_message(),
              StartsWith("layer_kinds[1].softcap:"));
  EXPECT_EQ(jobs(), 0);

  ASSERT_TRUE(call(req, &resp).ok());
  ASSERT_EQ(resp.buckets_size(), 13);
  std::vector<std::string> ids;
  for (const v1::ModelBucket& b : resp.buckets()) {
    EXPECT_TRUE(b.submitted());
    ids.push_back(b.job_id());
  }
  EXPECT_EQ(jobs(), 13);
  for (const std::string& id : ids) {
    std::vector<v1::JobUpdate> updates = WatchAll(d, id);
    ASSERT_FALSE(updates.empty());
    EXPECT_EQ(updates.back().job().state(), v1::JOB_STATE_SUCCEEDED);
  }
  EXPECT_EQ(resp.buckets(0).problem().seq_q(), 1u);
  ASSERT_TRUE(call(req, &resp).ok());
  for (int i = 0; i < resp.buckets_size(); ++i) {
    EXPECT_FALSE(resp.buckets(i).submitted());
    EXPECT_EQ(resp.buckets(i).job_id(), ids[i]);
    EXPECT_EQ(resp.buckets(i).state(), v1::JOB_STATE_SUCCEEDED);
  }
  EXPECT_EQ(jobs(), 13);
}

// Each bucket's search runs the strategy the request names, with its
// options; an unknown strategy or option is refused naming the field before
// anything is submitted.
TEST_F(GrpcApiTest, TuneModelSearchesWithTheStrategyAsked) {
  Daemon d(db_, "", &evaluations_);
  v1::TuneModelRequest req = SmallModelRequest();
  v1::TuneModelResponse resp;
  req.set_strategy("annealing");
  EXPECT_THAT(TuneModel(d, req, &resp).error_message(),
              StartsWith("strategy:"));
  req.set_strategy("random");
  (*req.mutable_strategy_options())["population"] = 4;
  EXPECT_THAT(TuneModel(d, req, &resp).error_message(),
              StartsWith("strategy_options:"));
  EXPECT_EQ(ListJobs(d).jobs_size(), 0);
  req.clear_strategy_options();
  ASSERT_TRUE(TuneModel(d, req, &resp).ok());
  const v1::ListJobsResponse listed = ListJobs(d);
  ASSERT_EQ(listed.jobs_size(), 13);
  for (const v1::Job& job : listed.jobs()) EXPECT_EQ(job.strategy(), "random");
}

// Two TuneModel calls at once (a run and its resumption while the first
// still submits) search each bucket once between them.
TEST_F(GrpcApiTest, TuneModelCallsAtOnceSearchEachBucketOnce) {
  Daemon d(db_, "", &evaluations_);
  v1::TuneModelRequest req;
  req.set_heads(8);
  req.set_head_dim(64);
  req.set_dtype(v1::DTYPE_FP16);
  req.mutable_envelope()->set_max_batch(8);
  req.mutable_envelope()->set_max_context(2048);
  req.mutable_envelope()->set_max_prefill_tokens(2048);
  req.mutable_envelope()->set_prefill_chunk(256);
  req.mutable_envelope()->add_decode_queries(1);
  req.mutable_envelope()->add_decode_queries(4);
  req.mutable_budget()->set_max_trials(1);
  req.mutable_budget()->set_max_seconds(60);
  std::vector<v1::TuneModelResponse> answers(4);
  std::vector<std::thread> calls;
  for (v1::TuneModelResponse& answer : answers) {
    calls.emplace_back([&] {
      grpc::ClientContext ctx;
      EXPECT_TRUE(d.stub()->TuneModel(&ctx, req, &answer).ok());
    });
  }
  for (std::thread& t : calls) t.join();
  int submitted = 0;
  for (const v1::TuneModelResponse& answer : answers) {
    ASSERT_EQ(answer.buckets_size(), answers[0].buckets_size());
    for (int i = 0; i < answer.buckets_size(); ++i) {
      submitted += answer.buckets(i).submitted();
      EXPECT_EQ(answer.buckets(i).job_id(), answers[0].buckets(i).job_id());
    }
  }
  EXPECT_EQ(submitted, answers[0].buckets_size());
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(d.stub()->ListJobs(&ctx, {}, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), answers[0].buckets_size());
}

TEST_F(GrpcApiTest, AVarlenBucketIsSearchedAndStoredApartFromDense) {
  Daemon d(db_, "", &evaluations_);
  v1::SubmitSearchRequest req = SeedRequest(6);
  req.mutable_problem()->set_batch(16);
  req.mutable_problem()->set_causal(true);
  req.mutable_problem()->set_layout(v1::LAYOUT_VARLEN);
  grpc::ClientContext ctx;
  v1::SubmitSearchResponse submitted;
  ASSERT_TRUE(d.stub()->SubmitSearch(&ctx, req, &submitted).ok());
  std::vector<v1::JobUpdate> updates = WatchAll(d, submitted.job_id());
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().job().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(updates.back().job().problem().layout(), v1::LAYOUT_VARLEN);

  grpc::ClientContext c1;
  v1::QueryBestRequest best;
  *best.mutable_problem() = req.problem();
  v1::QueryBestResponse resp;
  ASSERT_TRUE(d.stub()->QueryBest(&c1, best, &resp).ok());
  EXPECT_FALSE(resp.transferred());
  EXPECT_FALSE(resp.defaults());
  ASSERT_GE(resp.results_size(), 1);

  grpc::ClientContext c2;
  best.mutable_problem()->set_layout(v1::LAYOUT_DENSE);
  best.set_template_name("naive");
  ASSERT_TRUE(d.stub()->QueryBest(&c2, best, &resp).ok());
  EXPECT_TRUE(resp.transferred());
  EXPECT_EQ(resp.source_problem().layout(), v1::LAYOUT_VARLEN);

  grpc::ClientContext c3;
  req.mutable_problem()->set_layout(static_cast<v1::Layout>(7));
  grpc::Status s = d.stub()->SubmitSearch(&c3, req, &submitted);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("problem.layout"));
}

TEST_F(GrpcApiTest, OnlyCandidatesThatCouldEnterTheEliteAreTimedFully) {
  Daemon d(db_, "", &evaluations_);
  grpc::ClientContext ctx;
  v1::SubmitSearchResponse submitted;
  v1::SubmitSearchRequest req = SeedRequest(25);
  req.set_strategy("random");
  ASSERT_TRUE(d.stub()->SubmitSearch(&ctx, req, &submitted).ok());
  const std::vector<v1::JobUpdate> updates = WatchAll(d, submitted.job_id());
  auto events = d.store()->ListJobEvents(submitted.job_id(), 0, 100);
  ASSERT_TRUE(events.ok());
  std::vector<StoredTrial> ok;
  int quick = 0, full = 0;
  for (const JobEvent& e : *events) {
    if (e.trial.result.status != TrialStatus::kOk) continue;
    ok.push_back(e.trial);
    quick += e.trial.result.samples == kQuickTimingSamples;
    full += e.trial.result.samples == kFullTimingSamples;
  }
  EXPECT_EQ(quick + full, static_cast<int>(ok.size()));
  EXPECT_GT(quick, 0);  // Some candidates were not worth a full timing...
  std::sort(ok.begin(), ok.end(), [](const auto& a, const auto& b) {
    return a.result.median_us < b.result.median_us;
  });
  for (size_t i = 0; i < std::min<size_t>(5, ok.size()); ++i) {
    // ...but the fastest always were.
    EXPECT_EQ(ok[i].result.samples, kFullTimingSamples) << i;
  }
  // One quick evaluation per trial, plus one full one per fully timed trial,
  // plus the five fastest once more, timed together after the search: their
  // stored latencies say so.
  EXPECT_EQ(evaluations_, 25 + full + Elite::kSize);
  int confirmed = 0;
  for (const StoredTrial& t : ok) {
    confirmed += t.result.timed_against == Elite::kSize - 1;
  }
  EXPECT_EQ(confirmed, Elite::kSize);
  // The search's fastest measured slower in turns: the job's best is another
  // config now, in the watch's last update as in the store.
  const StoredTrial best = **d.store()->JobBest(submitted.job_id());
  EXPECT_EQ(best.result.timed_against, Elite::kSize - 1);
  ASSERT_TRUE(updates.back().job().has_best());
  EXPECT_EQ(updates.back().job().best().trial_id(), best.trial_id);
  EXPECT_DOUBLE_EQ(updates.back().job().best().latency().median_us(),
                   best.result.median_us);
}

TEST_F(GrpcApiTest, EvaluateConfigMeasuresOnceAndValidatesTheConfig) {
  Daemon d(db_, "", &evaluations_);
  auto request = [](std::vector<std::pair<std::string, int64_t>> params) {
    v1::EvaluateConfigRequest r;
    r.set_template_name("naive");
    *r.mutable_problem() = SeedRequest().problem();
    for (const auto& [name, value] : params) {
      v1::ParamValue* p = r.mutable_config()->add_params();
      p->set_name(name);
      p->set_value(value);
    }
    return r;
  };
  v1::EvaluateConfigResponse first, second;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub()
                    ->EvaluateConfig(
                        &ctx, request({{"KV_TILE", 64}, {"WARPS", 4}}), &first)
                    .ok());
  }
  EXPECT_FALSE(first.cached());
  EXPECT_EQ(evaluations_, 1);  // Full timing directly.
  EXPECT_EQ(first.trial().latency().samples(),
            first.trial().status() == v1::TRIAL_STATUS_OK
                ? static_cast<uint32_t>(kFullTimingSamples)
                : 0u);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub()
                    ->EvaluateConfig(
                        &ctx, request({{"WARPS", 4}, {"KV_TILE", 64}}), &second)
                    .ok());
  }
  EXPECT_TRUE(second.cached());
  EXPECT_EQ(second.trial().trial_id(), first.trial().trial_id());
  EXPECT_EQ(evaluations_, 1);
  if (first.trial().status() == v1::TRIAL_STATUS_OK) {
    EXPECT_GT(first.tflops(), 0);
  }

  const std::vector<std::vector<std::pair<std::string, int64_t>>> bad = {
      {{"KV_TILE", 63}, {"WARPS", 4}},                   // Not in the space.
      {{"KV_TILE", 64}},                                 // Missing WARPS.
      {{"KV_TILE", 64}, {"WARPS", 4}, {"BLOCK_M", 64}},  // Unknown name.
      {{"KV_TILE", 64}, {"KV_TILE", 32}, {"WARPS", 4}},  // Given twice.
  };
  for (const auto& params : bad) {
    grpc::ClientContext ctx;
    v1::EvaluateConfigResponse resp;
    grpc::Status s = d.stub()->EvaluateConfig(&ctx, request(params), &resp);
    EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), StartsWith("config:"));
  }
  EXPECT_EQ(*d.store()->CountTrials(), 1);
}

TEST_F(GrpcApiTest, AnUnfinishedJobResumesWithoutRepeatingATrial) {
  std::string job_id;
  std::vector<std::string> before;
  {
    // A daemon that stopped after 5 trials of a 15-trial job, as a kill -9
    // would leave it: state running, five events stored.
    auto store = *ResultStore::Open(db_);
    SyntheticEvaluator synthetic({});
    JobRecord job;
    job.job_id = "jresume";
    job.template_name = "naive";
    job.template_hash = TemplateRegistry::Builtin().Find("naive")->hash;
    job.problem.heads = job.problem.kv_heads = 8;
    job.problem.seq_q = job.problem.seq_k = 512;
    job.max_trials = 15;
    job.max_seconds = 600;
    job.strategy = "random";
    job.seed = 9;
    job.device = synthetic.device();
    ASSERT_TRUE(store->CreateJob(job).ok());
    const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
    auto order = MakeStrategy(
        "random",
        SearchInputs{naive.space,
                     FeasibleConfigs(naive, job.problem, job.device.limits),
                     {}},
        job.seed);
    TrialResult fast;
    fast.median_us = fast.min_us = fast.p90_us = 5;
    fast.samples = kFullTimingSamples;
    for (const Config& c : (*order)->Propose(5)) {
      ASSERT_TRUE(store->AppendJobTrial(job, c, fast, false, 1).ok());
      before.push_back(ConfigKey(c));
    }
    ASSERT_TRUE(store->SetJobState("jresume", JobState::kRunning, "").ok());
    job_id = job.job_id;
  }
  Daemon d(db_, "", &evaluations_);
  std::vector<v1::JobUpdate> updates = WatchAll(d, job_id);
  EXPECT_EQ(updates.back().job().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(updates.back().job().trials_done(), 15u);
  // Only the ten missing trials were measured (each once quickly, some also
  // fully).
  auto all = d.store()->ListJobEvents(job_id, 0, 100);
  int full = 0;
  for (const JobEvent& e : *all) {
    if (e.sequence > 5 && e.trial.result.samples == kFullTimingSamples) ++full;
  }
  EXPECT_EQ(evaluations_, 10 + full + Elite::kSize);  // And the confirmation.
  auto events = d.store()->ListJobEvents(job_id, 0, 100);
  ASSERT_EQ(events->size(), 15u);
  std::set<std::string> keys;
  for (const JobEvent& e : *events) keys.insert(ConfigKey(e.trial.config));
  EXPECT_EQ(keys.size(), 15u);
  for (const std::string& k : before) EXPECT_EQ(keys.count(k), 1u);
  EXPECT_EQ(*d.store()->CountTrials(), 15);
}

// GetKernel with the real compiler: a tuned config of a device the store
// knows (this daemon's own is synthetic), compiled for its architecture.
TEST_F(GrpcApiTest, GetKernelCompilesTheBestConfigForTheDevice) {
  Daemon d(db_, "s3cret", &evaluations_);
  const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
  absl::StatusOr<Problem> seed = ProblemFromProto(SeedRequest().problem());
  const Config config = naive.defaults.front();
  StoreL4Trial(d, naive, config);
  v1::GetKernelRequest req;
  *req.mutable_problem() = SeedRequest().problem();
  req.set_device("NVIDIA L4");
  v1::Kernel k;
  grpc::ClientContext none;
  EXPECT_EQ(d.stub()->GetKernel(&none, req, &k).error_code(),
            grpc::UNAUTHENTICATED);

  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer s3cret");
  grpc::Status s = d.stub()->GetKernel(&ctx, req, &k);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(k.template_name(), "naive");
  EXPECT_EQ(k.template_hash(), naive.hash);
  EXPECT_EQ(k.trial().latency().median_us(), 40);
  EXPECT_FALSE(k.transferred());
  EXPECT_EQ(k.arch(), "sm_89");
  EXPECT_EQ(k.cubin().substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_THAT(k.ptx(), HasSubstr(".target sm_89"));
  EXPECT_THAT(k.ptx(), HasSubstr(".entry " + naive.kernel_name));
  const LaunchGeometry g = naive.geometry(config, *seed);
  EXPECT_EQ(k.geometry().grid_x(), static_cast<uint64_t>(g.grid[0]));
  EXPECT_EQ(k.geometry().block_threads(),
            static_cast<uint32_t>(g.block_threads));
  EXPECT_EQ(k.param_layout_version(),
            static_cast<uint32_t>(kParamLayoutVersion));

  grpc::ClientContext bad;
  bad.AddMetadata("authorization", "Bearer s3cret");
  req.mutable_problem()->set_kv_heads(3);
  s = d.stub()->GetKernel(&bad, req, &k);
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("problem.kv_heads"));
}

// A device the store knows without its limits (from before it kept them)
// still has its architecture: an untuned problem on an L4 is never served a
// template of Hopper's instructions (which NVRTC would refuse to compile).
TEST_F(GrpcApiTest, AnUntunedProblemGetsATemplateOfItsDevicesArchitecture) {
  Daemon d(db_, "s3cret", &evaluations_);
  StoreL4Trial(d, *TemplateRegistry::Builtin().Find("naive"),
               TemplateRegistry::Builtin().Find("naive")->defaults.front());
  Problem p = *ProblemFromProto(SeedRequest().problem());
  p.seq_k = 1024;  // Untuned on the L4.
  absl::StatusOr<v1::Kernel> k =
      DaemonSource(d.channel(), "s3cret").Find(p, "NVIDIA L4", "sm_89");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->arch(), "sm_89");
  const KernelTemplate* t =
      TemplateRegistry::Builtin().Find(k->template_name());
  ASSERT_NE(t, nullptr);
  EXPECT_NE(t->only_compute_capability, 90) << t->name;
}

// What the daemon served for a GPU, the most recent first, is what
// RecentKernels (and the runtime's source) answer for that GPU; a refused
// problem is not among them, and a limit past what it keeps answers all.
TEST_F(GrpcApiTest, RecentKernelsAreTheProblemsServedForTheDevice) {
  Daemon d(db_, "s3cret", &evaluations_);
  const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
  StoreL4Trial(d, naive, naive.defaults.front());
  DaemonSource source(d.channel(), "s3cret");
  absl::StatusOr<Problem> seed = ProblemFromProto(SeedRequest().problem());
  ASSERT_TRUE(seed.ok());
  EXPECT_TRUE(source.Recent("NVIDIA L4", 10)->empty());
  Problem longer = *seed;
  longer.seq_k = 1024;
  StoreL4Trial(d, naive, naive.defaults.front(), longer);
  Problem unsupported = *seed;
  unsupported.head_dim = 40;
  ASSERT_TRUE(source.Find(*seed, "NVIDIA L4", "sm_89").ok());
  ASSERT_TRUE(source.Find(longer, "NVIDIA L4", "sm_89").ok());
  EXPECT_FALSE(source.Find(unsupported, "NVIDIA L4", "sm_89").ok());
  absl::StatusOr<std::vector<Problem>> recent = source.Recent("NVIDIA L4", 10);
  ASSERT_TRUE(recent.ok()) << recent.status();
  EXPECT_EQ(*recent, (std::vector<Problem>{longer, *seed}));
  EXPECT_EQ(*source.Recent("NVIDIA L4", 1), (std::vector<Problem>{longer}));
  EXPECT_TRUE(source.Recent("NVIDIA H100 80GB HBM3", 10)->empty());

  EXPECT_EQ(*source.Recent("NVIDIA L4", 5000),
            (std::vector<Problem>{longer, *seed}));
  EXPECT_TRUE(absl::IsUnauthenticated(
      DaemonSource(d.channel(), "wrong").Recent("NVIDIA L4", 10).status()));
}

// The runtime's source says NOT_FOUND where the daemon has no kernel, so
// that callers (the PyTorch op) fall back instead of failing.
TEST_F(GrpcApiTest, DaemonSourceFindsNothingWhereNoTemplateSupportsTheProblem) {
  Daemon d(db_, "s3cret", &evaluations_);
  const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
  StoreL4Trial(d, naive, naive.defaults.front());
  DaemonSource source(d.channel(), "s3cret");
  absl::StatusOr<Problem> p = ProblemFromProto(SeedRequest().problem());
  ASSERT_TRUE(p.ok());
  p->head_dim = 40;
  absl::Status s = source.Find(*p, "NVIDIA L4", "sm_89").status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no template supports"));
  EXPECT_TRUE(absl::IsUnauthenticated(DaemonSource(d.channel(), "wrong")
                                          .Find(*p, "NVIDIA L4", "sm_89")
                                          .status()));
}

}  // namespace
}  // namespace evotune
