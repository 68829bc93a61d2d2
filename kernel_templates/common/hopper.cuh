// Hopper (sm_90a) building blocks of the warpgroup templates
// (flash_fwd_sm90, flash_fwd_tma): wgmma with fp32 accumulators and its
// shared-memory descriptors, mbarriers, bulk tensor copies (TMA), named
// barriers, register reallocation and the split-KV combine of a cluster.
//
// Shared tiles use the 128-byte swizzle that both the tensor cores and the
// copy engine speak: a [rows][HEAD_DIM] tile is HEAD_DIM / 64 blocks of
// [rows][64], rows of 128 bytes whose 16-byte chunk index is XORed with row
// mod 8, every block 1024-byte aligned. A TMA box of 64 columns x rows with
// CU_TENSOR_MAP_SWIZZLE_128B writes exactly one such block.
#ifndef EVOTUNE_KERNEL_TEMPLATES_COMMON_HOPPER_CUH_
#define EVOTUNE_KERNEL_TEMPLATES_COMMON_HOPPER_CUH_

#include "flash_common.cuh"

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the Hopper templates need sm_90a"
#endif

namespace hopper {

constexpr int kRowBytes = 128;  // One row of a 64-column block.

// A wgmma shared-memory matrix descriptor of the 128-byte swizzle layout:
// start address, leading and stride byte offsets (the stride between
// 8-row groups, 1024 B; the leading offset is unused by K-major operands
// and by N-major ones at most 64 wide, and for wider N-major ones the
// distance between their 64-column blocks), all in 16-byte units.
__device__ __forceinline__ unsigned long long Descriptor(
    unsigned address, unsigned long long lead_bytes = 8 * kRowBytes) {
  constexpr unsigned long long kGroup = (8 * kRowBytes) >> 4;
  return ((address & 0x3FFFF) >> 4) | ((lead_bytes >> 4) << 16) |
         (kGroup << 32) | (1ull << 62);
}

// Keeps the compiler from moving reads or writes of wgmma operands across
// the asynchronous region: every earlier write of r happens before this
// point and every later use depends on it (after a wait; before a
// wgmma.fence, so that nothing writes an operand between the fence and the
// wgmma).
template <int kTiles>
__device__ __forceinline__ void FenceOperands(float (&r)[kTiles][4]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(r[i][j])::"memory");
  }
}

template <int kTiles>
__device__ __forceinline__ void FenceOperands(unsigned (&r)[kTiles][4]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
  }
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending)
               : "memory");
}

#if EVT_BF16
#define EVT_WGMMA_TYPES "bf16.bf16"
#else
#define EVT_WGMMA_TYPES "f16.f16"
#endif

// The fp32 accumulators of one m64nN wgmma per thread as asm operands
// %0..%(N/2 - 1): N / 8 n8 tiles of 4.
#define EVT_ACC_REGS_64                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "  \
  "%30, %31}"
#define EVT_ACC_REGS_128                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "  \
  "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "  \
  "%58, %59, %60, %61, %62, %63}"
#define EVT_ACC_REGS_136                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "  \
  "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "  \
  "%58, %59, %60, %61, %62, %63, %64, %65, %66, %67}"
#define EVT_ACC_REGS_192                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "  \
  "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "  \
  "%58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "  \
  "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, "  \
  "%86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define EVT_ACC_TILE(d, i) \
  "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define EVT_ACC_8(d, i)                                                       \
  EVT_ACC_TILE(d, i), EVT_ACC_TILE(d, i + 1), EVT_ACC_TILE(d, i + 2),         \
      EVT_ACC_TILE(d, i + 3), EVT_ACC_TILE(d, i + 4), EVT_ACC_TILE(d, i + 5), \
      EVT_ACC_TILE(d, i + 6), EVT_ACC_TILE(d, i + 7)

// d (64 x N) = a (64 x 16, shared memory, K-major) * b (16 x N, shared
// memory, K-major: [n][k], like K) + (accumulate ? d : 0); A_OP, B_OP and
// P_OP number the asm operands after the accumulators.
#define EVT_WGMMA_SS(N, REGS, A_OP, B_OP, P_OP, ...)                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P_OP                \
               ", 0;\n"                                                \
               "wgmma.mma_async.sync.aligned.m64n" #N                  \
               "k16.f32." EVT_WGMMA_TYPES " " REGS ", " A_OP ", " B_OP \
               ", p, 1, 1, 0, 0;\n}\n"                                 \
               : __VA_ARGS__                                           \
               : "l"(a), "l"(b), "r"(accumulate ? 1 : 0))

