"""Random and adversarial operands for the FMA-chain and AMD MFMA schemes (tests, benchmarks).

:func:`scheme_operands` returns ``(a_bits (S, K), b_bits (S, K), c_bits (S,))`` in the containers that
:func:`tcemu.numerics.block_fma_bits` takes for a preset with a ``scheme`` (fp64, fp32, tf32 in an fp32
container, fp16, bf16, AMD FNUZ fp8), of one of :data:`SCHEME_KINDS`:

- ``normal``: N(0, 1) rounded to the format; c ~ N(0, 1).
- ``bits``: uniformly random bit patterns (Inf/NaN included where the format has them).
- ``wide``: random sign and fraction, exponents within a window of ``spread`` binades around 1.
- ``cancel``: ``wide`` with c = -(a . b) rounded to c's format (massive cancellation).
- ``tiny``: exponents at the bottom of the range (subnormals; products and sums below fp32's normal range).
- ``special``: ``wide`` with zeros, signed zeros, Inf and NaN injected.
- ``extreme``: exponents anywhere in the format's range (overflow, underflow; fp64: the exact fallback path).
"""

from __future__ import annotations

import numpy as np

from .formats import get_format

__all__ = ["SCHEME_KINDS", "scheme_operands"]

SCHEME_KINDS = ("normal", "bits", "wide", "cancel", "tiny", "special", "extreme")


def _compose(fmt: str, neg, efield, frac) -> np.ndarray:
    f = get_format(fmt)
    u = (np.asarray(neg).astype(np.uint64) << np.uint64(f.width - 1)) | (
        np.asarray(efield).astype(np.uint64) << np.uint64(f.frac_bits)) | np.asarray(frac).astype(np.uint64)
    u = u << np.uint64(f.container_shift)
    if f.fnuz:  # a zero with the sign bit is NaN in FNUZ: keep zeros positive
        u = np.where(u == np.uint64(1 << (f.width - 1)), np.uint64(0), u)
    return u.astype(f.container_dtype)


def _finite(fmt: str, shape, rng, lo: int, hi: int) -> np.ndarray:
    """Random finite values with biased exponent field in [lo, hi] (clipped to the finite range)."""
    f = get_format(fmt)
    top = (1 << f.exp_bits) - 1
    hi = min(hi, top if f.fnuz else top - 1)
    lo = min(max(lo, 0), hi)
    frac = rng.integers(0, 1 << f.frac_bits, shape, dtype=np.uint64)
    return _compose(fmt, rng.random(shape) < 0.5, rng.integers(lo, hi + 1, shape), frac)


def _values(bits: np.ndarray, fmt: str) -> np.ndarray:
    f = get_format(fmt)
    if f.numpy_dtype is None:  # tf32: the top 19 bits
        return (bits.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    return bits.astype(f.container_dtype).view(f.numpy_dtype).astype(np.float64)


def _from_values(x: np.ndarray, fmt: str) -> np.ndarray:
    f = get_format(fmt)
    dt = f.numpy_dtype or np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.asarray(x).astype(dt)
    if f.fnuz:
        y = np.where(np.isnan(y.astype(np.float64)), np.zeros((), dt), y)  # out of range: 0 instead of NaN
    return y.view(f.container_dtype if f.numpy_dtype is not None else np.uint32)


def scheme_operands(params, s: int, k: int, kind: str, rng: np.random.Generator, spread: int = 12):
    """Operands of one kind (module docstring) for a preset with a scheme."""
    fa = params.input_format
    fb = params.b_format
    fc = params.c_format
    if kind not in SCHEME_KINDS:
        raise ValueError(f"kind must be one of {SCHEME_KINDS}, got {kind!r}")

    def operand(fmt, shape, lo, hi):
        return _finite(fmt, shape, rng, lo, hi)

    if kind == "normal":
        a = _from_values(rng.standard_normal((s, k)), fa)
        b = _from_values(rng.standard_normal((s, k)), fb)
        c = _from_values(rng.standard_normal(s), fc)
    elif kind == "bits":
        def rbits(fmt, shape):
            f = get_format(fmt)
            return rng.integers(0, 1 << 63, shape, dtype=np.uint64).astype(f.container_dtype)
        a, b, c = rbits(fa, (s, k)), rbits(fb, (s, k)), rbits(fc, (s,))
    elif kind in ("wide", "cancel", "special"):
        def window(fmt, shape):
            f = get_format(fmt)
            top = (1 << f.exp_bits) - (1 if f.fnuz else 2)
            centre = f.bias + rng.integers(-spread, spread + 1, shape[0]).reshape((-1,) + (1,) * (len(shape) - 1))
            efield = np.clip(centre + rng.integers(0, spread, shape), 1, top)
            frac = rng.integers(0, 1 << f.frac_bits, shape, dtype=np.uint64)
            return _compose(fmt, rng.random(shape) < 0.5, efield, frac)

        a, b, c = window(fa, (s, k)), window(fb, (s, k)), window(fc, (s,))
        c = np.where(rng.random(s) < 0.25, np.zeros((), c.dtype), c)
        if kind == "cancel":
            with np.errstate(all="ignore"):
                dot = (_values(a, fa) * _values(b, fb)).sum(axis=1)
            c = _from_values(-dot, fc)
        if kind == "special":
            f = get_format(fa)
            specials = [0, 1 << (f.width - 1)]
            if not f.fnuz:
                inf = ((1 << f.exp_bits) - 1) << f.frac_bits
                specials += [inf, inf | 1 << (f.width - 1), inf | 1] if f.ieee_specials else [inf | 0x7]
            specials = [x << f.container_shift for x in specials]
            for arr in (a, b):
                hit = rng.random(arr.shape) < 0.08
                arr[hit] = rng.choice(np.array(specials, np.uint64), hit.sum()).astype(arr.dtype)
            fcc = get_format(fc)
            cinf = ((1 << fcc.exp_bits) - 1) << fcc.frac_bits
            cspec = np.array([0, 1 << (fcc.width - 1), cinf, cinf | 1 << (fcc.width - 1), cinf | 1], np.uint64)
            hit = rng.random(s) < 0.15
            c[hit] = rng.choice(cspec, hit.sum()).astype(c.dtype)
    elif kind == "tiny":
        a = operand(fa, (s, k), 0, 3)
        b = operand(fb, (s, k), 0, 3)
        fcc = get_format(fc)
        c = np.where(rng.random(s) < 0.5, np.zeros((), fcc.container_dtype), operand(fc, (s,), 0, 2))
    else:  # extreme
        a = operand(fa, (s, k), 0, 1 << 12)
        b = operand(fb, (s, k), 0, 1 << 12)
        c = operand(fc, (s,), 0, 1 << 12)
    return a, b, c
