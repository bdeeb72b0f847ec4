// The differentiable products (tcemu.emulation.ops): autograd functions whose backward calls the emulated
// products again, so that double backward (training on forces) is emulated too.
#include "tcemu_native.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

namespace tcemu {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

Tensor plain_matmul(const Tensor& a, const Tensor& b, const GemmConfig& cfg) {
  return backend_matmul(a, b, get_method(cfg.forward), cfg.backend);
}

GemmConfig config_of(AutogradContext* ctx) {
  return {ctx->saved_data["forward"].toStringRef(), ctx->saved_data["grad_input"].toStringRef(),
          ctx->saved_data["grad_weight"].toStringRef(), ctx->saved_data["backend"].toStringRef()};
}

void keep_config(AutogradContext* ctx, const GemmConfig& cfg) {
  ctx->saved_data["forward"] = cfg.forward;
  ctx->saved_data["grad_input"] = cfg.grad_input;
  ctx->saved_data["grad_weight"] = cfg.grad_weight;
  ctx->saved_data["backend"] = cfg.backend;
}

// ops._EmulatedMatmul
struct EmulatedMatmul : public torch::autograd::Function<EmulatedMatmul> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b, const GemmConfig& cfg) {
    // each operand is kept only for the other's gradient, as autograd does for torch.matmul
    ctx->save_for_backward({b.requires_grad() ? a : Tensor(), a.requires_grad() ? b : Tensor()});
    ctx->saved_data["a_shape"] = a.sizes().vec();
    ctx->saved_data["b_shape"] = b.sizes().vec();
    keep_config(ctx, cfg);
    return plain_matmul(a, b, cfg);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& a = saved[0];
    const auto& b = saved[1];
    const auto& grad = grads[0];
    const auto cfg = config_of(ctx);
    Tensor grad_a, grad_b;
    if (!grad.defined()) return {grad_a, grad_b, Tensor()};
    if (ctx->needs_input_grad(0)) {
      grad_a = matmul_nd(grad, b.mT(), cfg.only(cfg.grad_input)).sum_to_size(ctx->saved_data["a_shape"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      grad_b = matmul_nd(a.mT(), grad, cfg.only(cfg.grad_weight)).sum_to_size(ctx->saved_data["b_shape"].toIntVector());
    }
    return {grad_a, grad_b, Tensor()};
  }
};

Tensor linear_forward(const Tensor& x, const Tensor& weight, const c10::optional<Tensor>& bias,
                      const GemmConfig& cfg) {
  return backend_linear(x, weight, bias, get_method(cfg.forward), cfg.backend);
}

// ops._EmulatedLinear: y = x @ W^T + bias on 2-D x
struct EmulatedLinear : public torch::autograd::Function<EmulatedLinear> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const c10::optional<Tensor>& bias,
                        const GemmConfig& cfg) {
    // x only for the weight gradient: frozen weights keep no inputs
    ctx->save_for_backward({weight.requires_grad() ? x : Tensor(), weight});
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    keep_config(ctx, cfg);
    return linear_forward(x, weight, bias, cfg);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const auto& grad = grads[0];
    const auto cfg = config_of(ctx);
    Tensor grad_x, grad_w, grad_b;
    if (!grad.defined()) return {grad_x, grad_w, grad_b, Tensor()};
    if (ctx->needs_input_grad(0)) {
      if (at::GradMode::is_enabled() || cfg.grad_input != cfg.forward) {
        grad_x = matmul_nd(grad, weight, cfg.only(cfg.grad_input));  // create_graph: differentiable again
      } else {
        grad_x = backend_linear_input_grad(grad, weight, get_method(cfg.forward), cfg.backend);
      }
    }
    if (ctx->needs_input_grad(1)) grad_w = matmul_nd(grad.mT(), x, cfg.only(cfg.grad_weight));
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) grad_b = grad.sum(0);
    return {grad_x, grad_w, grad_b, Tensor()};
  }
};

