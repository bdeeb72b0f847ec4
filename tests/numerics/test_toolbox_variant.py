"""``variant="toolbox"`` keeps the Khattak & Mikaitis toolbox's choices (models/*TC.m @ b12b5a7, run under Octave by
benchmarks/toolbox_diff.py): FP8 ``mma.sync`` on H100/H200 and B200 as one 32-term block (H100TC, B200TC:
``fma = 32``), and the E_max floor L for fp16 D of fp16 inputs only. Expected bits come from an exact rational
one-block reference written here (Fraction), independent of tcemu's model code, or are written out by hand.
"""

import math
from fractions import Fraction

import numpy as np
import pytest

from tcemu.numerics import block_fma_bits, get_preset, to_bits
from tcemu.numerics.public_data import load_cases

FP8 = ("e4m3", "e5m2")
EMIN = {"e4m3": -6, "e5m2": -14}


def one_block(a, b, c, frac_bits, out_frac_bits, emin):
    """Exact reference of one block: E_max is the largest of e(a_k) + e(b_k) over the nonzero products (a product's
    significand lies in [1, 4)) and e(c), with e(x) = max(floor(log2 |x|), emin) (emin: the input format's, -126 for
    c); each addend is truncated toward zero to ``frac_bits`` below 2^E_max, the sum is exact, then truncated (RZ)
    to ``out_frac_bits`` (normal range only)."""
    def e(x, lo):
        return max(math.floor(math.log2(abs(x))), lo)

    exps = [e(x, emin) + e(y, emin) for x, y in zip(a, b) if x and y] + ([e(c, -126)] if c else [])
    terms = [Fraction(x) * Fraction(y) for x, y in zip(a, b) if x and y] + ([Fraction(c)] if c else [])
    if not terms:
        return 0.0
    grid = Fraction(2) ** (max(exps) - frac_bits)
    s = sum(math.trunc(t / grid) for t in terms) * grid
    if s == 0:
        return 0.0
    ulp = Fraction(2) ** (math.floor(math.log2(abs(s))) - out_frac_bits)
    return float(math.trunc(s / ulp) * ulp)


def run(p, a, b, c):
    av = np.zeros(p.k_instr)
    bv = np.zeros(p.k_instr)
    av[: len(a)], bv[: len(b)] = a, b
    cb = to_bits(np.array([c], dtype=np.float64), p.c_format)
    got = block_fma_bits(to_bits(av, p.input_format)[None], to_bits(bv, p.input_format)[None], cb, p)
    dt = np.float16 if p.c_format == "fp16" else np.float32
    return float(np.asarray(got).view(dt)[0])


@pytest.mark.parametrize("arch", ["h100", "h200", "b200"])
@pytest.mark.parametrize("fin", FP8)
@pytest.mark.parametrize("out", ["fp32", "fp16"])
def test_fp8_mma_sync_toolbox_is_one_32_term_block(arch, fin, out):
    p = get_preset(arch, "mma.sync", fin, out, variant="toolbox")
    native = get_preset(arch, "wgmma" if arch != "b200" else "tcgen05", fin, out, variant="toolbox")
    assert (p.k_instr, p.n_fma, p.interleave) == (32, 32, None)
    assert (p.frac_bits, p.output_format) == (native.frac_bits, native.output_format)
    assert p.frac_bits == (13 if arch != "b200" else 25)
    assert p.output_format == ("e8m13" if arch != "b200" and out == "fp32" else out)
    assert p.czero_floor == (-133)  # the toolbox's fp16-D limit is set for fp16 inputs only
    assert get_preset(arch, "mma.sync", fin, out).interleave is not None  # the default stays the emulation


@pytest.mark.parametrize("arch,frac", [("h100", 13), ("b200", 25)])
def test_fp8_one_block_drops_what_the_emulation_keeps(arch, frac):
    """256 (k = 0) and -256 (k = 1) cancel in the emulation's first fp16-path group; k = 2 is summed in the second
    group from +0, so 2^-18 survives there. One block aligns it to 2^8: the grid 2^(8 - F) drops it."""
    a, b = [16.0, -16.0, 2.0**-9], [16.0, 16.0, 2.0**-9]
    tb = get_preset(arch, "mma.sync", "e4m3", "fp32", variant="toolbox")
    assert run(tb, a, b, 0.0) == one_block(a, b, 0.0, frac, 13 if arch == "h100" else 23, -6) == 0.0
    assert run(get_preset(arch, "mma.sync", "e4m3", "fp32"), a, b, 0.0) == 2.0**-18


def test_h100_fp8_toolbox_cuts_fp32_d_to_13_fraction_bits():
    """1.875 + 1.875 + 2^-13: one block at E_max = 0 keeps 2^-13 (F = 13), the sum 3.75 + 2^-13 needs 14 fraction
    bits at 2^1: e8m13 (RZ) gives 3.75. B200's block (F = 25, fp32 D) keeps it."""
    a, b = [1.875, 2.0**-6, 1.875], [1.0, 2.0**-7, 1.0]
    h = get_preset("h100", "mma.sync", "e4m3", "fp32", variant="toolbox")
    assert run(h, a, b, 0.0) == one_block(a, b, 0.0, 13, 13, -6) == 3.75
    bw = get_preset("b200", "mma.sync", "e4m3", "fp32", variant="toolbox")
    assert run(bw, a, b, 0.0) == one_block(a, b, 0.0, 25, 23, -6) == 3.75 + 2.0**-13


@pytest.mark.parametrize("arch", ["h100", "b200"])
@pytest.mark.parametrize("fin", FP8)
def test_fp8_toolbox_block_equals_exact_reference_on_random_rows(arch, fin):
    """Random N(0, 1) rows with c ~ U(0, 1): the toolbox variant equals the exact one-block reference (fp32 D).
    (H100TC under Octave agrees with both on such rows: benchmarks/toolbox_diff.py.)"""
    rng = np.random.default_rng(5)
    p = get_preset(arch, "mma.sync", fin, "fp32", variant="toolbox")
    dt = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[fin]
    import ml_dtypes

    for _ in range(200):
        a = rng.standard_normal(32).astype(getattr(ml_dtypes, dt)).astype(np.float64)
        b = rng.standard_normal(32).astype(getattr(ml_dtypes, dt)).astype(np.float64)
        c = float(np.float32(rng.random()))
        want = one_block(a, b, c, p.frac_bits, 13 if p.output_format == "e8m13" else 23, EMIN[fin])
        assert run(p, a, b, c) == want


def test_b200_hardware_data_refute_the_one_block_fp8_mma_sync():
    """The toolbox's own B200 mma.sync FP8 data: the emulation (default) fits every row, one block (the toolbox's
    choice) 3,207 (e4m3) and 3,236 (e5m2) of 5,000, as benchmarks/toolbox_diff.py reports."""
    for case in load_cases():
        if case.gpu != "B200" or case.input_format not in FP8 or case.output_format != "fp32":
            continue
        rates = {}
        for variant in ("measured", "toolbox"):
            p = get_preset("b200", "mma.sync", case.input_format, "fp32", variant=variant)
            rates[variant] = int((block_fma_bits(case.a, case.b, case.c, p) == case.d).sum())
        assert rates["measured"] == 5000 and rates["toolbox"] < 0.8 * 5000, rates
