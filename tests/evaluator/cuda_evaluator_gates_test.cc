// The CUDA evaluator's gates on a fake GPU (fake_cuda_driver.h), so that they
// run where there is none: a correct kernel is timed, and every way a kernel
// can fail ends its trial with the status and reason it must. Compiles are
// NVRTC's, for the fake's sm_90a.
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernel_templates/template_registry.h"
#include "tests/common/fake_cuda_driver.h"
#include "tuner/evaluator/cuda_evaluator.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

class CudaEvaluatorGatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CudaEvaluatorOptions options;
    options.driver = FakeCudaDriver::Install();
    options.compile_threads = 0;
    problem_.batch = 2;
    problem_.heads = 4;
    problem_.kv_heads = 2;
    problem_.seq_q = problem_.seq_k = 40;
    problem_.head_dim = 64;
    FakeCudaDriver::state().problem = problem_;
    absl::StatusOr<std::unique_ptr<Evaluator>> e = MakeCudaEvaluator(options);
    ASSERT_TRUE(e.ok()) << e.status();
    evaluator_ = *std::move(e);
  }

  TrialResult Evaluate() {
    absl::StatusOr<TrialResult> r =
        evaluator_->Evaluate(naive_, naive_.defaults.front(), problem_);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : TrialResult{};
  }

  const KernelTemplate& naive_ = *TemplateRegistry::Builtin().Find("naive");
  Problem problem_;
  std::unique_ptr<Evaluator> evaluator_;
  FakeGpuState& gpu_ = FakeCudaDriver::state();
};

TEST_F(CudaEvaluatorGatesTest, TheDeviceIsTheDriversAndACorrectKernelIsTimed) {
  EXPECT_EQ(evaluator_->device().name, "Fake H100");
  EXPECT_EQ(evaluator_->device().limits.multiprocessors, 132);
  const TrialResult r = Evaluate();
  EXPECT_EQ(r.status, TrialStatus::kOk) << r.error;
  EXPECT_EQ(r.samples, kFullTimingSamples);
  EXPECT_NEAR(r.median_us, 12.5, 1e-4);
  EXPECT_EQ(gpu_.fills, 3);            // Q, K and V, fresh for the trial.
  EXPECT_EQ(gpu_.bytes_allocated, 0);  // Every buffer freed again.
}

// With a virtual compile_arch the candidate is PTX, compiled by the driver as
// it loads it, and judged like a cubin.
TEST_F(CudaEvaluatorGatesTest, AVirtualCompileArchLoadsPtx) {
  CudaEvaluatorOptions options;
  options.driver = FakeCudaDriver::Install();
  options.compile_threads = 0;
  options.compile_arch = "compute_89";
  FakeCudaDriver::state().problem = problem_;
  absl::StatusOr<std::unique_ptr<Evaluator>> e = MakeCudaEvaluator(options);
  ASSERT_TRUE(e.ok()) << e.status();
  evaluator_ = *std::move(e);
  EXPECT_EQ(Evaluate().status, TrialStatus::kOk);
  EXPECT_EQ(gpu_.ptx_module_loads, 1);
  EXPECT_GT(gpu_.module_loads, 1);  // The evaluator's own kernels: cubins.
  // Configs are judged for the architecture compiled for.
  EXPECT_EQ(evaluator_->device().limits.compute_capability, 89);
  EXPECT_EQ(evaluator_->device().cc_major, 9);
}

// A compile_arch newer than the device (or no architecture) is refused
// naming the option.
TEST_F(CudaEvaluatorGatesTest, ACompileArchNewerThanTheDeviceIsRefused) {
  CudaEvaluatorOptions options;
  options.driver = FakeCudaDriver::Install();
  options.compile_threads = 0;
  for (const char* arch : {"compute_100", "sm_120", "ampere"}) {
    options.compile_arch = arch;
    absl::StatusOr<std::unique_ptr<Evaluator>> e = MakeCudaEvaluator(options);
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << arch;
    EXPECT_EQ(e.status().message().rfind("compile_arch:", 0), 0u) << e.status();
  }
}

// Each wrong output, and the reason the correctness gate gives.
TEST_F(CudaEvaluatorGatesTest, WrongOutputIsIncorrectSayingHow) {
  const std::pair<FakeKernel, std::string> cases[] = {
      {FakeKernel::kLeavesOneUnwritten, "output element 5 is NaN or infinite"},
      {FakeKernel::kRacy, "first at element 3): a race"},
      {FakeKernel::kWrong, "max abs error 0.25"}};
  for (const auto& [kernel, why] : cases) {
    gpu_.kernel = kernel;
    const TrialResult r = Evaluate();
    EXPECT_EQ(r.status, TrialStatus::kIncorrect) << why;
    EXPECT_THAT(r.error, HasSubstr(why));
  }
}

