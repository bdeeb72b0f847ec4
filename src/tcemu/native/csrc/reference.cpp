// The reference emulated product (tcemu.emulation.split and tcemu.emulation.reference), op for op.
#include "tcemu_native.h"

#include <ATen/Context.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace tcemu {

namespace {

constexpr int64_t kMag = 0x7FFFFFFF;
constexpr int64_t kSign = -0x80000000LL;  // 0x80000000 as int32
constexpr int64_t kInfBits = 0x7F800000;

struct PieceFormat {
  int64_t keep, max_bits, min_sub_bits;
};
constexpr PieceFormat kTF32{~0x1FFFLL, 0x7F7FE000, 0x2000};
constexpr PieceFormat kBF16{~0xFFFFLL, 0x7F7F0000, 0x10000};

Tensor finish(const Tensor& xc, const Tensor& bits, const Tensor& mag, Tensor rounded, const PieceFormat& fmt,
              bool keep_nonzero) {
  auto finite = mag < kInfBits;
  // saturate: a finite input never becomes Inf
  rounded = at::where(rounded >= kInfBits, at::full_like(rounded, fmt.max_bits), rounded);
  if (keep_nonzero) {  // a nonzero input keeps a nonzero high piece (so Inf * tiny stays Inf, not NaN)
    rounded = at::where(rounded.eq(0).logical_and(mag.ne(0)), at::full_like(rounded, fmt.min_sub_bits), rounded);
  }
  auto out = at::bitwise_or(at::bitwise_and(bits, kSign), rounded);
  return at::where(finite, out.view(at::kFloat), xc);
}

Tensor finite_or_zero(const Tensor& x) {
  return at::where(at::isfinite(x), x, at::zeros({}, x.options()));
}

// 2^e as float32 for integer e in [-126, 127], from the exponent bits (exact)
Tensor power_of_two(const Tensor& e) {
  return at::bitwise_left_shift(e.to(at::kInt) + 127, 23).view(at::kFloat);
}

// k = max(0, e - threshold) per slice along dim (kept), e the exponent of its largest finite magnitude
Tensor range_scale_exponents(const Tensor& x, int64_t dim, int threshold) {
  auto largest = at::where(at::isfinite(x), x.abs(), at::zeros({}, x.options()));
  largest = largest.amax({dim}, /*keepdim=*/true).contiguous();
  auto exponent = at::bitwise_and(at::bitwise_right_shift(largest.view(at::kInt), 23), 0xFF) - 127;
  return (exponent - threshold).clamp_min(0);
}

// x * 2^-k, a nonzero value never becoming zero (it keeps the smallest subnormal of its sign)
Tensor scale_down(const Tensor& x, const Tensor& k) {
  auto y = x * power_of_two(-k);
  const double tiny = std::ldexp(1.0, -149);
  auto tinies = at::where(at::signbit(x), at::scalar_tensor(-tiny, x.options()), at::scalar_tensor(tiny, x.options()));
  return at::where(y.eq(0).logical_and(x.ne(0)), tinies, y);
}

// (C, bad): the method's levels combined as the spec says, and where some level or the result is not finite
std::pair<Tensor, Tensor> emulate(const std::vector<Tensor>& pa, const std::vector<Tensor>& pb,
                                  const MethodSpec& spec) {
  auto level_sum = [&](const std::vector<std::pair<int, int>>& products) {
    Tensor acc;
    for (const auto& [i, j] : products) {  // accumulation order of the spec: small first
      auto p = ieee_fp32_matmul(pa[i], pb[j]);
      acc = acc.defined() ? acc + p : p;
    }
    return acc;
  };
  const auto levels = spec.levels();
  auto high = level_sum(levels[0]);
  auto bad = at::isfinite(high).logical_not();
  if (levels.size() == 1) return {high, bad};
  const double down = std::ldexp(1.0, -spec.shift);
  auto total = level_sum(levels.back());
  bad = bad.logical_or(at::isfinite(total).logical_not());
  total = finite_or_zero(total);
  for (int64_t lvl = static_cast<int64_t>(levels.size()) - 2; lvl > 0; --lvl) {
    total = total * down;
    if (!levels[lvl].empty()) {
      auto corr = level_sum(levels[lvl]);
      bad = bad.logical_or(at::isfinite(corr).logical_not());
      total = total + finite_or_zero(corr);
    }
  }
  auto out = total * down + high;
  return {out, bad.logical_or(at::isfinite(out).logical_not())};
}

// out with its bad elements computed again by mm_range_scaled (the rows, or batch entries, that hold them)
Tensor fix(const Tensor& a, const Tensor& b, const MethodSpec& spec, const Tensor& out, const Tensor& bad) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  using at::indexing::TensorIndex;
  if (b.dim() == 2) {
    auto flat = out.reshape({-1, N}).clone();
    auto bad2 = bad.reshape({-1, N});
    auto idx = bad2.any(-1).nonzero().squeeze(1);
    auto bad_rows = bad2.index({idx});
    auto scaled = mm_range_scaled(a.reshape({-1, K}).index({idx}), b, spec);
    flat.index_put_({idx}, at::where(bad_rows, scaled, flat.index({idx})));
    return flat.view(out.sizes());
  }
  auto batch = out.sizes().slice(0, out.dim() - 2).vec();
  auto with = [&](int64_t r, int64_t c) {
    auto shape = batch;
    shape.push_back(r);
    shape.push_back(c);
    return shape;
  };
  auto a3 = a.expand(with(M, K)).reshape({-1, M, K});
  auto b3 = b.expand(with(K, N)).reshape({-1, K, N});
  auto out3 = out.reshape({-1, M, N}).clone();
  auto bad3 = bad.reshape({-1, M, N});
  auto z = bad3.flatten(1).any(-1).nonzero().squeeze(1);
  auto scaled = mm_range_scaled(a3.index({z}), b3.index({z}), spec);
  out3.index_put_({z}, at::where(bad3.index({z}), scaled, out3.index({z})));
  return out3.view(out.sizes());
}

}  // namespace