__device__ __forceinline__ void WgmmaSS(float (&d)[8][4], unsigned long long a,
                                        unsigned long long b, bool accumulate) {
  EVT_WGMMA_SS(64, EVT_ACC_REGS_64, "%32", "%33", "%34", EVT_ACC_8(d, 0));
}

__device__ __forceinline__ void WgmmaSS(float (&d)[16][4], unsigned long long a,
                                        unsigned long long b, bool accumulate) {
  EVT_WGMMA_SS(128, EVT_ACC_REGS_128, "%64", "%65", "%66", EVT_ACC_8(d, 0),
               EVT_ACC_8(d, 8));
}

__device__ __forceinline__ void WgmmaSS(float (&d)[24][4], unsigned long long a,
                                        unsigned long long b, bool accumulate) {
  EVT_WGMMA_SS(192, EVT_ACC_REGS_192, "%96", "%97", "%98", EVT_ACC_8(d, 0),
               EVT_ACC_8(d, 8), EVT_ACC_8(d, 16));
}

// d (64 x N) = a (64 x 16, registers: the mma m16n8k16 A fragment of each
// warp's 16 rows) * b (16 x N, shared memory, K-major, like K) +
// (accumulate ? d : 0).
#define EVT_WGMMA_RS(N, REGS, A_OP, B_OP, P_OP, ...)                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P_OP                \
               ", 0;\n"                                                \
               "wgmma.mma_async.sync.aligned.m64n" #N                  \
               "k16.f32." EVT_WGMMA_TYPES " " REGS ", " A_OP ", " B_OP \
               ", p, 1, 1, 0;\n}\n"                                    \
               : __VA_ARGS__                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),   \
                 "r"(accumulate ? 1 : 0))

__device__ __forceinline__ void WgmmaRSK(float (&d)[8][4], const unsigned* a,
                                         unsigned long long b,
                                         bool accumulate) {
  EVT_WGMMA_RS(64, EVT_ACC_REGS_64, "{%32, %33, %34, %35}", "%36", "%37",
               EVT_ACC_8(d, 0));
}

__device__ __forceinline__ void WgmmaRSK(float (&d)[16][4], const unsigned* a,
                                         unsigned long long b,
                                         bool accumulate) {
  EVT_WGMMA_RS(128, EVT_ACC_REGS_128, "{%64, %65, %66, %67}", "%68", "%69",
               EVT_ACC_8(d, 0), EVT_ACC_8(d, 8));
}

__device__ __forceinline__ void WgmmaRSK(float (&d)[24][4], const unsigned* a,
                                         unsigned long long b,
                                         bool accumulate) {
  EVT_WGMMA_RS(192, EVT_ACC_REGS_192, "{%96, %97, %98, %99}", "%100", "%101",
               EVT_ACC_8(d, 0), EVT_ACC_8(d, 8), EVT_ACC_8(d, 16));
}

// e4m3 operands (FP8 attention): one k-step is 32 elements (the same 32
// bytes of the operands' rows as a 16-bit step), both operands K-major
// (e4m3 wgmma has no transpose), fp32 accumulators. Templates so that a
// discarded call with other tiles is never instantiated.
// d (64 x 128) = a (64 x 32, shared memory) * b (32 x 128, shared memory,
// [n][k]) + (accumulate ? d : 0).
template <int kTiles>
__device__ __forceinline__ void WgmmaSSFp8(float (&d)[kTiles][4],
                                           unsigned long long a,
                                           unsigned long long b,
                                           bool accumulate) {
  static_assert(kTiles == 16, "m64n128");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " EVT_ACC_REGS_128
      ", %64, %65, p, 1, 1;\n}\n"
      : EVT_ACC_8(d, 0), EVT_ACC_8(d, 8)
      : "l"(a), "l"(b), "r"(accumulate ? 1 : 0));
}

