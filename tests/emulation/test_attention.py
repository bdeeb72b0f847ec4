"""tcemu.scaled_dot_product_attention: emulated Q K^T and P V, softmax in FP32; reference and fused kernels.

Accuracy criterion (``FP32_FAITHFUL``): against FP64 attention on the same inputs, the normwise errors of the
output and of the gradients of Q, K, V and the mask stay within this factor of FP32 attention's own errors
(torch's float32 SDPA on the CPU) for the FP32-accurate methods. BF16x3 is near-FP32: its products carry a
split residual of about 2^-16 (``MethodSpec.split_residual``), so its bound is ``BF16X3_NEAR_FP32`` times that.
"""

import math
import os

import pytest
import torch
import torch.nn.functional as F

import tcemu
from tcemu.emulation import attention
from tcemu.emulation.attention import fused_smem_bytes, scaled_dot_product_attention, sdpa_reference
from tcemu.emulation.methods import get_method

FP32_FAITHFUL = 4.0
BF16X3_NEAR_FP32 = 8.0
interpret = pytest.mark.interpret


def _pet_like(B=3, L=37, H=4, D=32, mask="shared", seed=0, device="cpu"):
    """Q, K, V as PET makes them (one (B, L, 3, H, D) projection, permuted) and a log-cutoff mask."""
    x, m = _pet_like_cpu(B, L, H, D, mask, seed)
    return x.to(device), (None if m is None else m.to(device))


def _pet_like_cpu(B, L, H, D, mask, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, 3, H, D, dtype=torch.float64, generator=gen)
    if mask == "shared":
        m = torch.log(torch.rand(B, 1, L, L, dtype=torch.float64, generator=gen) * 0.9 + 0.05)
    elif mask == "per_head":
        m = torch.randn(B, H, L, L, dtype=torch.float64, generator=gen)
    elif mask == "batch_shared":
        m = torch.randn(1, 1, L, L, dtype=torch.float64, generator=gen)
    elif mask == "bool":
        m = torch.rand(L, L, generator=gen) > 0.3
        m.fill_diagonal_(True)
    else:
        m = None
    return x, m


def _run(x, m, dtype, fn, seed=1):
    """Output and gradients (x, mask) of fn on copies in ``dtype``, as float64."""
    xx = x.detach().clone().to(dtype).requires_grad_(True)
    mm = None
    if m is not None:
        mm = m.detach().clone()
        if mm.dtype != torch.bool:
            mm = mm.to(dtype).requires_grad_(True)
    q, k, v = xx.permute(2, 0, 3, 1, 4)
    o = fn(q, k, v, mm)
    g = torch.randn(o.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)).to(o.device, dtype)
    (o * g).sum().backward()
    out = [o.double(), xx.grad.double()]
    if mm is not None and mm.requires_grad:
        out.append(mm.grad.double())
    return out


def _errors(got, ref):
    return [((a - r).norm() / r.norm()).item() for a, r in zip(got, ref)]


def _check_accuracy(method, fn, mask, device="cpu", **shape):
    """FP32 attention's own errors are torch's float32 SDPA on ``device`` (on CUDA its memory-efficient kernel)."""
    x, m = _pet_like(mask=mask, device=device, **shape)
    ref = _run(x, m, torch.float64, lambda q, k, v, mm: F.scaled_dot_product_attention(q, k, v, attn_mask=mm))
    f32 = _errors(_run(x, m, torch.float32, lambda q, k, v, mm: F.scaled_dot_product_attention(q, k, v, attn_mask=mm)),
                  ref)
    got = _errors(_run(x, m, torch.float32, fn), ref)
    spec = get_method(method)
    for name, e, e32 in zip(("output", "grad qkv", "grad mask"), got, f32):
        if spec.name == "bf16x3":
            assert e <= BF16X3_NEAR_FP32 * spec.split_residual, (method, name, e)
        else:
            assert e <= FP32_FAITHFUL * e32, (method, name, e, e32)
    return got


@pytest.mark.parametrize("method", ["tf32x3", "bf16x3", "bf16x6", "bf16x9"])
def test_reference_is_fp32_faithful(method):
    _check_accuracy(method, lambda q, k, v, m: sdpa_reference(q, k, v, m, method=method), "shared")