Tensor linear_2d(const Tensor& x, const Tensor& weight, const c10::optional<Tensor>& bias, const GemmConfig& cfg) {
  if (x.numel() == 0 || weight.numel() == 0) {
    // M, N or K is zero: an empty result, or the bias alone (an empty sum is exactly 0)
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    return at::linear(x, weight, bias);
  }
  const bool needs_grad = at::GradMode::is_enabled() &&
                          (x.requires_grad() || weight.requires_grad() ||
                           (bias.has_value() && bias->defined() && bias->requires_grad()));
  if (needs_grad) return EmulatedLinear::apply(x, weight, bias, cfg);
  return linear_forward(x, weight, bias, cfg);
}

}  // namespace

namespace {
thread_local std::string backend_of_op = "torch";
}  // namespace

const std::string& current_backend() { return backend_of_op; }
void set_current_backend(const std::string& backend) { backend_of_op = backend; }

bool emulable(std::initializer_list<const Tensor*> tensors) {
  c10::optional<c10::Device> device;
  for (const Tensor* t : tensors) {
    if (!t->defined() || t->scalar_type() != at::kFloat || !(t->is_cpu() || t->is_cuda())) return false;
    if (!device) {
      device = t->device();
    } else if (t->device() != *device) {
      return false;
    }
    if (t->layout() != at::kStrided) return false;
  }
  return true;
}

Tensor matmul_nd(const Tensor& a, const Tensor& b, const GemmConfig& cfg) {
  if (at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())) {
    return EmulatedMatmul::apply(a, b, cfg);
  }
  return plain_matmul(a, b, cfg);
}

Tensor matmul(const Tensor& a, const Tensor& b, const std::string& method) {
  TORCH_CHECK_TYPE(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
                   "tcemu.matmul (native) emulates FP32 products and takes float32 tensors only");
  TORCH_CHECK(a.dim() > 0 && b.dim() > 0, "tcemu.matmul: both arguments need at least 1 dimension (as torch.matmul)");
  const auto cfg = GemmConfig::one(get_method(method).name);
  const bool squeeze_rows = a.dim() == 1, squeeze_cols = b.dim() == 1;
  auto a2 = squeeze_rows ? a.unsqueeze(0) : a;
  auto b2 = squeeze_cols ? b.unsqueeze(-1) : b;
  TORCH_CHECK(a2.size(-1) == b2.size(-2), "tcemu.matmul: shapes ", a.sizes(), " and ", b.sizes(),
              " cannot be multiplied (", a2.size(-1), " != ", b2.size(-2), ")");
  if (a2.numel() == 0 || b2.numel() == 0) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    return at::matmul(a, b);
  }
  auto out = matmul_nd(a2, b2, cfg);
  if (squeeze_cols) out = out.squeeze(-1);
  if (squeeze_rows) out = out.squeeze(squeeze_cols ? -1 : -2);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const c10::optional<Tensor>& bias, const std::string& method,
              const std::string& grad_weight_method) {
  const bool has_bias = bias.has_value() && bias->defined();
  TORCH_CHECK_VALUE(!has_bias || (bias->scalar_type() == at::kFloat && bias->device() == weight.device()),
                    "tcemu.linear (native): the bias must be a float32 tensor on the weight's device (",
                    weight.device(), ")");
  TORCH_CHECK_VALUE(x.size(-1) == weight.size(1), "tcemu.linear: input has ", x.size(-1), " features but weight ",
                    weight.sizes(), " expects ", weight.size(1));
  TORCH_CHECK_VALUE(!has_bias || (bias->dim() == 1 && bias->size(0) == weight.size(0)),
                    "tcemu.linear: bias must have shape (", weight.size(0), ",), got ", bias->sizes());
  const auto& fwd = get_method(method).name;
  GemmConfig cfg{fwd, fwd, get_method(grad_weight_method).name, current_backend()};
  auto lead = x.sizes().slice(0, x.dim() - 1).vec();
  int64_t rows = 1;
  for (auto n : lead) rows *= n;
  auto y = linear_2d(x.reshape({rows, x.size(-1)}), weight, bias, cfg);
  lead.push_back(weight.size(0));
  return y.reshape(lead);
}

}  // namespace tcemu
