// The `tcemu::` ops (tcemu.emulation.script_ops): their schemas, and kernels that run what tcemu's Python kernels
// run with backend="torch" (the emulated product where the eager emulation takes the call, else the aten op).
//
// The schemas are defined only where they are not defined yet: in a Python process that imported tcemu before
// loading this library, tcemu's own kernels (with the coverage meter and the Triton backend) stay, and this
// library registers nothing but tcemu::native_info.
#include "aot.h"
#include "decision.h"
#include "tcemu_native.h"

#include <ATen/ExpandUtils.h>
#include <torch/library.h>

namespace tcemu {

namespace {

using c10::optional;
using c10::Scalar;
using c10::string_view;

std::string method_of(string_view method, string_view backend) {
  TORCH_CHECK_VALUE(backend == "auto" || backend == "torch" || backend == "triton", "tcemu: unknown backend '",
                    std::string(backend), "' in a rewritten TorchScript graph; choose auto, torch or triton");
  set_current_backend(std::string(backend));  // the products of this op (and their backward) run by it
  return get_method(std::string(method)).name;
}

bool batch_dims_broadcast(const Tensor& a, const Tensor& b) {
  if (a.dim() <= 2 && b.dim() <= 2) return true;
  try {
    at::infer_size(a.sizes().slice(0, std::max<int64_t>(a.dim() - 2, 0)),
                   b.sizes().slice(0, std::max<int64_t>(b.dim() - 2, 0)));
  } catch (const c10::Error&) {
    return false;
  }
  return true;
}

// mode._matmul_fits: whether torch.matmul accepts the shapes (both at least 1-D)
bool matmul_fits(const Tensor& a, const Tensor& b) {
  return a.size(-1) == (b.dim() > 1 ? b.size(-2) : b.size(0)) && batch_dims_broadcast(a, b);
}

bool fp32(const Tensor& a, const Tensor& b) { return emulable({&a, &b}); }

Tensor op_matmul(const Tensor& a, const Tensor& b, string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!fp32(a, b) || a.dim() == 0 || b.dim() == 0 || !matmul_fits(a, b)) return at::matmul(a, b);
  return matmul(a, b, m);
}

Tensor op_mm(const Tensor& a, const Tensor& b, string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!fp32(a, b) || a.dim() != 2 || b.dim() != 2 || !matmul_fits(a, b)) return at::mm(a, b);
  return matmul(a, b, m);
}

Tensor op_bmm(const Tensor& a, const Tensor& b, string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!fp32(a, b) || a.dim() != 3 || b.dim() != 3 || a.size(0) != b.size(0) || !matmul_fits(a, b)) {
    return at::bmm(a, b);
  }
  return matmul(a, b, m);
}

Tensor op_mv(const Tensor& a, const Tensor& b, string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!fp32(a, b) || a.dim() != 2 || b.dim() != 1 || !matmul_fits(a, b)) return at::mv(a, b);
  return matmul(a, b, m);
}

bool dot_fits(const Tensor& a, const Tensor& b) {
  return fp32(a, b) && a.dim() == 1 && b.dim() == 1 && matmul_fits(a, b);
}

Tensor op_dot(const Tensor& a, const Tensor& b, string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  return dot_fits(a, b) ? matmul(a, b, m) : at::dot(a, b);
}

Tensor op_vdot(const Tensor& a, const Tensor& b, string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  return dot_fits(a, b) ? matmul(a, b, m) : at::vdot(a, b);
}

Tensor tensordot_or_aten(const Tensor& a, const Tensor& b, std::vector<int64_t> da, std::vector<int64_t> db,
                         const std::string& m) {
  if (a.numel() == 0 || b.numel() == 0) return at::tensordot(a, b, da, db);
  return tensordot(a, b, std::move(da), std::move(db), m);
}

Tensor op_inner(const Tensor& a, const Tensor& b, string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!fp32(a, b) || a.dim() == 0 || b.dim() == 0 || a.size(-1) != b.size(-1)) return at::inner(a, b);
  return tensordot_or_aten(a, b, {-1}, {-1}, m);
}