@interpret
@pytest.mark.parametrize("method", ["tf32x3", "bf16x3", "bf16x6"])
@pytest.mark.parametrize("mask", ["shared", "per_head", "batch_shared", "bool", None])
def test_fused_kernels_are_fp32_faithful_interpret(method, mask):
    """The fused forward and backward kernels (under the interpreter): PET's layout (permuted views of one
    projection), L = 37 (not a power of two), the mask shared by the heads, per head, shared by the batch,
    boolean, or absent; gradients of Q, K, V and of a float mask. Two batch entries (the interpreter runs each
    program in Python: its time grows with B x H)."""
    _check_accuracy(method, lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m, method=method,
                                                                            backend="triton"), mask, B=2)


PET_S = {"B": 64, "L": 41, "H": 8, "D": 32}
GPU_CASES = [(PET_S, mask) for mask in ("shared", "per_head", "batch_shared", "bool", None)] + [
    ({"B": 5, "L": 128, "H": 3, "D": 16}, "shared"), ({"B": 7, "L": 9, "H": 2, "D": 100}, "per_head"),
    ({"B": 3, "L": 65, "H": 2, "D": 128}, "shared"), ({"B": 2, "L": 128, "H": 2, "D": 128}, "shared")]


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["tf32x3", "bf16x3", "bf16x6"])
@pytest.mark.parametrize(("shape", "mask"), GPU_CASES, ids=str)
def test_fused_kernels_are_fp32_faithful_gpu(method, shape, mask):
    """The fused kernels on CUDA: PET S's attention (L = 41 neighbours + 1, 8 heads of 32) with every mask kind;
    the longest tile, ragged L and D, the widest head (each kernel variant costs a compile of seconds). Tiles
    whose kernels need more shared memory than the device has are refused with a message (on an H200 none
    since the backward became two kernels: 128 x 128 needs 128 KB)."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("needs sm80+ (TF32/BF16 Tensor Cores)")
    tiles = (max(16, 1 << (shape["L"] - 1).bit_length()), max(16, 1 << (shape["D"] - 1).bit_length()))
    hpp = attention._heads_per_program(shape["H"], *tiles)
    if fused_smem_bytes(method, *tiles, hpp) > attention._smem_limit(torch.device("cuda")):
        x, m = _pet_like(mask=mask, device="cuda", **shape)
        q, k, v = x.float().permute(2, 0, 3, 1, 4)
        with pytest.raises(ValueError, match="shared memory"):
            scaled_dot_product_attention(q, k, v, m.float(), method=method, backend="triton")
        return
    _check_accuracy(method, lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m, method=method,
                                                                            backend="triton"), mask, "cuda", **shape)


@pytest.mark.gpu
def test_fused_kernels_under_torch_compile_gpu():
    """The fused ops inside a compiled graph (fake implementations, registered autograd) give the eager bits."""
    x, m = _pet_like(B=16, L=41, H=8, D=32, device="cuda")

    def f(q, k, v, mm):
        return scaled_dot_product_attention(q, k, v, mm, method="tf32x3", backend="triton")

    eager = _run(x, m, torch.float32, f)
    compiled = _run(x, m, torch.float32, torch.compile(f, fullgraph=True))
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])
    assert torch.equal(eager[2], compiled[2])  # the mask's head sum, in head order


@interpret
@pytest.mark.parametrize("heads_per_program", [2, 4, 3, None])
@pytest.mark.parametrize("mask", ["shared", "per_head", None])
def test_heads_per_program_give_the_same_results_interpret(monkeypatch, heads_per_program, mask):
    """Several heads per forward program (the mask shared by them loaded once): the output and the Q/K/V
    gradients are one head's computation as before, so bit for bit, and so is the mask gradient (the backward
    is per head). 3 does not divide H = 4: the kernels take 2. None: the automatic choice (all 4 heads for
    these small tiles)."""
    x, m = _pet_like(B=2, L=19, H=4, D=16, mask=mask)

    def fused(q, k, v, mm):
        return scaled_dot_product_attention(q, k, v, mm, method="tf32x3", backend="triton")

    monkeypatch.setattr(attention, "HEADS_PER_PROGRAM", 1)
    one = _run(x, m, torch.float32, fused)
    monkeypatch.setattr(attention, "HEADS_PER_PROGRAM", heads_per_program)
    several = _run(x, m, torch.float32, fused)
    assert torch.equal(one[0], several[0]) and torch.equal(one[1], several[1])
    if m is not None:
        assert torch.equal(one[2], several[2])


@interpret
def test_shared_mask_gradient_is_the_head_sum_in_head_order_interpret():
    """A mask shared by the heads gets the sum of the heads' dS in head order (no atomics): bit for bit the
    per-head mask gradient of the same mask expanded to every head, summed head after head in FP32; and the
    same bits on a second run."""
    x, m = _pet_like(B=3, L=19, H=4, D=16, mask="shared")
    q, k, v = x.float().permute(2, 0, 3, 1, 4)
    go = torch.randn(q.shape, generator=torch.Generator().manual_seed(5))

    def mask_grad(mask):
        mask = mask.detach().requires_grad_()
        out = scaled_dot_product_attention(q, k, v, mask, method="tf32x3", backend="triton")
        (grad,) = torch.autograd.grad(out, mask, go)
        return grad

    shared = m.float()
    assert shared.shape[1] == 1
    got = mask_grad(shared)
    per_head = mask_grad(shared.expand(-1, 4, -1, -1).contiguous())
    want = torch.zeros_like(per_head[:, :1])
    for h in range(4):
        want = want + per_head[:, h:h + 1]
    assert torch.equal(got, want)
    assert torch.equal(mask_grad(shared), got)


@interpret
def test_fused_output_is_a_view_of_the_next_layout_interpret():
    """O is stored as (B, L, H, D), so O.transpose(1, 2).reshape(B, L, H * D) (PET's next step) is a view."""
    x, m = _pet_like(B=2, L=20, H=2, D=16)
    q, k, v = x.float().permute(2, 0, 3, 1, 4)
    o = scaled_dot_product_attention(q, k, v, m.float(), backend="triton")
    assert o.transpose(1, 2).is_contiguous()
    torch.testing.assert_close(o, F.scaled_dot_product_attention(q, k, v, attn_mask=m.float()), rtol=1e-5, atol=1e-5)


def test_auto_backend_off_gpu_runs_the_reference():
    x, m = _pet_like(B=2, L=9, H=2, D=8)
    q, k, v = x.float().permute(2, 0, 3, 1, 4)
    got = scaled_dot_product_attention(q, k, v, m.float(), method="bf16x6")
    want = sdpa_reference(q, k, v, m.float(), method="bf16x6")
    assert torch.equal(got, want)


def test_refuses_bad_input_with_a_message():
    q = torch.randn(2, 3, 5, 8)
    with pytest.raises(TypeError, match="float32"):
        scaled_dot_product_attention(q.double(), q.double(), q.double())
    with pytest.raises(TypeError, match="attn_mask"):
        scaled_dot_product_attention(q, q, q, torch.zeros(5, 5, dtype=torch.int32))
    with pytest.raises(ValueError, match="do not form an attention"):
        scaled_dot_product_attention(q, q[..., :4], q)
    with pytest.raises(ValueError, match="no fused kernel"):
        scaled_dot_product_attention(q, q, q, method="bf16x9", backend="triton")


# shared memory of the fused kernels (the most of the forward and the two backward kernels), KB, from Triton
# 3.6's sm_90 compiles (LP, DP): tf32x3, bf16x6; the forward with the automatic heads per program
MEASURED_SMEM_KB = {(16, 16): (7, 7), (16, 32): (14, 14), (16, 64): (28, 28), (16, 128): (56, 56), (32, 16): (14, 14),
                    (32, 32): (28, 28), (32, 64): (56, 54), (32, 128): (16, 16), (64, 16): (32, 30), (64, 32): (64, 60),
                    (64, 64): (32, 24), (64, 128): (64, 48), (128, 16): (80, 80), (128, 32): (80, 80),
                    (128, 64): (80, 80), (128, 128): (128, 96)}


def test_shared_memory_estimate_covers_the_compiled_kernels():
    """``fused_smem_bytes`` bounds the compiled kernels' shared memory, tightly where it matters: equal at the
    largest tile, within 2x elsewhere (so that a tile the device can hold is not refused)."""
    for (lp, dp), kbs in MEASURED_SMEM_KB.items():
        hpp = attention._heads_per_program(8, lp, dp)
        for method, kb in zip(("tf32x3", "bf16x6"), kbs):
            bound = fused_smem_bytes(method, lp, dp, hpp)
            assert kb * 1024 <= bound <= 2 * kb * 1024, (method, lp, dp, kb, bound)
    assert fused_smem_bytes("tf32x3", 128, 128) == 128 * 1024
    with pytest.raises(ValueError, match="no fused kernel"):
        fused_smem_bytes("bf16x9", 64, 32)


def test_tiles_beyond_the_shared_memory_are_refused(monkeypatch):
    """A device with less shared memory than the tiles need: backend='triton' says why; 'auto' runs the reference."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the CPU stands in for a device (nothing is launched)
    monkeypatch.setattr(attention, "_smem_limit", lambda device: 40 * 1024)
    assert tcemu.get_config().fused_attention  # the default
    x, m = _pet_like(B=2, L=41, H=2, D=32)
    q, k, v = x.float().permute(2, 0, 3, 1, 4)
    with pytest.raises(ValueError, match="about 64 KB of shared memory, the device allows 40 KB"):
        scaled_dot_product_attention(q, k, v, m.float(), backend="triton")
    got = scaled_dot_product_attention(q, k, v, m.float())
    assert torch.equal(got, sdpa_reference(q, k, v, m.float()))


def test_default_scale_is_torchs():
    x, _ = _pet_like(B=1, L=6, H=2, D=8, mask=None)
    q, k, v = x.float().permute(2, 0, 3, 1, 4)
    a = scaled_dot_product_attention(q, k, v)
    b = scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(8))
    assert torch.equal(a, b)


def test_emulation_mode_routes_attention_only_when_asked(monkeypatch):
    import tcemu.emulation.mode as mode

    calls = []
    real = mode.scaled_dot_product_attention
    monkeypatch.setattr(mode, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    x, m = _pet_like(B=2, L=7, H=2, D=8)
    q, k, v = x.float().permute(2, 0, 3, 1, 4)
    with tcemu.emulation_mode("tf32x3"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=m.float())
    assert calls == []
    with tcemu.emulation_mode("tf32x3", attention=True):
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=m.float())
        F.scaled_dot_product_attention(q, k, v, attn_mask=m.float(), dropout_p=0.5)  # not routed: dropout
        F.scaled_dot_product_attention(q, k, v, is_causal=True)  # not routed: causal
    assert calls == [1]
    assert torch.equal(got, scaled_dot_product_attention(q, k, v, m.float(), method="tf32x3"))


def test_small_batch_fallback_is_cuda_only_and_switchable(monkeypatch):
    """The small-batch decision: only for CUDA tensors, only below FUSED_MIN_HEADS heads in all, and off with
    ``attention_fallback=False``. (CPU tensors here: the decision is False.)"""
    q = torch.zeros(2, 3, 5, 4)
    assert not attention._small_batch(q)
    assert attention.FUSED_MIN_HEADS > 2 * 3 and tcemu.get_config().attention_fallback


@interpret
def test_small_batch_runs_torchs_fp32_attention_interpret(monkeypatch):
    """Where the decision says small batch, backend="auto" returns torch's own FP32 attention (output and
    gradients, bit for bit); backend="triton" still runs the fused kernels."""
    monkeypatch.setattr(attention, "_small_batch", lambda q: True)
    x, m = _pet_like(B=2, L=11, H=2, D=16)

    def auto(q, k, v, mm):
        return scaled_dot_product_attention(q, k, v, mm, method="tf32x3", backend="auto")

    def torch_fp32(q, k, v, mm):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mm)

    got, want = _run(x, m, torch.float32, auto), _run(x, m, torch.float32, torch_fp32)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    fused = _run(x, m, torch.float32, lambda q, k, v, mm: scaled_dot_product_attention(q, k, v, mm, backend="triton"))
    assert not torch.equal(fused[0], want[0])


@interpret
def test_small_batch_fallback_under_emulation_mode_and_compile_interpret(monkeypatch):
    """As the MD step runs it: F.scaled_dot_product_attention inside emulation_mode(attention=True), compiled
    (fullgraph). A small batch gives one graph with torch's attention and no fused op (no recursion through the
    mode); a large one the fused op."""
    x, m = _pet_like(B=2, L=11, H=2, D=16)
    q, k, v = x.float().permute(2, 0, 3, 1, 4)
    mask = m.float()
    graphs = []

    def capture(gm, _example):
        graphs.append(str(gm.graph))
        return gm.forward

    def f(q, k, v, mm):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mm)

    for small in (True, False):
        monkeypatch.setattr(attention, "_small_batch", lambda q, small=small: small)
        torch._dynamo.reset()
        with tcemu.emulation_mode("tf32x3", attention=True):
            got = torch.compile(f, backend=capture, fullgraph=True)(q, k, v, mask)
        code = graphs[-1]
        assert ("attention_fwd" in code) != small, code
        assert ("scaled_dot_product_attention" in code) == small, code
        want = f(q, k, v, mask) if small else scaled_dot_product_attention(q, k, v, mask, backend="triton")
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_small_batch_fallback_gpu(monkeypatch):
    """On CUDA: a batch below FUSED_MIN_HEADS heads runs torch's FP32 attention (counted), one at or above it
    the fused kernels, and with the fallback off the fused kernels run whatever the batch."""
    x, m = _pet_like(B=4, L=41, H=8, D=32, device="cuda")
    q, k, v = x.float().permute(2, 0, 3, 1, 4)
    mask = m.float()
    before = attention.fallback_stats().get(tuple(q.shape), 0)
    got = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert attention.fallback_stats()[tuple(q.shape)] == before + 1
    fused = scaled_dot_product_attention(q, k, v, mask, backend="triton")
    monkeypatch.setattr(attention, "FUSED_MIN_HEADS", 4 * 8)
    assert torch.equal(scaled_dot_product_attention(q, k, v, mask), fused)
    monkeypatch.setattr(attention, "FUSED_MIN_HEADS", 10**9)
    with tcemu.config(attention_fallback=False):
        assert torch.equal(scaled_dot_product_attention(q, k, v, mask), fused)


@interpret
def test_fused_op_registration_interpret():
    """torch.library.opcheck of the fused ops (schema, fake tensors for torch.compile, autograd registration)."""
    x, m = _pet_like(B=2, L=11, H=2, D=16)
    q, k, v = (t.float().requires_grad_(True) for t in x.permute(2, 0, 3, 1, 4))
    mask = m.float().requires_grad_(True)
    torch.library.opcheck(torch.ops.tcemu.attention_fwd.default, (q, k, v, mask, 0.25, "tf32x3"))
    o, lse = torch.ops.tcemu.attention_fwd(q.detach(), k.detach(), v.detach(), mask.detach(), 0.25, "tf32x3")
    torch.library.opcheck(torch.ops.tcemu.attention_bwd.default,
                          (q.detach(), k.detach(), v.detach(), mask.detach(), o, lse, torch.randn_like(o), 0.25,
                           "tf32x3", True))



def _attention_bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "attention.py"
    spec = importlib.util.spec_from_file_location("attention_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_attention_benchmark_cpu_smoke(tmp_path):
    """benchmarks/attention.py runs off-GPU (host clock) and writes its rows: errors against FP64 within FP32
    attention's bounds, and the speedup against torch's FP32 attention."""
    from tcemu._results import read_wide

    bench = _attention_bench()
    out = tmp_path / "attn.csv"
    rc = bench.main(["--device", "cpu", "--shapes", "tiny", "--impls", "torch,torch-math,tcemu-reference",
                     "--rep", "5", "--out", str(out)])
    assert rc == 0
    rows = read_wide(out)
    assert all(r["benchmark"] == "attention" and r["gpu"].startswith("CPU: ") and r["commit"] for r in rows)
    assert [(r["impl"], r["direction"]) for r in rows] == [
        (i, d) for i in ("torch", "torch-math", "tcemu-reference") for d in ("fwd", "fwd_bwd")]
    for r in rows:
        assert 0 < float(r["err_out"]) < 1e-5 and float(r["median_ms"]) > 0 and float(r["speedup_vs_torch_fp32"]) > 0
    assert all(0 < float(r["err_dmask"]) < 1e-5 for r in rows if r["direction"] == "fwd_bwd")


@pytest.mark.parametrize(("H", "lp", "dp", "expected"), [
    (8, 64, 32, 8),    # PET S: all heads (measured faster on the H200)
    (8, 64, 64, 1),    # PET M's 48-wide heads: the pipelined forward spills there (untimed)
    (6, 32, 32, 6), (12, 16, 16, 6), (7, 64, 32, 7), (10, 32, 64, 5), (8, 128, 16, 1),
])
def test_automatic_heads_per_program(monkeypatch, H, lp, dp, expected):
    monkeypatch.setattr(attention, "HEADS_PER_PROGRAM", None)
    assert attention._heads_per_program(H, lp, dp) == expected
    monkeypatch.setattr(attention, "HEADS_PER_PROGRAM", 3)
    assert attention._heads_per_program(H, lp, dp) == max(d for d in (1, 2, 3) if H % d == 0)


def test_wide_offsets_are_found():
    """In-tile offsets are int32 unless a stride makes them reach 2^31."""
    t = torch.empty(2, 3, 5, 8)
    assert not attention._needs_wide_offsets(64, 32, t, t)
    huge = torch.empty(0, device="meta").as_strided((2, 3, 5, 8), (0, 0, 2**26, 1))  # 4 GiB apart: no memory
    assert attention._needs_wide_offsets(64, 32, t, huge)


@interpret
def test_wide_offsets_give_the_same_bits_interpret(monkeypatch):
    """The backward's int64 offsets (taken when a stride needs them) read and write the same elements."""
    x, m = _pet_like(B=2, L=19, H=2, D=16, mask="shared")

    def fused(q, k, v, mm):
        return scaled_dot_product_attention(q, k, v, mm, method="tf32x3", backend="triton")

    narrow = _run(x, m, torch.float32, fused)
    monkeypatch.setattr(attention, "_needs_wide_offsets", lambda *a: True)
    wide = _run(x, m, torch.float32, fused)
    assert all(torch.equal(a, b) for a, b in zip(narrow, wide))


