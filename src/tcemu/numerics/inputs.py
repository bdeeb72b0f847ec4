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
- ``ties``: c in a random binade, one product equal to half (or 1 or 3 halves) of the output format's
  ulp there, so the exact sum is a rounding tie or a grid point, plus an optional tiny product 2^-d below
  it that the alignment truncation keeps or drops: ties and one unit either side of them.
"""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np

from .formats import FloatFormat, get_format
from .params import MMAParams

__all__ = ["KINDS", "make_operands", "make_mixed_operands", "compose_bits"]

KINDS = ("normal", "bits", "wide", "cancel", "tiny", "special", "ties")


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
    if not f.ieee_specials and not f.finite_only:  # e4m3fn: S.1111.111 is NaN
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
    if params.input_format_b is not None or params.scale_format is not None:
        return make_mixed_operands(params, s, k, kind, rng, spread)  # a and b of two formats, or block-scaled
    fin = get_format(params.input_format)
    fc = get_format(params.c_in_format)
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
            elif fin.finite_only:  # FP4/FP6: no Inf/NaN; the largest magnitudes instead
                specials += [fin.max_finite_field, fin.max_finite_field | 1 << (fin.width - 1)]
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
    if kind == "ties":
        return _ties(params, s, k, rng)
    raise ValueError(f"unknown kind {kind!r}; valid: {KINDS}")


def _pow2_bits(f: FloatFormat, exps: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """Bits of +-2**exps in f (exponents must be representable, subnormal ones included)."""
    efield = np.clip(exps + f.bias, 0, None)
    frac = np.where(efield == 0, np.left_shift(1, np.clip(exps - (f.emin - f.frac_bits), 0, 62)), 0)
    return compose_bits(f, negative, efield, frac)


def _ties(params: MMAParams, s: int, k: int, rng: np.random.Generator):
    fin = get_format(params.input_format if params.interleave is None else "fp16")
    fin_real = get_format(params.input_format)
    fc = get_format(params.c_in_format)
    fo = get_format(params.output_format)
    lo_in = fin_real.emin - fin_real.frac_bits  # smallest power of two of the input format
    hi_in = fin_real.emax
    # product 2**t = 2**ea * 2**eb with both factors representable; c's binade e_c = t + p_out (+1 for 3 halves)
    t = rng.integers(max(2 * lo_in, fc.emin - fc.frac_bits - fo.precision + 2),
                     min(2 * hi_in, fc.emax - fo.precision) + 1, s)
    ea = np.clip(t // 2 + rng.integers(-2, 3, s), lo_in, hi_in)
    eb = np.clip(t - ea, lo_in, hi_in)
    ea = t - eb
    ok = (ea >= lo_in) & (ea <= hi_in)
    mult = rng.choice([1, 1, 2, 3], s)  # 1 or 3 halves: ties; 2 halves: one ulp
    e_c = t + fo.precision
    neg_c = rng.random(s) < 0.5
    c_frac = rng.integers(0, 1 << fc.frac_bits, s) & ~((1 << max(fc.frac_bits - fo.frac_bits, 0)) - 1)
    c = compose_bits(fc, neg_c, np.clip(e_c + fc.bias, 1, (1 << fc.exp_bits) - 2), c_frac)
    a = np.zeros((s, k), dtype=fin_real.container_dtype)
    b = np.zeros((s, k), dtype=fin_real.container_dtype)
    pos = rng.integers(0, k, s)
    same = rng.random(s) < 0.5  # the product has c's sign or the opposite one
    neg_p = np.where(same, neg_c, ~neg_c)
    rows = np.arange(s)
    a[rows, pos] = np.where(ok, _pow2_bits(fin_real, np.where(ok, ea, 0), neg_p), 0)
    b_bits = _pow2_bits(fin_real, np.where(ok, eb, 0), np.zeros(s, bool))
    # 3 halves: b = 1.5 * 2**eb where the format allows it
    if fin_real.frac_bits >= 1:
        three = (mult == 3) & ok & (eb + fin_real.bias >= 1)
        b_bits = np.where(three, b_bits | (1 << (fin_real.frac_bits - 1)) << fin_real.container_shift, b_bits)
        e_one = (mult == 2) & ok
        b_bits = np.where(e_one, _pow2_bits(fin_real, np.clip(eb + 1, lo_in, hi_in), np.zeros(s, bool)), b_bits)
    b[rows, pos] = b_bits
    # an optional tiny product 2**(t - d), either sign, at another k
    # mostly right at the alignment grid (2**(E_max - F) with E_max ~ e_c), where F decides its fate
    near = np.clip(params.frac_bits - fo.precision + rng.integers(-3, 4, s), 1, 60)
    d = np.where(rng.random(s) < 0.7, near, rng.integers(1, 45, s))
    tiny = (rng.random(s) < 0.7) & (k > 1)
    pos2 = (pos + 1 + rng.integers(0, max(k - 1, 1), s)) % k
    e2 = t - d
    ea2 = np.clip(e2 // 2, lo_in, hi_in)
    eb2 = e2 - ea2
    fits = tiny & (eb2 >= lo_in) & (eb2 <= hi_in)
    a[rows[fits], pos2[fits]] = _pow2_bits(fin_real, ea2[fits], rng.random(int(fits.sum())) < 0.5)
    b[rows[fits], pos2[fits]] = _pow2_bits(fin_real, eb2[fits], np.zeros(int(fits.sum()), bool))
    del fin
    return a, b, c.astype(fc.container_dtype)


def _single(params: MMAParams, fmt: str) -> MMAParams:
    """``params`` with one unscaled input format (for drawing one operand)."""
    return replace(params, input_format=fmt, input_format_b=None, scale_format=None, scale_block=0, scale_chunk=0,
                   interleave=None, k_instr=params.n_fma, frac_bits=min(params.frac_bits, 29))


def make_mixed_operands(params: MMAParams, s: int, k: int, kind: str, rng: np.random.Generator, spread: int = 12):
    """(a_bits, b_bits, c_bits) with a in ``params.input_format`` and b in ``params.b_format`` (mixed or block-scaled
    models): each drawn as one unscaled format of the same kind (``ties`` becomes ``wide``: its crafted pair needs
    one format); for ``cancel`` c is minus the exact unscaled a . b."""
    kind = "wide" if kind == "ties" else kind
    a, _, c = make_operands(_single(params, params.input_format), s, k, kind, rng, spread)
    _, b, _ = make_operands(_single(params, params.b_format), s, k, kind, rng, spread)
    if kind == "cancel":
        c = _cancel_c(params, a, b, np.ones((s, 1)), np.ones((s, 1)), 1)
    return a, b, c


def _cancel_c(params: MMAParams, a, b, sa_val, sb_val, block) -> np.ndarray:
    fc = get_format(params.c_in_format)
    va = _elem_values(a, params.input_format) * np.repeat(sa_val, block, axis=1)
    vb = _elem_values(b, params.b_format) * np.repeat(sb_val, block, axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = -(va * vb).sum(axis=1)
        return np.nan_to_num(ref, nan=0.0).astype(fc.numpy_dtype).view(fc.container_dtype)


def _elem_values(bits, fmt) -> np.ndarray:
    f = get_format(fmt)
    with np.errstate(invalid="ignore"):
        return np.asarray(bits).view(f.numpy_dtype).astype(np.float64)
