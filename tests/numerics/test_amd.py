"""AMD CDNA Matrix Core presets (v_mfma_*): hand vectors that each decide one point of MMA-Sim's description, written
from the description (not computed by the model), the mma API, names and refusals; what-if schemes and a
sensitivity check (the oracle with another parameter disagrees with the model).
"""

import zlib
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from tcemu.numerics import block_fma_bits, get_preset, list_presets, mma
from tcemu.numerics.formats import get_format
from tcemu.numerics.inputs_schemes import scheme_operands
from tcemu.numerics.oracle import oracle_bits


def _bits(values, dtype, container):
    return np.array(values, dtype=np.float64).astype(dtype).view(container)


def _run(arch, instruction, fmt, dtype, container, a, b, c, b_dtype=None):
    p = get_preset(arch, instruction, fmt)
    k = p.k_instr
    a = list(a) + [0.0] * (k - len(a))
    b = list(b) + [0.0] * (k - len(b))
    ab = _bits([a], dtype, container)
    bb = _bits([b], b_dtype or dtype, container)
    cb = np.array([c], np.float32).view(np.uint32)
    got = int(block_fma_bits(ab, bb, cb, p)[0])
    assert got == int(oracle_bits(ab, bb, cb, p)[0])
    return got, p


F16 = (np.float16, np.uint16)
BF16 = (ml_dtypes.bfloat16, np.uint16)
FP8 = (ml_dtypes.float8_e4m3fnuz, np.uint8)


def test_cdna3_sum_rounded_down_not_truncated():
    """c = 1 + 2^-23, products -2^-24 and +2^-40: the sum -2^-24 + 2^-40 rounded *down* on the 2^-31 grid is -2^-24,
    so the result is the tie 1 + 2^-24, rounded to even: 1.0. Truncation toward zero, or the exact sum, give
    1 + 2^-23."""
    got, _ = _run("mi300", "v_mfma_f32_16x16x16_f16", "fp16", *F16, [-(2.0**-12), 2.0**-20], [2.0**-12, 2.0**-20],
                  1 + 2.0**-23)
    assert got == 0x3F800000


def test_cdna3_far_negative_c_rounded_down_except_fp8():
    """c = -2^-30 below a product of 1: fp16/bf16 round c down on the 2^-24 grid (to -2^-24: 1 - 2^-24); fp8 drops
    a c more than 25 binades below (1.0)."""
    got16, _ = _run("mi300", "mfma", "fp16", *F16, [1.0], [1.0], -(2.0**-30))
    got8, _ = _run("mi300", "mfma", "fp8", *FP8, [1.0], [1.0], -(2.0**-30))
    assert (got16, got8) == (0x3F7FFFFF, 0x3F800000)


def test_cdna3_fp8_even_and_odd_halves():
    """fp8: k = 0 gives 2^14, k = 1, 3, 5, 7 give 2^-11 each. One 24-bit sum at 2^14 truncates each 2^-11 to 0;
    the odd half sums them first (2^-9), which survives the join: 2^14 + 2^-9."""
    a = [2.0**7] + [2.0**-5, 0.0] * 4
    b = [2.0**7] + [2.0**-6, 0.0] * 4
    a = [a[0], a[1], 0.0, a[1], 0.0, a[1], 0.0, a[1]]
    b = [b[0], b[1], 0.0, b[1], 0.0, b[1], 0.0, b[1]]
    got, p = _run("mi300", "mfma", "fp8", *FP8, a, b, 0.0)
    assert got == 0x46800001
    joint = replace(p, scheme=replace(p.scheme, fp8_pairs=False))
    ab, bb = _bits([a + [0.0] * 24], *FP8), _bits([b + [0.0] * 24], *FP8)
    assert int(block_fma_bits(ab, bb, np.zeros(1, np.uint32), joint)[0]) == 0x46800000


