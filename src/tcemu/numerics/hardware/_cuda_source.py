"""CUDA source of the hardware runners: one kernel per MMA case, issued through inline PTX.

Every kernel computes independent tiles: tile ``t`` reads ``A[t]`` (row-major M x K), ``B[t]`` stored
**N x K** (k contiguous, the "col" operand), ``C[t]`` (row-major M x N) and writes ``D[t]``. Operands travel as
raw bits (uint8 / uint16 / uint32), so NaN payloads, signed zeros and subnormals reach the Tensor Core untouched.
With ``nchain > 1`` a tile holds ``nchain`` K-slices that are issued back to back into the same accumulator
registers (``mma.sync``: in a register loop; ``wgmma``: all slices in one commit group), so the accumulator
passes between instructions exactly as in a GEMM main loop.

Fragment layouts (lane = 4 * groupID + threadID_in_group; g = groupID, t = threadID_in_group), from the PTX ISA
"Matrix fragments for mma.m16nNkK" sections, restated per case in the ``*_map`` functions below. The smoke test
(``runner.check_layouts``) checks every case on small-integer inputs, where every rounding model is exact.

``wgmma`` reads A and B from shared memory through matrix descriptors, K-major, without swizzle: a core matrix
is 8 rows x 16 bytes stored contiguously (128 B); LBO is the byte distance between core matrices adjacent in K,
SBO between core matrices adjacent in M (or N). The accumulator fragment of warp w of the warpgroup is the
``mma.m16n8`` C fragment shifted down by 16 w rows.

``wmma`` (CUDA's ``nvcuda::wmma`` API, not an instruction): one warp per 16 x 16 tile, fragments loaded and stored
by ``load_matrix_sync``/``store_matrix_sync`` (the API owns the layouts), ``nchain`` slices ``mma_sync``-ed into one
accumulator fragment. tf32 operands are the raw fp32 bits (no ``__float_to_tf32``), as for ``mma.sync``: the
hardware's own reading of them. :data:`WMMA_SOURCE` is that part alone, for offline SASS checks.
"""

WMMA_SOURCE = r"""
#include <cstdint>
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// One warp per tile of M x N (= 16 x 16 here): A row-major M x K, B stored N x K (col-major K x N), C/D row-major.
template <class FRAG_T, class LOAD_T, class ACC_T, int M, int N, int K>
__global__ void __launch_bounds__(128) wmma_kernel(const uint8_t* __restrict__ A, const uint8_t* __restrict__ B,
    const uint8_t* __restrict__ C, uint8_t* __restrict__ D, long ntiles, int nchain) {
  using namespace nvcuda;
  const long tile = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5;
  if (tile >= ntiles) return;  // uniform per warp
  wmma::fragment<wmma::accumulator, M, N, K, ACC_T> fc;
  wmma::load_matrix_sync(fc, reinterpret_cast<const ACC_T*>(C) + tile * M * N, N, wmma::mem_row_major);
  for (int s = 0; s < nchain; ++s) {
    wmma::fragment<wmma::matrix_a, M, N, K, FRAG_T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, M, N, K, FRAG_T, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, reinterpret_cast<const LOAD_T*>(A) + (tile * nchain + s) * M * K, K);
    wmma::load_matrix_sync(fb, reinterpret_cast<const LOAD_T*>(B) + (tile * nchain + s) * N * K, K);
    wmma::mma_sync(fc, fa, fb, fc);
  }
  wmma::store_matrix_sync(reinterpret_cast<ACC_T*>(D) + tile * M * N, fc, N, wmma::mem_row_major);
}
#define WMMA_F16_F32 wmma_kernel<half, half, float, 16, 16, 16>
#define WMMA_F16_F16 wmma_kernel<half, half, half, 16, 16, 16>
#define WMMA_BF16_F32 wmma_kernel<__nv_bfloat16, __nv_bfloat16, float, 16, 16, 16>
#define WMMA_TF32_F32 wmma_kernel<nvcuda::wmma::precision::tf32, float, float, 16, 16, 8>
"""