Tensor op_vecdot(const Tensor& x, const Tensor& y, int64_t dim, string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!fp32(x, y)) return at::linalg_vecdot(x, y, dim);
  std::vector<int64_t> shape;
  try {
    shape = at::infer_size(x.sizes(), y.sizes());
  } catch (const c10::Error&) {
    return at::linalg_vecdot(x, y, dim);
  }
  auto xe = x.expand(shape).movedim(dim, -1), ye = y.expand(shape).movedim(dim, -1);
  return matmul(xe.unsqueeze(-2), ye.unsqueeze(-1), m).squeeze(-1).squeeze(-1);
}

Tensor chain(at::TensorList tensors, const std::string& m, bool* passed) {
  *passed = true;
  if (tensors.size() < 2) return Tensor();
  for (const auto& t : tensors) {
    if (!fp32(t, tensors[0])) return Tensor();
  }
  *passed = false;
  const auto n = tensors.size();
  bool ok = tensors[0].dim() >= 1 && tensors[0].dim() <= 2 && tensors[n - 1].dim() >= 1 && tensors[n - 1].dim() <= 2;
  for (size_t i = 1; i + 1 < n; ++i) ok = ok && tensors[i].dim() == 2;
  TORCH_CHECK(ok, "multi_dot: expected at least two tensors, 1-D or 2-D at the ends and 2-D between");
  for (size_t i = 0; i + 1 < n; ++i) {
    const auto cols = tensors[i].dim() == 1 ? tensors[i].size(0) : tensors[i].size(1);
    TORCH_CHECK(cols == tensors[i + 1].size(0), "multi_dot: tensors ", i, " and ", i + 1, " with shapes ",
                tensors[i].sizes(), " and ", tensors[i + 1].sizes(), " cannot be multiplied");
  }
  for (const auto& t : tensors) {
    if (t.numel() == 0) return at::linalg_multi_dot(tensors);
  }
  return multi_dot(tensors.vec(), m);
}

Tensor op_multi_dot(at::TensorList tensors, string_view method, string_view backend) {
  bool passed;
  auto out = chain(tensors, method_of(method, backend), &passed);
  return passed ? at::linalg_multi_dot(tensors) : out;
}

Tensor op_chain_matmul(at::TensorList matrices, string_view method, string_view backend) {
  bool passed;
  auto out = chain(matrices, method_of(method, backend), &passed);
  return passed ? at::chain_matmul(matrices) : out;
}

Tensor op_bilinear(const Tensor& x1, const Tensor& x2, const Tensor& w, const optional<Tensor>& b,
                   string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  const bool has_bias = b.has_value() && b->defined();
  if (!emulable({&x1, &x2, &w}) || (has_bias && !emulable({&*b}))) return at::bilinear(x1, x2, w, b);
  const bool fits = w.dim() == 3 && x1.dim() > 0 && x2.dim() > 0 &&
                    x1.sizes().slice(0, x1.dim() - 1) == x2.sizes().slice(0, x2.dim() - 1) &&
                    x1.size(-1) == w.size(1) && x2.size(-1) == w.size(2) &&
                    (!has_bias || (b->dim() == 1 && b->size(0) == w.size(0)));
  TORCH_CHECK(fits, "bilinear: shapes input1 ", x1.sizes(), ", input2 ", x2.sizes(), ", weight ", w.sizes(),
              " and bias do not fit (input1 (..., in1), input2 (..., in2), weight (out, in1, in2), bias (out,))");
  return bilinear(x1, x2, w, b, m);
}

Tensor op_tensordot(const Tensor& a, const Tensor& b, at::IntArrayRef da, at::IntArrayRef db, string_view method,
                    string_view backend) {
  const auto m = method_of(method, backend);
  if (!fp32(a, b) || da.empty()) return at::tensordot(a, b, da, db);
  bool ok = da.size() == db.size();
  for (size_t i = 0; ok && i < da.size(); ++i) ok = a.size(da[i]) == b.size(db[i]);
  if (!ok) return at::tensordot(a, b, da, db);  // torch's error
  return tensordot_or_aten(a, b, da.vec(), db.vec(), m);
}

Tensor op_einsum(string_view equation, at::TensorList tensors, at::OptionalIntArrayRef path, string_view method,
                 string_view backend) {
  const auto m = method_of(method, backend);
  bool all_fp32 = !tensors.empty();
  for (const auto& t : tensors) all_fp32 = all_fp32 && fp32(t, tensors[0]);
  const std::string eq(equation);
  if (!all_fp32 || !einsum_contracts(eq, tensors.vec())) return at::einsum(equation, tensors, path);
  return einsum(eq, tensors.vec(), m);
}