// d (64 x 128) = a (64 x 32, registers: four bytes of a row per register,
// k-positions 4 (lane % 4) .. + 3 of rows lane / 4 (a[0]) and + 8 (a[1]),
// then 16 k-positions on (a[2], a[3])) * b (32 x 128, shared memory,
// [n][k]) + (accumulate ? d : 0).
template <int kTiles>
__device__ __forceinline__ void WgmmaRSFp8(float (&d)[kTiles][4],
                                           const unsigned* a,
                                           unsigned long long b,
                                           bool accumulate) {
  static_assert(kTiles == 16, "m64n128");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " EVT_ACC_REGS_128
      ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : EVT_ACC_8(d, 0), EVT_ACC_8(d, 8)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
        "r"(accumulate ? 1 : 0));
}

// WgmmaRSFp8 with 136 columns: b's rows 128..135 after its 128 (FP8
// attention's P V beside P's row sums, IssueTilePv).
__device__ __forceinline__ void WgmmaRSFp8(float (&d)[17][4], const unsigned* a,
                                           unsigned long long b,
                                           bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %73, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 " EVT_ACC_REGS_136
      ", {%68, %69, %70, %71}, %72, p, 1, 1;\n}\n"
      : EVT_ACC_8(d, 0), EVT_ACC_8(d, 8), EVT_ACC_TILE(d, 16)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
        "r"(accumulate ? 1 : 0));
}

// d (64 x 64) += a (64 x 16, registers: the mma m16n8k16 A fragment of each
// warp's 16 rows) * b (16 x 64, shared memory, N-major: [k][n], like V).
__device__ __forceinline__ void WgmmaRS(float (&d)[8][4], const unsigned* a,
                                        unsigned long long b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." EVT_WGMMA_TYPES
               " " EVT_ACC_REGS_64 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
               : EVT_ACC_8(d, 0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// d (64 x 128) += a (64 x 16, registers, as above) * b (16 x 128, shared
// memory, N-major in two 64-column blocks, the descriptor's leading offset
// apart).
__device__ __forceinline__ void WgmmaRS(float (&d)[16][4], const unsigned* a,
                                        unsigned long long b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." EVT_WGMMA_TYPES
               " " EVT_ACC_REGS_128 ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
               : EVT_ACC_8(d, 0), EVT_ACC_8(d, 8)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// The eight n8 tiles from tile 8 * i of a row of accumulator tiles.
template <int kTiles>
__device__ __forceinline__ float (&N64(float (&acc)[kTiles][4], int i))[8][4] {
  return *reinterpret_cast<float(*)[8][4]>(&acc[8 * i]);
}

// ---- mbarriers (shared memory, 8 bytes each).

__device__ __forceinline__ void BarrierInit(unsigned bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
               "r"(count)
               : "memory");
}

// Makes the initialised barriers visible to the copy engine and to the
// other threads (after a block-wide barrier).
__device__ __forceinline__ void BarrierInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void BarrierArrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar)
               : "memory");
}

// Arrives and announces `bytes` that copies will complete on the barrier.
__device__ __forceinline__ void BarrierExpectBytes(unsigned bar,
                                                   unsigned bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void BarrierWait(unsigned bar, int parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- Bulk tensor copies through a CUtensorMap (kernel parameter).

__device__ __forceinline__ void PrefetchTensorMap(const TensorMap& map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(&map) : "memory");
}

// The box at (c0, c1, c2, c3) (innermost first) into shared memory at `dst`,
// completing on barrier `bar`.
__device__ __forceinline__ void TmaLoad(unsigned dst, const TensorMap& map,
                                        unsigned bar, int c0, int c1, int c2,
                                        int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(&map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// Shared memory at `src` to the box at (c0, c1, c2, c3); parts of the box
// outside the tensor are not written.
__device__ __forceinline__ void TmaStore(const TensorMap& map, unsigned src,
                                         int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group "
      "[%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(&map),
      "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
      : "memory");
}

__device__ __forceinline__ void TmaStoreCommit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until this thread's committed stores have read their shared memory
// (kRead) or are complete.
template <bool kRead>
__device__ __forceinline__ void TmaStoreWait() {
  if (kRead) {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  } else {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
}

// Orders this thread's ordinary shared-memory writes before later reads by
// the tensor cores or the copy engine.
__device__ __forceinline__ void FenceSharedForAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- Named barriers and register reallocation.

__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int kRegs>
__device__ __forceinline__ void LowerRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void RaiseRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- Split-KV through a thread block cluster.

// The kernel attribute of a template with a KV_SPLITS tunable: its split
// blocks form clusters of (KV_SPLITS, 1, 1) along grid x.
#if defined(KV_SPLITS) && KV_SPLITS > 1
#define EVT_CLUSTER_DIMS __cluster_dims__(KV_SPLITS, 1, 1)
#else
#define EVT_CLUSTER_DIMS
#endif

// Address `address` of this block's shared memory at the same place in the
// shared memory of block `rank` of the cluster.
__device__ __forceinline__ unsigned ClusterAddress(unsigned address, int rank) {
  unsigned mapped;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(mapped)
               : "r"(address), "r"(rank));
  return mapped;
}

__device__ __forceinline__ float4 LoadCluster4(unsigned address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address)
               : "memory");
  return v;
}