@interpret
def test_double_backward_runs_through_the_reference_interpret():
    """create_graph=True through the fused kernels (training on forces): the first-order gradients come from the
    reference, so the second derivative is the reference's, bit for bit."""
    x, m = _pet_like(B=2, L=7, H=2, D=8, mask="shared")
    w = torch.randn(2, 2, 7, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).float()

    def second(fn):
        xx = x.float().clone().requires_grad_()
        q, k, v = xx.permute(2, 0, 3, 1, 4)
        (g,) = torch.autograd.grad((fn(q, k, v, m.float()) * w).sum(), xx, create_graph=True)
        (g * g).sum().backward()
        return g.detach(), xx.grad

    fused = second(lambda q, k, v, mm: scaled_dot_product_attention(q, k, v, mm, backend="triton"))
    ref = second(lambda q, k, v, mm: sdpa_reference(q, k, v, mm))
    assert all(torch.equal(a, b) for a, b in zip(fused, ref))


def test_backward_launch_caps_registers_only_where_measured():
    """The 168-register cap (3 blocks per SM) is for the measured 64 x 32 tiles (PET S) on the GPU only."""
    pytest.importorskip("triton")
    from tcemu.emulation.methods import get_method

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the interpreter takes no register cap")
    spec = get_method("tf32x3")
    assert attention._launch_args(spec, 41, 32, True)["maxnreg"] == 168
    assert "maxnreg" not in attention._launch_args(spec, 41, 32)
    assert "maxnreg" not in attention._launch_args(spec, 48, 48, True)
    assert attention._launch_args(spec, 100, 16, True)["num_warps"] == 8