// contractions.add_scaled: beta * input + alpha * product(), with addmm's semantics at beta == 0 and alpha == 0
template <typename Product>
Tensor add_scaled(const Tensor& input, Product product, at::IntArrayRef shape, const Scalar& beta,
                  const Scalar& alpha) {
  if (alpha.toDouble() == 0) {
    auto base = at::zeros(shape, input.options());
    return beta.toDouble() == 0 ? base : at::add(base, input, beta);
  }
  auto prod = product();
  if (alpha.toDouble() != 1) prod = prod * alpha;
  return beta.toDouble() == 0 ? prod : at::add(prod, input, beta);
}

bool real(const Scalar& s) { return !s.isComplex(); }

bool broadcasts_to(const Tensor& input, at::IntArrayRef shape) {
  try {
    return at::infer_size(input.sizes(), shape) == shape.vec();
  } catch (const c10::Error&) {
    return false;
  }
}

Tensor op_addmm(const Tensor& inp, const Tensor& x, const Tensor& y, const Scalar& beta, const Scalar& alpha,
                string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!emulable({&inp, &x, &y}) || x.dim() != 2 || y.dim() != 2 || !real(beta) || !real(alpha) ||
      x.size(1) != y.size(0) || !broadcasts_to(inp, {x.size(0), y.size(1)})) {
    return at::addmm(inp, x, y, beta, alpha);
  }
  return add_scaled(inp, [&] { return matmul(x, y, m); }, {x.size(0), y.size(1)}, beta, alpha);
}

Tensor op_addmv(const Tensor& inp, const Tensor& x, const Tensor& y, const Scalar& beta, const Scalar& alpha,
                string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!emulable({&inp, &x, &y}) || x.dim() != 2 || y.dim() != 1 || !real(beta) || !real(alpha) ||
      x.size(1) != y.size(0) || !broadcasts_to(inp, {x.size(0)})) {
    return at::addmv(inp, x, y, beta, alpha);
  }
  return add_scaled(inp, [&] { return matmul(x, y, m); }, {x.size(0)}, beta, alpha);
}

Tensor op_baddbmm(const Tensor& inp, const Tensor& x, const Tensor& y, const Scalar& beta, const Scalar& alpha,
                  string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!emulable({&inp, &x, &y}) || x.dim() != 3 || y.dim() != 3 || !real(beta) || !real(alpha) ||
      x.size(0) != y.size(0) || x.size(2) != y.size(1) || !broadcasts_to(inp, {x.size(0), x.size(1), y.size(2)})) {
    return at::baddbmm(inp, x, y, beta, alpha);
  }
  return add_scaled(inp, [&] { return matmul(x, y, m); }, {x.size(0), x.size(1), y.size(2)}, beta, alpha);
}

Tensor op_addbmm(const Tensor& inp, const Tensor& x, const Tensor& y, const Scalar& beta, const Scalar& alpha,
                 string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!emulable({&inp, &x, &y}) || x.dim() != 3 || y.dim() != 3 || !real(beta) || !real(alpha) ||
      x.size(0) != y.size(0) || x.size(2) != y.size(1) || !broadcasts_to(inp, {x.size(1), y.size(2)})) {
    return at::addbmm(inp, x, y, beta, alpha);
  }
  auto product = [&] {  // sum_b x[b] @ y[b]: one GEMM over K = (batch, k)
    const int64_t b = x.size(0), n = x.size(1), k = x.size(2);
    return matmul(x.permute({1, 0, 2}).reshape({n, b * k}), y.reshape({b * k, y.size(2)}), m);
  };
  return add_scaled(inp, product, {x.size(1), y.size(2)}, beta, alpha);
}

Tensor op_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask, double dropout_p,
               bool is_causal, optional<double> scale, bool enable_gqa, string_view method, string_view backend) {
  const auto m = method_of(method, backend);
  if (!emulable({&q, &k, &v}) || dropout_p != 0 || is_causal || enable_gqa) {
    return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
  }
  return scaled_dot_product_attention(q, k, v, mask, scale, m);
}

