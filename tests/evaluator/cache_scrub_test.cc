#include "tuner/evaluator/cache_scrub.h"

#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tuner/evaluator/nvrtc_compiler.h"

namespace evotune {
namespace {

TEST(CacheScrubTest, KernelCompilesForEveryTarget) {
  for (const char* arch : {"sm_80", "sm_89", "sm_90"}) {
    absl::StatusOr<std::string> cubin =
        CompileSource(kCacheScrubSource, "cache_scrub.cu", arch);
    ASSERT_TRUE(cubin.ok()) << arch << ": " << cubin.status();
    EXPECT_FALSE(cubin->empty());
  }
}

TEST(CacheScrubTest, ReadsTwiceTheCacheInWholeVectors) {
  EXPECT_EQ(CacheScrubBytes(50 * 1024 * 1024), 100u * 1024 * 1024);
  EXPECT_EQ(CacheScrubBytes(0), 2u << 20);  // Unknown: at least 2 MiB.
  EXPECT_EQ(CacheScrubBytes((40 << 20) + 1) % 16, 0u);
  EXPECT_GE(CacheScrubBytes((40 << 20) + 1), 2u * ((40 << 20) + 1));
}

}  // namespace
}  // namespace evotune