#: explicit instantiations, for compiling :data:`WMMA_SOURCE` alone (the runner's library instantiates them by use)
WMMA_INSTANTIATIONS = r"""
template __global__ void WMMA_F16_F32(const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, long, int);
template __global__ void WMMA_F16_F16(const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, long, int);
template __global__ void WMMA_BF16_F32(const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, long, int);
template __global__ void WMMA_TF32_F32(const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, long, int);
"""

CUDA_SOURCE = WMMA_SOURCE + r"""
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#define DEV __device__ __forceinline__

// ---------------------------------------------------------------------------------------------------------------
// Case descriptions for mma.sync. EA: bytes per A/B element; NA/NB: elements per thread; F16OUT: C/D are f16.
// a_map(i, g, t, row, col), b_map(i, g, t, k, n). C/D element i: row = g + 8 (i >> 1), col = 2 t + (i & 1).
// ---------------------------------------------------------------------------------------------------------------
struct Map16K16 {
  static constexpr int EA = 2, NA = 8, NB = 4, K = 16;
  DEV static void a_map(int i, int g, int t, int& r, int& c) { r = g + 8 * ((i >> 1) & 1); c = 2 * t + (i & 1) + 8 * (i >> 2); }
  DEV static void b_map(int i, int g, int t, int& k, int& n) { k = 2 * t + (i & 1) + 8 * (i >> 1); n = g; }
};
struct Map16K8 {
  static constexpr int EA = 2, NA = 4, NB = 2, K = 8;
  DEV static void a_map(int i, int g, int t, int& r, int& c) { r = g + 8 * (i >> 1); c = 2 * t + (i & 1); }
  DEV static void b_map(int i, int g, int t, int& k, int& n) { k = 2 * t + i; n = g; }
};
struct MapTf32K8 {
  static constexpr int EA = 4, NA = 4, NB = 2, K = 8;
  DEV static void a_map(int i, int g, int t, int& r, int& c) { r = g + 8 * (i & 1); c = t + 4 * (i >> 1); }
  DEV static void b_map(int i, int g, int t, int& k, int& n) { k = t + 4 * i; n = g; }
};
struct MapTf32K4 {
  static constexpr int EA = 4, NA = 2, NB = 1, K = 4;
  DEV static void a_map(int i, int g, int t, int& r, int& c) { r = g + 8 * i; c = t; }
  DEV static void b_map(int i, int g, int t, int& k, int& n) { k = t; n = g; }
};
struct Map8K32 {
  static constexpr int EA = 1, NA = 16, NB = 8, K = 32;
  DEV static void a_map(int i, int g, int t, int& r, int& c) { r = g + 8 * ((i >> 2) & 1); c = 4 * t + (i & 3) + 16 * (i >> 3); }
  DEV static void b_map(int i, int g, int t, int& k, int& n) { k = 4 * t + (i & 3) + 16 * (i >> 2); n = g; }
};

#define F4IN  float f0 = __uint_as_float(d[0]), f1 = __uint_as_float(d[1]), f2 = __uint_as_float(d[2]), f3 = __uint_as_float(d[3]);
#define F4OUT d[0] = __float_as_uint(f0); d[1] = __float_as_uint(f1); d[2] = __float_as_uint(f2); d[3] = __float_as_uint(f3);
#define F4C "+f"(f0), "+f"(f1), "+f"(f2), "+f"(f3)

// K16, 16-bit inputs: 4 A regs, 2 B regs.
#define MMA_K16_F32(NAME, PTX) struct NAME : Map16K16 { static constexpr bool F16OUT = false; \
  DEV static void mma(uint32_t* d, const uint32_t* a, const uint32_t* b) { F4IN \
    asm volatile(PTX " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" : F4C \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); F4OUT } };
MMA_K16_F32(MmaF16K16F32, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
MMA_K16_F32(MmaBf16K16F32, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
struct MmaF16K16F16 : Map16K16 { static constexpr bool F16OUT = true;
  DEV static void mma(uint32_t* d, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"
                 : "+r"(d[0]), "+r"(d[1]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); } };

// K8, 16-bit inputs: 2 A regs, 1 B reg.
#define MMA_K8_F32(NAME, PTX) struct NAME : Map16K8 { static constexpr bool F16OUT = false; \
  DEV static void mma(uint32_t* d, const uint32_t* a, const uint32_t* b) { F4IN \
    asm volatile(PTX " {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};" : F4C : "r"(a[0]), "r"(a[1]), "r"(b[0])); F4OUT } };
MMA_K8_F32(MmaF16K8F32, "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32")
MMA_K8_F32(MmaBf16K8F32, "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32")
struct MmaF16K8F16 : Map16K8 { static constexpr bool F16OUT = true;
  DEV static void mma(uint32_t* d, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%0,%1};"
                 : "+r"(d[0]), "+r"(d[1]) : "r"(a[0]), "r"(a[1]), "r"(b[0])); } };

// tf32: K8 (4 A regs, 2 B regs) and K4 (2 A regs, 1 B reg). Raw fp32 bits go in: the hardware's own conversion.
struct MmaTf32K8F32 : MapTf32K8 { static constexpr bool F16OUT = false;
  DEV static void mma(uint32_t* d, const uint32_t* a, const uint32_t* b) { F4IN
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : F4C : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); F4OUT } };
struct MmaTf32K4F32 : MapTf32K4 { static constexpr bool F16OUT = false;
  DEV static void mma(uint32_t* d, const uint32_t* a, const uint32_t* b) { F4IN
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : F4C : "r"(a[0]), "r"(a[1]), "r"(b[0])); F4OUT } };

// FP8 K32: 4 A regs, 2 B regs.
#define MMA_K32_F32(NAME, PTX) struct NAME : Map8K32 { static constexpr bool F16OUT = false; \
  DEV static void mma(uint32_t* d, const uint32_t* a, const uint32_t* b) { F4IN \
    asm volatile(PTX " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" : F4C \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); F4OUT } };
#define MMA_K32_F16(NAME, PTX) struct NAME : Map8K32 { static constexpr bool F16OUT = true; \
  DEV static void mma(uint32_t* d, const uint32_t* a, const uint32_t* b) { \
    asm volatile(PTX " {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};" : "+r"(d[0]), "+r"(d[1]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); } };
MMA_K32_F32(MmaE4m3F32, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32")
MMA_K32_F32(MmaE5m2F32, "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32")
MMA_K32_F16(MmaE4m3F16, "mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16")
MMA_K32_F16(MmaE5m2F16, "mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e5m2.f16")

DEV uint32_t ld_bits(const uint8_t* p, int eb) {
  if (eb == 1) return *p;
  if (eb == 2) return *reinterpret_cast<const uint16_t*>(p);
  return *reinterpret_cast<const uint32_t*>(p);
}

// One warp per tile. nchain K-slices per tile, issued back to back.
template <class S>
__global__ void __launch_bounds__(128) mma_sync_kernel(const uint8_t* __restrict__ A, const uint8_t* __restrict__ B,
    const uint8_t* __restrict__ C, uint8_t* __restrict__ D, long ntiles, int nchain) {
  constexpr int M = 16, N = 8, K = S::K, EA = S::EA, EPR = 4 / EA;
  const long tile = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5;
  if (tile >= ntiles) return;  // uniform per warp
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  uint32_t d[4];
  if (S::F16OUT) {
    const uint16_t* c16 = reinterpret_cast<const uint16_t*>(C) + tile * M * N;
    for (int j = 0; j < 2; ++j) {
      int r = g + 8 * j, col = 2 * t;
      d[j] = (uint32_t)c16[r * N + col] | ((uint32_t)c16[r * N + col + 1] << 16);
    }
  } else {
    const uint32_t* c32 = reinterpret_cast<const uint32_t*>(C) + tile * M * N;
    for (int i = 0; i < 4; ++i) d[i] = c32[(g + 8 * (i >> 1)) * N + 2 * t + (i & 1)];
  }
  for (int s = 0; s < nchain; ++s) {
    const uint8_t* a_t = A + ((tile * nchain + s) * (long)(M * K)) * EA;
    const uint8_t* b_t = B + ((tile * nchain + s) * (long)(N * K)) * EA;
    uint32_t a[S::NA / EPR], b[S::NB / EPR];
#pragma unroll
    for (int j = 0; j < S::NA / EPR; ++j) a[j] = 0;
#pragma unroll
    for (int j = 0; j < S::NB / EPR; ++j) b[j] = 0;
#pragma unroll
    for (int i = 0; i < S::NA; ++i) {
      int r, c; S::a_map(i, g, t, r, c);
      a[i / EPR] |= ld_bits(a_t + (r * K + c) * EA, EA) << (8 * EA * (i % EPR));
    }
#pragma unroll
    for (int i = 0; i < S::NB; ++i) {
      int k, n; S::b_map(i, g, t, k, n);
      b[i / EPR] |= ld_bits(b_t + (n * K + k) * EA, EA) << (8 * EA * (i % EPR));
    }
    S::mma(d, a, b);
  }
  if (S::F16OUT) {
    uint16_t* d16 = reinterpret_cast<uint16_t*>(D) + tile * M * N;
    for (int j = 0; j < 2; ++j) {
      int r = g + 8 * j, col = 2 * t;
      d16[r * N + col] = (uint16_t)(d[j] & 0xFFFF); d16[r * N + col + 1] = (uint16_t)(d[j] >> 16);
    }
  } else {
    uint32_t* d32 = reinterpret_cast<uint32_t*>(D) + tile * M * N;
    for (int i = 0; i < 4; ++i) d32[(g + 8 * (i >> 1)) * N + 2 * t + (i & 1)] = d[i];
  }
}

// ---------------------------------------------------------------------------------------------------------------
// wgmma m64n8kK, A and B from shared memory (K-major, no swizzle). Every case has K * element bytes = 32.
// ---------------------------------------------------------------------------------------------------------------
#define WG_PRED "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
#define WG_PRED16 "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
#define WG_F32(NAME, PTX, TAIL) struct NAME { static constexpr bool F16OUT = false; \
  DEV static void mma(uint32_t* d, uint64_t da, uint64_t db, int sd) { F4IN \
    asm volatile(WG_PRED PTX " {%0,%1,%2,%3}, %4, %5, p, 1, 1" TAIL ";\n}\n" : F4C : "l"(da), "l"(db), "r"(sd)); F4OUT } };
#define WG_F16(NAME, PTX, TAIL) struct NAME { static constexpr bool F16OUT = true; \
  DEV static void mma(uint32_t* d, uint64_t da, uint64_t db, int sd) { \
    asm volatile(WG_PRED16 PTX " {%0,%1}, %2, %3, p, 1, 1" TAIL ";\n}\n" : "+r"(d[0]), "+r"(d[1]) : "l"(da), "l"(db), "r"(sd)); } };
WG_F32(WgF16F32, "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", ", 0, 0")
WG_F32(WgBf16F32, "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", ", 0, 0")
WG_F16(WgF16F16, "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16", ", 0, 0")
WG_F32(WgTf32F32, "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32", "")
WG_F32(WgE4m3F32, "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3", "")
WG_F32(WgE5m2F32, "wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2", "")
WG_F16(WgE4m3F16, "wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3", "")
WG_F16(WgE5m2F16, "wgmma.mma_async.sync.aligned.m64n8k32.f16.e5m2.e5m2", "")

#define WG_MAXCHAIN 4

DEV uint64_t make_desc(const void* smem, int lbo, int sbo) {
  uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16)
       | ((uint64_t)((sbo >> 4) & 0x3FFF) << 32);
}

// One warpgroup (128 threads) per block, looping over tiles. Rows of 32 bytes = 2 chunks of 16 bytes.
// Chunk (row r, half h) of a matrix goes to smem offset (r / 8) * sbo + h * lbo + (r % 8) * 16.
template <class S>
__global__ void __launch_bounds__(128) wgmma_kernel(const uint8_t* __restrict__ A, const uint8_t* __restrict__ B,
    const uint8_t* __restrict__ C, uint8_t* __restrict__ D, long ntiles, int nchain, int scale_d, int lbo, int sbo) {
  constexpr int M = 64, N = 8, ROWB = 32;
  __shared__ __align__(1024) uint8_t sA[WG_MAXCHAIN][M * ROWB];
  __shared__ __align__(1024) uint8_t sB[WG_MAXCHAIN][N * ROWB];
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  for (long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    for (int idx = tid; idx < nchain * M * 2; idx += 128) {
      int s = idx / (M * 2), r = (idx / 2) % M, h = idx & 1;
      const uint4* src = reinterpret_cast<const uint4*>(A + ((tile * nchain + s) * M + r) * ROWB + h * 16);
      *reinterpret_cast<uint4*>(&sA[s][(r / 8) * sbo + h * lbo + (r % 8) * 16]) = *src;
    }
    for (int idx = tid; idx < nchain * N * 2; idx += 128) {
      int s = idx / (N * 2), r = (idx / 2) % N, h = idx & 1;
      const uint4* src = reinterpret_cast<const uint4*>(B + ((tile * nchain + s) * N + r) * ROWB + h * 16);
      *reinterpret_cast<uint4*>(&sB[s][(r / 8) * sbo + h * lbo + (r % 8) * 16]) = *src;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    uint32_t d[4];
    const int row0 = 16 * w + g;
    if (S::F16OUT) {
      const uint16_t* c16 = reinterpret_cast<const uint16_t*>(C) + tile * M * N;
      for (int j = 0; j < 2; ++j) {
        int r = row0 + 8 * j, col = 2 * t;
        d[j] = (uint32_t)c16[r * N + col] | ((uint32_t)c16[r * N + col + 1] << 16);
      }
      d[2] = d[3] = 0;
    } else {
      const uint32_t* c32 = reinterpret_cast<const uint32_t*>(C) + tile * M * N;
      for (int i = 0; i < 4; ++i) d[i] = c32[(row0 + 8 * (i >> 1)) * N + 2 * t + (i & 1)];
    }
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int s = 0; s < WG_MAXCHAIN; ++s) {
      if (s < nchain) S::mma(d, make_desc(sA[s], lbo, sbo), make_desc(sB[s], lbo, sbo), s == 0 ? scale_d : 1);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (S::F16OUT) {
      uint16_t* d16 = reinterpret_cast<uint16_t*>(D) + tile * M * N;
      for (int j = 0; j < 2; ++j) {
        int r = row0 + 8 * j, col = 2 * t;
        d16[r * N + col] = (uint16_t)(d[j] & 0xFFFF); d16[r * N + col + 1] = (uint16_t)(d[j] >> 16);
      }
    } else {
      uint32_t* d32 = reinterpret_cast<uint32_t*>(D) + tile * M * N;
      for (int i = 0; i < 4; ++i) d32[(row0 + 8 * (i >> 1)) * N + 2 * t + (i & 1)] = d[i];
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Host side: case table (ids match tcemu.numerics.hardware.cases), device buffers kept between calls.
// ---------------------------------------------------------------------------------------------------------------
struct CaseInfo { int wg, M, N, K, ea, ec; };  // wg: 0 mma.sync, 1 wgmma, 2 wmma
static const CaseInfo CASES[] = {
  {0, 16, 8, 16, 2, 4},  // 0 mma f16 -> f32 k16
  {0, 16, 8, 16, 2, 2},  // 1 mma f16 -> f16 k16
  {0, 16, 8, 16, 2, 4},  // 2 mma bf16 -> f32 k16
  {0, 16, 8, 8, 4, 4},   // 3 mma tf32 -> f32 k8
  {0, 16, 8, 32, 1, 4},  // 4 mma e4m3 -> f32
  {0, 16, 8, 32, 1, 4},  // 5 mma e5m2 -> f32
  {0, 16, 8, 32, 1, 2},  // 6 mma e4m3 -> f16
  {0, 16, 8, 32, 1, 2},  // 7 mma e5m2 -> f16
  {0, 16, 8, 8, 2, 4},   // 8 mma f16 -> f32 k8
  {0, 16, 8, 8, 2, 4},   // 9 mma bf16 -> f32 k8
  {0, 16, 8, 8, 2, 2},   // 10 mma f16 -> f16 k8
  {0, 16, 8, 4, 4, 4},   // 11 mma tf32 -> f32 k4
  {1, 64, 8, 16, 2, 4},  // 12 wgmma f16 -> f32
  {1, 64, 8, 16, 2, 2},  // 13 wgmma f16 -> f16
  {1, 64, 8, 16, 2, 4},  // 14 wgmma bf16 -> f32
  {1, 64, 8, 8, 4, 4},   // 15 wgmma tf32 -> f32
  {1, 64, 8, 32, 1, 4},  // 16 wgmma e4m3 -> f32
  {1, 64, 8, 32, 1, 4},  // 17 wgmma e5m2 -> f32
  {1, 64, 8, 32, 1, 2},  // 18 wgmma e4m3 -> f16
  {1, 64, 8, 32, 1, 2},  // 19 wgmma e5m2 -> f16
  {2, 16, 16, 16, 2, 4}, // 20 wmma f16 -> f32 m16n16k16
  {2, 16, 16, 16, 2, 2}, // 21 wmma f16 -> f16 m16n16k16
  {2, 16, 16, 16, 2, 4}, // 22 wmma bf16 -> f32 m16n16k16
  {2, 16, 16, 8, 4, 4},  // 23 wmma tf32 -> f32 m16n16k8
};
static const int NCASES = sizeof(CASES) / sizeof(CASES[0]);

static void* g_buf[4] = {nullptr, nullptr, nullptr, nullptr};
static size_t g_cap[4] = {0, 0, 0, 0};
static cudaError_t ensure(int i, size_t n) {
  if (g_cap[i] >= n) return cudaSuccess;
  if (g_buf[i]) cudaFree(g_buf[i]);
  g_buf[i] = nullptr; g_cap[i] = 0;
  cudaError_t e = cudaMalloc(&g_buf[i], n);
  if (e == cudaSuccess) g_cap[i] = n;
  return e;
}

template <class S> static void launch_mma(const uint8_t* a, const uint8_t* b, const uint8_t* c, uint8_t* d, long nt, int nchain) {
  long blocks = (nt + 3) / 4;
  mma_sync_kernel<S><<<(unsigned)blocks, 128>>>(a, b, c, d, nt, nchain);
}
template <class KERN> static void launch_wmma(KERN k, const uint8_t* a, const uint8_t* b, const uint8_t* c, uint8_t* d,
                                              long nt, int nchain) {
  long blocks = (nt + 3) / 4;
  k<<<(unsigned)blocks, 128>>>(a, b, c, d, nt, nchain);
}
template <class S> static void launch_wg(const uint8_t* a, const uint8_t* b, const uint8_t* c, uint8_t* d, long nt, int nchain, int sd, int lbo, int sbo) {
  long blocks = nt < 132 * 16 ? nt : 132 * 16;
  wgmma_kernel<S><<<(unsigned)blocks, 128>>>(a, b, c, d, nt, nchain, sd, lbo, sbo);
}

extern "C" int tc_num_cases() { return NCASES; }

// Returns 0 or a cudaError_t (>0), or -1 for a bad argument.
extern "C" int tc_run(int cid, const void* hA, const void* hB, const void* hC, void* hD, long ntiles, int nchain,
                      int scale_d, int lbo, int sbo) {
  if (cid < 0 || cid >= NCASES || ntiles <= 0 || nchain < 1) return -1;
  const CaseInfo& ci = CASES[cid];
  if (ci.wg == 1 && nchain > WG_MAXCHAIN) return -1;  // wg: 0 mma.sync, 1 wgmma, 2 wmma
  size_t na = (size_t)ntiles * nchain * ci.M * ci.K * ci.ea, nb = (size_t)ntiles * nchain * ci.N * ci.K * ci.ea;
  size_t nc = (size_t)ntiles * ci.M * ci.N * ci.ec;
  cudaError_t e;
  if ((e = ensure(0, na)) || (e = ensure(1, nb)) || (e = ensure(2, nc)) || (e = ensure(3, nc))) return (int)e;
  uint8_t *a = (uint8_t*)g_buf[0], *b = (uint8_t*)g_buf[1], *c = (uint8_t*)g_buf[2], *d = (uint8_t*)g_buf[3];
  if ((e = cudaMemcpy(a, hA, na, cudaMemcpyHostToDevice)) || (e = cudaMemcpy(b, hB, nb, cudaMemcpyHostToDevice))
      || (e = cudaMemcpy(c, hC, nc, cudaMemcpyHostToDevice)) || (e = cudaMemset(d, 0xA5, nc))) return (int)e;
  switch (cid) {
    case 0: launch_mma<MmaF16K16F32>(a, b, c, d, ntiles, nchain); break;
    case 1: launch_mma<MmaF16K16F16>(a, b, c, d, ntiles, nchain); break;
    case 2: launch_mma<MmaBf16K16F32>(a, b, c, d, ntiles, nchain); break;
    case 3: launch_mma<MmaTf32K8F32>(a, b, c, d, ntiles, nchain); break;
    case 4: launch_mma<MmaE4m3F32>(a, b, c, d, ntiles, nchain); break;
    case 5: launch_mma<MmaE5m2F32>(a, b, c, d, ntiles, nchain); break;
    case 6: launch_mma<MmaE4m3F16>(a, b, c, d, ntiles, nchain); break;
    case 7: launch_mma<MmaE5m2F16>(a, b, c, d, ntiles, nchain); break;
    case 8: launch_mma<MmaF16K8F32>(a, b, c, d, ntiles, nchain); break;
    case 9: launch_mma<MmaBf16K8F32>(a, b, c, d, ntiles, nchain); break;
    case 10: launch_mma<MmaF16K8F16>(a, b, c, d, ntiles, nchain); break;
    case 11: launch_mma<MmaTf32K4F32>(a, b, c, d, ntiles, nchain); break;
    case 12: launch_wg<WgF16F32>(a, b, c, d, ntiles, nchain, scale_d, lbo, sbo); break;
    case 13: launch_wg<WgF16F16>(a, b, c, d, ntiles, nchain, scale_d, lbo, sbo); break;
    case 14: launch_wg<WgBf16F32>(a, b, c, d, ntiles, nchain, scale_d, lbo, sbo); break;
    case 15: launch_wg<WgTf32F32>(a, b, c, d, ntiles, nchain, scale_d, lbo, sbo); break;
    case 16: launch_wg<WgE4m3F32>(a, b, c, d, ntiles, nchain, scale_d, lbo, sbo); break;
    case 17: launch_wg<WgE5m2F32>(a, b, c, d, ntiles, nchain, scale_d, lbo, sbo); break;
    case 18: launch_wg<WgE4m3F16>(a, b, c, d, ntiles, nchain, scale_d, lbo, sbo); break;
    case 19: launch_wg<WgE5m2F16>(a, b, c, d, ntiles, nchain, scale_d, lbo, sbo); break;
    case 20: launch_wmma(WMMA_F16_F32, a, b, c, d, ntiles, nchain); break;
    case 21: launch_wmma(WMMA_F16_F16, a, b, c, d, ntiles, nchain); break;
    case 22: launch_wmma(WMMA_BF16_F32, a, b, c, d, ntiles, nchain); break;
    case 23: launch_wmma(WMMA_TF32_F32, a, b, c, d, ntiles, nchain); break;
  }
  if ((e = cudaGetLastError())) return (int)e;
  if ((e = cudaDeviceSynchronize())) return (int)e;
  if ((e = cudaMemcpy(hD, d, nc, cudaMemcpyDeviceToHost))) return (int)e;
  return 0;
}

extern "C" const char* tc_error_string(int e) { return e < 0 ? "bad argument" : cudaGetErrorString((cudaError_t)e); }

// "name|major.minor|driver|runtime|sm_count"
extern "C" int tc_device_info(char* buf, int n) {
  int dev = 0, drv = 0, rt = 0;
  cudaDeviceProp p;
  cudaError_t e;
  if ((e = cudaGetDevice(&dev)) || (e = cudaGetDeviceProperties(&p, dev))) return (int)e;
  cudaDriverGetVersion(&drv); cudaRuntimeGetVersion(&rt);
  snprintf(buf, n, "%s|%d.%d|%d|%d|%d", p.name, p.major, p.minor, drv, rt, p.multiProcessorCount);
  return 0;
}
"""
