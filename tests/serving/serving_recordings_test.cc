// The daemon's answers for problems never tuned, checked against the H100
// recordings: a store holding the recorded trials of the nine prefill suite
// problems (every config of every recorded template, as exhaustive jobs
// would leave it), its cost model trained as the daemon trains it, and
// QueryBest for every other recorded problem. What transfer_loo measures on
// the recordings (and bench/RESULTS.md on the H100) is what users get only
// if the daemon serves as it does: the same model and limits, the same
// rules for when defaults answer. A daemon without the GPU, answering from
// the store alone, must serve the same (the store keeps the GPU's limits).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tuner/jobs/cost_models.h"
#include "tuner/jobs/in_process_runner.h"
#include "tuner/jobs/job_manager.h"
#include "tuner/jobs/worker_pool.h"
#include "tuner/model/leave_one_out.h"
#include "tuner/serving/tuning_service.h"

namespace evotune {
namespace {

const char* const kRecordings[] = {
    "flash_fwd_landscapes_h100.csv",
    "flash_fwd_sm90_landscapes_h100.csv",
    "flash_fwd_tma_landscapes_h100.csv",
    "decode_fwd_landscapes_h100.csv",
    "decode_fwd_short_query_landscapes_h100.csv",
    "decode_fwd_spread_landscapes_h100.csv",
    "decode_fwd_causal_spread_landscapes_h100.csv"};

// The nine prefill problems of the suite, as RESULTS.md's serving entries
// tune them.
const std::set<std::string> kTuned = {
    "b1_h8_kv8_q512_k512_d64_full_fp16_bhsd",
    "b1_h8_kv8_q512_k512_d64_causal_fp16_bhsd",
    "b4_h16_kv16_q1024_k1024_d64_full_fp16_bhsd",
    "b4_h16_kv16_q2048_k2048_d64_causal_bf16_bhsd",
    "b2_h16_kv16_q4096_k4096_d128_full_bf16_bhsd",
    "b2_h16_kv16_q4096_k4096_d128_causal_bf16_bhsd",
    "b1_h16_kv16_q8192_k8192_d128_full_bf16_bhsd",
    "b32_h16_kv16_q512_k512_d128_full_fp16_bhsd",
    "b1_h32_kv8_q1024_k8192_d128_causal_bf16_bhsd"};

// The recorded GPU, never asked to measure anything.
class RecordedGpu : public Evaluator {
 public:
  explicit RecordedGpu(const DeviceLimits& limits) {
    device_.name = "NVIDIA H100 80GB HBM3";
    device_.cc_major = 9;
    device_.limits = limits;
  }
  const DeviceInfo& device() const override { return device_; }
  absl::StatusOr<TrialResult> Evaluate(const KernelTemplate&, const Config&,
                                       const Problem&) override {
    return absl::FailedPreconditionError("nothing is measured in this test");
  }

 private:
  DeviceInfo device_;
};

// problem key -> template -> config key -> recorded median (OK results).
using Truth =
    std::map<std::string, std::map<std::string, std::map<std::string, double>>>;

// The daemon of this test: a store holding the recorded trials of kTuned on
// the recorded GPU, and its cost model trained as the daemon trains it.
// The daemon's models as it trains them, less the order model: serving ranks
// by the latency model alone, and the order model would double the
// training.
CostModelsOptions ServingModels() {
  CostModelsOptions options;
  options.model.order_model = false;
  return options;
}

class ServingRecordingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* file : kRecordings) {
      absl::StatusOr<RecordedLandscape> l =
          LoadRecordedLandscape(std::string(EVOTUNE_TEST_DATA) + "/" + file,
                                TemplateRegistry::Builtin());
      ASSERT_TRUE(l.ok()) << l.status();
      recordings_.push_back(*std::move(l));
    }
    absl::StatusOr<DeviceLimits> limits = SharedLimits(recordings_);
    ASSERT_TRUE(limits.ok()) << limits.status();
    limits_ = *limits;
    db_ = ::testing::TempDir() + "/serving_recordings_" +
          std::to_string(getpid()) + ".db";
    std::filesystem::remove(db_);
    store_ = *ResultStore::Open(db_);
    runner_ = std::make_unique<InProcessRunner>(
        std::make_unique<RecordedGpu>(limits_), &TemplateRegistry::Builtin());
    const DeviceInfo device = *runner_->FindDevice("");
    for (const RecordedLandscape& l : recordings_) {
      for (const auto& [key, results] : l.problems) {
        for (const auto& [config, r] : results) {
          if (r.status == TrialStatus::kOk) {
            truth_[key][l.t->name][ConfigKey(config)] = r.median_us;
          }
          if (kTuned.count(key) == 0) continue;
          ASSERT_TRUE(store_
                          ->InsertTrial({device, l.t->name, l.t->hash,
                                         *ParseProblemKey(key)},
                                        config, r)
                          .ok());
        }
      }
    }
    models_ = std::make_unique<CostModels>(
        store_.get(), &TemplateRegistry::Builtin(), ServingModels());
    jobs_ = std::make_unique<JobManager>(
        store_.get(), &TemplateRegistry::Builtin(), runner_.get());
    service_ = std::make_unique<TuningService>(
        store_.get(), &TemplateRegistry::Builtin(), jobs_.get(), TuneOnMiss{},
        models_.get(), ModelRanking{});
    ASSERT_TRUE(store_->RecordDeviceLimits(device).ok());
    device_ = device;
    models_->Get(device);  // Asked for: the next refresh trains it.
    ASSERT_TRUE(models_->Refresh().ok());
    ASSERT_NE(models_->Get(device), nullptr);
  }
  void TearDown() override {
    if (jobs_ != nullptr) jobs_->Shutdown();
    std::filesystem::remove(db_);
  }

  double Optimum(const std::string& key) const {
    double best = std::numeric_limits<double>::infinity();
    for (const auto& [name, configs] : truth_.at(key)) {
      for (const auto& [config, us] : configs) best = std::min(best, us);
    }
    return best;
  }

  std::vector<RecordedLandscape> recordings_;
  DeviceLimits limits_;
  DeviceInfo device_;
  Truth truth_;
  std::string db_;
  std::unique_ptr<ResultStore> store_;
  std::unique_ptr<InProcessRunner> runner_;
  std::unique_ptr<CostModels> models_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<TuningService> service_;
};

