// The launcher on a stand-in driver: the arguments, grid, block and shared
// memory it hands cuLaunchKernel, and the tensor maps it encodes for a TMA
// geometry only.
#include "launch/launcher.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::ElementsAre;

struct Launched {
  CUfunction f = nullptr;
  std::vector<unsigned> grid, block;
  unsigned smem = 0;
  CUstream stream = nullptr;
  AttentionParams params{};
  const AttentionTensorMaps* maps = nullptr;
};
Launched launched;
int encodes = 0;

CUresult FakeLaunch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                    unsigned bx, unsigned by, unsigned bz, unsigned smem,
                    CUstream stream, void** params, void** extra) {
  launched = {f,
              {gx, gy, gz},
              {bx, by, bz},
              smem,
              stream,
              *static_cast<AttentionParams*>(params[0]),
              static_cast<const AttentionTensorMaps*>(params[1])};
  return extra == nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult FakeEncode(CUtensorMap* map, CUtensorMapDataType, cuuint32_t, void*,
                    const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                    const cuuint32_t*, CUtensorMapInterleave,
                    CUtensorMapSwizzle, CUtensorMapL2promotion,
                    CUtensorMapFloatOOBfill) {
  reinterpret_cast<unsigned char*>(map)[0] =
      static_cast<unsigned char>(++encodes);
  return CUDA_SUCCESS;
}

LaunchGeometry Geometry() {
  LaunchGeometry g;
  g.grid[0] = 500;
  g.grid[1] = 8;
  g.grid[2] = 2;
  g.block_threads = 384;
  g.smem_bytes = 150000;
  return g;
}

TEST(LauncherTest, HandsTheDriverTheGeometryAndBothParameters) {
  CudaDriver d;
  d.cuLaunchKernel = FakeLaunch;
  const Problem p = *ParseProblemKey("b2_h8_kv8_q512_k512_d64_full_fp16_bhsd");
  AttentionParams params = ContiguousParams(p);
  params.scale_log2 = 0.5f;
  absl::StatusOr<LaunchArgs> args =
      MakeLaunchArgs(FakeEncode, Geometry(), params, p);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(encodes, 0);  // No TMA: no maps.
  auto* f = reinterpret_cast<CUfunction>(0x1234);
  auto* stream = reinterpret_cast<CUstream>(0x99);
  ASSERT_EQ(LaunchAttention(d, {f, Geometry(), 132}, *args, stream),
            CUDA_SUCCESS);
  EXPECT_EQ(launched.f, f);
  EXPECT_THAT(launched.grid, ElementsAre(500, 8, 2));
  EXPECT_THAT(launched.block, ElementsAre(384, 1, 1));
  EXPECT_EQ(launched.smem, 150000u);
  EXPECT_EQ(launched.stream, stream);
  EXPECT_EQ(launched.params.scale_log2, 0.5f);
  EXPECT_EQ(launched.params.seq_q, 512);
  EXPECT_EQ(launched.maps, &args->maps);
}

TEST(LauncherTest, APersistentKernelGetsOneBlockPerMultiprocessor) {
  CudaDriver d;
  d.cuLaunchKernel = FakeLaunch;
  LaunchGeometry g = Geometry();
  g.persistent = true;
  LaunchArgs args;
  ASSERT_EQ(LaunchAttention(d, {nullptr, g, 132}, args, nullptr), CUDA_SUCCESS);
  EXPECT_THAT(launched.grid, ElementsAre(132, 1, 1));
}

TEST(LauncherTest, ATmaGeometryGetsItsFourMaps) {
  const Problem p = *ParseProblemKey("b1_h8_kv8_q512_k512_d64_full_bf16_bhsd");
  LaunchGeometry g = Geometry();
  g.tma = {128, 128, 64};
  encodes = 0;
  absl::StatusOr<LaunchArgs> args =
      MakeLaunchArgs(FakeEncode, g, ContiguousParams(p), p);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(encodes, 4);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(&args->maps.o)[0], 4);
}

}  // namespace
}  // namespace evotune
