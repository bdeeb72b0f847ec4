// The products on CUDA by the ahead-of-time Triton kernels (aot.h), launched as tcemu's Python Triton backend
// launches them (tcemu.emulation.gemm.triton_backend and launch.py): B split once into transposed pieces, A split
// beforehand, the GEMM with its range check, then the range fix-up; small products as IEEE SGEMM (decision.h).
// Where the kernels cannot take a product, the reference runs (the reason is recorded for native_info).
#include "aot.h"
#include "decision.h"
#include "tcemu_native.h"

#include <ATen/ExpandUtils.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <map>
#include <mutex>
#include <tuple>

namespace tcemu {

namespace {

constexpr int64_t kMaxGridYZ = 65535;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool has_kernels(const MethodSpec& spec) {
  return spec.name == "tf32x3" || spec.name == "bf16x3" || spec.name == "bf16x6" || spec.name == "bf16x9";
}

at::ScalarType piece_dtype(const MethodSpec& spec) { return spec.piece_format == "tf32" ? at::kFloat : at::kBFloat16; }

int cuda_index(const Tensor& t) { return t.device().index() < 0 ? 0 : t.device().index(); }

// triton_backend._use_fallback: whether an M x K x N product of `role` ("fwd": a @ W^T; "bwd_input": a @ B) runs as
// IEEE SGEMM, by the GPU's measured table or the FLOP rule (decision.h), cached per shape
bool runs_as_sgemm(int device, const MethodSpec& spec, const char* role, int64_t rows, int64_t N, int64_t K) {
  if (!decision::fallback_enabled()) return false;
  static std::mutex mutex;
  static std::map<std::tuple<int, std::string, std::string, int64_t, int64_t>, int64_t> cache;
  const auto key = std::make_tuple(device, spec.name, std::string(role), N, K);
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(key);
  if (found == cache.end()) {
    found = cache.emplace(key, decision::row_threshold(aot::device_name(device), spec.name, role, N, K)).first;
  }
  return rows < found->second;
}

bool fits_int32(std::initializer_list<int64_t> values) {
  for (auto v : values) {
    if (v > INT32_MAX) return false;
  }
  return true;
}

const aot::KernelImage& kernel(const Tensor& t, const MethodSpec& spec, const char* kind, const std::string& variant) {
  std::string why;
  const auto* k = aot::find(cuda_index(t), spec.name, kind, variant, &why);
  TORCH_CHECK(k != nullptr, "tcemu (native): ", why);  // (availability was checked before the product began)
  return *k;
}

// the GEMM kernel for 16-byte aligned operands where it fits the device, else the general one
const aot::KernelImage& gemm_kernel(const Tensor& t, const MethodSpec& spec, bool bias, bool align) {
  const std::string variant = std::string("bias") + (bias ? "1" : "0") + ".align";
  std::string why;
  if (align) {
    const auto* k = aot::find(cuda_index(t), spec.name, "gemm", variant + "1", &why);
    if (k != nullptr) return *k;
  }
  return kernel(t, spec, "gemm", variant + "0");
}

bool aligned(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// launch.split_t: FP32 b (R, C), any strides -> pieces (C, R), contiguous
std::vector<Tensor> split_t(const Tensor& b, const MethodSpec& spec) {
  const int64_t R = b.size(0), C = b.size(1);
  std::vector<Tensor> pieces;
  for (int i = 0; i < spec.n_pieces; ++i) pieces.push_back(at::empty({C, R}, b.options().dtype(piece_dtype(spec))));
  if (b.numel() == 0) return pieces;
  const auto& k = kernel(b, spec, "split", "-");
  const int64_t step = kMaxGridYZ * k.block_n;  // columns per launch (grid y)
  for (int64_t c0 = 0; c0 < C; c0 += step) {
    const int64_t n = std::min(C, c0 + step) - c0;
    auto q = [&](int i) { return pieces[i < spec.n_pieces ? i : 0].narrow(0, c0, n); };
    aot::launch(k, cuda_index(b), cdiv(R, k.block_m), cdiv(n, k.block_n), 1,
                {aot::Arg::ptr(b.narrow(1, c0, n)), aot::Arg::ptr(q(0)), aot::Arg::ptr(q(1)), aot::Arg::ptr(q(2)),
                 aot::Arg::num(R), aot::Arg::num(n), aot::Arg::num(b.stride(0)), aot::Arg::num(b.stride(1))});
  }
  return pieces;
}

// launch._emu_mm: a3 (Z, M, K) FP32 @ B + bias from B's transposed pieces bt3 (Zb, N, K), Zb in {1, Z}; b_t: FP32 B
// transposed, (Zb, N, K), for the range fix-up, or undefined (the fix-up rebuilds B from the pieces)
Tensor emu(const Tensor& a3, std::vector<Tensor> bt3, const Tensor& b_t, const c10::optional<Tensor>& bias_in,
           const MethodSpec& spec) {
  const int64_t Z = a3.size(0), M = a3.size(1), K = a3.size(2), Zb = bt3[0].size(0), N = bt3[0].size(1);
  const bool has_bias = bias_in.has_value() && bias_in->defined();
  const c10::optional<Tensor> bias = has_bias ? c10::optional<Tensor>(bias_in->contiguous()) : c10::nullopt;
  auto out = at::empty({Z, M, N}, a3.options());
  if (M == 0 || N == 0 || Z == 0) return out;
  if (K == 0) return has_bias ? out.zero_().add_(*bias) : out.zero_();
  for (auto& p : bt3) {
    if (p.stride(2) != 1) p = p.contiguous();
  }
  const int dev = cuda_index(a3);
  // A split beforehand ("p" configurations: the same bits as the in-kernel split), (Z*M, K) contiguous
  auto ap = split_t(a3.reshape({Z * M, K}).mT(), spec);
  auto flags = at::zeros({Z * M}, a3.options().dtype(at::kChar));
  const auto piece = [](const std::vector<Tensor>& v, int i) { return v[i < static_cast<int>(v.size()) ? i : 0]; };
  const int64_t sbz = Zb == 1 ? 0 : bt3[0].stride(0), sbn = bt3[0].stride(1);
  for (int64_t z0 = 0; z0 < Z; z0 += kMaxGridYZ) {  // the batch is the grid's y dimension
    const int64_t zs = std::min(Z, z0 + kMaxGridYZ) - z0;
    std::vector<Tensor> a_s, b_s;
    for (int i = 0; i < 3; ++i) {
      a_s.push_back(piece(ap, i).narrow(0, z0 * M, zs * M));
      b_s.push_back(Zb == 1 ? piece(bt3, i) : piece(bt3, i).narrow(0, z0, zs));
    }
    auto out_s = out.narrow(0, z0, zs);
    auto flags_s = flags.narrow(0, z0 * M, zs * M);
    bool align = K % 16 == 0 && N % 16 == 0 && sbz % 16 == 0 && sbn % 16 == 0 && (M * K) % 16 == 0 &&
                 (M * N) % 16 == 0 && aligned(out_s) && aligned(flags_s) && (!has_bias || aligned(*bias));
    for (int i = 0; i < 3; ++i) align = align && aligned(a_s[i]) && aligned(b_s[i]);
    const auto& k = gemm_kernel(a3, spec, has_bias, align);
    std::vector<aot::Arg> args;
    for (const auto& t : a_s) args.push_back(aot::Arg::ptr(t));
    for (const auto& t : b_s) args.push_back(aot::Arg::ptr(t));
    args.push_back(aot::Arg::ptr(has_bias ? *bias : out_s));
    args.push_back(aot::Arg::ptr(out_s));
    args.push_back(aot::Arg::ptr(flags_s));
    for (int64_t v : {M, N, K, M * K, K, sbz, sbn, M * N, N}) args.push_back(aot::Arg::num(v));
    aot::launch(k, dev, cdiv(M, k.block_m) * cdiv(N, k.block_n), zs, 1, args);
  }
  // the range fix-up: the flagged rows' marked elements computed again (a program without flags returns at once)
  const bool from_pieces = !b_t.defined();
  const auto& f = kernel(a3, spec, "fixup", std::string("bias") + (has_bias ? "1" : "0") + ".pieces" +
                                                  (from_pieces ? "1" : "0"));
  const std::vector<Tensor> src = from_pieces ? bt3 : std::vector<Tensor>{b_t};
  const int64_t fbz = Zb == 1 ? 0 : src[0].stride(0);
  for (int64_t z0 = 0; z0 < Z; z0 += kMaxGridYZ) {
    const int64_t zs = std::min(Z, z0 + kMaxGridYZ) - z0;
    auto a_s = a3.narrow(0, z0, zs);
    auto out_s = out.narrow(0, z0, zs);
    std::vector<aot::Arg> args{aot::Arg::ptr(a_s)};
    for (int i = 0; i < 3; ++i) {
      args.push_back(aot::Arg::ptr(Zb == 1 ? piece(src, i) : piece(src, i).narrow(0, z0, zs)));
    }
    args.push_back(aot::Arg::ptr(has_bias ? *bias : out_s));
    args.push_back(aot::Arg::ptr(out_s));
    args.push_back(aot::Arg::ptr(flags.narrow(0, z0 * M, zs * M)));
    for (int64_t v : {M, N, K, static_cast<int64_t>(spec.range_threshold(K)), a3.stride(0), a3.stride(1),
                      a3.stride(2), fbz, src[0].stride(1), src[0].stride(2), out.stride(0), out.stride(1),
                      out.stride(2)}) {
      args.push_back(aot::Arg::num(v));
    }
    aot::launch(f, dev, cdiv(M, f.block_m), std::min<int64_t>(cdiv(N, f.block_n), 32), zs, args);
  }
  return out;
}

// "" where every kernel a product of the method may launch is there for the device (general variants), else why not
std::string method_refusal(int device, const MethodSpec& spec) {
  auto why = aot::unavailable(device);
  if (!why.empty()) return why;
  for (const char* variant : {"bias0.align0", "bias1.align0"}) {
    if (aot::find(device, spec.name, "gemm", variant, &why) == nullptr) return why;
  }
  for (const char* variant : {"bias0.pieces0", "bias1.pieces0", "bias0.pieces1"}) {
    if (aot::find(device, spec.name, "fixup", variant, &why) == nullptr) return why;
  }
  if (aot::find(device, spec.name, "split", "-", &why) == nullptr) return why;
  return "";
}

// the checks every product makes before it takes the kernels: "" or why the reference runs
std::string refusal(const Tensor& t, const MethodSpec& spec, std::initializer_list<int64_t> sizes) {
  auto why = method_refusal(cuda_index(t), spec);
  if (!why.empty()) return why;
  if (!fits_int32(sizes)) return "a product dimension exceeds int32 (the kernels' sizes are 32-bit)";
  return "";
}

bool takes_kernels(const Tensor& t, const MethodSpec& spec, const std::string& backend,
                   std::initializer_list<int64_t> sizes) {
  if (backend == "torch" || !t.is_cuda() || !has_kernels(spec)) return false;
  const auto why = refusal(t, spec, sizes);
  if (why.empty()) return true;
  aot::note_fallback(spec.name + ": " + why);
  return false;
}

Tensor ieee(const Tensor& a, const Tensor& b, const c10::optional<Tensor>& bias) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  IeeeFp32Guard ieee_fp32;
  if (bias.has_value() && bias->defined()) return at::addmm(*bias, a, b);
  return at::matmul(a, b);
}

}  // namespace

Tensor backend_matmul(const Tensor& a, const Tensor& b, const MethodSpec& spec, const std::string& backend) {
  if (a.dim() < 2 || b.dim() < 2) return mm_reference(a, b, spec);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  auto batch = at::infer_size(a.sizes().slice(0, a.dim() - 2), b.sizes().slice(0, b.dim() - 2));
  int64_t Z = 1;
  for (auto d : batch) Z *= d;
  if (!takes_kernels(a, spec, backend, {M * Z, N * Z, K})) return mm_reference(a, b, spec);
  if (runs_as_sgemm(cuda_index(a), spec, "bwd_input", M * Z, N, K)) return ieee(a, b, c10::nullopt);
  auto with = [&](std::vector<int64_t> shape, int64_t r, int64_t c) {
    shape.push_back(r);
    shape.push_back(c);
    return shape;
  };
  if (b.dim() == 2) {  // one weight-like b: the batch folded into M
    auto pieces = split_t(b, spec);
    for (auto& p : pieces) p = p.unsqueeze(0);
    auto a2 = a.expand(with(batch, M, K)).reshape({1, -1, K});
    return emu(a2, pieces, b.mT().unsqueeze(0), c10::nullopt, spec).view(with(batch, M, N));
  }
  auto a3 = a.expand(with(batch, M, K)).reshape({-1, M, K});
  auto b3 = b.reshape({-1, K, N});
  const int64_t Zb = b3.size(0);
  // every entry's pieces from one split of (K, Zb * N): its transposed pieces are (Zb * N, K) = (Zb, N, K)
  auto stacked = split_t(b3.permute({1, 0, 2}).reshape({K, Zb * N}), spec);
  for (auto& p : stacked) p = p.view({Zb, N, K});
  Tensor b_t = b3.mT();
  if (Zb != Z) {  // b broadcast over the batch: the fix-up rebuilds it from the pieces
    auto b_batch = b.sizes().slice(0, b.dim() - 2).vec();
    for (auto& p : stacked) p = p.view(with(b_batch, N, K)).expand(with(batch, N, K)).reshape({-1, N, K});
    b_t = Tensor();
  }
  return emu(a3, stacked, b_t, c10::nullopt, spec).view(with(batch, M, N));
}

Tensor backend_linear(const Tensor& x, const Tensor& w, const c10::optional<Tensor>& bias, const MethodSpec& spec,
                      const std::string& backend) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const bool has_bias = bias.has_value() && bias->defined();
  if (!takes_kernels(x, spec, backend, {M, N, K})) {
    auto y = mm_reference(x, w.mT(), spec);
    return has_bias ? y + *bias : y;
  }
  if (runs_as_sgemm(cuda_index(x), spec, "fwd", M, N, K)) return ieee(x, w.t(), bias);
  auto pieces = split_t(w.t(), spec);
  for (auto& p : pieces) p = p.unsqueeze(0);
  return emu(x.unsqueeze(0), pieces, w.unsqueeze(0), bias, spec).squeeze(0);
}

Tensor backend_linear_input_grad(const Tensor& grad, const Tensor& w, const MethodSpec& spec,
                                 const std::string& backend) {
  const int64_t M = grad.size(0), N = w.size(0), K = w.size(1);
  if (!takes_kernels(grad, spec, backend, {M, N, K})) return mm_reference(grad, w, spec);
  if (runs_as_sgemm(cuda_index(grad), spec, "bwd_input", M, K, N)) return ieee(grad, w, c10::nullopt);
  auto pieces = split_t(w, spec);
  for (auto& p : pieces) p = p.unsqueeze(0);
  return emu(grad.unsqueeze(0), pieces, w.t().unsqueeze(0), c10::nullopt, spec).squeeze(0);
}

}  // namespace tcemu