def test_cdna3_zero_factor_counts_at_minus_126():
    """bf16: 0 x 2^127 counts at exponent 1 (-126 + 127), so 2^-60 x 2^-60 = 2^-120 is truncated away (+0); with
    zero factors left out (the rule measured on the H100 for NVIDIA) it survives."""
    got, p = _run("mi300", "mfma", "bf16", *BF16, [0.0, 2.0**-60], [2.0**127, 2.0**-60], 0.0)
    assert got == 0
    out = replace(p, scheme=replace(p.scheme, zero_exp=None))
    ab = _bits([[0.0, 2.0**-60] + [0.0] * 14], *BF16)
    bb = _bits([[2.0**127, 2.0**-60] + [0.0] * 14], *BF16)
    assert int(block_fma_bits(ab, bb, np.zeros(1, np.uint32), out)[0]) == np.float32(2.0**-120).view(np.uint32)


def test_cdna1_pairwise_tree():
    """Products 2^24, 1, 1, -2^24 in one group of 4: (2^24 + 1) rounds to 2^24, (1 - 2^24) is exact, their sum is 1.
    The exact sum is 2, a k-order chain gives 0."""
    got, _ = _run("mi100", "mfma", "fp16", *F16, [4096.0, 1.0, 1.0, -4096.0], [4096.0, 1.0, 1.0, 4096.0], 0.0)
    assert got == 0x3F800000


def test_cdna2_flushes_subnormals():
    """An fp16 subnormal input (2^-20): kept on CDNA1 (2^-20), flushed to zero on CDNA2."""
    got1, _ = _run("mi100", "mfma", "fp16", *F16, [2.0**-20], [1.0], 0.0)
    got2, _ = _run("mi250", "mfma", "fp16", *F16, [2.0**-20], [1.0], 0.0)
    assert (got1, got2) == (0x35800000, 0)


def test_bf16_product_overflow_and_nan():
    """bf16 products beyond fp32's range: Inf on CDNA3 even if another product would cancel it (+Inf and -Inf:
    NaN); Inf x 0 is NaN (0x7FC00000, the assumed NaN bits)."""
    big = 2.0**100
    assert _run("mi300", "mfma", "bf16", *BF16, [big, 1.0], [big, -1.0], 0.0)[0] == 0x7F800000
    assert _run("mi300", "mfma", "bf16", *BF16, [big, -big], [big, big], 0.0)[0] == 0x7FC00000
    assert _run("mi100", "mfma", "bf16", *BF16, [np.inf], [0.0], 0.0)[0] == 0x7FC00000


def test_fp32_mfma_is_an_fma_chain():
    """fp32: a b + c with a = 1 + 2^-12, b = 1 - 2^-12, c = -1 is -2^-24 only if a b is not rounded first."""
    p = get_preset("mi100", "v_mfma_f32_4x4x1f32", "fp32")
    ab = np.array([[1 + 2.0**-12]], np.float32).view(np.uint32)
    bb = np.array([[1 - 2.0**-12]], np.float32).view(np.uint32)
    got = block_fma_bits(ab, bb, np.array([-1.0], np.float32).view(np.uint32), p)
    assert got.view(np.float32)[0] == -(2.0**-24)


@pytest.mark.parametrize("arch", ["mi100", "cdna1", "gfx908", "MI250", "gfx90a", "mi210", "cdna3", "gfx942", "mi300x"])
def test_arch_names(arch):
    assert get_preset(arch, "mfma", "fp16").scheme is not None


