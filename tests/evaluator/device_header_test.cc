#include "tuner/evaluator/device_header.h"

#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

TEST(DeviceHeaderTest, ReadsBackWhatItWrites) {
  DeviceInfo h100;
  h100.cc_major = 9;
  h100.limits.multiprocessors = 132;
  h100.limits.smem_per_block_bytes = 232448;
  const std::string header = DeviceHeader(h100);
  EXPECT_EQ(header,
            "compute capability: 9.0\nmultiprocessors: 132\n"
            "shared memory per block: 232448\n");
  DeviceInfo read;
  for (absl::string_view line :
       absl::StrSplit(header, '\n', absl::SkipEmpty())) {
    absl::StatusOr<bool> known = ReadDeviceHeaderLine(line, &read);
    ASSERT_TRUE(known.ok()) << known.status();
    EXPECT_TRUE(*known) << line;
  }
  EXPECT_EQ(read.cc_major, 9);
  EXPECT_EQ(read.cc_minor, 0);
  EXPECT_EQ(read.limits.compute_capability, 90);
  EXPECT_EQ(read.limits.multiprocessors, 132);
  EXPECT_EQ(read.limits.smem_per_block_bytes, 232448);
}

TEST(DeviceHeaderTest, OtherLinesAreLeftAlone) {
  DeviceInfo d;
  absl::StatusOr<bool> known = ReadDeviceHeaderLine(" gpu: NVIDIA L4", &d);
  ASSERT_TRUE(known.ok());
  EXPECT_FALSE(*known);
  EXPECT_EQ(d.limits.multiprocessors, 0);
}

TEST(DeviceHeaderTest, MalformedValuesNameTheField) {
  for (const auto& [line, field] :
       {std::pair{"multiprocessors: many", "multiprocessors"},
        std::pair{"multiprocessors: 0", "multiprocessors"},
        std::pair{"multiprocessors: 100000", "multiprocessors"},
        std::pair{"shared memory per block: -1", "shared memory per block"},
        std::pair{"compute capability: 9", "compute capability"},
        std::pair{"compute capability: 9.x", "compute capability"}}) {
    DeviceInfo d;
    absl::StatusOr<bool> known = ReadDeviceHeaderLine(line, &d);
    EXPECT_TRUE(absl::IsInvalidArgument(known.status())) << line;
    EXPECT_THAT(std::string(known.status().message()), HasSubstr(field))
        << line;
  }
}

}  // namespace
}  // namespace evotune