Tensor op_linear(const Tensor& x, const Tensor& w, const optional<Tensor>& b, string_view method,
                 string_view grad_weight_method, string_view backend) {
  const auto m = method_of(method, backend);
  const auto gw = get_method(std::string(grad_weight_method)).name;
  const bool has_bias = b.has_value() && b->defined();
  if (!fp32(x, w) || (has_bias && !emulable({&*b})) || w.dim() != 2 || x.dim() == 0) return at::linear(x, w, b);
  return linear(x, w, b, m, gw);
}

bool defined_by_python = false;

std::string native_info() {
  const std::string ops =
      defined_by_python
          ? "tcemu native library: the tcemu:: ops were defined before it loaded (by tcemu's Python ops), whose "
            "kernels run"
          : "tcemu native library: the tcemu:: ops are defined by this library (backend \"torch\" runs the reference "
            "algorithm; \"auto\" and \"triton\" the CUDA GEMM kernels below where they apply, unless tcemu's Python, "
            "imported after it, replaced them)";
  return ops + "\n" + aot::describe() + "\n" + decision::describe();
}

}  // namespace

}  // namespace tcemu

#define TCEMU_TAIL "str method, str backend) -> Tensor"

TORCH_LIBRARY_FRAGMENT(tcemu, m) {
  using namespace tcemu;
  auto& dispatcher = c10::Dispatcher::singleton();
  if (dispatcher.findSchema({"tcemu::native_info", ""}).has_value()) return;  // another copy of this library
  m.def("native_info() -> str", &native_info);
  // the small-shape row threshold the library's CUDA products use on a GPU of this name (tests compare tcemu's)
  m.def("native_row_threshold(str device, str method, str role, int N, int K) -> int",
        [](c10::string_view device, c10::string_view method, c10::string_view role, int64_t N, int64_t K) {
          return decision::row_threshold(std::string(device), std::string(method), std::string(role), N, K);
        });
  if (dispatcher.findSchema({"tcemu::matmul", ""}).has_value()) {
    defined_by_python = true;  // defined already: tcemu's Python ops were imported first
    return;
  }
  m.def("matmul(Tensor self, Tensor other, " TCEMU_TAIL, &op_matmul);
  m.def("mm(Tensor self, Tensor mat2, " TCEMU_TAIL, &op_mm);
  m.def("bmm(Tensor self, Tensor mat2, " TCEMU_TAIL, &op_bmm);
  m.def("mv(Tensor self, Tensor vec, " TCEMU_TAIL, &op_mv);
  m.def("dot(Tensor self, Tensor tensor, " TCEMU_TAIL, &op_dot);
  m.def("vdot(Tensor self, Tensor other, " TCEMU_TAIL, &op_vdot);
  m.def("inner(Tensor self, Tensor other, " TCEMU_TAIL, &op_inner);
  m.def("linalg_vecdot(Tensor x, Tensor y, int dim, " TCEMU_TAIL, &op_vecdot);
  m.def("linalg_multi_dot(Tensor[] tensors, " TCEMU_TAIL, &op_multi_dot);
  m.def("chain_matmul(Tensor[] matrices, " TCEMU_TAIL, &op_chain_matmul);
  m.def("bilinear(Tensor input1, Tensor input2, Tensor weight, Tensor? bias, " TCEMU_TAIL, &op_bilinear);
  m.def("tensordot(Tensor self, Tensor other, int[] dims_self, int[] dims_other, " TCEMU_TAIL, &op_tensordot);
  m.def("einsum(str equation, Tensor[] tensors, int[]? path, " TCEMU_TAIL, &op_einsum);
  m.def("addmm(Tensor self, Tensor mat1, Tensor mat2, Scalar beta, Scalar alpha, " TCEMU_TAIL, &op_addmm);
  m.def("addmv(Tensor self, Tensor mat, Tensor vec, Scalar beta, Scalar alpha, " TCEMU_TAIL, &op_addmv);
  m.def("baddbmm(Tensor self, Tensor batch1, Tensor batch2, Scalar beta, Scalar alpha, " TCEMU_TAIL, &op_baddbmm);
  m.def("addbmm(Tensor self, Tensor batch1, Tensor batch2, Scalar beta, Scalar alpha, " TCEMU_TAIL, &op_addbmm);
  m.def("scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, float dropout_p, "
        "bool is_causal, float? scale, bool enable_gqa, " TCEMU_TAIL,
        &op_sdpa);
  m.def("linear(Tensor input, Tensor weight, Tensor? bias, str method, str grad_weight_method, str backend) -> Tensor",
        &op_linear);
}
