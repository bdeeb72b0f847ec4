"""An emulated layer never computes with weights other than its current ones.

Every way a weight changes is tried: in-place edits that bump the version counter and edits that do not
(``.data``, a numpy view, fused optimizers), weights recomputed at each forward (parametrizations, weight
norm), state-dict loads, and a change between forward and backward. After each, the forward (with and without
autograd) and the input gradient must be within the rigorous bound of the product with the *current* weight;
a stale weight is off by O(1), far outside it.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tcemu
from tcemu import EmulatedLinear
from tcemu.testing import assert_within_elementwise_bound

METHOD = "tf32x3"


def layer(seed: int = 0, *, backend: str = "auto") -> EmulatedLinear:
    torch.manual_seed(seed)
    return EmulatedLinear.from_linear(nn.Linear(24, 6, bias=False), METHOD, backend=backend)


def inputs(seed: int = 1) -> torch.Tensor:
    return torch.randn(5, 24, generator=torch.Generator().manual_seed(seed))


def assert_uses_current_weight(mod: nn.Module, x: torch.Tensor) -> None:
    """Forward without and with autograd, and the input gradient, all from ``mod.weight`` as it is now."""
    weight = mod.weight.detach().clone()
    with torch.no_grad():
        assert_within_elementwise_bound(mod(x), x, weight.T, METHOD)
    xg = x.clone().requires_grad_(True)
    y = mod(xg)
    assert_within_elementwise_bound(y.detach(), x, weight.T, METHOD)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(2)).to(y.device)
    y.backward(dy)
    assert_within_elementwise_bound(xg.grad, dy, weight, METHOD)


def test_in_place_edits_with_and_without_a_version_bump():
    x = inputs()
    for edit in (
        lambda w: w.mul_(2),  # autograd-visible in-place op (under no_grad)
        lambda w: w.data.mul_(2),  # .data: no version bump
        lambda w: w.data.__setitem__(0, 5.0),  # .data[i] = ...
        lambda w: w.detach().numpy().__setitem__((0, 0), 7.0),  # a numpy view shares the storage
        lambda w: w.data.copy_(torch.randn(w.shape)),
    ):
        mod = layer()
        assert_uses_current_weight(mod, x)
        with torch.no_grad():
            edit(mod.weight)
        assert_uses_current_weight(mod, x)


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad])
@pytest.mark.parametrize("flag", ["fused", "foreach", "plain"])
def test_optimizer_steps_fused_foreach_and_plain(opt_cls, flag):
    """Fused optimizers update the weight without bumping its version counter (CPU runs fused for these four)."""
    mod, x = layer(), inputs()
    kwargs = {} if flag == "plain" else {flag: True}
    opt = opt_cls(mod.parameters(), lr=0.5, **kwargs)
    for _ in range(2):
        opt.zero_grad()
        mod(x).square().sum().backward()
        opt.step()
        assert_uses_current_weight(mod, x)


def test_weight_changed_between_forward_and_backward_is_what_torch_backward_sees():
    """A ``.data`` edit between forward and backward: torch's own linear backward reads the edited weight (no
    version bump, no error); the emulated backward must read the same weight, not pieces split in forward."""
    mod, x = layer(), inputs()
    plain = nn.Linear(24, 6, bias=False)
    plain.weight.data.copy_(mod.weight.data)
    dy = torch.randn(5, 6, generator=torch.Generator().manual_seed(3))
    grads = []
    for m in (mod, plain):
        xg = x.clone().requires_grad_(True)
        y = m(xg)
        m.weight.data.mul_(-3)
        y.backward(dy)
        grads.append(xg.grad)
    assert_within_elementwise_bound(grads[0], dy, mod.weight.detach(), METHOD)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-5)


def test_parametrized_weights_are_recomputed_at_every_forward():
    """A parametrization computes a new weight tensor at each forward; freed storage is reused with version 0,
    so a cache keyed on (address, version) handed out an older weight's pieces."""
    from torch.nn.utils import parametrize
    from torch.nn.utils.parametrizations import weight_norm

    class Scaled(nn.Module):
        def forward(self, w):
            return 2 * w

    x = inputs()
    for apply in (lambda m: parametrize.register_parametrization(m, "weight", Scaled()), weight_norm):
        torch.manual_seed(0)
        lin = nn.Linear(24, 6, bias=False)
        apply(lin)
        mod = tcemu.emulate_(lin, METHOD)
        assert mod is lin and isinstance(mod, EmulatedLinear) and parametrize.is_parametrized(mod)
        opt = torch.optim.SGD(mod.parameters(), lr=0.5)
        for _ in range(3):
            assert_uses_current_weight(mod, x)
            opt.zero_grad()
            mod(x).square().sum().backward()
            opt.step()


