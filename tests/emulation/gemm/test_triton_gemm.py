"""Triton GEMM kernels (tcemu.emulation.gemm) against the reference split and against FP64.

Two kinds of test:

* ``interpret``: the kernels run on the CPU under ``TRITON_INTERPRET=1`` (``make test``'s second pass) on
  small shapes. There ``tl.dot`` is a NumPy product, so these check indexing, masking, batching, bias and
  the split (bit for bit), not Tensor Core rounding.
* ``gpu``: the same kernels on a CUDA device (sm80+), against FP64 with the derived bound below, against
  cuBLAS SGEMM's own error, and under ``torch.compile`` and CUDA graphs.
"""

from __future__ import annotations

import importlib
from dataclasses import replace

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs the 'triton' extra")

from _gemm_cases import (  # noqa: E402 - the shared markers, device, tolerances and checks
    DEVICE,
    METHODS,
    U_FP32,
    _bits,
    _special_matrix,
    assert_close_to_fp64,
    gpu,
    interpret,
)

from tcemu.emulation.gemm import (  # noqa: E402
    KernelConfig,
    TritonBackend,
    config_candidates,
    emu_mm,
    emu_mm_reference,
    split_t,
    split_t_reference,
)
from tcemu.emulation.methods import get_method  # noqa: E402
from tcemu.emulation.reference import ieee_fp32_matmul  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


# ---------------------------------------------------------------------------------------------------
# split: bit for bit
# ---------------------------------------------------------------------------------------------------


def _check_split(method: str, device: str) -> None:
    gen = torch.Generator().manual_seed(1)
    b = _special_matrix(70, 45, gen).to(device)
    for src in (b, b.t()):  # both memory orders
        got = split_t(src, method)
        want = split_t_reference(src, method)
        assert len(got) == len(want) == get_method(method).n_pieces
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype and g.is_contiguous()
            nan = torch.isnan(w.float())
            assert torch.equal(torch.isnan(g.float()), nan), f"{method} piece {i}: NaN positions differ"
            assert torch.equal(_bits(g)[~nan], _bits(w)[~nan]), f"{method} piece {i}: bits differ from split()"


@interpret
@pytest.mark.parametrize("method", METHODS)
def test_split_bits_interpret(method):
    _check_split(method, "cpu")


@gpu
@pytest.mark.parametrize("method", METHODS)
def test_split_bits_gpu(method):
    _check_split(method, DEVICE)



# ---------------------------------------------------------------------------------------------------
# emu_mm vs the reference (interpret) and FP64 (gpu)
# ---------------------------------------------------------------------------------------------------

# (Z, M, K, N): ragged (no tile multiples), K=1, a batch, a K that is one tile plus one
INTERPRET_SHAPES = [(1, 37, 45, 29), (1, 5, 1, 7), (2, 33, 17, 40)]
GPU_SHAPES = [(1, 1000, 777, 333), (1, 129, 4096, 257), (3, 200, 300, 100), (1, 4097, 64, 1), (1, 7, 2, 5)]


def _run_mm_case(method: str, shape, *, noncontig: bool, with_bias: bool, device: str, seed: int):
    Z, M, K, N = shape
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(Z, K, M, generator=gen).transpose(1, 2) if noncontig else torch.randn(Z, M, K, generator=gen)
    b = torch.randn(K, N, generator=gen)
    bias = torch.randn(N, generator=gen) if with_bias else None
    a, b = a.to(device), b.to(device)
    bias = bias.to(device) if bias is not None else None
    a_in = a[0] if Z == 1 else a
    out = emu_mm(a_in, split_t(b, method), method, bias)
    return a_in, b, bias, out


@interpret
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", INTERPRET_SHAPES, ids=str)
def test_emu_mm_matches_reference_interpret(method, shape):
    a, b, bias, out = _run_mm_case(method, shape, noncontig=shape[0] == 2, with_bias=True, device="cpu", seed=2)
    ref = emu_mm_reference(a, b, method, bias)
    # Same pieces and products; only the summation order differs (NumPy vs torch): FP32 rounding only.
    scale = (a.double().abs() @ b.double().abs()) + bias.double().abs()
    err = ((out - ref).double().abs() / scale).max().item()
    assert err <= 8 * a.shape[-1] * U_FP32, f"{method} {shape}: {err:.3g}"
    assert_close_to_fp64(out, a, b, method, bias)