// Every recorded problem not tuned is served within 15% of its recorded
// optimum, with the config transfer_loo serves it (what RESULTS.md timed on
// the H100). transfer_loo serves a problem only from the templates recorded
// for it; the daemon ranks every template, so on two decode-only
// recordings (48 and 24 causal queries) it serves flash_fwd_tma, which
// the recordings cannot time (on the H100: 0.69x and 0.92x of the recorded
// decode_fwd optimum, RESULTS.md 2026-11-27).
TEST_F(ServingRecordingsTest, UntunedProblemsAreServedAsTransferLooMeasures) {
  absl::StatusOr<std::vector<LeftOut>> bench =
      LeaveOneProblemOut(recordings_, limits_, CostModelOptions{}, kTuned);
  ASSERT_TRUE(bench.ok()) << bench.status();
  ASSERT_EQ(bench->size(), 43u);
  int other_template = 0;
  for (const LeftOut& row : *bench) {
    BestQuery q;
    q.problem = *ParseProblemKey(row.problem);
    absl::StatusOr<BestAnswer> a = service_->QueryBest(q);
    ASSERT_TRUE(a.ok()) << row.problem << ": " << a.status();
    ASSERT_FALSE(a->results.empty()) << row.problem;
    EXPECT_TRUE(a->transferred || a->defaults) << row.problem;
    const RankedTrial& served = a->results.front();
    const auto& recorded = truth_.at(row.problem);
    auto t = recorded.find(served.template_name);
    if (t == recorded.end()) {
      ++other_template;
      EXPECT_TRUE(a->predicted) << row.problem;
      continue;
    }
    EXPECT_EQ(served.template_name, row.model.template_name) << row.problem;
    EXPECT_EQ(served.trial.config, row.model.config) << row.problem;
    auto c = t->second.find(ConfigKey(served.trial.config));
    ASSERT_NE(c, t->second.end()) << row.problem;
    EXPECT_LE(c->second, 1.15 * Optimum(row.problem)) << row.problem;
  }
  EXPECT_LE(other_template, 2);
}

// A daemon without the GPU (serving from a copy of the store, say) answers
// for it as the daemon with it does: the store keeps the device's limits,
// so its model and its checks are the same.
TEST_F(ServingRecordingsTest, ADaemonWithoutTheGpuServesTheSame) {
  WorkerPool::Options options;
  options.startup_wait = absl::ZeroDuration();
  WorkerPool no_gpu(options);
  no_gpu.SetNoWorkerReason("no CUDA device: none in this test");
  CostModels models(store_.get(), &TemplateRegistry::Builtin(),
                    ServingModels());
  JobManager jobs(store_.get(), &TemplateRegistry::Builtin(), &no_gpu);
  TuningService service(store_.get(), &TemplateRegistry::Builtin(), &jobs,
                        TuneOnMiss{}, &models, ModelRanking{});
  absl::StatusOr<DeviceInfo> stored = store_->FindDevice(device_.name);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->limits.multiprocessors, limits_.multiprocessors);
  models.Get(*stored);
  ASSERT_TRUE(models.Refresh().ok());
  int asked = 0;
  for (const auto& [key, recorded] : truth_) {
    if (kTuned.count(key) > 0) continue;
    BestQuery q;
    q.problem = *ParseProblemKey(key);
    absl::StatusOr<BestAnswer> with_gpu = service_->QueryBest(q);
    q.device = device_.name;
    absl::StatusOr<BestAnswer> without = service.QueryBest(q);
    ASSERT_TRUE(with_gpu.ok() && without.ok()) << key;
    ASSERT_FALSE(with_gpu->results.empty() || without->results.empty());
    EXPECT_EQ(without->results.front().template_name,
              with_gpu->results.front().template_name)
        << key;
    EXPECT_EQ(without->results.front().trial.config,
              with_gpu->results.front().trial.config)
        << key;
    ++asked;
  }
  EXPECT_EQ(asked, 43);
  jobs.Shutdown();
  no_gpu.Close();
}