def test_legacy_weight_norm_hook_recomputes_the_weight():
    """``torch.nn.utils.weight_norm`` (a forward pre-hook that assigns a new weight tensor each call)."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        lin = torch.nn.utils.weight_norm(nn.Linear(24, 6, bias=False))
    tcemu.emulate_(lin, METHOD)
    x = inputs()
    opt = torch.optim.SGD([lin.weight_g, lin.weight_v], lr=0.5)
    for _ in range(3):
        lin(x)  # the hook sets lin.weight from weight_g, weight_v
        assert_uses_current_weight(lin, x)
        opt.zero_grad()
        lin(x).square().sum().backward()
        opt.step()


@pytest.mark.parametrize("assign", [False, True])
def test_load_state_dict(assign):
    mod, x = layer(), inputs()
    assert_uses_current_weight(mod, x)
    for seed in (5, 6):
        torch.manual_seed(seed)
        mod.load_state_dict({"weight": torch.randn(6, 24)}, assign=assign)
        assert_uses_current_weight(mod, x)


def test_inference_mode_and_fp32_baseline_layers_see_edits():
    x = inputs()
    for method in ("fp32", "bf16x6"):
        mod = layer()
        mod.set_method(method)
        with torch.inference_mode():
            y0 = mod(x)
        mod.weight.data.mul_(2)
        with torch.inference_mode():
            y1 = mod(x)
        torch.testing.assert_close(y1, 2 * y0, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(y1, F.linear(x, mod.weight.detach()), rtol=1e-5, atol=1e-5)


def test_nothing_derived_from_the_weight_is_kept_on_the_module():
    mod, x = layer(), inputs()
    before = set(mod.__dict__)
    mod(x).sum().backward()
    assert set(mod.__dict__) == before
    assert not any(isinstance(v, tuple) and v and isinstance(v[0], torch.Tensor) for v in mod.__dict__.values())


# --------------------------------------------------------------------------- Triton backend (interpreter)


@pytest.mark.interpret
def test_triton_layer_sees_edits_and_splits_only_the_layout_each_gemm_needs(monkeypatch):
    """Eager Triton layers: the forward splits W's forward layout once, the backward its input-gradient layout
    once (from the saved weight), and a GEMM that takes the small-shape fallback splits nothing."""
    import tcemu.emulation.gemm.triton_backend as gb

    splits = []
    real = gb._split_pieces

    def counting(b, method):
        splits.append(tuple(b.shape))
        return real(b, method)

    monkeypatch.setattr(gb, "_split_pieces", counting)
    mod, x = layer(backend="triton"), inputs()
    opt = torch.optim.Adam(mod.parameters(), lr=0.5, fused=True)
    for _ in range(2):
        opt.zero_grad()
        mod(x).square().sum().backward()
        opt.step()
        assert_uses_current_weight(mod, x)
    mod.weight.data.mul_(-2)
    mod.requires_grad_(False)  # frozen (an MD potential): no weight gradient, whose GEMM splits x
    splits.clear()
    assert_uses_current_weight(mod, x)
    # no_grad forward and autograd forward: W^T (24, 6) split into (6, 24) pieces; backward: W (6, 24) itself.
    # The inputs' pieces are split inside the kernel, not by this function.
    assert splits == [(24, 6), (24, 6), (6, 24)], splits
    monkeypatch.setattr(gb, "_use_fallback", lambda *a, **k: True)
    splits.clear()
    assert_uses_current_weight(mod, x)
    assert splits == []


@pytest.mark.gpu
def test_triton_layer_on_cuda_sees_fused_optimizer_steps_and_data_edits_gpu():
    """On CUDA with the Triton kernels (the small-shape fallback off, so that every GEMM splits the weight): fused
    optimizer steps, where the cached pieces were off by about 2 after one step, and a .data edit."""
    from tcemu.emulation.dispatch import every_gemm_emulated

    torch.manual_seed(0)
    mod = EmulatedLinear.from_linear(nn.Linear(256, 128, bias=False), METHOD, backend="triton").cuda()
    x = torch.randn(512, 256, device="cuda")
    with every_gemm_emulated():
        assert_uses_current_weight(mod, x)
        for opt_cls in (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad):
            try:
                opt = opt_cls(mod.parameters(), lr=0.05, fused=True)
                mod(x).square().mean().backward()
                opt.step()
            except RuntimeError as exc:  # a fused step this torch has only for the CPU: the foreach one
                assert "fused" in str(exc).lower(), exc
                opt = opt_cls(mod.parameters(), lr=0.05, foreach=True)
                mod(x).square().mean().backward()
                opt.step()
            mod.zero_grad(set_to_none=True)
            assert_uses_current_weight(mod, x)
        mod.weight.data.mul_(-2)
        assert_uses_current_weight(mod, x)