def _long_batch_case(method, Z, M, K, N, device, batched_b):
    """emu_mm of a (Z, M, K) batch, and the same product entry by entry (the bits must agree)."""
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(Z, M, K, generator=gen).to(device)
    b = torch.randn(Z if batched_b else 1, N, K, generator=gen).to(device)
    pieces = split_t(b.reshape(-1, K).T, method)  # (Zb * N, K) each
    pieces = tuple(q.reshape(b.shape[0], N, K) for q in pieces)
    return a, pieces, emu_mm(a, pieces, method)


@interpret
@pytest.mark.parametrize("batched_b", [True, False])
def test_long_batches_and_splits_run_in_slices_interpret(monkeypatch, batched_b):
    """A batch longer than CUDA's grid y limit (65,535) runs in slices, and so does a split of more columns than
    the limit's tiles cover: same bits as one launch (the limit is patched down to 3 here)."""
    emu_mm_module = importlib.import_module("tcemu.emulation.gemm.launch")
    method = "tf32x3"
    a, pieces, whole = _long_batch_case(method, 7, 5, 8, 6, "cpu", batched_b)
    monkeypatch.setattr(emu_mm_module, "MAX_GRID_YZ", 3)
    _, pieces_sliced, sliced = _long_batch_case(method, 7, 5, 8, 6, "cpu", batched_b)
    assert all(torch.equal(p, q) for p, q in zip(pieces, pieces_sliced))
    assert torch.equal(whole, sliced)
    wide = torch.randn(4, 3 * 64 * 3 + 5)  # split_t: 3 launches of 3 column tiles (64 wide) and a ragged rest
    assert all(torch.equal(p, q) for p, q in zip(split_t(wide, method), split_t_reference(wide, method)))


@gpu
def test_long_batches_and_splits_gpu():
    """Batches of 138,240 small products (PET S's attention at 17,280 atoms: 8 heads) and a split of 4.5 M
    columns exceed CUDA's grid y limit; they run in slices and match entry-by-entry products."""
    a, pieces, out = _long_batch_case("tf32x3", 138_240, 5, 32, 7, "cuda", True)
    for z in (0, 65_534, 65_535, 65_536, 138_239):
        assert torch.equal(out[z], emu_mm(a[z], tuple(q[z] for q in pieces), "tf32x3")), z
    wide = torch.randn(8, 4_500_000, device="cuda")
    got, want = split_t(wide, "bf16x3"), split_t_reference(wide, "bf16x3")
    assert all(torch.equal(p, q.to(p.device)) for p, q in zip(got, want))


@interpret
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("mode", [0, 1, 4])
def test_accumulation_modes_interpret(method, mode):
    """Tile (0), running (1) and hybrid (4) correction levels: same products, same spec."""
    a, b, bias, _ = _run_mm_case(method, (1, 37, 45, 29), noncontig=False, with_bias=True, device="cpu", seed=8)
    a[3, 5] = float("inf")
    a[6, 7] = float("nan")
    out = emu_mm(a, split_t(b, method), method, bias, config=KernelConfig(32, 32, 16, 4, 1, mode, 4))
    want = a.double() @ b.double() + bias.double()
    assert torch.equal(torch.isnan(out), torch.isnan(want)) and torch.equal(torch.isinf(out), torch.isinf(want))
    fin = torch.isfinite(want).all(dim=1)
    assert_close_to_fp64(out[fin], a[fin], b, method, bias)


@interpret
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("mode", [0, 1])
def test_presplit_a_same_bits_interpret(method, mode):
    """A split beforehand (and L0 issued first, and a persistent tile loop) runs the same products in
    the same order: same bits. A Gluon-kernel configuration ("g") runs the Triton kernel off Hopper."""
    gen = torch.Generator().manual_seed(21)
    a = torch.randn(2, 45, 37, generator=gen).mT  # (2, 37, 45), strided
    a[1, 3, 5] = float("inf")
    b = torch.randn(45, 29, generator=gen)
    bias = torch.randn(29, generator=gen)
    pieces = split_t(b, method)
    base = KernelConfig(32, 32, 16, 4, 1, mode, 4)
    want = emu_mm(a, pieces, method, bias, config=base)
    for cfg in (replace(base, presplit=True), replace(base, presplit=True, l0_first=True),
                replace(base, persistent=True), replace(base, presplit=True, persistent=True),
                *([replace(base, wgmma=True)] if mode == 1 and method != "bf16x9" else [])):
        got = emu_mm(a, pieces, method, bias, config=cfg)
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        assert torch.equal(got[~torch.isnan(want)], want[~torch.isnan(want)]), str(cfg)
    assert KernelConfig.parse(str(replace(base, presplit=True, l0_first=True))).presplit
    assert KernelConfig.parse(str(replace(base, presplit=True, persistent=True))).persistent
    assert KernelConfig.parse(str(replace(base, presplit=True, wgmma=True))).wgmma


