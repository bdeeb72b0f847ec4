"""The range check and fix-up in the GPU kernels (tcemu.emulation.gemm): no false overflow, no lost correction
level, Inf/NaN exactly where the exact product has them, in every kernel family and mode.

* ``interpret``: the Triton kernel and the fix-up on the CPU under ``TRITON_INTERPRET=1`` (``tl.dot`` is a NumPy
  product there, so the checks are those of the reference: the FP64 pattern and the method's bound);
* offline sm_90 compiles (CPU, no GPU): every kernel the dispatcher launches on the H200, with its flag store;
* ``gpu``: every configuration the dispatcher uses on the H200 (Triton kernel, Gluon ``pg``/``g``, the
  warp-specialised ``gw``/``tgw`` and ``pgw``/``ptgw``), against FP64, and the same bits within a tiling with and
  without flagged rows; the sign of zero results against cuBLAS.
"""

from __future__ import annotations

import importlib
import os
import re
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

triton = pytest.importorskip("triton", reason="needs the 'triton' extra")

import tcemu  # noqa: E402
from tcemu.emulation.gemm import KERNEL_METHODS, KernelConfig, config_candidates, emu_mm, split_t  # noqa: E402
from tcemu.emulation.gemm.range_fixup import RANGE_MARK_BITS, range_fixup, range_fixup_reference  # noqa: E402
from tcemu.emulation.methods import get_method  # noqa: E402
from tcemu.emulation.split import recombine  # noqa: E402
from tcemu.testing import TOP_OF_RANGE_CASES, assert_fp32_faithful, extreme_operands  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
HAS_CUDA = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)
SM90 = HAS_CUDA and not INTERPRET and torch.cuda.get_device_capability()[0] == 9
METHODS = list(KERNEL_METHODS)
FMAX = torch.finfo(torch.float32).max
X = 1.8446743e19
#: the Tensor Core truncates its accumulator input and output (a few ulps per K-tile); the GPU kernels' results
#: are compared with the method's bound plus this much relative to |A||B|
TC_TRUNCATION = 4 * 2.0**-22

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value encountered")


interpret = pytest.mark.interpret  # skipped outside TRITON_INTERPRET=1 (tests/conftest.py)


gpu = pytest.mark.gpu  # skipped without a CUDA device of sm80+ or under TRITON_INTERPRET=1 (tests/conftest.py)


def _gluon_available() -> bool:
    try:
        from tcemu.emulation.gemm.launch import _wgmma_module

        return _wgmma_module() is not None
    except Exception:  # noqa: BLE001
        return False


offline = pytest.mark.skipif(INTERPRET or not _gluon_available(), reason="needs Triton's Gluon (and no TRITON_INTERPRET)")

# Small tiles for the interpreter, one per accumulation mode (the interpreter's default is mode 0)
INTERPRET_CONFIGS = [KernelConfig(32, 32, 16, 4, 1, mode, 4) for mode in (0, 1, 4)]


