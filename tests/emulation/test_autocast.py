"""Under torch.autocast an emulated product is still FP32-faithful and float32: its pieces are multiplied in FP32
whatever autocast says (autocast would run them in bf16/fp16). emulation_mode routes float32 contractions to the
emulation under autocast too; what it leaves to torch follows autocast."""

import pytest
import torch
import torch.nn.functional as F

import tcemu
from tcemu.testing import assert_fp32_faithful

LOW = [torch.bfloat16, torch.float16]
LOW_IDS = ["bf16", "fp16"]
#: the Tensor Core's truncation in a GPU kernel, relative to |A||B| (as tests/emulation/gemm/test_range_kernels.py)
TC_TRUNCATION = 4 * 2.0**-22


def _operands(device="cpu", m=48, k=200, n=24):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g).to(device)
    b = torch.randn(k, n, generator=g).to(device)
    bias = torch.randn(n, generator=g).to(device)
    return a, b, bias


@pytest.mark.parametrize("dtype", LOW, ids=LOW_IDS)
@pytest.mark.parametrize("method", ["bf16x3", "tf32x3", "fp32"])
def test_matmul_and_linear_under_cpu_autocast_are_fp32_faithful(dtype, method):
    a, b, bias = _operands()
    with torch.autocast("cpu", dtype=dtype):
        c = tcemu.matmul(a, b, method)
        y = tcemu.linear(a, b.T, bias, method)
        empty = tcemu.linear(a[:0], b.T, bias, method)
    assert c.dtype == y.dtype == empty.dtype == torch.float32
    assert_fp32_faithful(c, a, b, method)
    assert_fp32_faithful(y, a, b, method, bias=bias)


@pytest.mark.parametrize("dtype", LOW, ids=LOW_IDS)
def test_emulated_linear_under_cpu_autocast_forward_and_gradients(dtype):
    """An EmulatedLinear (and its input gradient, computed inside the autocast block) within the bound of its
    method against FP64; the coverage meter's 100 % emulated is then true."""
    a, b, bias = _operands()
    lin = torch.nn.Linear(a.shape[1], b.shape[1])
    with torch.no_grad():
        lin.weight.copy_(b.T)
        lin.bias.copy_(bias)
    layer = tcemu.EmulatedLinear.from_linear(lin, "bf16x6")
    x = a.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype), tcemu.coverage() as cov:
        y = layer(x)
        dy = torch.randn_like(y)
        (dx,) = torch.autograd.grad(y, x, dy)
    assert y.dtype == dx.dtype == torch.float32 and cov.fraction == 1.0
    assert_fp32_faithful(y, a, b, "bf16x6", bias=bias)
    assert_fp32_faithful(dx, dy, b.T, "bf16x6")


@pytest.mark.parametrize("dtype", LOW, ids=LOW_IDS)
def test_emulation_mode_under_cpu_autocast_emulates_matmul_einsum_and_linear(dtype):
    a, b, bias = _operands()
    with torch.autocast("cpu", dtype=dtype), tcemu.emulation_mode("tf32x3"):
        outs = [torch.matmul(a, b), a @ b, torch.einsum("ik,kj->ij", a, b), torch.mm(a, b)]
        y = F.linear(a, b.T, bias)
        half = torch.matmul(a.to(dtype), b.to(dtype))  # not float32: torch's own, as autocast says
    for c in outs:
        assert c.dtype == torch.float32
        assert_fp32_faithful(c, a, b, "tf32x3")
    assert y.dtype == torch.float32
    assert_fp32_faithful(y, a, b, "tf32x3", bias=bias)
    assert half.dtype == dtype


def test_an_emulated_model_under_cpu_autocast_matches_its_fp32_run():
    """A whole emulate_'d model (nn.Linear swaps and functional products) gives the same bits under autocast
    as without it: nothing of the emulation ran in low precision."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 64), torch.nn.SiLU(), torch.nn.Linear(64, 8))
    tcemu.emulate_(model, "bf16x3")
    x = torch.randn(16, 40)
    want = model(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(x)
    assert got.dtype == torch.float32 and torch.equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", LOW, ids=LOW_IDS)
def test_cuda_autocast_keeps_every_emulated_path_fp32(dtype):
    """CUDA autocast around the Triton kernels and the small-shape SGEMM fallback (the configuration's switch
    off and on), the reference, EmulatedLinear with its gradient, emulation_mode, TF32 by cuBLAS and the
    attention's small-batch fallback: float32 results within each method's bound."""
    a, b, bias = _operands("cuda", m=128, k=384, n=64)
    cases = []
    for fallback in (False, True):
        with tcemu.config(small_shape_fallback=fallback), torch.autocast("cuda", dtype=dtype):
            for method in ("tf32x3", "bf16x6"):
                cases.append((tcemu.matmul(a, b, method), a, b, method, None))
                cases.append((tcemu.matmul(a, b, method, backend="torch"), a, b, method, None))
                cases.append((tcemu.linear(a, b.T, bias, method), a, b, method, bias))
            with tcemu.emulation_mode("tf32x3"):
                cases.append((torch.einsum("ik,kj->ij", a, b), a, b, "tf32x3", None))
            lin = torch.nn.Linear(a.shape[1], b.shape[1]).cuda()
            with torch.no_grad():
                lin.weight.copy_(b.T)
                lin.bias.copy_(bias)
            layer = tcemu.EmulatedLinear.from_linear(lin, "bf16x3")
            x = a.clone().requires_grad_(True)
            y = layer(x)
            dy = torch.randn_like(y)
            (dx,) = torch.autograd.grad(y, x, dy)
            cases += [(y, a, b, "bf16x3", bias), (dx, dy, b.T, "bf16x3", None)]
    for c, x_, w_, method, bias_ in cases:
        assert c.dtype == torch.float32
        assert_fp32_faithful(c, x_, w_, method, bias=bias_, extra_rel=TC_TRUNCATION)
    q = torch.randn(1, 2, 16, 32, device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        att = tcemu.scaled_dot_product_attention(q, q, q)  # a small batch: torch's FP32 attention
        tf_auto = tcemu.matmul(a, b, "tf32")  # the TF32 baseline (cuBLAS)
    assert att.dtype == torch.float32
    ref = torch.softmax((q.double() @ q.double().mT) / q.shape[-1] ** 0.5, -1) @ q.double()
    assert (att.double() - ref).abs().max().item() < 1e-5  # FP32's error; fp16 attention's is ~1e-3
    assert tf_auto.dtype == torch.float32 and torch.equal(tf_auto, tcemu.matmul(a, b, "tf32"))