__device__ __forceinline__ float2 LoadCluster2(unsigned address) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n"
               : "=f"(v.x), "=f"(v.y)
               : "r"(address)
               : "memory");
  return v;
}

// Every thread of every block of the cluster: writes before it are seen by
// reads after it, shared memory of peers included.
__device__ __forceinline__ void ClusterSync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// Split-KV epilogue: the kSplits blocks of a cluster hold the unnormalised
// output rows of the same query block over different keys. Each leaves its
// rows (fp32, [kM][kPartRowStride<kD>]) and their (max, sum) in its
// shared memory `part` (the caller makes sure nothing reads the tiles there
// any more); then block `split` combines rows [split, split + 1) * kM /
// kSplits from all of them and stores those. Every thread of the cluster
// calls it (or, having no rows, ClusterSync twice); `threads` of them,
// numbered by `thread`, hold rows and share the combining: a warp's rows
// start at row0. `sink_shift`: what the sums' reference lies below the
// rows' max (flash_common's WithSink). `kDMem`: O's columns in memory, the
// first kDMem of the kD computed.
template <int kM, int kD, int kSplits, int kDMem = kD>
__device__ __forceinline__ void CombineInCluster(
    const AttentionParams& p, const flash::BlockPlan& w, float* part, int row0,
    const float (&o_acc)[1][kD / 8][4], const float (&row_max)[1][2],
    const float (&row_sum)[1][2], int lane, int thread, int threads,
    float sink_shift = 0.f) {
  constexpr int kStride = flash::kPartRowStride<kD>;
  float* part_ml = part + kM * kStride;
  flash::StorePartialRows(part, kStride, part_ml, row0, o_acc, row_max, row_sum,
                          lane);
  ClusterSync();
  unsigned peer_part[kSplits], peer_ml[kSplits];
#pragma unroll
  for (int s = 0; s < kSplits; ++s) {
    peer_part[s] = ClusterAddress(flash::SmemAddress(part), s);
    peer_ml[s] = ClusterAddress(flash::SmemAddress(part_ml), s);
  }
  evt_elem* o = w.o;
  const float sink = flash::SinkLog2(p, w.h) + sink_shift;
  constexpr int kRows = kM / kSplits;
  constexpr int kVecs = kDMem / 8;  // Eight columns per thread and step.
  for (int idx = thread; idx < kRows * kVecs; idx += threads) {
    const int row = w.split * kRows + idx / kVecs;
    const int col = (idx % kVecs) * 8;
    if (w.q0 + row >= w.seq_q) continue;
    float m[kSplits], l[kSplits];
    float4 lo[kSplits], hi[kSplits];
#pragma unroll
    for (int s = 0; s < kSplits; ++s) {
      const float2 ml = LoadCluster2(peer_ml[s] + row * 8);
      m[s] = ml.x;
      l[s] = ml.y;
      const unsigned at = peer_part[s] + (row * kStride + col) * 4;
      lo[s] = LoadCluster4(at);
      hi[s] = LoadCluster4(at + 16);
    }
    *reinterpret_cast<uint4*>(o + (w.q0 + row) * p.o_row_stride + col) =
        flash::CombineSplits(m, l, lo, hi, sink);
  }
  ClusterSync();  // No block leaves while a peer reads its rows.
}

}  // namespace hopper

#endif  // EVOTUNE_KERNEL_TEMPLATES_COMMON_HOPPER_CUH_