// With lengths on the device the reference is per sequence, and the cache
// slots past a sequence's length hold NaN: a kernel that reads them, or
// drops a key, is incorrect.
TEST_F(CudaEvaluatorGatesTest, LengthsOnTheDeviceAreCheckedPerSequence) {
  problem_.batch = 6;
  problem_.seq_q = 8;
  problem_.seq_k = 16;  // Few keys: one dropped shows.
  for (Layout layout : {Layout::kVarlen, Layout::kKvCache, Layout::kPaged}) {
    problem_.layout = layout;
    problem_.page_size = layout == Layout::kPaged ? 16 : 0;
    for (bool causal : {false, true}) {
      problem_.causal = causal;
      gpu_.kernel = FakeKernel::kCorrect;
      TrialResult r = Evaluate();
      EXPECT_EQ(r.status, TrialStatus::kOk) << ProblemKey(problem_) << r.error;
      gpu_.kernel = FakeKernel::kDropsLastKey;
      r = Evaluate();
      EXPECT_EQ(r.status, TrialStatus::kIncorrect) << ProblemKey(problem_);
      EXPECT_THAT(r.error, HasSubstr("max abs error"));
    }
  }
  for (Layout layout : {Layout::kKvCache, Layout::kPaged}) {
    problem_.layout = layout;
    problem_.page_size = layout == Layout::kPaged ? 16 : 0;
    gpu_.kernel = FakeKernel::kIgnoresSequsedK;
    const TrialResult r = Evaluate();
    EXPECT_EQ(r.status, TrialStatus::kIncorrect) << ProblemKey(problem_);
    EXPECT_THAT(r.error, HasSubstr("NaN"));
  }
}

TEST_F(CudaEvaluatorGatesTest, ALaunchTheDriverRefusesIsResourceRejected) {
  gpu_.kernel = FakeKernel::kRefusedLaunch;
  const TrialResult r = Evaluate();
  EXPECT_EQ(r.status, TrialStatus::kResourceRejected);
  EXPECT_THAT(r.error, HasSubstr("launch"));
  // The context is fine: the next kernel runs.
  gpu_.kernel = FakeKernel::kCorrect;
  EXPECT_EQ(Evaluate().status, TrialStatus::kOk);
}

TEST_F(CudaEvaluatorGatesTest, SpillsAndTooManyRegistersAreRejected) {
  gpu_.local_bytes = 64;
  TrialResult r = Evaluate();
  EXPECT_EQ(r.status, TrialStatus::kResourceRejected);
  EXPECT_THAT(r.error, HasSubstr("spills: 64 B"));
  gpu_.local_bytes = 0;
  gpu_.registers = 65536;  // A block of them would take the whole file.
  r = Evaluate();
  EXPECT_EQ(r.status, TrialStatus::kResourceRejected);
  EXPECT_THAT(r.error, HasSubstr("registers"));
  EXPECT_EQ(gpu_.attention_launches, 0);
}

TEST_F(CudaEvaluatorGatesTest, AFaultCrashesTheTrialAndBreaksTheEvaluator) {
  gpu_.kernel = FakeKernel::kFaults;
  const TrialResult r = Evaluate();
  EXPECT_EQ(r.status, TrialStatus::kCrashed);
  EXPECT_THAT(r.error, HasSubstr("illegal memory access"));
  gpu_.kernel = FakeKernel::kCorrect;
  absl::StatusOr<TrialResult> next =
      evaluator_->Evaluate(naive_, naive_.defaults.front(), problem_);
  EXPECT_FALSE(next.ok());
  EXPECT_THAT(std::string(next.status().message()),
              HasSubstr("restart the evaluator"));
}

TEST_F(CudaEvaluatorGatesTest, ConfigsTimedInTurnsAreScrubbedBetween) {
  std::vector<TemplateConfig> configs = {{&naive_, naive_.defaults.front()},
                                         {&naive_, naive_.defaults.front()}};
  absl::StatusOr<std::vector<TrialResult>> r =
      evaluator_->TimeInTurns(configs, problem_, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  for (const TrialResult& one : *r) {
    EXPECT_EQ(one.status, TrialStatus::kOk) << one.error;
    EXPECT_EQ(one.samples, 4);
  }
  EXPECT_GE(gpu_.scrubs, 2 * 4);  // A scrub before every sample.
}

}  // namespace
}  // namespace evotune
