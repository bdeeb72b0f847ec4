"""Exhaustive checks where the space is small.

- every fp8 x fp8 product (e4m3 and e5m2, all 65,536 bit-pattern pairs, Inf/NaN included) through every
  FP8 preset, the product placed at a varying k of an otherwise zero block (emulated: instruction), c = +0;
- every fp16 bit pattern times a 512-pattern cover of fp16 (all 32 exponent fields x 8 fractions x 2 signs),
  33.5 million products, into one block of the H100 (fp32 out) and A100 (fp16 out) presets; the full
  2^32 product table is the ``slow`` variant;
- every fp8 x fp8 pair with random c against the exact oracle (``slow``).

A single product with c = +0 is representable in fp32 (and in e8m13 for fp8), so the reference is the
float64 product (exact) plus +0.0, cast once to the output format by NumPy (one rounding; fp16 casts are
round-to-nearest-even), with NaN made canonical, and a product that underflows to -0 made +0 where the
preset says so (``underflow_sign="positive"``: what the H200 returns, docs/hardware/h200.md).
"""

import ml_dtypes
import numpy as np
import pytest

from tcemu.numerics import block_fma_bits, get_preset
from tcemu.numerics.oracle import oracle_bits
from tcemu.numerics.presets import PRESETS

FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _reference(prod64: np.ndarray, out: str, positive_zero: bool = False) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        s = prod64 + 0.0  # + c = +0, exactly
        if out == "fp16":
            bits = s.astype(np.float16).view(np.uint16)
            bits = np.where(np.isnan(s), np.uint16(0x7FFF), bits)
            return np.where(positive_zero & (bits == 0x8000), np.uint16(0), bits)
        bits = s.astype(np.float32).view(np.uint32)
        bits = np.where(np.isnan(s), np.uint32(0x7FFFFFFF), bits)
        return np.where(positive_zero & (bits == 0x80000000), np.uint32(0), bits)


@pytest.mark.parametrize("key", [k for k in sorted(PRESETS) if k[2] in FP8], ids=lambda k: "-".join(k))
def test_every_fp8_product(key):
    p = PRESETS[key]
    fmt = p.input_format
    a = np.repeat(np.arange(256, dtype=np.uint8), 256)
    b = np.tile(np.arange(256, dtype=np.uint8), 256)
    with np.errstate(invalid="ignore"):
        prod = a.view(FP8[fmt]).astype(np.float64) * b.view(FP8[fmt]).astype(np.float64)
    # one block (an underflowed -0 passed on as c to a later all-zero block comes back +0: docs/numerics.md,
    # "Rounding"); the emulated path always ends with the IEEE add of c = +0, which turns -0 into +0
    k = p.n_fma if p.interleave is None else p.k_instr
    pos = np.arange(a.size) % k
    a_rows = np.zeros((a.size, k), np.uint8)
    b_rows = np.zeros((a.size, k), np.uint8)
    a_rows[np.arange(a.size), pos] = a
    b_rows[np.arange(a.size), pos] = b
    c = np.zeros(a.size, np.uint16 if p.c_format == "fp16" else np.uint32)
    got = block_fma_bits(a_rows, b_rows, c, p)
    want = _reference(prod, "fp16" if p.output_format == "fp16" else "fp32", p.underflow_sign == "positive")
    if p.interleave is not None:
        want = np.where(want == (0x8000 if p.output_format == "fp16" else 0x80000000), 0, want).astype(want.dtype)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"{bad.size} products differ, e.g. {a[bad[0]]:#x} * {b[bad[0]]:#x}: {got[bad[0]]:#x} vs {want[bad[0]]:#x}"


def _fp16_products(b_patterns: np.ndarray, key) -> None:
    p = get_preset(*key)
    a = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    a64 = a.view(np.float16).astype(np.float64)
    c = np.zeros(a.size, np.uint16 if p.c_format == "fp16" else np.uint32)
    for i, bb in enumerate(b_patterns):
        col = i % p.n_fma  # the product's position in the block; the other entries are zero
        a_rows = np.zeros((a.size, col + 1), np.uint16)
        b_rows = np.zeros((a.size, col + 1), np.uint16)
        a_rows[:, col] = a
        b_rows[:, col] = bb
        got = block_fma_bits(a_rows, b_rows, c, p)
        with np.errstate(invalid="ignore"):
            want = _reference(a64 * float(np.array([bb], np.uint16).view(np.float16)[0]), p.output_format,
                              p.underflow_sign == "positive")
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, f"{key}: b={int(bb):#06x}, a={int(a[bad[0]]):#06x}: {got[bad[0]]:#x} vs {want[bad[0]]:#x}"


FP16_COVER = np.array(
    [(s << 15) | (e << 10) | f for s in (0, 1) for e in range(32) for f in (0, 1, 2, 0x155, 0x200, 0x2AA, 0x3FE, 0x3FF)],
    dtype=np.uint16,
)


@pytest.mark.parametrize("key", [("h100", "mma.sync", "fp16", "fp32"), ("a100", "mma.sync", "fp16", "fp16")],
                         ids=lambda k: "-".join(k))
def test_fp16_products_cover(key):
    _fp16_products(FP16_COVER, key)


@pytest.mark.slow(reason="all 2^32 FP16 products: about a minute of one core per shard, 32 shards")
@pytest.mark.parametrize("shard", range(16), ids=lambda s: f"shard{s:02d}")
@pytest.mark.parametrize("key", [("h100", "mma.sync", "fp16", "fp32"), ("v100", "mma.sync", "fp16", "fp16")],
                         ids=lambda k: "-".join(k))
def test_every_fp16_product(key, shard):
    """All 2^32 products, in 16 shards of 4,096 b patterns (about a minute of one core per shard)."""
    _fp16_products(np.arange(shard << 12, (shard + 1) << 12, dtype=np.uint32).astype(np.uint16), key)


@pytest.mark.slow(reason="every FP8 pair (65,536 products) with C against the exact oracle, per FP8 preset")
@pytest.mark.parametrize("key", [k for k in sorted(PRESETS) if k[2] in FP8], ids=lambda k: "-".join(k))
def test_every_fp8_pair_with_c_vs_oracle(key):
    p = PRESETS[key]
    rng = np.random.default_rng(3)
    a = np.repeat(np.arange(256, dtype=np.uint8), 256)[:, None]
    b = np.tile(np.arange(256, dtype=np.uint8), 256)[:, None]
    c = rng.standard_normal(a.shape[0]).astype(np.float16 if p.c_format == "fp16" else np.float32)
    c = c.view(np.uint16 if p.c_format == "fp16" else np.uint32)
    assert np.array_equal(block_fma_bits(a, b, c, p), oracle_bits(a, b, c, p))