@interpret
@pytest.mark.parametrize("method", METHODS)
def test_persistent_loops_over_tiles_interpret(method):
    """With more tiles than programs (15 tiles per batch entry, 2 programs each), every tile is
    computed once, with the bits of the one-tile-per-program grid."""
    gen = torch.Generator().manual_seed(24)
    a = torch.randn(2, 150, 45, generator=gen)
    a[0, 140, 2] = float("nan")
    b = torch.randn(45, 70, generator=gen)
    bias = torch.randn(70, generator=gen)
    pieces = split_t(b, method)
    base = KernelConfig(32, 32, 16, 4, 1, 1 if method != "bf16x9" else 0, 4)
    want = emu_mm(a, pieces, method, bias, config=base)
    for cfg in (replace(base, persistent=True), replace(base, persistent=True, presplit=True)):
        got = emu_mm(a, pieces, method, bias, config=cfg)
        assert torch.equal(torch.isnan(got), torch.isnan(want)), str(cfg)
        assert torch.equal(got[~torch.isnan(want)], want[~torch.isnan(want)]), str(cfg)
    assert torch.isnan(want[0, 140]).all() and not torch.isnan(want[0, :140]).any()
    assert_close_to_fp64(want[1], a[1], b, method, bias)

@gpu
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bucket_m", [2000, 300], ids=["large", "small"])
def test_every_candidate_config_gpu(method, bucket_m):
    """Autotuning may pick any candidate: each one must be right (ragged shape, bias, Inf)."""
    gen = torch.Generator().manual_seed(9)
    a = torch.randn(bucket_m, 333, generator=gen).to(DEVICE)
    b = torch.randn(333, 257, generator=gen).to(DEVICE)
    bias = torch.randn(257, generator=gen).to(DEVICE)
    pieces = split_t(b, method)
    for cfg in config_candidates(get_method(method), bucket_m):
        out = emu_mm(a, pieces, method, bias, config=cfg)
        assert_close_to_fp64(out, a, b, method, bias)


@gpu
@pytest.mark.parametrize("method", METHODS)
def test_presplit_a_same_bits_gpu(method):
    """On the Tensor Core too, splitting A beforehand (and issuing L0 first) changes no bit."""
    gen = torch.Generator().manual_seed(22)
    a = torch.randn(1500, 333, generator=gen).to(DEVICE)
    b = torch.randn(333, 257, generator=gen).to(DEVICE)
    pieces = split_t(b, method)
    for cfg in config_candidates(get_method(method), 1500) + config_candidates(get_method(method), 300):
        if not cfg.presplit:
            continue
        want = emu_mm(a, pieces, method, config=replace(cfg, presplit=False, l0_first=False))
        assert torch.equal(emu_mm(a, pieces, method, config=cfg), want), str(cfg)


@gpu
@pytest.mark.parametrize("method", METHODS)
def test_persistent_same_bits_gpu(method):
    """The persistent tile loop computes each tile as the one-tile-per-program grid does: same bits,
    also batched (one persistent grid per batch entry) and with more tiles than programs."""
    gen = torch.Generator().manual_seed(23)
    a = torch.randn(2, 2900, 333, generator=gen).to(DEVICE)
    a[1, 7, 9] = float("inf")
    b = torch.randn(333, 1100, generator=gen).to(DEVICE)
    bias = torch.randn(1100, generator=gen).to(DEVICE)
    pieces = split_t(b, method)
    for cfg in config_candidates(get_method(method), 2900):
        cfg = replace(cfg, num_stages=2)  # the flattened loop holds one stage more: 2 fits every tile
        want = emu_mm(a, pieces, method, bias, config=cfg)
        got = emu_mm(a, pieces, method, bias, config=replace(cfg, persistent=True))
        assert torch.equal(torch.isnan(got), torch.isnan(want)), str(cfg)
        assert torch.equal(got[~torch.isnan(want)], want[~torch.isnan(want)]), str(cfg)