Tensor round_to_piece(const Tensor& x, const std::string& piece_format, bool keep_nonzero) {
  if (piece_format == "fp32") return x;
  TORCH_CHECK_TYPE(x.scalar_type() == at::kFloat, "tcemu (native): splitting needs a float32 tensor, got ",
                   x.scalar_type());
  auto xc = x.contiguous();
  auto bits = xc.view(at::kInt);
  auto mag = at::bitwise_and(bits, kMag);
  Tensor rounded;
  const PieceFormat* fmt;
  if (piece_format == "tf32") {  // nearest, ties away from zero (cvt.rna.tf32.f32)
    rounded = at::bitwise_and(mag + 0x1000, kTF32.keep);
    fmt = &kTF32;
  } else {  // bf16: nearest, ties to even (cvt.rn.bf16.f32)
    rounded = at::bitwise_and(mag + 0x7FFF + at::bitwise_and(at::bitwise_right_shift(mag, 16), 1), kBF16.keep);
    fmt = &kBF16;
  }
  return finish(xc, bits, mag, rounded, *fmt, keep_nonzero).view(x.sizes());
}

std::vector<Tensor> split(const Tensor& x, const MethodSpec& spec) {
  if (spec.piece_format == "fp32") return {x};
  const double scale = std::ldexp(1.0, spec.shift);
  std::vector<Tensor> pieces{round_to_piece(x, spec.piece_format, /*keep_nonzero=*/true)};
  Tensor residual = x;
  for (int i = 1; i < spec.n_pieces; ++i) {
    residual = (residual - pieces.back()) * scale;  // exact: Sterbenz, then a power of two
    pieces.push_back(round_to_piece(residual, spec.piece_format, false));
  }
  return pieces;
}

Tensor ieee_fp32_matmul(const Tensor& a, const Tensor& b) {
  // autocast off (an emulated product is float32 whatever autocast says), TF32 off for cuBLAS
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  IeeeFp32Guard ieee;
  return at::matmul(a, b);
}

Tensor mm_range_scaled(const Tensor& a, const Tensor& b, const MethodSpec& spec) {
  const int threshold = spec.range_threshold(a.size(-1));
  auto ka = range_scale_exponents(a, -1, threshold);
  auto lb = range_scale_exponents(b, -2, threshold);
  auto scaled = emulate(split(scale_down(a, ka), spec), split(scale_down(b, lb), spec), spec).first;
  return scaled * power_of_two(ka) * power_of_two(lb);
}

Tensor mm_reference(const Tensor& a, const Tensor& b, const MethodSpec& spec) {
  if (spec.piece_format == "fp32") return ieee_fp32_matmul(a, b);
  TORCH_CHECK(!(spec.name == "tf32" && a.is_cuda()),
              "tcemu (native): method tf32 on CUDA is cuBLAS's own TF32 in tcemu's Python path, which this library "
              "does not run; emulate with tf32x3 or bf16x3/x6/x9, or run the model unemulated with TF32 allowed");
  auto [out, bad] = emulate(split(a, spec), split(b, spec), spec);
  if (bad.any().item<bool>()) out = fix(a, b, spec, out, bad);
  return out;
}

}  // namespace tcemu
