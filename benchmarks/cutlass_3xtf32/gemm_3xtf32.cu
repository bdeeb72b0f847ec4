// CUTLASS's 3xTF32 GEMM (OpMultiplyAddFastF32: FP32 operands split into big + small TF32 parts, three TF32
// Tensor Core products, FP32 accumulation) in the configuration of CUTLASS example 27
// (27_ampere_3xtf32_fast_accurate_tensorop_gemm): threadblock 128x64x16, warp 64x32x16, mma 16x8x8, 3 stages,
// 4-element (16-byte) alignment, Sm80 mma.sync kernels (they run on sm_90). The anchor that the study's numbers
// come from, timed beside tcemu's kernels by benchmarks/gemm.py (--cutlass). Built by build.py.
//
// C entry points for ctypes, one per layout of B, D = A @ B with A (M, K) row-major, D (M, N) row-major:
//   tcemu_cutlass_3xtf32_nt: B given as (N, K) row-major (K-major, an nn.Linear weight: y = x @ W^T);
//   tcemu_cutlass_3xtf32_nn: B given as (K, N) row-major (the input gradient dx = dy @ W).
// Each returns 0, or a CUTLASS status / CUDA error code (and prints what failed).

#include <cstdio>

#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm.h"

namespace {

using Epilogue = cutlass::epilogue::thread::LinearCombination<float, 128 / cutlass::sizeof_bits<float>::value,
                                                              float, float>;

template <typename LayoutB>
using Gemm3xTF32 = cutlass::gemm::device::Gemm<
    float, cutlass::layout::RowMajor,   // A
    float, LayoutB,                     // B
    float, cutlass::layout::RowMajor,   // C and D
    float,                              // accumulator
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<128, 64, 16>, cutlass::gemm::GemmShape<64, 32, 16>, cutlass::gemm::GemmShape<16, 8, 8>,
    Epilogue, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, 3, 4, 4, false,
    cutlass::arch::OpMultiplyAddFastF32>;

template <typename LayoutB>
int run(const float* a, const float* b, float* d, int M, int N, int K, int ldb, cudaStream_t stream) {
  using Gemm = Gemm3xTF32<LayoutB>;
  typename Gemm::Arguments args({M, N, K}, {a, K}, {b, ldb}, {d, N}, {d, N}, {1.0f, 0.0f});
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status != cutlass::Status::kSuccess) {
    std::fprintf(stderr, "tcemu cutlass 3xTF32: cannot run M=%d N=%d K=%d: %s\n", M, N, K,
                 cutlassGetStatusString(status));
    return static_cast<int>(status);
  }
  status = gemm(args, nullptr, stream);  // this configuration needs no workspace (no split-K)
  if (status != cutlass::Status::kSuccess) {
    std::fprintf(stderr, "tcemu cutlass 3xTF32: launch failed: %s\n", cutlassGetStatusString(status));
    return static_cast<int>(status);
  }
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + static_cast<int>(err);
}

}  // namespace

extern "C" int tcemu_cutlass_3xtf32_nt(const float* a, const float* b, float* d, int M, int N, int K,
                                       void* stream) {
  return run<cutlass::layout::ColumnMajor>(a, b, d, M, N, K, K, static_cast<cudaStream_t>(stream));
}

extern "C" int tcemu_cutlass_3xtf32_nn(const float* a, const float* b, float* d, int M, int N, int K,
                                       void* stream) {
  return run<cutlass::layout::RowMajor>(a, b, d, M, N, K, N, static_cast<cudaStream_t>(stream));
}