def test_instruction_names_and_refusals():
    p = get_preset("mi300", "v_mfma_f32_32x32x8_f16", "fp16")
    assert (p.k_instr, p.n_fma) == (8, 8)
    assert get_preset("mi300", "v_mfma_f32_32x32x8f16", "fp16") == p  # either spelling
    assert get_preset("mi250", "f32_32x32x4bf16_1k", "bf16").n_fma == 4
    assert get_preset("mi250", "v_mfma_f32_32x32x4bf16", "bf16").n_fma == 2
    assert get_preset("mi300", "mfma", "fp8.bf8").b_format == "e5m2fnuz"
    assert get_preset("mi300", "mfma", "xf32").input_format == "tf32"
    with pytest.raises(ValueError, match="no e4m3fnuz MFMA on mi250"):
        get_preset("mi250", "mfma", "fp8")
    with pytest.raises(ValueError, match="unknown instruction .*valid: v_mfma_"):
        get_preset("mi100", "v_mfma_f32_16x16x8_xf32", "xf32")
    with pytest.raises(ValueError, match="returns fp32"):
        get_preset("mi300", "mfma", "fp16", "fp16")
    with pytest.raises(ValueError, match="takes fp16 inputs"):
        get_preset("mi300", "v_mfma_f32_16x16x16_f16", "bf16")


def test_toolbox_variant():
    """The toolbox agrees on CDNA2 and the FMA chains; its CDNA1 model differs (exact group sums: its own scheme);
    its CDNA3 model is missing: refused with the reason."""
    assert get_preset("mi250", "mfma", "fp16", variant="toolbox") == get_preset("mi250", "mfma", "fp16")
    assert get_preset("mi100", "mfma", "fp32", variant="toolbox") == get_preset("mi100", "mfma", "fp32")
    tb = get_preset("mi100", "mfma", "fp16", variant="toolbox")
    assert tb.scheme.kind == "exact_group" and "MI100MC" in tb.sources
    # the pairwise-tree vector (products 2^24, 1, 1, -2^24): exact group sum 2 under the toolbox, 1 under MMA-Sim
    a = np.array([[4096.0, 1.0, 1.0, -4096.0] + [0.0] * 12], np.float16).view(np.uint16)
    b = np.array([[4096.0, 1.0, 1.0, 4096.0] + [0.0] * 12], np.float16).view(np.uint16)
    c = np.zeros(1, np.uint32)
    assert block_fma_bits(a, b, c, tb)[0] == 0x40000000 and oracle_bits(a, b, c, tb)[0] == 0x40000000
    with pytest.raises(ValueError, match="MI300MC, which is not in the toolbox"):
        get_preset("mi300", "mfma", "fp8", variant="toolbox")


def test_listing_has_every_mfma_with_sources():
    keys = [k for k in list_presets() if k[1].startswith("v_mfma_")]
    assert len(keys) == 64
    for key in keys:
        p = get_preset(*key)
        assert "MMA-Sim @ c785138" in p.sources and "literature" in p.sources


