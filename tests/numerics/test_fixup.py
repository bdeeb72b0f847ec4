"""The twin's range check and fix-up path (tcemu.numerics.emulated.run_gemm, schedule.derive_fixup_schedule).

* the fix-up's operands (range_scaling) against their exact-rational reference, bit for bit;
* the twin with its fix-up against its exact reference on top-of-range data, every kernel mode, with and
  without bias, B as FP32 and as its pieces; the elements marked are the ones the flag rule names;
* a false overflow (X X < FLT_MAX whose high pieces overflow) is finite, within the method's bound, and Inf
  without the fix-up;
* the fix-up's schedule reads the fix-up kernel's launch constants; offline compiles (no GPU): its instruction
  per architecture (PTX), and the bias fused into the column unscaling (SASS), as the schedule says;
* ``interpret``: emu_mm (the GEMM kernel and the fix-up kernel) under TRITON_INTERPRET=1, with the Tensor Core
  model in every tl.dot, gives the twin's bits on the marked elements too, every mode, B both ways.
"""

from __future__ import annotations

import importlib
import os
import zlib
from dataclasses import replace

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from tcemu.emulation.gemm.launch import KernelConfig  # noqa: E402
from tcemu.emulation.methods import get_method  # noqa: E402
from tcemu.numerics import get_preset  # noqa: E402
from tcemu.numerics.emulated import (  # noqa: E402
    emulated_matmul,
    emulated_matmul_bits,
    emulated_matmul_reference,
    run_gemm,
)
from tcemu.numerics.hardware.gemm_families import X_BELOW_2_64, false_overflow, top_of_range  # noqa: E402
from tcemu.numerics.range_scaling import range_scaled_operands, range_scaled_operands_reference  # noqa: E402
from tcemu.numerics.schedule import (  # noqa: E402
    FIXUP_INSTRUCTION,
    FIXUP_KERNEL,
    derive_fixup_schedule,
    derive_schedule,
)
from tcemu.testing import assert_within_elementwise_bound  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
METHODS = ("tf32x3", "bf16x3", "bf16x6", "bf16x9")
# one configuration per kernel mode (as test_numerics_emulated), K with 16-byte rows for the Gluon ones
CONFIGS = [("tf32x3", "128x128x32w8s3m1pg"), ("tf32x3", "64x128x32w4s3m0"), ("bf16x3", "128x128x64w8s3m1"),
           ("bf16x6", "128x64x64w8s3m1ptgw"), ("bf16x6", "128x64x64w8s3m4p"), ("bf16x6", "64x128x64w4s2m0"),
           ("bf16x9", "128x64x64w8s3m0p")]


