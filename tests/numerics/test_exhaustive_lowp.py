"""Every element pair of the low-precision presets, exhaustively (docs/numerics.md, "Validation").

A single product with c = +0 is exact in fp32 (and e8m13) for every FP8/FP6/FP4 pair, also times a scale of
2^-100 .. 2^100 or a ue4m3 scale, so the reference is the float64 product cast once by NumPy (fp16 output:
round to nearest even), NaN made canonical and a -0 made +0 (``underflow_sign="positive"``), as in
test_exhaustive.py. Every bit pattern of each format, Inf and NaN included.
"""

import ml_dtypes
import numpy as np
import pytest

from tcemu.numerics import block_fma_bits, get_preset
from tcemu.numerics.presets_blackwell import LOWP_PRESETS

DT = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e2m1": ml_dtypes.float4_e2m1fn,
      "e2m3": ml_dtypes.float6_e2m3fn, "e3m2": ml_dtypes.float6_e3m2fn}
WIDTH = {"e4m3": 8, "e5m2": 8, "e2m1": 4, "e2m3": 6, "e3m2": 6}
UNSCALED = [k for k in sorted(LOWP_PRESETS) if not LOWP_PRESETS[k].scale_format
            and LOWP_PRESETS[k].input_format in DT and (k[0] != "sm120" or k[3] == "fp32")]


def _pairs(fa: str, fb: str):
    a = np.repeat(np.arange(1 << WIDTH[fa], dtype=np.uint8), 1 << WIDTH[fb])
    b = np.tile(np.arange(1 << WIDTH[fb], dtype=np.uint8), 1 << WIDTH[fa])
    with np.errstate(invalid="ignore"):
        prod = a.view(DT[fa]).astype(np.float64) * b.view(DT[fb]).astype(np.float64)
    return a, b, prod


def _reference(prod: np.ndarray, out: str) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        s = prod + 0.0
        if out == "fp16":
            bits = np.where(np.isnan(s), np.uint16(0x7FFF), s.astype(np.float16).view(np.uint16))
            return np.where(bits == 0x8000, np.uint16(0), bits)
        bits = np.where(np.isnan(s), np.uint32(0x7FFFFFFF), s.astype(np.float32).view(np.uint32))
        return np.where(bits == 0x80000000, np.uint32(0), bits)


def _rows(a, b, k):
    pos = np.arange(a.size) % k  # the product's position in the block; the other entries are zero
    a_rows, b_rows = np.zeros((a.size, k), np.uint8), np.zeros((a.size, k), np.uint8)
    a_rows[np.arange(a.size), pos], b_rows[np.arange(a.size), pos] = a, b
    return a_rows, b_rows


def _check(got, want, a, b, what):
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (f"{what}: {bad.size} products differ, e.g. {a[bad[0]]:#x} * {b[bad[0]]:#x}: "
                           f"{got[bad[0]]:#x} vs {want[bad[0]]:#x}")


@pytest.mark.parametrize("key", UNSCALED, ids=lambda k: "-".join(k))
def test_every_product(key):
    p = get_preset(*key)
    a, b, prod = _pairs(p.input_format, p.b_format)
    a_rows, b_rows = _rows(a, b, p.k_instr if p.interleave else p.n_fma)
    c = np.zeros(a.size, np.uint16 if p.c_format == "fp16" else np.uint32)
    got = block_fma_bits(a_rows, b_rows, c, p)
    _check(got, _reference(prod, "fp16" if p.output_format == "fp16" else "fp32"), a, b, key)


@pytest.mark.parametrize("fa", sorted(DT))
@pytest.mark.parametrize("fb", sorted(DT))
def test_every_mx_scaled_product(fa, fb):
    """kind::mxf8f6f4 (b200 and sm120): every pair at scales 2^-100, 1 and 2^100 (split between a and b)."""
    a, b, prod = _pairs(fa, fb)
    a_rows, b_rows = _rows(a, b, 32)
    c = np.zeros(a.size, np.uint32)
    for arch, instr in (("b200", "tcgen05.mxf8f6f4"), ("sm120", "mma.sync.mxf8f6f4")):
        p = get_preset(arch, instr, f"{fa}.{fb}")
        for ea, eb in ((-60, -40), (0, 0), (27, 73)):
            sa = np.full((a.size, 1), 127 + ea, np.uint8)
            sb = np.full((a.size, 1), 127 + eb, np.uint8)
            got = block_fma_bits(a_rows, b_rows, c, p, sa, sb)
            _check(got, _reference(prod * 2.0 ** (ea + eb), "fp32"), a, b, (arch, fa, fb, ea + eb))


@pytest.mark.parametrize("key", [k for k in sorted(LOWP_PRESETS) if LOWP_PRESETS[k].scale_chunk],
                         ids=lambda k: "-".join(k))
def test_every_nvf4_product_and_scale(key):
    """kind::mxf4nvf4: every e2m1 pair times every finite non-negative scale of the format on a (b's scale 1)."""
    p = get_preset(*key)
    a, b, prod = _pairs("e2m1", "e2m1")
    scales = np.arange(255 if p.scale_format == "ue8m0" else 0x7F, dtype=np.uint8)
    if p.scale_format == "ue8m0":
        scales = scales[(scales >= 127 - 100) & (scales <= 127 + 100)]  # the product stays a normal fp32
    sval = scales.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu if p.scale_format == "ue8m0"
                                        else ml_dtypes.float8_e4m3fn).astype(np.float64)
    a_all, b_all = np.tile(a, scales.size), np.tile(b, scales.size)
    s_all = np.repeat(scales, a.size)
    want = _reference(np.tile(prod, scales.size) * np.repeat(sval, a.size), "fp32")
    a_rows, b_rows = _rows(a_all, b_all, 64)
    nb = 64 // p.scale_block
    blk = (np.arange(a_all.size) % 64) // p.scale_block  # the block that holds the product
    sa = np.full((a_all.size, nb), 0x38 if p.scale_format == "ue4m3" else 127, np.uint8)
    sa[np.arange(a_all.size), blk] = s_all
    sb = np.full((a_all.size, nb), 0x38 if p.scale_format == "ue4m3" else 127, np.uint8)
    got = block_fma_bits(a_rows, b_rows, np.zeros(a_all.size, np.uint32), p, sa, sb)
    _check(got, want, a_all, b_all, key)
