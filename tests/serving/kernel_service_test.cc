// KernelService over a real store and TuningService, with a fake compiler
// (the real one is exercised by grpc_api_test and the runtime's GPU test).
#include "tuner/serving/kernel_service.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/h100_testing.h"
#include "tuner/evaluator/synthetic_evaluator.h"
#include "tuner/jobs/in_process_runner.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

DeviceInfo H100() {
  DeviceInfo d;
  d.name = "NVIDIA H100 80GB HBM3";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.driver_version = "580.1";
  d.nvrtc_version = "13.0";
  d.limits = H100Limits();
  return d;
}

Problem Seed() {
  return *ParseProblemKey("b1_h8_kv8_q512_k512_d64_full_fp16_bhsd");
}

class KernelServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::filesystem::path(::testing::TempDir()) /
          ("kernels_" + std::to_string(getpid()) + ".db");
    std::filesystem::remove(db_);
    store_ = *ResultStore::Open(db_);
    runner_ = std::make_unique<InProcessRunner>(
        std::make_unique<SyntheticEvaluator>(SyntheticEvaluator::Options{}),
        &TemplateRegistry::Builtin());
    jobs_ = std::make_unique<JobManager>(
        store_.get(), &TemplateRegistry::Builtin(), runner_.get());
    tuning_ = std::make_unique<TuningService>(
        store_.get(), &TemplateRegistry::Builtin(), jobs_.get());
  }

  // A compiler that counts its calls and fails while `fail_` is set.
  KernelCompileFn FakeCompiler() {
    return [this](const KernelTemplate& t, const Config& config,
                  const Problem& problem,
                  const std::string& arch) -> absl::StatusOr<CompiledKernel> {
      ++compiles_;
      if (fail_) return absl::InternalError("compiling: fake error");
      return CompiledKernel{
          absl::StrCat("cubin ", t.name, " ", arch, " ", ConfigKey(config)),
          "ptx"};
    };
  }

  // Stores an OK trial of `config` of `template_name` for `p` on the H100.
  void Tune(const std::string& template_name, const Config& config,
            const Problem& p, double median_us) {
    const KernelTemplate* t = TemplateRegistry::Builtin().Find(template_name);
    TrialResult r;
    r.median_us = r.min_us = r.p90_us = median_us;
    ASSERT_TRUE(
        store_->InsertTrial({H100(), t->name, t->hash, p}, config, r).ok());
  }

  BestQuery Query(const Problem& p) {
    BestQuery q;
    q.problem = p;
    q.device = H100().name;
    q.template_name = "naive";
    return q;
  }

  std::filesystem::path db_;
  std::unique_ptr<ResultStore> store_;
  std::unique_ptr<TrialRunner> runner_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<TuningService> tuning_;
  std::atomic<int> compiles_{0};
  bool fail_ = false;
};

TEST_F(KernelServiceTest, ServesTheBestConfigCompiledForTheDevice) {
  const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
  const std::vector<Config> configs =
      FeasibleConfigs(naive, Seed(), H100().limits);
  ASSERT_GE(configs.size(), 2u);
  Tune("naive", configs[0], Seed(), 20);
  Tune("naive", configs[1], Seed(), 10);
  KernelService service(tuning_.get(), store_.get(), FakeCompiler());

  absl::StatusOr<ServedKernel> k = service.GetKernel(Query(Seed()));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_FALSE(k->answer.transferred);
  ASSERT_EQ(k->answer.results.size(), 1u);
  EXPECT_EQ(ConfigKey(k->answer.results[0].trial.config),
            ConfigKey(configs[1]));
  EXPECT_EQ(k->arch, "sm_90a");
  EXPECT_EQ(k->kernel_name, naive.kernel_name);
  EXPECT_EQ(k->compiled.cubin,
            absl::StrCat("cubin naive sm_90a ", ConfigKey(configs[1])));
  const LaunchGeometry g = naive.geometry(configs[1], Seed());
  EXPECT_EQ(k->geometry.grid[0], g.grid[0]);
  EXPECT_EQ(k->geometry.block_threads, g.block_threads);
  EXPECT_EQ(k->geometry.smem_bytes, g.smem_bytes);
  EXPECT_EQ(k->param_layout_version, kParamLayoutVersion);
}

TEST_F(KernelServiceTest, CompilesEachInstantiationOnceAcrossRestarts) {
  const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
  Tune("naive", naive.defaults.front(), Seed(), 10);
  {
    KernelService service(tuning_.get(), store_.get(), FakeCompiler());
    ASSERT_TRUE(service.GetKernel(Query(Seed())).ok());
    ASSERT_TRUE(service.GetKernel(Query(Seed())).ok());
  }
  EXPECT_EQ(compiles_, 1);
  // Another problem of the same head_dim and dtype needs no compile either.
  Problem other = Seed();
  other.seq_k = 4096;
  KernelService restarted(tuning_.get(), store_.get(), FakeCompiler());
  absl::StatusOr<ServedKernel> k = restarted.GetKernel(Query(other));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(k->answer.transferred);
  EXPECT_EQ(compiles_, 1);
  EXPECT_EQ(k->geometry.grid[0],
            naive.geometry(k->answer.results[0].trial.config, other).grid[0]);
}

TEST_F(KernelServiceTest, AFailedCompileIsAnErrorAndNotCached) {
  const KernelTemplate& naive = *TemplateRegistry::Builtin().Find("naive");
  Tune("naive", naive.defaults.front(), Seed(), 10);
  KernelService service(tuning_.get(), store_.get(), FakeCompiler());
  fail_ = true;
  absl::StatusOr<ServedKernel> k = service.GetKernel(Query(Seed()));
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInternal);
  fail_ = false;
  EXPECT_TRUE(service.GetKernel(Query(Seed())).ok());
  EXPECT_EQ(compiles_, 2);
}

TEST_F(KernelServiceTest, UntunedProblemsGetADefaultConfig) {
  Tune("naive", TemplateRegistry::Builtin().Find("naive")->defaults.front(),
       Seed(), 10);
  Problem bf16 = Seed();
  bf16.dtype = DType::kBf16;
  bf16.head_dim = 128;
  KernelService service(tuning_.get(), store_.get(), FakeCompiler());
  absl::StatusOr<ServedKernel> k = service.GetKernel(Query(bf16));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(k->answer.transferred || k->answer.defaults);
  EXPECT_TRUE(RunsOn(*TemplateRegistry::Builtin().Find("naive"),
                     k->answer.results[0].trial.config, bf16, H100().limits));
}

TEST_F(KernelServiceTest, RefusesBadInputAndDevicesNvrtcCannotTarget) {
  KernelService service(tuning_.get(), store_.get(), FakeCompiler());
  Problem bad = Seed();
  bad.kv_heads = 3;
  absl::StatusOr<ServedKernel> k = service.GetKernel(Query(bad));
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(k.status().message()),
              StartsWith("problem.kv_heads"));

  BestQuery unknown = Query(Seed());
  unknown.template_name = "nope";
  k = service.GetKernel(unknown);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(k.status().message()), StartsWith("template_name"));

  // The daemon's own device here is synthetic (compute capability 0.0).
  BestQuery synthetic = Query(Seed());
  synthetic.device = "";
  k = service.GetKernel(synthetic);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(k.status().message()), StartsWith("device: "));
  EXPECT_EQ(compiles_, 0);
}

}  // namespace
}  // namespace evotune
