"""Random and adversarial operands for model checks (tests, benchmarks, hardware validation).

:func:`make_operands` returns ``(a_bits (S, K), b_bits (S, K), c_bits (S,))`` in the containers that
:func:`tcemu.numerics.block_fma_bits` takes, drawn from one of :data:`KINDS`:

- ``normal``: N(0, 1) rounded to the format (as the public hardware data); c ~ U(0, 1).
- ``bits``: uniformly random bit patterns (many Inf/NaN for the narrow formats).
- ``wide``: random sign, fraction and exponent within a window of ``spread`` binades, so that
  alignment truncates partly; c likewise, or zero with probability 1/4.
- ``cancel``: like ``wide``, with c = -(a . b) rounded to c's format: massive cancellation.
- ``tiny``: exponents near the bottom of the range (subnormal products, c = 0 or subnormal c):
  the regime of the disputed c = 0 floor.
- ``special``: ``wide`` with zeros, signed zeros, Inf and NaN injected.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .formats import FloatFormat, get_format
from .params import MMAParams

__all__ = ["KINDS", "make_operands", "compose_bits"]

KINDS = ("normal", "bits", "wide", "cancel", "tiny", "special")


def compose_bits(f: FloatFormat, negative: np.ndarray, efield: np.ndarray, frac: np.ndarray) -> np.ndarray:
    """Container bits from sign, biased exponent field and fraction field."""
    u = (negative.astype(np.int64) << (f.width - 1)) | (efield.astype(np.int64) << f.frac_bits) | frac.astype(np.int64)
    return (u << f.container_shift).astype(f.container_dtype)


def _field_bits(f: FloatFormat, shape, rng: np.random.Generator, lo: int, hi: int) -> np.ndarray:
    """Random finite values with biased exponent field in [lo, hi] (0 = subnormal)."""
    top = (1 << f.exp_bits) - 1
    hi = min(hi, top - 1 if f.ieee_specials else top)
    lo = max(lo, 0)
    efield = rng.integers(lo, hi + 1, shape)
    frac = rng.integers(0, 1 << f.frac_bits, shape)
    if not f.ieee_specials:  # e4m3fn: S.1111.111 is NaN
        frac = np.where((efield == top) & (frac == (1 << f.frac_bits) - 1), frac - 1, frac)
    return compose_bits(f, rng.random(shape) < 0.5, efield, frac)


def _values(bits: np.ndarray, fmt: str) -> np.ndarray:
    f = get_format(fmt)
    if f.numpy_dtype is None:
        return (bits.astype(np.uint32) & ~np.uint32((1 << f.container_shift) - 1)).view(np.float32).astype(np.float64)
    return bits.view(f.numpy_dtype).astype(np.float64)


def make_operands(params: MMAParams, s: int, k: int, kind: str, rng: np.random.Generator, spread: int = 12):
    """Operands for ``block_fma_bits`` of one kind (see the module docstring).

    Returns:
        ``(a_bits, b_bits, c_bits)`` with shapes ``(s, k), (s, k), (s,)``.
    """
    fin = get_format(params.input_format)
    fc = get_format(params.c_format)
    shape = (s, k)
    if kind == "normal":
        x = rng.standard_normal((2,) + shape)
        dtype = ml_dtypes.bfloat16 if fin.name == "tf32" else fin.numpy_dtype
        if fin.name == "tf32":
            a = x[0].astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
            b = x[1].astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
        else:
            a, b = (x[i].astype(dtype).view(fin.container_dtype) for i in (0, 1))
        c = rng.random(s).astype(fc.numpy_dtype).view(fc.container_dtype)
        return a, b, c
    if kind == "bits":
        a = rng.integers(0, 1 << fin.width, shape).astype(np.int64) << fin.container_shift
        b = rng.integers(0, 1 << fin.width, shape).astype(np.int64) << fin.container_shift
        c = rng.integers(0, 1 << fc.width, s)
        return a.astype(fin.container_dtype), b.astype(fin.container_dtype), c.astype(fc.container_dtype)
    if kind in ("wide", "cancel", "special"):
        mid = fin.bias
        half = max(1, min(spread, (1 << fin.exp_bits) // 2 - 2))
        a = _field_bits(fin, shape, rng, mid - half, mid + half)
        b = _field_bits(fin, shape, rng, mid - half, mid + half)
        cmid = fc.bias
        c = _field_bits(fc, (s,), rng, cmid - 2 * half, cmid + 2 * half)
        c = np.where(rng.random(s) < 0.25, 0, c).astype(fc.container_dtype)
        if kind == "cancel":
            ref = -(_values(a, fin.name) * _values(b, fin.name)).sum(axis=1)
            with np.errstate(over="ignore"):
                c = ref.astype(fc.numpy_dtype).view(fc.container_dtype)
        if kind == "special":
            specials = [0, 1 << (fin.width - 1)]  # +0, -0
            if fin.ieee_specials:
                inf = ((1 << fin.exp_bits) - 1) << fin.frac_bits
                specials += [inf, inf | 1 << (fin.width - 1), inf | 1, inf | (1 << (fin.frac_bits - 1))]
            else:
                specials += [0x7F, 0xFF]
            specials = (np.array(specials, dtype=np.int64) << fin.container_shift).astype(fin.container_dtype)
            for arr in (a, b):
                mask = rng.random(shape) < 0.03
                arr[mask] = rng.choice(specials, int(mask.sum()))
            cinf = ((1 << fc.exp_bits) - 1) << fc.frac_bits
            cspecial = np.array([0, 1 << (fc.width - 1), cinf, cinf | 1 << (fc.width - 1), cinf | 1, cinf | 5],
                                dtype=np.int64).astype(fc.container_dtype)
            mask = rng.random(s) < 0.1
            c[mask] = rng.choice(cspecial, int(mask.sum()))
        return a, b, c
    if kind == "tiny":
        # product exponents around the bottom of c's format (and below), c mostly zero
        top = (1 << fin.exp_bits) - 2
        t = rng.integers(fc.emin - 30, fc.emin + 5, shape)
        ea = t // 2 + rng.integers(-3, 4, shape)
        efa = np.clip(ea + fin.bias, 0, top)
        efb = np.clip(t - ea + fin.bias, 0, top)
        a = compose_bits(fin, rng.random(shape) < 0.5, efa, rng.integers(0, 1 << fin.frac_bits, shape))
        b = compose_bits(fin, rng.random(shape) < 0.5, efb, rng.integers(0, 1 << fin.frac_bits, shape))
        c = _field_bits(fc, (s,), rng, 0, 3)
        c = np.where(rng.random(s) < 0.6, 0, c).astype(fc.container_dtype)
        return a, b, c
    raise ValueError(f"unknown kind {kind!r}; valid: {KINDS}")