def test_attention_benchmark_launch_variants(monkeypatch):
    """--variants overrides warps, register caps (-1: none), heads per program and the forward's stages, and
    None restores the library's launch."""
    pytest.importorskip("triton")
    from tcemu.emulation.methods import get_method

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    bench, spec = _attention_bench(), get_method("tf32x3")
    library = (attention._launch_args(spec, 41, 32), attention._launch_args(spec, 41, 32, True))
    try:
        bench.set_launch((4, 8, 0, -1, 2, 2))
        fwd, bwd = attention._launch_args(spec, 41, 32), attention._launch_args(spec, 41, 32, True)
        assert (fwd["num_warps"], fwd["num_stages"], bwd["num_warps"]) == (4, 2, 8)
        assert "maxnreg" not in bwd and "num_stages" not in bwd and attention.HEADS_PER_PROGRAM == 2
        bench.set_launch((4, 4, 128, 200))
        assert attention._launch_args(spec, 41, 32)["maxnreg"] == 128
        assert attention._launch_args(spec, 41, 32, True)["maxnreg"] == 200
    finally:
        bench.set_launch(None)
    assert (attention._launch_args(spec, 41, 32), attention._launch_args(spec, 41, 32, True)) == library
    assert attention.HEADS_PER_PROGRAM is None
