// tcemu's emulated FP32 products for LibTorch hosts: the `tcemu::` ops that rewritten TorchScript graphs call.
//
// A C++ rendering of tcemu's PyTorch reference backend (src/tcemu/emulation/reference.py, split.py, ops.py,
// attention.py, contractions.py): the same sequence of ATen calls, so that on the CPU (and on CUDA, where the
// piece products run on cuBLAS in IEEE FP32) a model gives the bits of tcemu's Python path with backend="torch".
// On CUDA with backend "auto" or "triton" the GEMMs run tcemu's Triton kernels compiled ahead of time (aot.h,
// aot_gemm.cpp), as the Python Triton backend runs them.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace tcemu {

using at::Tensor;

// One emulation method (tcemu.emulation.methods.MethodSpec): pieces, kept products and the residual shift.
struct MethodSpec {
  std::string name;
  std::string piece_format;  // "fp32", "tf32" or "bf16"
  int n_pieces;
  std::vector<std::pair<int, int>> products;  // accumulation order: small first, (0, 0) last
  int shift;

  bool uses_tensor_cores() const { return piece_format != "fp32"; }
  // products grouped by level i + j, each in accumulation order
  std::vector<std::vector<std::pair<int, int>>> levels() const;
  int max_level_products() const;
  // T of the range fix-up for contraction length k (MethodSpec.range_threshold)
  int range_threshold(int64_t k) const;
};

// The method by name; raises a ValueError naming tcemu and the methods.
const MethodSpec& get_method(const std::string& name);

// The backend string of the tcemu:: op being run on this thread ("auto", "torch" or "triton"; set by the ops)
const std::string& current_backend();
void set_current_backend(const std::string& backend);

// The GEMM methods of one product and its gradients, and the backend (tcemu.GemmConfig): "torch" runs the
// reference everywhere; "auto" and "triton" the ahead-of-time kernels on CUDA where they apply.
struct GemmConfig {
  std::string forward, grad_input, grad_weight, backend;
  static GemmConfig one(const std::string& method) { return {method, method, method, current_backend()}; }
  GemmConfig only(const std::string& method) const { return {method, method, method, backend}; }
};

// split.py
Tensor round_to_piece(const Tensor& x, const std::string& piece_format, bool keep_nonzero);
std::vector<Tensor> split(const Tensor& x, const MethodSpec& spec);

// reference.py
Tensor ieee_fp32_matmul(const Tensor& a, const Tensor& b);
Tensor mm_reference(const Tensor& a, const Tensor& b, const MethodSpec& spec);
Tensor mm_range_scaled(const Tensor& a, const Tensor& b, const MethodSpec& spec);

// ops.py: the differentiable products (forward, backward and double backward emulated)
Tensor matmul_nd(const Tensor& a, const Tensor& b, const GemmConfig& cfg);
Tensor matmul(const Tensor& a, const Tensor& b, const std::string& method);
Tensor linear(const Tensor& x, const Tensor& weight, const c10::optional<Tensor>& bias, const std::string& method,
              const std::string& grad_weight_method);

// the products by backend (aot_gemm.cpp): the kernels on CUDA for "auto"/"triton" where they apply, else the
// reference; a (M, K) @ b, linear x (M, K) @ w (N, K)^T + bias, and its input gradient grad (M, N) @ w
Tensor backend_matmul(const Tensor& a, const Tensor& b, const MethodSpec& spec, const std::string& backend);
Tensor backend_linear(const Tensor& x, const Tensor& w, const c10::optional<Tensor>& bias, const MethodSpec& spec,
                      const std::string& backend);
Tensor backend_linear_input_grad(const Tensor& grad, const Tensor& w, const MethodSpec& spec,
                                 const std::string& backend);

// contractions.py and attention.py
Tensor tensordot(const Tensor& a, const Tensor& b, std::vector<int64_t> dims_a, std::vector<int64_t> dims_b,
                 const std::string& method);
Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const c10::optional<Tensor>& bias,
                const std::string& method);
Tensor multi_dot(const std::vector<Tensor>& tensors, const std::string& method);
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const c10::optional<Tensor>& attn_mask, c10::optional<double> scale,
                                    const std::string& method);
bool einsum_contracts(const std::string& equation, const std::vector<Tensor>& operands);
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands, const std::string& method);

// ops.py's check: float32, dense, on one CPU or CUDA device (what the emulation runs; anything else is aten's)
bool emulable(std::initializer_list<const Tensor*> tensors);

// Whether cuBLAS may run FP32 GEMMs in TF32: torch.backends.cuda.matmul.fp32_precision, read through the API that
// sets it. (The legacy allowTF32CuBLAS() raises in torch 2.11 where a host set the precision through the new API:
// measured on the H100 machine.)
inline bool cublas_fp32_is_tf32() {
  return at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) ==
         at::Float32Precision::TF32;
}

// cuBLAS FP32 products in IEEE mode for the scope, as tcemu's Python sets torch.backends.cuda.matmul.fp32_precision
// to "ieee" around them: at::NoTF32Guard alone is not enough, since cuBLASLt's GEMM with bias (addmm's epilogue)
// reads the global setting only, and with TF32 allowed it rounds the operands to TF32.
struct IeeeFp32Guard {
  at::NoTF32Guard no_tf32;
  bool was_tf32 = cublas_fp32_is_tf32();
  IeeeFp32Guard() {
    if (was_tf32)
      at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL,
                                              at::Float32Precision::IEEE);
  }
  ~IeeeFp32Guard() {
    if (was_tf32)
      at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL,
                                              at::Float32Precision::TF32);
  }
  IeeeFp32Guard(const IeeeFp32Guard&) = delete;
  IeeeFp32Guard& operator=(const IeeeFp32Guard&) = delete;
};

}  // namespace tcemu
