"""Gradients of tcemu.matmul / tcemu.linear against FP64 autograd; configurable weight-gradient method."""

import pytest
import torch

import tcemu
from tcemu.testing import normwise_bound, relative_errors


def fp64_grads(fn, *tensors):
    t64 = [t.detach().double().requires_grad_() for t in tensors]
    out = fn(*t64)
    g = torch.Generator().manual_seed(9)
    go = torch.randn(out.shape, generator=g, dtype=torch.float64)
    out.backward(go)
    return out.detach(), [t.grad for t in t64], go


@pytest.mark.parametrize("name", ["fp32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"])
@pytest.mark.parametrize("shapes", [((40, 300), (300, 24)), ((3, 20, 300), (300, 24)), ((2, 20, 300), (2, 300, 24)),
                                    ((300,), (300, 24))])
def test_matmul_gradients_match_fp64(name, shapes):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(shapes[0], generator=g).requires_grad_()
    b = torch.randn(shapes[1], generator=g).requires_grad_()
    out64, (ga64, gb64), go = fp64_grads(torch.matmul, a, b)
    out = tcemu.matmul(a, b, name)
    out.backward(go.float())
    # each gradient is itself a product of K = the contracted size
    assert relative_errors(a.grad, ga64)[0] <= normwise_bound(name, go.shape[-1] * 3)
    assert relative_errors(b.grad, gb64)[0] <= normwise_bound(name, max(a.shape[0] if a.dim() > 1 else 1, 60))
    assert a.grad.shape == a.shape and b.grad.shape == b.shape


@pytest.mark.parametrize("name", ["tf32x3", "bf16x6"])
def test_linear_gradients_match_fp64(name):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 7, 128, generator=g).requires_grad_()
    w = torch.randn(64, 128, generator=g).requires_grad_()
    bias = torch.randn(64, generator=g).requires_grad_()
    out64, grads64, go = fp64_grads(torch.nn.functional.linear, x, w, bias)
    out = tcemu.linear(x, w, bias, method=name)
    assert relative_errors(out, out64)[0] <= normwise_bound(name, 128)
    out.backward(go.float())
    for got, want, k in zip((x.grad, w.grad, bias.grad), grads64, (64, 35, 35)):
        assert relative_errors(got, want)[0] <= normwise_bound(name, k)


def test_weight_gradient_method_is_configurable():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 256, generator=g).requires_grad_()
    w = torch.randn(32, 256, generator=g).requires_grad_()
    _, (gx64, gw64), go = fp64_grads(lambda x, w: torch.nn.functional.linear(x, w), x, w)
    tcemu.linear(x, w, method="bf16x6", grad_weight_method="tf32").backward(go.float())
    err_x, _ = relative_errors(x.grad, gx64)
    err_w, _ = relative_errors(w.grad, gw64)
    assert err_x <= normwise_bound("bf16x6", 32)  # input gradient: the forward method
    assert err_w > 1e-4  # weight gradient: single-pass TF32 accuracy, as asked
    assert err_w <= normwise_bound("tf32", 64)


def test_double_backward_forces_like_training():
    """d/dw of a gradient (training on forces) goes through the emulated ops again."""
    g = torch.Generator().manual_seed(3)
    pos = torch.randn(10, 16, generator=g, dtype=torch.float64)
    w1 = torch.randn(32, 16, generator=g, dtype=torch.float64)
    w2 = torch.randn(1, 32, generator=g, dtype=torch.float64)

    def energy(p, w1, w2, lin):
        return lin(torch.tanh(lin(p, w1)), w2).sum()

    def run(lin, dtype):
        p = pos.to(dtype).clone().requires_grad_()
        a, b = w1.to(dtype).clone().requires_grad_(), w2.to(dtype).clone().requires_grad_()
        e = energy(p, a, b, lin)
        (forces,) = torch.autograd.grad(e, p, create_graph=True)
        forces.square().sum().backward()
        return a.grad.double(), b.grad.double()

    ref = run(lambda x, w: torch.nn.functional.linear(x, w), torch.float64)
    got = run(lambda x, w: tcemu.linear(x, w, method="tf32x3"), torch.float32)
    for r, o in zip(ref, got):
        assert relative_errors(o, r)[0] < 1e-5


def test_no_grad_path_and_requires_grad_flags():
    a = torch.randn(4, 8)
    b = torch.randn(8, 3, requires_grad=True)
    with torch.no_grad():
        assert not tcemu.matmul(a, b).requires_grad
    out = tcemu.matmul(a, b)
    assert out.requires_grad
    out.sum().backward()
    assert b.grad is not None and a.grad is None


def _saved_storages(fn):
    """Data pointers of the storages autograd keeps for the backward pass of ``fn()``."""
    saved = set()

    def pack(t):
        saved.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, saved


@pytest.mark.parametrize("frozen", [True, False])
def test_linear_keeps_its_input_only_for_the_weight_gradient(frozen):
    """With frozen weights (an exported MD potential) the layer input is not saved for backward, as autograd's
    own linear does; it once was, which cost 1.5x FP32's peak memory in an eager PET step."""
    from tcemu.emulation.linear import EmulatedLinear

    torch.manual_seed(0)
    layer = EmulatedLinear.from_linear(torch.nn.Linear(32, 16), "tf32x3")
    layer.requires_grad_(not frozen)
    x = torch.randn(10, 32, requires_grad=True)
    y, saved = _saved_storages(lambda: layer(x))
    assert (x.untyped_storage().data_ptr() in saved) == (not frozen)
    y.square().sum().backward()
    x64, w64 = x.detach().double().requires_grad_(), layer.weight.detach().double().requires_grad_(not frozen)
    (x64 @ w64.T + layer.bias.detach().double()).square().sum().backward()
    assert relative_errors(x.grad, x64.grad)[0] <= normwise_bound("tf32x3", 32 * 3)
    if not frozen:
        assert relative_errors(layer.weight.grad, w64.grad)[0] <= normwise_bound("tf32x3", 60)


@pytest.mark.parametrize("grad_of", ["a", "b"])
def test_matmul_keeps_an_operand_only_for_the_other_gradient(grad_of):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(3, 20, 40, generator=g, requires_grad=grad_of == "a")
    b = torch.randn(40, 12, generator=g, requires_grad=grad_of == "b")
    out, saved = _saved_storages(lambda: tcemu.matmul(a, b, "bf16x6"))
    kept, dropped = (b, a) if grad_of == "a" else (a, b)
    assert kept.untyped_storage().data_ptr() in saved and dropped.untyped_storage().data_ptr() not in saved
    go = torch.randn(out.shape, generator=g)
    out.backward(go)
    a64, b64 = a.detach().double().requires_grad_(grad_of == "a"), b.detach().double().requires_grad_(grad_of == "b")
    (a64 @ b64).backward(go.double())
    grad, grad64 = (a.grad, a64.grad) if grad_of == "a" else (b.grad, b64.grad)
    assert grad.shape == (a if grad_of == "a" else b).shape
    assert relative_errors(grad, grad64)[0] <= normwise_bound("bf16x6", 60 * 3)
