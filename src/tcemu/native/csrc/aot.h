// tcemu's Triton GEMM kernels compiled ahead of time (tcemu.native._aot), and their launch on CUDA through the
// driver API (libcuda.so.1, opened at run time: the library needs no CUDA headers or toolkit to build).
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tcemu::aot {

// One cubin and its launch contract (generated: aot_kernels.cpp in the build directory, or aot_none.cpp).
struct KernelImage {
  const char* key;      // "sm90/tf32x3/gemm/bias0.align1"
  int arch;             // 80 (sm_80) or 90 (sm_90a)
  const char* method;   // tf32x3, bf16x3, bf16x6, bf16x9
  const char* kind;     // split, gemm, fixup
  const char* variant;  // "-", "bias0.align1", "bias1.pieces0", ...
  const char* name;     // the cubin's entry
  size_t offset, size;  // the cubin in blob()
  int num_warps, num_ctas, shared;
  const char* args;     // the launcher's arguments: p pointer, i int32, l int64
  const char* extra;    // parameters Triton appends: g global scratch, r profile scratch (pointers)
  int global_scratch_size, global_scratch_align, profile_scratch_size, profile_scratch_align;
  int block_m, block_n, block_k;  // GEMM: tile of C and K-tile; split: rows, columns; fix-up: rows per program, BN, BK
  bool cooperative, pdl;
};

extern const KernelImage kKernels[];
extern const int kKernelCount;
extern const char* const kStatus;         // what the build compiled, or why nothing
extern const char* const kTritonVersion;  // "" where Triton was not importable
const unsigned char* blob();

// A kernel argument: a device pointer or an integer, in the kernel's order.
struct Arg {
  uint64_t value;
  static Arg ptr(const at::Tensor& t) { return {reinterpret_cast<uint64_t>(t.data_ptr())}; }
  static Arg num(int64_t v) { return {static_cast<uint64_t>(v)}; }
};

// The kernel of (method, kind, variant) for the device's architecture; nullptr with *why set where there is none.
const KernelImage* find(int device_index, const std::string& method, const std::string& kind,
                        const std::string& variant, std::string* why);
// Launch on the device's current stream (grid x, y, z); the arguments must match `image.args`.
void launch(const KernelImage& image, int device_index, int64_t gx, int64_t gy, int64_t gz,
            const std::vector<Arg>& args);
// "" where the kernels can run on the device, else why not (no driver, no cubin for its architecture, ...).
std::string unavailable(int device_index);
// The device's name as the driver gives it (torch.cuda.get_device_name's); "" where the driver could not say.
std::string device_name(int device_index);
// What native_info reports: the kernels built in, and the devices and products that fell back to the reference.
std::string describe();
// Record why a CUDA product ran the reference (listed by describe(), once per reason).
void note_fallback(const std::string& why);

}  // namespace tcemu::aot