// A model's buckets on the recorded GPU, planned with its cost model:
// every bucket predicted, the served config's time its own and a search's
// best no slower; searches ordered by the time they are predicted to save,
// those predicted to gain little given a check of the served config.
TEST_F(ServingRecordingsTest, TuneModelPlansItsSearchesByPredictedGain) {
  ModelTuneRequest r;
  r.heads = 32;
  r.kv_heads = 8;
  r.head_dim = 128;
  r.envelope.max_batch = 8;
  r.envelope.max_context = 4096;
  r.envelope.prefill_chunk = 1024;
  r.envelope.max_prefill_tokens = 4096;
  r.max_trials = 12;
  r.dry_run = true;
  absl::StatusOr<std::vector<ModelBucket>> plan = service_->TuneModel(r);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->size(), 40u);
  int checks = 0;
  for (const ModelBucket& b : *plan) {
    EXPECT_GT(b.served_us, 0) << ProblemKey(b.problem);
    EXPECT_GT(b.best_us, 0) << ProblemKey(b.problem);
    EXPECT_LE(b.best_us, b.served_us) << ProblemKey(b.problem);
    EXPECT_EQ(b.trials, PredictedGain(b) < kSmallGain ? kCheckTrials : 12)
        << ProblemKey(b.problem);
    checks += b.trials == kCheckTrials;
    EXPECT_TRUE(b.job_id.empty());
  }
  std::cout << checks << " of " << plan->size()
            << " buckets predicted to gain under 3%\n";
  std::vector<ModelBucket> again = *plan;
  const std::vector<size_t> order = PlanSearches(&again, 12);
  ASSERT_EQ(order.size(), plan->size());
  for (size_t i = 1; i < order.size(); ++i) {
    const ModelBucket& a = again[order[i - 1]];
    const ModelBucket& b = again[order[i]];
    EXPECT_GE(a.served_us - a.best_us, b.served_us - b.best_us);
  }
  EXPECT_TRUE(store_->ListJobs(std::nullopt)->empty());
}

// What TuneModel's plan gives a 2-trial check (a predicted gain under
// kSmallGain) against what the recordings hold: for each recorded problem
// nothing tuned, the served config's recorded time against the recorded
// optimum. On these recordings, 17 of the 43 are predicted under 3%; of
// the 15 whose served config was recorded, one could gain 6.9%, the rest
// 2.3% at most (bench/RESULTS.md, 2026-12-04, "tune-model's plan").
TEST_F(ServingRecordingsTest, BucketsPredictedToGainLittleHaveLittleToGain) {
  std::shared_ptr<const ModelSnapshot> snapshot = models_->Get(device_);
  int small = 0, judged = 0, missed = 0;
  for (const auto& [key, recorded] : truth_) {
    if (kTuned.count(key) > 0) continue;
    const Problem p = *ParseProblemKey(key);
    absl::StatusOr<std::pair<double, double>> us =
        service_->PredictBucket(*snapshot->model, p, device_);
    ASSERT_TRUE(us.ok()) << key << ": " << us.status();
    ASSERT_LE(us->second, us->first) << key;
    if (1 - us->second / us->first >= kSmallGain) continue;
    ++small;
    BestQuery q;
    q.problem = p;
    absl::StatusOr<BestAnswer> a = service_->QueryBest(q);
    ASSERT_TRUE(a.ok() && !a->results.empty()) << key;
    const RankedTrial& served = a->results.front();
    auto t = recorded.find(served.template_name);
    if (t == recorded.end()) continue;
    auto c = t->second.find(ConfigKey(served.trial.config));
    if (c == t->second.end()) continue;
    ++judged;
    const double gain = 1 - Optimum(key) / c->second;
    EXPECT_LT(gain, 0.10) << key;
    missed += gain >= kSmallGain;
  }
  std::cout << small << " predicted under 3%, " << judged << " judged, "
            << missed << " of those could gain 3% or more\n";
  EXPECT_GE(small, 10);
  EXPECT_LE(missed, 2);
}

}  // namespace
}  // namespace evotune