def range_case(M: int, K: int, N: int, seed: int, *, inf_in_b: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """N(0, 1) operands with a few rows at the top of the range: products near and past FLT_MAX (false overflows
    before the fix-up), a correction level that overflows while the result does not (about 1.8e38: silent loss
    before), the issue's examples, Inf and NaN; ``inf_in_b`` adds an Inf to B (every row flagged)."""
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(M, K, generator=gen), torch.randn(K, N, generator=gen)
    a[:, 1:3] *= 1e-3  # ordinary rows meet B's huge rows 1 and 2 with small values: they are not flagged
    hot = torch.randperm(M, generator=gen)[:12].tolist()
    b[1, :] = X * (1 + torch.rand(N, generator=gen))  # row 1 of B near 2^64-2^65
    b[2, :3] = torch.tensor([X, -3.4e38, 1.8599303511086727e19])
    for i, r in enumerate(hot):
        if i < 6:
            a[r, 1] = X * (0.6 + 0.08 * i)  # times B's row 1: from about 0.6 FLT_MAX to past it
        elif i == 6:
            a[r, 2] = 9.88536599770615e18  # times 1.86e19: 1.84e38, its level 1 overflowed
            a[r, :2] = 0.0
        elif i == 7:
            a[r, 2] = 3.4e38  # times -3.4e38: -Inf, exactly
        elif i == 8:
            a[r, 3] = float("inf")
        elif i == 9:
            a[r, 4] = float("nan")
        elif i == 10:
            a[r, 1] = 1.7e38 / X  # a large, ordinary row
        else:
            a[r] *= 2.0**120  # large values, products near 2^120: nothing overflows
    if inf_in_b:
        b[K // 2, N // 3] = float("-inf")
    return a, b


# ---------------------------------------------------------------------------------------------------------
# interpreter: the Triton kernel (every mode) and the fix-up
# ---------------------------------------------------------------------------------------------------------


@interpret
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("cfg", INTERPRET_CONFIGS, ids=lambda c: f"m{c.mode}")
def test_issue_examples_interpret(method, cfg):
    for a, b, _, _ in TOP_OF_RANGE_CASES:
        a, b = torch.tensor(a), torch.tensor(b)
        pieces = split_t(b, method)
        for b_arg in (None, b.mT):  # the fix-up's B: rebuilt from the pieces, or FP32 b
            assert_fp32_faithful(emu_mm(a, pieces, method, config=cfg, b=b_arg), a, b, method)


@interpret
@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=extreme_operands(), mode=st.sampled_from([0, 1, 4]), give_b=st.booleans())
def test_kernel_is_fp32_faithful_over_the_whole_range_interpret(method, ops, mode, give_b):
    """FP32-faithful to the B the fix-up reads: FP32 b where the caller gives it, else the value its pieces
    represent (TF32x3 and BF16x3 read a subnormal b as its pieces: 2^-149 has none, so Inf * it is Inf * 0)."""
    a, b = ops
    pieces = split_t(b, method)
    out = emu_mm(a, pieces, method, config=KernelConfig(32, 32, 16, 4, 1, mode, 4), b=b.mT if give_b else None)
    assert_fp32_faithful(out, a, b if give_b else recombine(tuple(p.float() for p in pieces), get_method(method)).mT,
                         method)


@interpret
@pytest.mark.parametrize("method", METHODS)
def test_flagged_rows_batched_with_bias_interpret(method):
    """A batch (B shared, then batched), bias, several row tiles and K-tiles, a persistent grid: flagged rows
    recomputed with their own entry's B and the bias; the other rows keep the kernel's bits."""
    gen = torch.Generator().manual_seed(8)
    a = torch.stack([range_case(70, 24, 21, seed)[0] for seed in (1, 2)])
    b = range_case(70, 24, 21, 1)[1]
    bias = torch.randn(21, generator=gen)
    cfg = KernelConfig(32, 32, 16, 4, 1, 1 if method != "bf16x9" else 0, 4, persistent=True)
    pieces = split_t(b, method)
    out = emu_mm(a, pieces, method, bias, config=cfg, b=b.mT)
    for z in range(2):
        assert_fp32_faithful(out[z], a[z], b, method, bias=bias)
    with tcemu.config(range_fixup=False):
        plain = emu_mm(a, pieces, method, bias, config=cfg)
    with pytest.raises(AssertionError):  # without the fix-up: false overflows or lost accuracy
        for z in range(2):
            assert_fp32_faithful(plain[z], a[z], b, method, bias=bias)
    # rows that cannot be flagged (every |A||B| entry far below FLT_MAX) keep the kernel's bits
    fine = torch.isfinite(a).all(-1) & ((a.double().abs() @ b.double().abs()).amax(-1) < 2.0**120)
    assert fine.sum() > 40 and torch.equal(out[fine], plain[fine])
    # a batched B: each entry's flagged rows with that entry's B
    b2 = torch.stack([b, range_case(70, 24, 21, 3)[1]])
    p2 = tuple(q.reshape(2, 21, 24) for q in split_t(b2.transpose(0, 1).reshape(24, 42), method))
    out2 = emu_mm(a, p2, method, bias, config=cfg, b=b2.mT)
    for z in range(2):
        assert_fp32_faithful(out2[z], a[z], b2[z], method, bias=bias)


@interpret
@pytest.mark.parametrize("method", METHODS)
def test_fixup_kernel_matches_its_reference_interpret(method):
    """The fix-up kernel and its reference twin on the same flags (every third row, B from FP32 and from the
    pieces): both within the bound of the exact product, unflagged rows untouched (bit for bit)."""
    spec = get_method(method)
    a, b = range_case(50, 33, 70, 5)
    pieces = tuple(q.unsqueeze(0) for q in split_t(b, method))
    flags = torch.zeros(50, dtype=torch.int8)
    flags[::3] = 1
    rows = flags.bool()
    for b_t in (b.mT.unsqueeze(0), None):
        got = torch.full((1, 50, 70), 7.0)
        got.view(torch.int32)[0, rows] = RANGE_MARK_BITS  # the elements the GEMM marked, but one
        got[0, 3, 5] = 7.0
        want = got.clone()
        range_fixup(a.unsqueeze(0), pieces, b_t, None, got, flags, spec)
        range_fixup_reference(a.unsqueeze(0), pieces, b_t, None, want, flags, spec)
        for c in (got, want):
            assert (c[0, ~rows] == 7.0).all() and c[0, 3, 5] == 7.0  # nothing unmarked is touched
            c[0, 3, 5] = float("nan")
            assert not (c.view(torch.int32) == RANGE_MARK_BITS).any()
            keep = torch.ones(70, dtype=torch.bool)
            keep[5] = False
            assert_fp32_faithful(c[0, rows][:, keep], a[rows], b[:, keep], method)


@interpret
def test_linear_layer_with_huge_weights_interpret():
    """The public path (tcemu.linear, backend triton): a weight at the top of the range, forward and input
    gradient, with the weight as the fix-up's FP32 operand."""
    import tcemu

    gen = torch.Generator().manual_seed(9)
    w = torch.randn(9, 17, generator=gen)
    w[2, :] = X * 1.4
    w[5, 3] = 3.3e38
    x = torch.randn(6, 17, generator=gen)
    x[1, :] = X * 0.7
    x.requires_grad_(True)
    for method in ("tf32x3", "bf16x6"):
        x.grad = None
        y = tcemu.linear(x, w, None, method, backend="triton")
        assert_fp32_faithful(y.detach(), x.detach(), w.T, method)
        dy = torch.randn(6, 9, generator=gen)
        dy[0, 2] = X
        y.backward(dy)
        assert_fp32_faithful(x.grad, dy, w, method)


@interpret
@pytest.mark.parametrize("method", METHODS)
def test_zero_results_are_positive_interpret(method):
    """Sums of -0 products and of underflowing products: +0, as torch's CPU matmul (docs/emulation.md)."""
    for cfg in INTERPRET_CONFIGS:
        a = -torch.zeros(5, 7)
        b = torch.rand(7, 3) + 0.5
        c = emu_mm(a, split_t(b, method), method, config=cfg)
        assert (c == 0).all() and not torch.signbit(c).any()
        a2 = torch.cat([-torch.rand(1, 7) * 1e-30, torch.tensor([[float("inf")] + [1.0] * 6])])
        c2 = emu_mm(a2, split_t(b * 1e-30, method), method, config=cfg)  # row 1 flagged: its row is +Inf
        assert (c2[0] == 0).all() and not torch.signbit(c2[0]).any() and (c2[1] == float("inf")).all()


# ---------------------------------------------------------------------------------------------------------
# offline sm_90 compiles: the kernels the dispatcher launches, with the range check
# ---------------------------------------------------------------------------------------------------------


def _dispatcher_configs(method: str) -> list[str]:
    """Every configuration the static table holds for a method (large and small M)."""
    spec = get_method(method)
    return list(dict.fromkeys(str(c) for c in config_candidates(spec, 2000) + config_candidates(spec, 300)))


def _flag_store(ptx: str) -> bool:
    return bool(re.search(r"st\.global(\.[a-z0-9]+)*\.b8", ptx))


@offline
@pytest.mark.parametrize(("method", "config"), [
    ("tf32x3", "128x128x32w8s3m1"), ("tf32x3", "64x128x32w4s3m0"), ("bf16x6", "128x64x64w8s3m1po"),
    ("bf16x9", "128x64x64w8s3m0p"),
])
def test_triton_kernel_compiles_with_range_check(method, config):
    """Offline sm_90 compile of the Triton GEMM kernel (the fallback of every Gluon configuration, and the small
    and BF16x9 ones): the flag store is there, nothing spills."""
    from tcemu.emulation.gemm.launch import emu_mm_compile

    ptx = emu_mm_compile(method, 4096, 4096, 4096, has_bias=True, config=KernelConfig.parse(config), arch=90).asm["ptx"]
    assert _flag_store(ptx)
    assert "ld.local" not in ptx and "st.local" not in ptx


@offline
@pytest.mark.parametrize("method", METHODS)
def test_gluon_kernels_compile_with_range_check(method):
    """Offline sm_90 compile of every Gluon configuration the dispatcher uses for the method (``pg``, ``gw``/``tgw``,
    ``pgw``/``ptgw``; the bias as the wait-structure tests compile them, so that Triton's cache serves most): each
    stores the row flags and fits the shared memory."""
    from tcemu.emulation.gemm.launch import wgmma_compile, wgmma_pieces_ws_compile, wgmma_ws_compile

    seen = 0
    for text in _dispatcher_configs(method):
        cfg = KernelConfig.parse(text)
        if not cfg.wgmma or method == "bf16x9":
            continue
        if cfg.warp_specialized and cfg.presplit:
            ck = wgmma_pieces_ws_compile(method, cfg, has_bias=True)
        elif cfg.warp_specialized:
            ck = wgmma_ws_compile(method, cfg, has_bias=True)
        else:
            ck = wgmma_compile(method, cfg, split_a=not cfg.presplit)
        assert _flag_store(ck.asm["ptx"]), text
        assert ck.metadata.shared <= importlib.import_module("tcemu.emulation.gemm.launch")._SMEM_PER_BLOCK
        seen += 1
    assert seen or method == "bf16x9"


@offline
def test_kernels_without_the_check_compile():
    """The benchmark's unchecked variants (``tcemu.config(range_fixup=False)``) compile for sm_90 without the flag store."""
    from tcemu.emulation.gemm.launch import (
        emu_mm_compile,
        wgmma_compile,
        wgmma_pieces_ws_compile,
        wgmma_ws_compile,
    )

    kernels = [emu_mm_compile("bf16x6", 4096, 4096, 4096, config=KernelConfig.parse("128x64x64w8s3m1p"), arch=90,
                              range_check=False),
               wgmma_compile("tf32x3", "128x128x32w8s3m1pg", range_check=False),
               wgmma_ws_compile("tf32x3", "128x128x32w8s3m1tgw", has_bias=True, range_check=False),
               wgmma_pieces_ws_compile("bf16x6", "128x64x64w8s3m1ptgw", has_bias=True, range_check=False)]
    for ck in kernels:
        assert not _flag_store(ck.asm["ptx"]) and "st.global" in ck.asm["ptx"]


@offline
@pytest.mark.parametrize(("method", "b_pieces"), [("tf32x3", False), ("bf16x3", True), ("bf16x6", False),
                                                  ("bf16x9", True)])
def test_fixup_kernel_compiles(method, b_pieces):
    """Offline sm_90 compile of the fix-up kernel (B as FP32 or as pieces): it stores C, nothing spills."""
    from tcemu.emulation.gemm.range_fixup import range_fixup_compile

    ck = range_fixup_compile(method, b_pieces=b_pieces, has_bias=True, arch=90)
    ptx = ck.asm["ptx"]
    assert "st.global" in ptx and "mma.sync" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx


# ---------------------------------------------------------------------------------------------------------
# GPU: every configuration the dispatcher uses
# ---------------------------------------------------------------------------------------------------------


def _run(method: str, text: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    cfg = KernelConfig.parse(text)
    return emu_mm(a, split_t(b, method), method, bias, config=cfg, b=b.mT)


def _same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    nan = torch.isnan(x)
    return torch.equal(nan, torch.isnan(y)) and torch.equal(x[~nan].view(torch.int32), y[~nan].view(torch.int32))


def _groups(method: str) -> dict[tuple, list[str]]:
    """The dispatcher's configurations by tiling and accumulation mode: each group gives the same bits."""
    groups: dict[tuple, list[str]] = {}
    for text in _dispatcher_configs(method):
        c = KernelConfig.parse(text)
        mode = 0 if method == "bf16x9" else (1 if c.wgmma else c.mode)
        groups.setdefault((c.bm, c.bn, c.bk, mode), []).append(text)
    return groups


@gpu
@pytest.mark.parametrize("method", METHODS)
def test_every_dispatcher_config_is_fp32_faithful_gpu(method):
    """Every configuration the static table holds (Gluon ones on sm_90; elsewhere they run the Triton kernel):
    the FP64 pattern and the bound on rows at the top of the range, with bias; within a tiling every family gives
    the same bits, on ordinary data and on data with flagged rows."""
    from tcemu.emulation.gemm.launch import _WGMMA_FAILED

    gen = torch.Generator().manual_seed(31)
    M, K, N = 2900, 336, 300
    a, b = range_case(M, K, N, 11)
    bias = torch.randn(N, generator=gen)
    a_d, b_d, bias_d = a.cuda(), b.cuda(), bias.cuda()
    a_ord, b_ord = torch.randn(M, K, generator=gen).cuda(), torch.randn(K, N, generator=gen).cuda()
    for texts in _groups(method).values():
        first = _run(method, texts[0], a_d, b_d, bias_d)
        assert_fp32_faithful(first, a, b, method, bias=bias, extra_rel=TC_TRUNCATION)
        plain = _run(method, texts[0], a_ord, b_ord, bias_d)
        for text in texts[1:]:
            assert _same_bits(_run(method, text, a_d, b_d, bias_d), first), f"{method} {text} vs {texts[0]}"
            assert _same_bits(_run(method, text, a_ord, b_ord, bias_d), plain), f"{method} {text} vs {texts[0]}"
    assert not _WGMMA_FAILED, f"a Gluon kernel failed and the Triton kernel ran instead: {_WGMMA_FAILED}"


@gpu
@pytest.mark.parametrize("method", METHODS)
def test_every_row_flagged_and_batched_gpu(method):
    """An Inf in B flags every row (the whole product is recomputed); a batch with B batched and broadcast; B
    rebuilt from its pieces; the result within the bound, Inf/NaN where the exact product has them."""
    a, b = range_case(1500, 200, 130, 12, inf_in_b=True)
    text = _dispatcher_configs(method)[0]
    out = _run(method, text, a.cuda(), b.cuda(), torch.zeros(130, device="cuda"))
    assert_fp32_faithful(out, a, b, method, extra_rel=TC_TRUNCATION)
    a3 = torch.stack([range_case(700, 96, 80, s)[0] for s in (1, 2, 3)])
    b3 = torch.stack([range_case(700, 96, 80, s)[1] for s in (4, 5, 6)])
    p3 = tuple(q.reshape(3, 80, 96) for q in split_t(b3.transpose(0, 1).reshape(96, 240).cuda(), method))
    for b_arg in (b3.mT.cuda(), None):
        out3 = emu_mm(a3.cuda(), p3, method, b=b_arg)
        for z in range(3):
            assert_fp32_faithful(out3[z], a3[z], b3[z], method, extra_rel=TC_TRUNCATION)


@gpu
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_public_path_and_cuda_graph_gpu(method):
    """tcemu.linear on CUDA (the small-shape fallback off): forward and input gradient with a weight at the top
    of the range; the same product captured in a CUDA graph and replayed (the fix-up needs no host sync)."""
    from tcemu.emulation.gemm import TritonBackend

    with tcemu.config(small_shape_fallback=False):
        gen = torch.Generator().manual_seed(13)
        w = torch.randn(260, 336, generator=gen)
        w[7, :] = X * 1.3
        x, _ = range_case(2000, 336, 260, 14)
        x_d, w_d = x.cuda().requires_grad_(True), w.cuda()
        y = tcemu.linear(x_d, w_d, None, method, backend="triton")
        assert_fp32_faithful(y, x, w.T, method, extra_rel=TC_TRUNCATION)
        dy = torch.randn(2000, 260, generator=gen)
        dy[3, 7] = X
        y.backward(dy.cuda())
        assert_fp32_faithful(x_d.grad, dy, w, method, extra_rel=TC_TRUNCATION)
        be, spec = TritonBackend(), get_method(method)
        pw = be.prepare_weight(w_d, spec)
        static_x = x.cuda()
        eager = be.linear(static_x, w_d, pw, spec, None)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = be.linear(static_x, w_d, pw, spec, None)
        x2, _ = range_case(2000, 336, 260, 15)
        static_x.copy_(x2.cuda())
        g.replay()
        torch.cuda.synchronize()
        assert_fp32_faithful(static_y, x2, w.T, method, extra_rel=TC_TRUNCATION)
        assert _same_bits(static_y, be.linear(x2.cuda(), w_d, pw, spec, None))
        del eager


@gpu
@pytest.mark.parametrize("method", METHODS)
def test_zero_results_against_cublas_gpu(method, record_property):
    """Sums of -0 products and of underflowing products: every kernel family gives +0. What cuBLAS SGEMM (torch.matmul,
    TF32 off) gives is recorded (``record_property`` and a warning where it differs: docs/emulation.md)."""
    from tcemu.emulation.reference import ieee_fp32_matmul

    cases = {"neg_zero": (-torch.zeros(1000, 336), torch.rand(336, 300) + 0.5),
             "underflow": (-torch.rand(1000, 336) * 1e-30, torch.rand(336, 300) * 1e-30)}
    for name, (a, b) in cases.items():
        a, b = a.cuda(), b.cuda()
        cublas = ieee_fp32_matmul(a, b)
        neg = int(torch.signbit(cublas).sum())
        record_property(f"cublas_{name}_negative_zeros", neg)
        if neg:
            warnings.warn(f"cuBLAS SGEMM gives -0 in {neg} of {cublas.numel()} entries ({name}); the emulation "
                          "gives +0", stacklevel=1)
        for text in _dispatcher_configs(method):
            c = emu_mm(a, split_t(b, method), method, config=KernelConfig.parse(text))
            assert (c == 0).all() and not torch.signbit(c).any(), f"{method} {text} {name}"


@gpu
@pytest.mark.parametrize("method", METHODS)
def test_fixup_kernel_matches_its_reference_gpu(method):
    """The fix-up kernel on the GPU (every row flagged, B as FP32 and from the pieces, ragged shapes): within the
    bound, as its reference twin."""
    spec = get_method(method)
    a, b = range_case(333, 257, 190, 16)
    pieces = tuple(q.unsqueeze(0) for q in split_t(b.cuda(), method))
    flags = torch.ones(333, dtype=torch.int8, device="cuda")
    for b_t in (b.mT.unsqueeze(0).cuda(), None):
        got = torch.full((1, 333, 190), RANGE_MARK_BITS, dtype=torch.int32, device="cuda").view(torch.float32)
        range_fixup(a.unsqueeze(0).cuda(), pieces, b_t, None, got, flags, spec)
        assert_fp32_faithful(got[0], a, b, method, extra_rel=TC_TRUNCATION)