@gpu
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "strided"])
def test_emu_mm_vs_fp64_gpu(method, shape, noncontig):
    a, b, bias, out = _run_mm_case(method, shape, noncontig=noncontig, with_bias=True, device=DEVICE, seed=3)
    assert_close_to_fp64(out, a, b, method, bias)



@gpu
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6", "bf16x9"])
@pytest.mark.parametrize("k", [256, 4096])
def test_normwise_error_not_above_sgemm_gpu(method, k):
    """FP32-accurate methods: normwise error vs FP64 no larger than cuBLAS SGEMM's on the same inputs."""
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(2048, k, generator=gen).to(DEVICE)
    w = torch.randn(512, k, generator=gen).to(DEVICE)
    ref = a.double() @ w.double().T
    be, spec = TritonBackend(), get_method(method)
    ours = emu_mm(a, TritonBackend().prepare_weight(w, spec).fwd, method)
    sgemm = ieee_fp32_matmul(a, w.T)
    e_ours = ((ours.double() - ref).norm() / ref.norm()).item()
    e_sgemm = ((sgemm.double() - ref).norm() / ref.norm()).item()
    assert e_ours <= e_sgemm, f"{method} K={k}: {e_ours:.3g} > SGEMM {e_sgemm:.3g}"
    del be



# ---------------------------------------------------------------------------------------------------
# special values: Inf and NaN propagate as in FP32
# ---------------------------------------------------------------------------------------------------


def _check_special(method: str, device: str) -> None:
    gen = torch.Generator().manual_seed(5)
    M, K, N = 40, 35, 24
    a = torch.randn(M, K, generator=gen)
    b = torch.randn(K, N, generator=gen)
    a[3, 7] = float("inf")
    a[5, 2] = float("nan")
    a[9, 11] = float("-inf")
    b[11, 4] = 0.0  # -Inf * 0 -> NaN in column 4 of row 9
    b[20, 6] = float("inf")
    a[12, 20] = 0.0  # row 12 times the Inf in b: NaN at (12, 6)
    a, b = a.to(device), b.to(device)
    out = emu_mm(a, split_t(b, method), method)
    want = a.double() @ b.double()  # Inf/NaN pattern of an exact product (no overflow here)
    assert torch.equal(torch.isnan(out), torch.isnan(want)), f"{method}: NaN pattern differs"
    assert torch.equal(torch.isposinf(out), torch.isposinf(want)), f"{method}: +Inf pattern differs"
    assert torch.equal(torch.isneginf(out), torch.isneginf(want)), f"{method}: -Inf pattern differs"
    fin = torch.isfinite(want)
    assert torch.isfinite(out[fin]).all()


@interpret
@pytest.mark.parametrize("method", METHODS)
def test_special_values_interpret(method):
    _check_special(method, "cpu")



@gpu
@pytest.mark.parametrize("method", METHODS)
def test_special_values_gpu(method):
    _check_special(method, DEVICE)



def _check_wide_range(method: str, device: str) -> None:
    """Values from 2^-120 to 2^120 (no product under/overflows): the scaled split keeps FP32 accuracy."""
    gen = torch.Generator().manual_seed(6)
    M, K, N = 48, 40, 36
    ea = torch.randint(-60, 60, (M, 1), generator=gen).float()
    eb = torch.randint(-60, 60, (1, N), generator=gen).float()
    a = torch.randn(M, K, generator=gen) * torch.exp2(ea)
    b = torch.randn(K, N, generator=gen) * torch.exp2(eb)
    a[0] *= 2.0**-60  # rows near 2^-120
    a, b = a.to(device), b.to(device)
    out = emu_mm(a, split_t(b, method), method)
    assert_close_to_fp64(out, a, b, method)


@interpret
@pytest.mark.parametrize("method", METHODS)
def test_wide_exponent_range_interpret(method):
    _check_wide_range(method, "cpu")



@gpu
@pytest.mark.parametrize("method", METHODS)
def test_wide_exponent_range_gpu(method):
    _check_wide_range(method, DEVICE)
