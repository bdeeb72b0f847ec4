"""einsum and tensordot through the Triton kernels: under TRITON_INTERPRET=1 on the CPU (make test's second
pass) against the reference, and on a CUDA device against FP64 with the small-shape fallback as for linear
layers (the coverage meter tells which ran)."""

import os

import pytest
import torch

pytest.importorskip("triton", reason="needs the 'triton' extra")

import tcemu  # noqa: E402
from tcemu.emulation.contractions import einsum, tensordot  # noqa: E402
from tcemu.testing import elementwise_bound  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _ops(shapes, device="cpu", seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(s, generator=gen, device=device) for s in shapes]


def _bounded(got, equation, ops, method, k):
    want = torch.einsum(equation, *(o.double() for o in ops))
    scale = torch.einsum(equation, *(o.double().abs() for o in ops))
    return bool(((got.double() - want).abs() <= 2.1 * elementwise_bound(method, k) * scale + 1e-38).all())


@pytest.mark.interpret
@pytest.mark.skipif(not INTERPRET, reason="runs only under TRITON_INTERPRET=1 (make test's second pass)")
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_einsum_and_tensordot_on_the_triton_kernels_interpret(method):
    """The lowered GEMMs (batched with a broadcast operand, plain 2-D) run on the kernels: the reference's
    accuracy, and gradients through them."""
    for equation, shapes in (("zui,zvi->zuv", [(3, 4, 20), (3, 5, 20)]), ("uvw,zu,zv->zw", [(6, 5, 4), (3, 6), (3, 5)]),
                             ("bij,jk->bik", [(2, 3, 20), (20, 4)])):
        ops = _ops(shapes)
        got = einsum(equation, *ops, method=method, backend="triton")
        assert _bounded(got, equation, ops, method, 20), equation
        ref = einsum(equation, *ops, method=method, backend="torch")
        assert torch.allclose(got, ref, rtol=4 * elementwise_bound(method, 20), atol=1e-6)
    a, b = _ops([(6, 20), (20, 5)])
    a.requires_grad_(True)
    out = tensordot(a, b, 1, method=method, backend="triton")
    (g,) = torch.autograd.grad(out.sum(), a)
    assert torch.allclose(g, b.sum(1).expand(6, 20), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_large_einsums_run_the_kernels_and_small_ones_fall_back_on_cuda(method):
    """A batched einsum above the small-shape threshold (6 GFLOP) runs the emulation on the GPU (coverage kind
    'emulated', FP64 within the method's bound); a small one takes cuBLAS SGEMM ('fallback'), FP32-accurate."""
    big = _ops([(24, 512, 512), (24, 512, 512)], device="cuda")  # 2 x 24 x 512^3 = 12.9 GFLOP
    small = _ops([(4, 64, 32), (4, 32, 48)], device="cuda")
    with tcemu.coverage() as cov, tcemu.emulation_mode(method):
        got_big = torch.einsum("bij,bjk->bik", *big)
    assert cov.fraction == 1.0 and cov.flops("emulated") == 2 * 24 * 512**3
    assert _bounded(got_big, "bij,bjk->bik", big, method, 512)
    with tcemu.coverage() as cov, tcemu.emulation_mode(method):
        got_small = torch.einsum("bij,bjk->bik", *small)
    assert cov.flops("fallback") == 2 * 4 * 64 * 32 * 48 and cov.fraction == 0.0
    assert _bounded(got_small, "bij,bjk->bik", small, "fp32", 32)


@pytest.mark.gpu
def test_an_emulated_e3nn_network_runs_on_cuda_with_every_product_emulated():
    """The e3nn network of the CPU tests on the GPU, with the small-shape fallback off: 100 % emulated by the
    Triton kernels, TF32x3's forces within 3x FP32's error against FP64, single-pass TF32's visibly not."""
    pytest.importorskip("e3nn")
    import copy

    import e3nn_net as net
    import numpy as np

    from tcemu.mlip.report import every_gemm_emulated

    pos = torch.tensor(np.random.RandomState(0).rand(40, 3) * 8, dtype=torch.float64, device="cuda")
    numbers = [1, 8] * 20
    model = net.build().cuda()
    f64 = net.energy_and_forces(copy.deepcopy(model).double(), pos, numbers)[1]
    f32 = net.energy_and_forces(model, pos, numbers)[1]
    errs = {}
    with every_gemm_emulated():
        for method in ("tf32", "tf32x3"):
            emulated = tcemu.emulate_(copy.deepcopy(model), method)
            with tcemu.coverage() as cov:
                f = net.energy_and_forces(emulated, pos, numbers)[1]
            assert cov.fraction == 1.0, cov.table()
            errs[method] = (f - f64).abs().max().item()
    ref = (f32 - f64).abs().max().item()
    assert errs["tf32"] > 30 * ref and errs["tf32x3"] < 3 * ref
