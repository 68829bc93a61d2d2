// CubinCache over a fake file system: what it keeps, what it reads back
// instead of compiling, and that a cache it cannot write or read only costs
// compiles. Compiles are NVRTC's (no GPU needed).
#include "tuner/evaluator/cubin_cache.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernel_templates/template_registry.h"
#include "tests/common/fake_file_system.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

class CubinCacheTest : public ::testing::Test {
 protected:
  const KernelTemplate& naive_ = *TemplateRegistry::Builtin().Find("naive");
  const Config config_ = naive_.defaults.front();
  Problem problem_ = [] {
    Problem p;
    p.heads = p.kv_heads = 8;
    p.seq_q = p.seq_k = 512;
    return p;
  }();
  FakeFileSystem fs_;
};

TEST_F(CubinCacheTest, KeepsACompiledCubinAndReadsItBackInsteadOfCompiling) {
  const std::string path =
      "/cache/" + CubinCache("", "sm_90a", 0).Key(naive_, config_, problem_) +
      ".cubin";
  std::string compiled;
  {
    CubinCache cache("/cache", "sm_90a", 0, &fs_);
    EXPECT_TRUE(fs_.HasDirectory("/cache"));
    absl::StatusOr<CompileResult> r = cache.Get(naive_, config_, problem_);
    ASSERT_TRUE(r.ok() && r->ok) << r.status();
    EXPECT_THAT(r->log, ::testing::Not(HasSubstr("from the cubin cache")));
    ASSERT_EQ(fs_.files().count(path), 1u);
    EXPECT_EQ(fs_.files().at(path), r->cubin);
    compiled = r->cubin;
  }
  CubinCache again("/cache", "sm_90a", 0, &fs_);
  absl::StatusOr<CompileResult> r = again.Get(naive_, config_, problem_);
  ASSERT_TRUE(r.ok() && r->ok);
  EXPECT_EQ(r->log, "(from the cubin cache)");
  EXPECT_EQ(r->cubin, compiled);
  EXPECT_EQ(fs_.writes(), 1);
}

TEST_F(CubinCacheTest, ACacheItCannotWriteOrReadOnlyCostsCompiles) {
  fs_.FailWrites(true);
  CubinCache cache("/cache", "sm_90a", 0, &fs_);
  absl::StatusOr<CompileResult> r = cache.Get(naive_, config_, problem_);
  ASSERT_TRUE(r.ok() && r->ok);
  EXPECT_TRUE(fs_.files().empty());
  fs_.FailWrites(false);
  fs_.FailReads(true);
  r = CubinCache("/cache", "sm_90a", 0, &fs_).Get(naive_, config_, problem_);
  ASSERT_TRUE(r.ok() && r->ok);
  EXPECT_FALSE(r->cubin.empty());
}

TEST_F(CubinCacheTest, AnEmptyFileIsCompiledAgain) {
  CubinCache cache("/cache", "sm_90a", 0, &fs_);
  fs_.Put("/cache/" + cache.Key(naive_, config_, problem_) + ".cubin", "");
  absl::StatusOr<CompileResult> r = cache.Get(naive_, config_, problem_);
  ASSERT_TRUE(r.ok() && r->ok);
  EXPECT_NE(r->log, "(from the cubin cache)");
  EXPECT_FALSE(r->cubin.empty());
}

TEST_F(CubinCacheTest, WithoutADirectoryNothingTouchesTheFileSystem) {
  CubinCache cache("", "sm_90a", 1, &fs_);
  cache.Prefetch(naive_, config_, problem_);
  absl::StatusOr<CompileResult> r = cache.Get(naive_, config_, problem_);
  ASSERT_TRUE(r.ok() && r->ok);
  EXPECT_EQ(fs_.reads() + fs_.writes(), 0);
}

}  // namespace
}  // namespace evotune
