// Contractions lowered to the emulated matmul (tcemu.emulation.contractions) and the reference attention
// (tcemu.emulation.attention.sdpa_reference).
#include "tcemu_native.h"

#include <cmath>
#include <limits>

namespace tcemu {

Tensor tensordot(const Tensor& a, const Tensor& b, std::vector<int64_t> da, std::vector<int64_t> db,
                 const std::string& method) {
  for (auto& d : da) d = ((d % a.dim()) + a.dim()) % a.dim();
  for (auto& d : db) d = ((d % b.dim()) + b.dim()) % b.dim();
  std::vector<int64_t> free_a, free_b, perm_a, perm_b, out_shape;
  int64_t k = 1;
  for (auto d : da) k *= a.size(d);
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (std::find(da.begin(), da.end(), d) == da.end()) free_a.push_back(d);
  }
  for (int64_t d = 0; d < b.dim(); ++d) {
    if (std::find(db.begin(), db.end(), d) == db.end()) free_b.push_back(d);
  }
  perm_a = free_a;
  perm_a.insert(perm_a.end(), da.begin(), da.end());
  perm_b = db;
  perm_b.insert(perm_b.end(), free_b.begin(), free_b.end());
  for (auto d : free_a) out_shape.push_back(a.size(d));
  for (auto d : free_b) out_shape.push_back(b.size(d));
  auto a2 = a.permute(perm_a).reshape({-1, k});
  auto b2 = b.permute(perm_b).reshape({k, -1});
  return matmul(a2, b2, method).reshape(out_shape);
}

Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const c10::optional<Tensor>& bias,
                const std::string& method) {
  const int64_t out_f = weight.size(0), in1 = weight.size(1), in2 = weight.size(2);
  auto a = x1.reshape({-1, in1});
  auto b = x2.reshape({-1, in2});
  auto t = matmul(a, weight.permute({1, 0, 2}).reshape({in1, out_f * in2}), method);
  auto y = matmul(t.reshape({-1, out_f, in2}), b.unsqueeze(-1), method).squeeze(-1);
  if (bias.has_value() && bias->defined()) y = y + *bias;
  auto shape = x1.sizes().slice(0, x1.dim() - 1).vec();
  shape.push_back(out_f);
  return y.reshape(shape);
}

Tensor multi_dot(const std::vector<Tensor>& tensors, const std::string& method) {
  std::vector<Tensor> mats(tensors);
  if (mats.front().dim() == 1) mats.front() = mats.front().unsqueeze(0);
  if (mats.back().dim() == 1) mats.back() = mats.back().unsqueeze(-1);
  std::vector<int64_t> want;
  if (tensors.front().dim() == 2) want.push_back(mats.front().size(0));
  if (tensors.back().dim() == 2) want.push_back(mats.back().size(1));
  // the matrix-chain order of least cost (contractions._chain_order)
  std::vector<int64_t> dims{mats[0].size(0)};
  for (const auto& m : mats) dims.push_back(m.size(1));
  const size_t n = mats.size();
  std::vector<std::vector<double>> cost(n, std::vector<double>(n, 0));
  std::vector<std::vector<size_t>> split(n, std::vector<size_t>(n, 0));
  for (size_t length = 1; length < n; ++length) {
    for (size_t i = 0; i + length < n; ++i) {
      size_t j = i + length;
      cost[i][j] = std::numeric_limits<double>::infinity();
      for (size_t k = i; k < j; ++k) {
        double c = cost[i][k] + cost[k + 1][j] + static_cast<double>(dims[i]) * dims[k + 1] * dims[j + 1];
        if (c < cost[i][j]) {
          cost[i][j] = c;
          split[i][j] = k;
        }
      }
    }
  }
  std::function<Tensor(size_t, size_t)> product = [&](size_t i, size_t j) -> Tensor {
    if (i == j) return mats[i];
    size_t k = split[i][j];
    return matmul(product(i, k), product(k + 1, j), method);
  };
  return product(0, n - 1).reshape(want);
}

namespace {

// whether torch's own SDPA zeroes a query row whose keys are all masked out (torch 2.5+) rather than giving NaN
bool torch_zeroes_dead_rows() {
  static const bool zeroes = [] {
    at::NoGradGuard no_grad;
    auto one = at::ones({1, 1, 1});
    auto out = at::scaled_dot_product_attention(one, one, one, at::zeros({1, 1}, at::kBool));
    return out.item<float>() == 0;
  }();
  return zeroes;
}

Tensor softmax_keys(const Tensor& s) {
  if (!torch_zeroes_dead_rows()) return at::softmax(s, -1);
  auto dead = s.eq(-std::numeric_limits<double>::infinity()).all(-1, /*keepdim=*/true);
  return at::softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const c10::optional<Tensor>& attn_mask, c10::optional<double> scale,
                                    const std::string& method) {
  for (const auto* t : {&q, &k, &v}) {
    TORCH_CHECK_VALUE(t->dim() >= 2, "tcemu.scaled_dot_product_attention: query, key and value need at least 2 "
                                     "dimensions (..., L, D)");
  }
  TORCH_CHECK_VALUE(q.size(-1) == k.size(-1) && k.sizes().slice(0, k.dim() - 1) == v.sizes().slice(0, v.dim() - 1),
                    "tcemu.scaled_dot_product_attention: shapes query ", q.sizes(), ", key ", k.sizes(), ", value ",
                    v.sizes(), " do not form an attention");
  Tensor mask;
  if (attn_mask.has_value() && attn_mask->defined()) {
    mask = *attn_mask;
    TORCH_CHECK_TYPE(mask.scalar_type() == at::kFloat || mask.scalar_type() == at::kBool,
                     "tcemu.scaled_dot_product_attention: attn_mask must be float32 (added to the scores) or bool "
                     "(True = keep), got ", mask.scalar_type());
    TORCH_CHECK_VALUE(mask.device() == q.device(), "tcemu.scaled_dot_product_attention: all tensors must be on one "
                                                   "device");
    if (mask.scalar_type() == at::kBool) {
      const double minus_inf = -std::numeric_limits<double>::infinity();
      mask = at::zeros(mask.sizes(), q.options()).masked_fill(mask.logical_not(), minus_inf);
    }
    if (q.dim() == 4 && mask.dim() < 4) {  // as torch broadcasts it (a view: gradients flow back)
      std::vector<int64_t> shape(4 - mask.dim(), 1);
      for (auto n : mask.sizes()) shape.push_back(n);
      mask = mask.reshape(shape);
    }
  }
  // 1 / sqrt(D) as torch; for D = 0 the scores are empty sums, 0 whatever the scale
  const double default_scale = q.size(-1) ? 1.0 / std::sqrt(static_cast<double>(q.size(-1))) : 1.0;
  const double s_scale = scale.has_value() ? *scale : default_scale;
  auto s = matmul(q, k.transpose(-2, -1), method) * s_scale;
  if (mask.defined()) s = s + mask;
  return matmul(softmax_keys(s), v, method);
}

}  // namespace tcemu