def test_mma_api_runs_every_format():
    rng = np.random.default_rng(3)
    c = rng.standard_normal((3, 2)).astype(np.float32)
    for arch, dtype, fmt, k in [("mi300", ml_dtypes.float8_e4m3fnuz, None, 64), ("mi300", np.float16, None, 32),
                                ("mi250", ml_dtypes.bfloat16, None, 32), ("mi300", np.float32, "xf32", 16),
                                ("mi100", np.float32, "fp32", 8)]:
        a = rng.standard_normal((3, k)).astype(dtype)
        b = rng.standard_normal((k, 2)).astype(dtype)
        d = mma(a, b, c, arch=arch, input_format=fmt)
        if fmt == "xf32":  # the hardware reads the top 19 bits of each fp32 operand
            a, b = ((x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) for x in (a, b))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        # bound: each of the K products and group sums loses at most 2^-23 relative (truncation, round-down, RNE)
        bound = k * 2.0**-22 * (np.abs(a64) @ np.abs(b64) + np.abs(c))
        assert d.dtype == np.float32 and np.all(np.abs(d - (a64 @ b64 + c)) <= bound)
    a = rng.standard_normal((3, 8))
    d = mma(a, a.T[:, :2].copy(), c.astype(np.float64), arch="mi250")  # fp64: an FMA chain, ~1 ulp per step
    assert d.dtype == np.float64 and np.allclose(d, a @ a.T[:, :2] + c, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("kind", ["normal", "bits", "wide", "cancel", "tiny", "special", "extreme"])
@pytest.mark.parametrize("instruction,fmt", [("v_mfma_f32_16x16x16f16", "fp16"), ("v_mfma_f32_32x32x4bf16", "bf16")])
def test_toolbox_cdna1_equals_oracle(instruction, fmt, kind):
    p = get_preset("mi100", instruction, fmt, variant="toolbox")
    rng = np.random.default_rng(zlib.crc32(f"{instruction}{kind}".encode()))
    a, b, c = scheme_operands(p, 40, 2 * p.k_instr, kind, rng)
    assert np.array_equal(block_fma_bits(a, b, c, p), oracle_bits(a, b, c, p))


@pytest.mark.parametrize("change", ["frac_bits", "c_frac_bits", "zero_exp", "flush", "group"])
def test_oracle_sensitivity(change):
    """The comparison can fail: the oracle with one parameter changed disagrees with the model on the same inputs."""
    arch, fmt = ("mi250", "fp16") if change in ("flush", "group") else ("mi300", "bf16")
    p = get_preset(arch, "mfma", fmt)
    s = p.scheme
    other = {"frac_bits": lambda: replace(p, frac_bits=23),
             "c_frac_bits": lambda: replace(p, scheme=replace(s, c_frac_bits=25)),
             "zero_exp": lambda: replace(p, scheme=replace(s, zero_exp=None)),
             "flush": lambda: replace(p, scheme=replace(s, flush_subnormals=False)),
             "group": lambda: replace(p, n_fma=2)}[change]()
    rng = np.random.default_rng(zlib.crc32(change.encode()))
    kind = {"flush": "tiny", "zero_exp": "wide"}.get(change, "cancel")
    a, b, c = scheme_operands(p, 300, p.k_instr, kind, rng)
    if change == "zero_exp":  # zero factors beside large partners
        b[:, 0] = np.float32(2.0**127).view(np.uint32) >> 16
        a[:, 0] = 0
    assert np.any(block_fma_bits(a, b, c, p) != oracle_bits(a, b, c, other))


def test_mma_mixed_fp8_bf8():
    """float8_e4m3fnuz a with float8_e5m2fnuz b runs v_mfma_f32_16x16x32_fp8_bf8 (b read as bf8)."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal((2, 32)).astype(ml_dtypes.float8_e4m3fnuz)
    b = rng.standard_normal((32, 3)).astype(ml_dtypes.float8_e5m2fnuz)
    c = np.zeros((2, 3), np.float32)
    d = mma(a, b, c, arch="mi300")
    p = get_preset("mi300", "v_mfma_f32_16x16x32_fp8_bf8", "fp8.bf8")
    rows_a = np.repeat(a.view(np.uint8), 3, axis=0)
    rows_b = np.tile(b.view(np.uint8).T, (2, 1))
    assert np.array_equal(d.view(np.uint32).ravel(), block_fma_bits(rows_a, rows_b, np.zeros(6, np.uint32), p))
    same_bits_as_fp8 = block_fma_bits(rows_a, rows_b, np.zeros(6, np.uint32), get_preset("mi300", "mfma", "fp8"))
    assert not np.array_equal(d.view(np.uint32).ravel(), same_bits_as_fp8)  # b's bits read as bf8, not fp8


# ---------------------------------------------------------------- NaN bits of variant="mmasim" (MMA-Sim's host)


def _nan_case(arch, instruction, fmt, a_bits, b_bits, c_bits, variant="mmasim"):
    """One dot product on raw container bits (zeros after the given k) through the preset and the oracle."""
    p = get_preset(arch, instruction, fmt, variant=variant)
    k = p.k_instr
    ab = np.array([list(a_bits) + [0] * (k - len(a_bits))], get_format(p.input_format).container_dtype)
    bb = np.array([list(b_bits) + [0] * (k - len(b_bits))], get_format(p.b_format).container_dtype)
    cb = np.array([c_bits], np.uint64 if p.output_format == "fp64" else np.uint32)
    got = int(block_fma_bits(ab, bb, cb, p)[0])
    assert got == int(oracle_bits(ab, bb, cb, p)[0])
    return got


F32_ONE, F16_ONE = 0x3F800000, 0x3C00


def test_mmasim_nans_fma_chains():
    """fp32/fp64 MFMA under MMA-Sim: glibc fma (x86 FMA): b's NaN, then a's, then the sum's, quieted; Inf x 0 the
    negative default NaN 0xFFC00000 (fp64 0xFFF8000000000000). The default returns one canonical NaN."""
    fp32 = ("mi300", "v_mfma_f32_16x16x4_f32", "fp32")
    assert _nan_case(*fp32, [0x7F800001], [0xFFC0BEEF], 0) == 0xFFC0BEEF  # b's before a's
    assert _nan_case(*fp32, [0x7F800005], [F32_ONE], 0x7FC00123) == 0x7FC00005  # a's (quieted) before the sum's
    assert _nan_case(*fp32, [F32_ONE], [F32_ONE], 0xFF800077) == 0xFFC00077  # c's, quieted
    assert _nan_case(*fp32, [0x7F800000], [0], 0) == 0xFFC00000  # Inf x 0
    assert _nan_case(*fp32, [0x7F800000, 0x7F800009], [0, F32_ONE], 0) == 0x7FC00009  # a's before the carried NaN
    assert _nan_case(*fp32, [0x7F800001], [0xFFC0BEEF], 0, variant="measured") == 0x7FC00000
    fp64 = ("mi250", "v_mfma_f64_16x16x4f64", "fp64")
    assert _nan_case(*fp64, [0x7FF0000000000001], [0xFFF80000DEADBEEF], 0) == 0xFFF80000DEADBEEF
    assert _nan_case(*fp64, [0x7FF0000000000000], [0], 0) == 0xFFF8000000000000
    assert _nan_case(*fp64, [0x7FF0000000000001], [0], 0, variant="measured") == 0x7FF8000000000000


def test_mmasim_nans_cdna3_fused_groups():
    """CDNA3 under MMA-Sim: the NaN of its float64 group sum. fp16 NaNs widen with sign and payload, quieted
    (0x7E01 -> 0x7FC02000, 0xFD00 -> 0xFFE00000). Products: b's NaN first in groups of 8, a's in groups of 4. Sum:
    product k in partial k % 4, a partial's earlier NaN first, later partials before earlier ones, c before all."""
    g8, g4 = ("mi300", "v_mfma_f32_16x16x16_f16", "fp16"), ("mi300", "v_mfma_f32_16x16x4_4b_f16", "fp16")
    assert _nan_case(*g8, [0x7E01], [0xFD00], 0) == 0xFFE00000
    assert _nan_case(*g4, [0x7E01], [0xFD00], 0) == 0x7FC02000
    ones = [F16_ONE] * 8
    assert _nan_case(*g8, [0, 0x7E01, 0, 0, 0x7E02], ones, 0) == 0x7FC02000  # partial 1 after partial 0
    assert _nan_case(*g8, [0x7E02, 0, 0, 0, 0x7E01], ones, 0) == 0x7FC04000  # both in partial 0: k = 0 first
    assert _nan_case(*g4, [0, 0x7E01, 0x7E02], ones[:4], 0) == 0x7FC04000  # partial 2 after partial 1
    assert _nan_case(*g8, [0x7E01], [F16_ONE], 0x7F800123) == 0x7FC00123  # c's before the sum's
    assert _nan_case(*g8, [0x7C00, 0x7C00], [F16_ONE, 0xBC00], 0) == 0xFFC00000  # +Inf - Inf
    big_bf16 = ("mi300", "v_mfma_f32_16x16x16_bf16", "bf16")  # +-2^200 products: MMA-Sim's float("nan")
    assert _nan_case(*big_bf16, [0x7180, 0x7180], [0x7180, 0xF180], 0) == 0x7FC00000
    fp8 = ("mi300", "v_mfma_f32_16x16x32_fp8_fp8", "fp8")
    assert _nan_case(*fp8, [0x80], [0x40], 0) == 0x7FC00001  # torch's float of the fnuz NaN
    assert _nan_case(*fp8, [0x80], [0x40], 0xFFC0ABCD) == 0xFFC0ABCD
    xf32 = ("mi300", "v_mfma_f32_16x16x8_xf32", "xf32")
    assert _nan_case(*xf32, [0x7F802000], [0xFF804000], 0) == 0x7FC02000  # a group of 4: a's first
    assert _nan_case(*xf32, [0x7F800001], [F32_ONE], 0) == 0x7F800000  # tf32 drops the low 13 bits: +Inf
    assert _nan_case(*g8, [0x7E01], [0xFD00], 0, variant="measured") == 0x7FC00000


def test_mmasim_nans_cdna12_pairwise():
    """CDNA1/CDNA2 under MMA-Sim with its fp32 assertion off: products fmaf(a, b, 0) (b's NaN first), the tree's
    left half before its right, the group sum before the accumulator; CDNA2 flushes a subnormal factor, so
    Inf x 2^-24 is Inf x 0 there."""
    cdna1 = ("mi100", "v_mfma_f32_16x16x16f16", "fp16")
    assert _nan_case(*cdna1, [0x7E01, F16_ONE, F16_ONE, F16_ONE], [F16_ONE, F16_ONE, 0xFE02, F16_ONE], 0) == 0x7FC02000
    assert _nan_case(*cdna1, [0x7E01], [0xFE02], 0) == 0xFFC04000
    assert _nan_case(*cdna1, [0x7E01], [F16_ONE], 0x7FC00777) == 0x7FC02000
    assert _nan_case("mi250", "v_mfma_f32_16x16x16f16", "fp16", [0x7C00], [0x0001], 0) == 0xFFC00000
    assert _nan_case(*cdna1, [0x7C00], [0x0001], 0) == 0x7F800000
    assert _nan_case(*cdna1, [0x7E01], [0xFE02], 0, variant="measured") == 0x7FC00000


@pytest.mark.parametrize("kind", ["special", "bits"])
@pytest.mark.parametrize("arch,instruction,fmt", [
    ("mi300", "v_mfma_f32_16x16x4_f32", "fp32"), ("mi300", "v_mfma_f64_16x16x4_f64", "fp64"),
    ("mi300", "v_mfma_f32_16x16x16_f16", "fp16"), ("mi300", "v_mfma_f32_16x16x4_4b_bf16", "bf16"),
    ("mi300", "v_mfma_f32_32x32x4_xf32", "xf32"), ("mi300", "v_mfma_f32_16x16x32_bf8_fp8", "bf8.fp8"),
    ("mi100", "v_mfma_f32_16x16x16f16", "fp16"), ("mi250", "v_mfma_f32_16x16x8bf16", "bf16")])
def test_mmasim_nans_vectorised_equal_elementwise(arch, instruction, fmt, kind):
    """The vectorised host-NaN rules equal their element-by-element references (the oracle's), NaN bits included."""
    p = get_preset(arch, instruction, fmt, variant="mmasim")
    rng = np.random.default_rng(zlib.crc32(f"{instruction}{kind}nan".encode()))
    a, b, c = scheme_operands(p, 300, 2 * p.k_instr, kind, rng)
    got, ref = block_fma_bits(a, b, c, p), oracle_bits(a, b, c, p)
    assert np.array_equal(got, ref)
    width = 64 if p.output_format == "fp64" else 32
    nan = (got & np.uint64((1 << (width - 1)) - 1)) > np.uint64(0x7FF0000000000000 if width == 64 else 0x7F800000)
    kinds = len(set(got[nan].tolist()))  # NaNs of more than one kind were compared (fp8: its one NaN, 0x7FC00001)
    assert nan.any() and (kinds > 1 or get_format(p.input_format).fnuz)