def _top_of_range(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """N(0, 1) operands with a top-of-range block (products of 2^127 .. 2^129) and a false overflow."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    top_of_range(a, b, rng, fraction=0.3)
    false_overflow(a, b, rng)
    return a.astype(np.float32), b.astype(np.float32)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("b_operand", ["fp32", "recombined"])
def test_fixup_operands_equal_their_exact_reference(method, b_operand):
    """Scaled A and B, k and l == the element-by-element rational reference: huge rows and columns, values
    scaled into the subnormal range and to the smallest subnormal, Inf and NaN, a zero row."""
    rng = np.random.default_rng(zlib.crc32(f"{method}{b_operand}".encode()))
    a = (rng.standard_normal((6, 20)) * 2.0 ** rng.integers(-140, 128, (6, 20))).astype(np.float32)
    b = (rng.standard_normal((20, 5)) * 2.0 ** rng.integers(-140, 128, (20, 5))).astype(np.float32)
    a[1, 2], a[2, 0], b[3, 1], b[0, 2] = np.inf, np.nan, -np.inf, np.float32(3.4e38)
    a[4] = 0.0
    got = range_scaled_operands(a, b, method, b_operand)
    want = range_scaled_operands_reference(a, b, method, b_operand)
    assert np.array_equal(got[2], want[2]) and np.array_equal(got[3], want[3])
    assert got[2].max() > 0 and got[3].max() > 0 and got[2][4] == 0
    for x, y in zip(got[:2], want[:2]):
        assert np.array_equal(x.view(np.uint32), y.view(np.uint32))


@pytest.mark.parametrize(("method", "config"), CONFIGS)
@pytest.mark.parametrize("fixup_b", ["fp32", "recombined"])
def test_twin_with_its_fixup_equals_its_exact_reference(method, config, fixup_b):
    """Top-of-range data: the fast twin (the kernel's schedule, its marks, the fix-up's schedule on the marked
    elements) == the exact rational reference, bit for bit, with a bias; some elements are marked, and the
    others keep the bits they have without the fix-up."""
    a, b = _top_of_range(4, 48 if "g" not in config else 64, 4, seed=zlib.crc32(f"{method}{config}".encode()))
    bias = np.array([0.5, -1.25, 3.0, 2.0**100], np.float32)
    s = derive_schedule(method, config, K=a.shape[1], has_bias=True, fixup_b=fixup_b)
    bits, fixed = run_gemm(s, a, b, bias.view(np.uint32))
    ref = emulated_matmul_reference(a, b, method, schedule=s, bias=bias).view(np.uint32)
    assert np.array_equal(bits, ref), np.argwhere(bits != ref)
    assert fixed.any() and not fixed.all()
    plain = emulated_matmul_bits(a, b, method, config=config, bias=bias, range_fixup=False)
    assert np.array_equal(plain[~fixed], bits[~fixed])  # the fix-up touches the marked elements only


@pytest.mark.parametrize("method", METHODS)
def test_top_of_range_results_within_the_method_bound(method):
    """The twin's results on top-of-range data are within the method's rigorous bound of the FP64 product (the
    range fix-up's term included), overflow only where the FP64 result does, and differ from those without the
    fix-up on some marked elements; X X = 3.4028233e38 is finite (Inf without the fix-up where the kernel runs
    the L0 tile from zero)."""
    a, b = _top_of_range(24, 40, 20, seed=3)
    s = derive_schedule(method, M=24, N=20, K=40)
    bits, fixed = run_gemm(s, a, b)
    c = bits.view(np.float32)
    plain = emulated_matmul_bits(a, b, method, range_fixup=False)
    assert np.count_nonzero(plain[fixed] != bits[fixed]) and np.array_equal(plain[~fixed], bits[~fixed])
    diag = np.arange(20)
    d_bits, d_fixed = run_gemm(s, a, b, rows=diag, cols=diag)  # selected outputs: the grid's, fix-up included
    assert np.array_equal(d_bits, bits[diag, diag]) and np.array_equal(d_fixed, fixed[diag, diag]) and d_fixed.any()
    assert_within_elementwise_bound(torch.from_numpy(c), torch.from_numpy(a), torch.from_numpy(b), method)
    x = np.array([[X_BELOW_2_64, 1.0]], np.float32)
    y = np.array([[X_BELOW_2_64], [0.0]], np.float32)
    assert emulated_matmul(x, y, method)[0, 0] == np.float32(float(np.float32(X_BELOW_2_64)) ** 2)
    if derive_schedule(method, M=1, N=1, K=2).mode == 1:
        assert np.isinf(emulated_matmul(x, y, method, range_fixup=False)[0, 0])


def test_fixup_schedule_reads_the_fixup_kernel(monkeypatch):
    """The fix-up's schedule comes from _range_fixup's constants: its K-tile, its tiling; every method's levels
    on running accumulators; a main schedule holds it, and range_fixup=False has neither check nor fix-up."""
    fix = importlib.import_module("tcemu.emulation.gemm._kernels._range_fixup")
    s = derive_schedule("bf16x9", "128x64x64w8s3m0p", K=96)
    assert s.range_check and s.fixup.kernel == FIXUP_KERNEL and s.fixup.bk == fix.FIX_BK and s.fixup.mode == 1
    assert s.fixup.config == f"{fix.FIX_BM}x{fix.FIX_BN}x{fix.FIX_BK}w{fix.FIX_WARPS}"
    assert s.fixup.params == get_preset("h200", FIXUP_INSTRUCTION["h100"], "bf16", "fp32")
    mmas = [st for st in s.fixup.tile if st.op == "mma"]
    assert sorted(st.product for st in mmas) == sorted(get_method("bf16x9").products)
    assert all(st.dst == f"c{sum(st.product)}" for st in mmas if st.product != (0, 0))
    assert "range fix-up" in s.describe() and s.to_dict()["fixup"]["kernel"] == FIXUP_KERNEL
    off = derive_schedule("bf16x9", "128x64x64w8s3m0p", K=96, range_fixup=False)
    assert not off.range_check and off.fixup is None
    monkeypatch.setattr(fix, "FIX_BK", 64)
    assert derive_fixup_schedule("tf32x3").bk == 64
    with pytest.raises(ValueError, match="fp32.*recombined"):
        derive_fixup_schedule("tf32x3", b_operand="pieces")


needs_compile = pytest.mark.skipif(INTERPRET, reason="TRITON_INTERPRET=1 replaces Triton's compiler (the CPU pass "
                                   "runs these)")


@needs_compile
@pytest.mark.parametrize(("arch", "name", "method"), [(80, "a100", "tf32x3"), (90, "h100", "tf32x3"),
                                                      (90, "h100", "bf16x6"), (100, "b200", "bf16x6")])
def test_fixup_instruction_per_architecture_from_ptx(arch, name, method):
    """The fix-up's tl.dot compiles to FIXUP_INSTRUCTION with the preset's K on every architecture."""
    from tcemu.numerics.hardware.kernel_sass import fixup_evidence

    ev = fixup_evidence(method, arch=arch)
    s = derive_fixup_schedule(method, arch=name)
    assert (ev["instruction"], ev["k_instr"]) == (FIXUP_INSTRUCTION[name], s.params.k_instr)


@needs_compile
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_fixup_bias_is_fused_into_the_column_unscaling(method):
    """sm_90 SASS of the fix-up: the bias adds one FFMA per element of C and per thread and removes one FMUL,
    no FADD (the column unscaling and the bias are one rounding), as the schedule's last step says; for TF32x3
    the FFMA count is the schedule's fused steps (the combine's select keeps its FMUL and FADD apart)."""
    from tcemu.numerics.hardware.kernel_sass import fixup_evidence

    with_bias, without = fixup_evidence(method, has_bias=True), fixup_evidence(method, has_bias=False)
    per = {op: (with_bias[op] - without[op]) / with_bias["elements_per_thread"] for op in ("FFMA", "FMUL", "FADD")}
    last = derive_fixup_schedule(method, has_bias=True).epilogue[-1]
    assert last.op == "unscale_cols_bias" and last.fused
    assert per == {"FFMA": 1, "FMUL": -1, "FADD": 0}, per
    if method == "tf32x3":  # no FFMA in the TF32 split: every FFMA is one of the schedule's fused steps
        for ev, bias in ((with_bias, True), (without, False)):
            fused = sum(st.fused for st in derive_fixup_schedule(method, has_bias=bias).epilogue)
            assert ev["FFMA"] == fused * ev["elements_per_thread"], (ev, fused)


@pytest.mark.interpret
@pytest.mark.parametrize(("method", "config"), [
    ("tf32x3", "32x32x16w4s1m0"), ("tf32x3", "32x32x16w4s1m1pg"), ("bf16x3", "32x32x32w4s1m1"),
    ("bf16x6", "32x32x32w4s1m0"), ("bf16x6", "32x32x32w4s1m1p"), ("bf16x6", "32x32x32w4s1m4"),
    ("bf16x9", "32x32x32w4s1m0p"),
])
@pytest.mark.parametrize("fixup_b", ["fp32", "recombined"])
def test_gemm_and_fixup_kernels_under_the_interpreter_equal_the_twin(method, config, fixup_b):
    """emu_mm's GEMM kernel and its range fix-up kernel themselves, every tl.dot by the Tensor Core model (the
    fix-up's by its own instruction's), on top-of-range data (with a bias where B is passed in FP32, none where
    only its pieces are): the twin's bits everywhere, the marked elements included; the fix-up ran and gave
    finite results where the GEMM kernel alone does not."""
    from tcemu.emulation.gemm import emu_mm, split_t
    from tcemu.numerics.hardware.interpret_dot import tensor_core_dot

    a, b = _top_of_range(40, 75, 36, seed=zlib.crc32(f"{method}{config}".encode()))  # tails everywhere
    bias = np.random.default_rng(1).standard_normal(36).astype(np.float32) if fixup_b == "fp32" else None
    bt = torch.from_numpy(b)
    with tensor_core_dot(get_method(method).piece_format) as dots:
        got = emu_mm(torch.from_numpy(a), split_t(bt, method), method, None if bias is None else torch.from_numpy(bias),
                     config=KernelConfig.parse(config), b=bt.mT if fixup_b == "fp32" else None)
    got = got.numpy().view(np.uint32)
    assert dots["fixup_dots"] > 0
    s = derive_schedule(method, config, K=a.shape[1], has_bias=bias is not None, fixup_b=fixup_b).without_contraction()
    want, fixed = run_gemm(s, a, b, None if bias is None else bias.view(np.uint32))
    assert fixed.any()
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]
    assert np.isfinite(got.view(np.float32)[fixed]).any()  # finite results the GEMM kernel alone overflows
    plain = emulated_matmul_bits(a, b, method, schedule=replace(s, range_check=False, fixup=None), bias=bias)
    assert np.count_nonzero(plain[fixed] != got[fixed])
