"""FAST vectorised chains of IEEE FMAs: FP64 DMMA (NVIDIA) and AMD fp32/fp64 MFMA.

``d = c; for k in 0..K-1: d = fma(a_k, b_k, d)``, each FMA the exact ``a_k b_k + d`` rounded once to nearest
even in the operands' format (fp32 or fp64), as the PTX ISA describes ``mma`` with ``.f64`` and as MMA-Sim
models ``mma.*.f64`` and AMD's ``v_mfma_f32_*_f32`` / ``v_mfma_f64_*`` (docs/numerics.md, "FMA chains").

NumPy has no FMA, so each one is built from error-free float operations, all exact:

- fp32: the product of two fp32 values is exact in float64; ``a b + d`` is summed in float64 with its exact
  error (TwoSum) and rounded to odd; rounding that to fp32 (nearest even) rounds the exact value once, since
  53 >= 24 + 2 bits (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms
  using rounding to odd", IEEE TC 57(4), 2008).
- fp64: the product is split exactly (Dekker's TwoProduct), ``d + hi`` exactly (TwoSum), the two low parts
  rounded to odd, and the sum rounded once (the same paper's FMA emulation). Its proof needs no overflow or
  underflow, so rows with an operand outside a safe exponent window (nonzero |a|, |b| in [2^-400, 2^400],
  |c| <= 2^800) take an exact rational path instead (:func:`fma64_exact_scalar`); so do non-finite ones.

The exact rational reference of the same chain is :mod:`tcemu.numerics.oracle_schemes`.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["FMAChain", "chain_nan_bits", "fma32", "fma64", "fma64_exact_scalar", "propagated_nan_bits"]

_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's splitter for binary64
_LO, _HI = 2.0**-400, 2.0**400  # safe window of nonzero a and b for the float64 path
_CHI = 2.0**800  # largest c for the float64 path
_LO2, _HI2 = (np.array([_LO, _HI]).view(np.uint64) << np.uint64(1))  # their bits without the sign
_CHUNK = 1 << 13  # rows per chunk


def _to_odd(v: np.ndarray, err: np.ndarray, int_dtype) -> np.ndarray:
    """Round-to-odd of the exact ``v + err`` given ``v`` = its nearest value and ``err`` the exact remainder."""
    bits = v.view(int_dtype)
    inexact = err != 0
    toward_zero = inexact & ((err.view(int_dtype) ^ bits) < 0)  # opposite signs: |v| > |v + err|, one ulp down
    return ((bits - toward_zero) | inexact).view(v.dtype)


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = x + y
    z = s - x
    return s, (x - (s - z)) + (y - z)


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: x = hi + lo exactly, each with at most 26 significant bits (|x| < 2**996)."""
    t = _SPLIT * x
    hi = t - (t - x)
    return hi, x - hi


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Elementwise IEEE fp32 FMA ``a b + c`` rounded once to nearest even (float32 arrays in and out)."""
    with np.errstate(invalid="ignore", over="ignore"):
        p = a.astype(np.float64) * b  # exact: 48-bit significands, exponents within binary64's range
        s, err = _two_sum(p, c.astype(np.float64))
        err[~np.isfinite(s)] = 0.0
        return _to_odd(s, err, np.int64).astype(np.float32)  # odd at 53 bits, then nearest even at 24: one rounding


def _fma64_safe(a, b, c, ah, al, bh, bl, zeros: bool = True) -> np.ndarray:
    """fp64 FMA on elements inside the safe window (split operands given); ``zeros``: some a or b may be zero."""
    ph = a * b
    pl = ((ah * bh - ph) + ah * bl + al * bh) + al * bl  # a b = ph + pl exactly
    th, tl = _two_sum(c, ph)
    v, err = _two_sum(tl, pl)
    out = th + _to_odd(v, err, np.int64)
    if zeros:  # a zero product and a zero c: th is IEEE's c + (+-0) (an exact cancellation gives +0 either way)
        out = np.where((out == 0) & (th == 0), th, out)
    return out


def _safe_rows(a: np.ndarray, b: np.ndarray, c: np.ndarray, buf: np.ndarray | None = None) -> np.ndarray:
    """Rows (columns of the (K, S) arrays) whose every FMA may take the float64 path: nonzero |a|, |b| in
    [2^-400, 2^400] (so every product and its error term are exact normal numbers) and |c| <= 2^800 (no
    overflow for K < 2^100); a tiny accumulator is fine (TwoSum is exact under gradual underflow).

    On the bits, shifted left by one (the sign dropped: ordered as |x|; NaN and Inf above 2^400's), by two
    reductions over k per operand; ``buf``: a (K, S) uint64 scratch array to reuse."""
    ok = np.abs(c) <= _CHI
    for x in (a, b):
        m = np.left_shift(x.view(np.uint64), np.uint64(1), out=buf)
        ok &= m.max(axis=0) <= _HI2
        m -= np.uint64(1)  # a zero wraps to the largest value
        ok &= m.min(axis=0) >= _LO2 - np.uint64(1)
    return ok


def fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Elementwise IEEE fp64 FMA ``a b + c`` rounded once to nearest even (float64 arrays in and out)."""
    a, b, c = (np.asarray(x, np.float64) for x in np.broadcast_arrays(a, b, c))
    out = np.empty(a.shape)
    safe = _safe_rows(a[None], b[None], c)
    with np.errstate(invalid="ignore", over="ignore"):
        out[safe] = _fma64_safe(a[safe], b[safe], c[safe], *_split(a[safe]), *_split(b[safe]))
    out[~safe] = [fma64_exact_scalar(x, y, z) for x, y, z in zip(a[~safe].tolist(), b[~safe].tolist(),
                                                                 c[~safe].tolist())]
    return out


def _chain64(a: np.ndarray, b: np.ndarray, c: np.ndarray, buf: np.ndarray | None = None) -> np.ndarray:
    """The fp64 chain on (K, S) operands: float64 path for safe rows, exact fallback for the others. The float64
    path splits each k's operands in turn: temporaries of one row of S stay small (whole (K, S) temporaries cost
    fresh pages of memory, more than the arithmetic)."""
    out = c.copy()
    safe = _safe_rows(a, b, c, buf)
    cols = slice(None) if safe.all() else np.nonzero(safe)[0]
    with np.errstate(invalid="ignore", over="ignore"):
        sa, sb = a[:, cols], b[:, cols]
        d = c[cols]
        zeros = bool((sa == 0).any() or (sb == 0).any())
        for k in range(a.shape[0]):
            d = _fma64_safe(sa[k], sb[k], d, *_split(sa[k]), *_split(sb[k]), zeros)
        out[cols] = d
    for j in np.nonzero(~safe)[0]:
        d = float(c[j])
        for x, y in zip(a[:, j].tolist(), b[:, j].tolist()):
            d = fma64_exact_scalar(x, y, d)
        out[j] = d
    return out


def _running_sums(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The chain's (K + 1, S) running values on (K, S) operands, c first: what :func:`chain_nan_bits` reads, made
    for the rows whose result is NaN only (elementwise FMAs per k: the same IEEE values as the chain's)."""
    fma = fma64 if a.dtype == np.float64 else fma32
    hist = np.empty((a.shape[0] + 1,) + c.shape, a.dtype)
    hist[0] = c
    for k in range(a.shape[0]):
        hist[k + 1] = fma(a[k], b[k], hist[k])
    return hist


def chain_nan_bits(a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, hist: np.ndarray, default: int,
                   order: str = "bda") -> np.ndarray:
    """NaN bits of FMA chains by propagation, vectorised over rows: (K, S) operand bits, (S,) c bits and the (K + 1,
    S) running values (from which NaN and Inf steps are read) -> (S,) bits, meaningful where the result is NaN.

    An FMA with a NaN operand returns the first NaN among a_k, b_k and the running sum in ``order``, quieted; one
    that turns non-NaN operands into NaN (Inf x 0, Inf - Inf) returns ``default`` (the rule of
    :func:`propagated_nan_bits`, checked against it)."""
    udt = a_bits.dtype.type
    width = 8 * a_bits.dtype.itemsize
    quiet = udt(1 << (22 if width == 32 else 51))
    mag, inf = udt((1 << (width - 1)) - 1), udt(0x7F800000 if width == 32 else _EXP64)
    bits = c_bits | quiet
    for k in range(a_bits.shape[0]):
        ops = {"a": a_bits[k], "b": b_bits[k], "d": bits}
        nans = {"a": (a_bits[k] & mag) > inf, "b": (b_bits[k] & mag) > inf, "d": np.isnan(hist[k])}
        pick = np.full(bits.shape, udt(default))
        for o in reversed(order):
            pick = np.where(nans[o], ops[o] | quiet, pick)
        bits = np.where(nans["a"] | nans["b"] | nans["d"] | np.isnan(hist[k + 1]), pick, bits)
    return bits


def fma64_exact_scalar(a: float, b: float, c: float) -> float:
    """One fp64 FMA through exact rationals (the fallback of :func:`fma64`; Inf/NaN by IEEE rules)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return a * b + c  # Inf x nonzero = Inf, Inf x 0 = NaN, NaN: then IEEE addition, as the FMA
    if not math.isfinite(c):
        return c  # a finite (exact) product plus Inf or NaN
    if a == 0 or b == 0:
        return c + a * b
    x = Fraction(a) * Fraction(b) + Fraction(c)
    if x == 0:
        return 0.0  # an exact zero sum of nonzero terms is +0 under round to nearest
    try:
        return float(x)  # CPython's int / int division is correctly rounded (nearest even), subnormals included
    except OverflowError:
        return math.inf if x > 0 else -math.inf


@dataclass(frozen=True)
class FMAChain:
    """Accumulation scheme: a chain of IEEE FMAs in increasing k from c, each rounded to nearest even.

    ``nan_rule``: ``"constant"``: every NaN result is ``nan_bits`` (None: the IEEE default quiet NaN, 0x7FC00000
    or 0x7FF8000000000000); ``"propagate"``: an FMA with a NaN operand returns that NaN quieted, its payload kept,
    the first NaN in ``nan_order`` (``"bda"``: b_k, then the running sum d, then a_k, the H100's order; ``"bad"``:
    MMA-Sim's host ``fma``), and an invalid one (Inf x 0, Inf - Inf) returns ``nan_bits``
    (:func:`chain_nan_bits`).
    """

    nan_bits: int | None = None
    kind: str = "fma_chain"
    nan_rule: str = "constant"
    nan_order: str = "bda"

    def check(self, p) -> None:
        if p.input_format not in ("fp32", "fp64") or p.output_format != p.input_format:
            raise ValueError(f"tcemu: an FMA chain takes fp32 -> fp32 or fp64 -> fp64, got "
                             f"{p.input_format} -> {p.output_format}")
        if self.nan_bits is not None and self.nan_bits >> (32 if p.output_format == "fp32" else 64):
            raise ValueError(f"tcemu: nan_bits {self.nan_bits:#x} wider than {p.output_format}")
        if p.n_fma != 1 or p.k_instr < 1:
            raise ValueError(f"tcemu: an FMA chain has n_fma = 1 and k_instr >= 1, got {p.n_fma}, {p.k_instr}")
        if self.nan_rule not in ("constant", "propagate") or (self.nan_rule == "propagate" and self.nan_bits is None):
            raise ValueError(f"tcemu: nan_rule is 'constant', or 'propagate' with nan_bits set, got "
                             f"{self.nan_rule!r}")
        if sorted(self.nan_order) != ["a", "b", "d"]:
            raise ValueError(f"tcemu: nan_order orders 'a', 'b' and 'd' (the running sum), got {self.nan_order!r}")

    def describe(self, p) -> str:
        order = ", ".join({"a": "a", "b": "b", "d": "the sum"}[x] for x in self.nan_order)
        nans = (f"a NaN operand's NaN quieted (first of {order}), invalid ones {self.nan_bits:#x}"
                if self.nan_rule == "propagate" else f"{self.nan_of(p.output_format):#x}")
        return (f"K={p.k_instr}, chain of IEEE {p.input_format} FMAs in increasing k from c, each rounded to "
                f"nearest even; NaN results {nans}")

    def bits(self, a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, p) -> np.ndarray:
        """(S, K), (S, K), (S,) container bits -> (S,) result bits."""
        fdt, udt = (np.float32, np.uint32) if p.input_format == "fp32" else (np.float64, np.uint64)
        c_all = np.asarray(c_bits).astype(udt).view(fdt)
        d = np.empty_like(c_all)
        n = min(_CHUNK, len(c_all))
        # (K, chunk) operands, reused from chunk to chunk: fresh memory pages per chunk would cost more than the
        # arithmetic
        a_buf, b_buf, scratch = (np.empty((np.shape(a_bits)[1], n), udt) for _ in range(3))
        for r0 in range(0, len(c_all), _CHUNK):
            rs = slice(r0, r0 + _CHUNK)
            m = len(c_all[rs])
            a, b = a_buf[:, :m], b_buf[:, :m]
            np.copyto(a, np.asarray(a_bits[rs]).T, casting="unsafe")
            np.copyto(b, np.asarray(b_bits[rs]).T, casting="unsafe")
            a, b = a.view(fdt), b.view(fdt)
            if fdt is np.float64:
                d[rs] = _chain64(a, b, c_all[rs], scratch[:, :m])
            else:
                acc = c_all[rs]
                for k in range(a.shape[0]):
                    acc = fma32(a[k], b[k], acc)
                d[rs] = acc
        out = d.view(udt).copy()
        nan = np.isnan(d)
        if np.any(nan):
            if self.nan_rule == "propagate":  # the NaN rows' running sums again (rare), then their NaN's bits
                rows = np.nonzero(nan)[0]
                ua = np.ascontiguousarray(np.asarray(a_bits)[rows].astype(udt).T)
                ub = np.ascontiguousarray(np.asarray(b_bits)[rows].astype(udt).T)
                uc = np.asarray(c_bits)[rows].astype(udt)
                hist = _running_sums(ua.view(fdt), ub.view(fdt), uc.view(fdt))
                out[rows] = chain_nan_bits(ua, ub, uc, hist, self.nan_bits, self.nan_order)
            else:
                out[nan] = udt(self.nan_of(p.output_format))
        return out

    def nan_of(self, fmt: str) -> int:
        """The NaN result's bits in ``fmt`` (fp32 or fp64)."""
        if self.nan_bits is not None:
            return self.nan_bits
        return 0x7FC00000 if fmt == "fp32" else 0x7FF8000000000000


_EXP64, _FRAC64, _QUIET64 = 0x7FF0000000000000, 0x000FFFFFFFFFFFFF, 0x0008000000000000
_FIELDS = {"fp64": (_EXP64, _FRAC64, _QUIET64, "<d", "<Q"), "fp32": (0x7F800000, 0x007FFFFF, 0x00400000, "<f", "<I")}


def propagated_nan_bits(a_bits: list[int], b_bits: list[int], c_bits: int, default: int,
                        order: str = "bda", fmt: str = "fp64") -> int | None:
    """The FMA chain ``d = fma(a_k, b_k, d)`` from c on bits (``fmt`` fp64 or fp32), NaN by propagation, one
    element at a time (the reference of :func:`chain_nan_bits`): an FMA with a NaN operand returns the first NaN
    among a_k, b_k and d in ``order`` (default b_k, d, a_k), quieted (payload and sign kept); an invalid one (Inf x
    0, or an infinite product plus the opposite Inf) returns ``default``. The result's bits if it is NaN, else None.

    What the H100's DMMA returned (docs/hardware/h100-dmma.json): input payloads quieted, 0xFFF8000000000000 for
    invalid operations, and where several NaNs meet in one FMA the B operand's, else the running sum's, else the A
    operand's (the check's ``nan_priority`` inputs: NaNs with payloads of their own in a, b and c). MMA-Sim's
    host ``fma``/``fmaf`` (x86 FMA): b's, then a's, then the running sum's; x86's default NaN for invalid ones.
    """
    exp, frac, quiet, fcode, icode = _FIELDS[fmt]

    def nan(x: int) -> bool:
        return (x & exp) == exp and (x & frac) != 0

    def val(x: int) -> float:
        return struct.unpack(fcode, struct.pack(icode, x))[0]

    def fma(x: float, y: float, z: float) -> float:
        if fmt == "fp64":
            return fma64_exact_scalar(x, y, z)
        return float(fma32(*(np.array([v], np.float32) for v in (x, y, z)))[0])

    d = c_bits
    for x, y in zip(a_bits, b_bits):
        if nan(x) or nan(y) or nan(d):
            ops = {"a": x, "b": y, "d": d}
            d = next(ops[o] for o in order if nan(ops[o])) | quiet
            continue
        xv, yv, dv = val(x), val(y), val(d)
        if (math.isinf(xv) and yv == 0) or (xv == 0 and math.isinf(yv)):
            d = default
            continue
        infinite_product = math.isinf(xv) or math.isinf(yv)
        if infinite_product and math.isinf(dv) and math.copysign(1, xv * yv) != math.copysign(1, dv):
            d = default
            continue
        d = struct.unpack(icode, struct.pack(fcode, fma(xv, yv, dv)))[0]
    return d if nan(d) else None
