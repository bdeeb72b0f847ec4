"""FAST vectorised models of AMD CDNA Matrix Core (``v_mfma_*``) accumulation, as MMA-Sim describes it.

Schemes besides the FMA chains of :mod:`tcemu.numerics.model_fma` (fp32 and fp64 MFMA), each a frozen record
set as :attr:`MMAParams.scheme`; ``n_fma`` is the group size, ``k_instr`` the instruction's K (and
:class:`ExactGroupRound`, the Khattak & Mikaitis toolbox's CDNA1 model, ``variant="toolbox"``):

- :class:`PairwiseTree` (CDNA1/CDNA2 fp16 and bf16): each group of ``n_fma`` products (exact, rounded to
  fp32) is summed by a balanced binary tree of fp32 additions rounded to nearest even, and the group sum is
  added to the accumulator with one more fp32 addition. CDNA2 flushes subnormal inputs, c, every partial
  sum and the accumulator to zero (``flush_subnormals``).
- :class:`FusedRoundDown` (CDNA3 xf32, fp16, bf16, fp8): per group, the products are aligned to their own
  largest exponent ``e`` and truncated toward zero to ``frac_bits`` (24) fraction bits and summed exactly;
  then the sum and c are aligned to ``max(e, e_c)`` by rounding *down* (toward -Inf): the sum to
  ``sum_frac_bits`` (31) fraction bits, c to ``c_frac_bits`` (24); their exact sum is rounded to fp32 to
  nearest even. FP8 (``fp8_pairs``): the even-k and the odd-k products are two such sums, each aligned to its
  own maximum, then joined by rounding down to 24 bits at the larger one; c is dropped when its exponent is
  more than ``c_drop_gap`` (25) below the joint maximum. A zero factor counts at exponent ``zero_exp`` (-126)
  in the products' maximum, and a product of magnitude >= 2^128 makes the result Inf (both as MMA-Sim).

The exact rational reference of both is :mod:`tcemu.numerics.oracle_schemes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .formats import FINITE, INF, NAN, ZERO, decode, decode_table, encode, get_format
from .model_amd_nan import binary_nan_bits, fused_group_nan_bits, operand_nan32
from .rounding import Rounding, bit_length

__all__ = ["PairwiseTree", "FusedRoundDown", "ExactGroupRound", "AMD_NAN32"]

AMD_NAN32 = 0x7FC00000  # NaN results: the IEEE default quiet NaN (assumed; no AMD document states MFMA NaN bits)
NAN_RULES = ("constant", "mmasim_host")  # nan_bits always, or MMA-Sim's host NaNs (tcemu.numerics.model_amd_nan)
_CHUNK = 1 << 13  # rows per chunk
_ZERO_SENTINEL = -(1 << 20)  # exponent of a zero factor left out (zero_exp None): never the maximum
_SPECIAL_SENTINEL = 1 << 24  # exponent of Inf/NaN: the group maximum flags the row


def _check_nan_rule(rule: str) -> None:
    if rule not in NAN_RULES:
        raise ValueError(f"tcemu: nan_rule must be one of {NAN_RULES}, got {rule!r}")


def _nan_text(scheme) -> str:
    return (f"{scheme.nan_bits:#x}" if scheme.nan_rule == "constant"
            else "MMA-Sim's host NaNs (tcemu.numerics.model_amd_nan)")


@lru_cache(maxsize=None)
def _packed(fmt: str, lshift: int, zero_exp: int | None) -> np.ndarray:
    """int64 per bit pattern: low half the signed significand << lshift, high half the exponent (zero: zero_exp
    or a sentinel below everything; Inf/NaN: a sentinel above everything)."""
    neg, sig, e, cls = decode_table(fmt)
    e = np.where(cls >= INF, _SPECIAL_SENTINEL, np.where(cls == ZERO, _ZERO_SENTINEL if zero_exp is None
                                                          else zero_exp, e)).astype(np.int64)
    signed = np.where(neg, -(sig << lshift), sig << lshift).astype(np.int64)
    packed = (e << 32) | (signed & 0xFFFFFFFF)
    packed.setflags(write=False)
    return packed


def _fields(idx: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pair = np.take(table, idx).view(np.int32).reshape(idx.shape + (2,))
    return (pair[..., 0], pair[..., 1]) if np.little_endian else (pair[..., 1], pair[..., 0])  # pragma: no branch


def _trunc_sum32(m: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Signed products (pre-shifted to F fraction bits at their own exponent) truncated toward zero at the
    group's largest exponent and summed exactly: (int64 sum on 2**(e_max - F), e_max)."""
    e_max = np.maximum.reduce(e, axis=0)
    sh = np.minimum(e_max - e, 31)
    t = np.abs(m) >> sh
    sgn = m >> 31
    t ^= sgn
    t -= sgn
    return np.add.reduce(t, axis=0, dtype=np.int64), e_max.astype(np.int64)


def _fp32_fields(c_bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """fp32 bits -> (int64 signed significand, exponent of its units' place + 23 (zero and subnormals: -126),
    Inf/NaN mask): the fields :func:`~tcemu.numerics.formats.decode` gives, for the fast paths."""
    u = np.asarray(c_bits).astype(np.int64)
    ef = (u >> 23) & 0xFF
    sig = (u & 0x7FFFFF) | ((ef != 0).astype(np.int64) << 23)
    return np.where(u >> 31, -sig, sig), np.maximum(ef, 1) - 127, ef == 0xFF


def _values32(bits: np.ndarray, fmt: str) -> np.ndarray:
    """Exact float32 values of fp16/bf16 bits."""
    f = get_format(fmt)
    return np.asarray(bits).astype(f.container_dtype).view(f.numpy_dtype).astype(np.float32)


def _values64(bits: np.ndarray, fmt: str) -> np.ndarray:
    """Exact float64 values of fp16/bf16 bits."""
    if fmt == "bf16":  # bf16 is the top half of fp32
        return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.asarray(bits).astype(np.uint16).view(np.float16).astype(np.float64)


@dataclass(frozen=True)
class PairwiseTree:
    """CDNA1/CDNA2 fp16/bf16 MFMA: pairwise fp32 sums of ``n_fma`` products, then one fp32 add per group."""

    flush_subnormals: bool = False
    nan_bits: int = AMD_NAN32
    kind: str = "pairwise"
    nan_rule: str = "constant"

    def check(self, p) -> None:
        _check_nan_rule(self.nan_rule)
        if p.input_format not in ("fp16", "bf16") or p.output_format != "fp32":
            raise ValueError(f"tcemu: the pairwise MFMA scheme takes fp16/bf16 -> fp32, got {p.input_format} -> "
                             f"{p.output_format}")
        if p.n_fma & (p.n_fma - 1) or p.k_instr % p.n_fma:
            raise ValueError(f"tcemu: pairwise groups need n_fma a power of two dividing k_instr, got {p.n_fma}, "
                             f"{p.k_instr}")

    def describe(self, p) -> str:
        flush = ", subnormal inputs, c, partial sums and results flushed to zero" if self.flush_subnormals else ""
        return (f"K={p.k_instr}, groups of {p.n_fma} products summed pairwise in fp32 (RNE), each group sum "
                f"added to the fp32 accumulator (RNE){flush}; NaN results {_nan_text(self)}")

    def _flush(self, x: np.ndarray) -> np.ndarray:
        """Subnormals to a zero of their sign (CDNA2), in place where any (rare: one comparison otherwise)."""
        if self.flush_subnormals:
            tiny = np.abs(x) < np.float32(2.0**-126)
            if tiny.any():
                x[tiny] *= np.float32(0)
        return x

    def _tree(self, prods: list[np.ndarray], nans: list | None) -> tuple[np.ndarray, np.ndarray | None]:
        """Pairwise sum of the values and (``nans`` given) the NaN bits it carries, the left half's first."""
        if len(prods) == 1:
            return prods[0], None if nans is None else nans[0]
        m = len(prods) // 2
        (x, xb), (y, yb) = (self._tree(prods[:m], None if nans is None else nans[:m]),
                            self._tree(prods[m:], None if nans is None else nans[m:]))
        z = self._flush(x + y)
        return z, (None if nans is None else binary_nan_bits(x, xb, y, yb, y_first=False))

    def bits(self, a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, p) -> np.ndarray:
        c_all = np.asarray(c_bits).astype(np.uint32)
        out = np.empty_like(c_all)
        for r0 in range(0, len(c_all), _CHUNK):  # (K, chunk) operands stay in cache
            rs = slice(r0, r0 + _CHUNK)
            out[rs] = self._rows(np.asarray(a_bits[rs]), np.asarray(b_bits[rs]), c_all[rs], p)
        return out

    def _rows(self, a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, p) -> np.ndarray:
        a = np.ascontiguousarray(_values32(a_bits, p.input_format).T)  # (K, S)
        b = np.ascontiguousarray(_values32(b_bits, p.input_format).T)
        d = c_bits.view(np.float32).copy()
        track = self.nan_rule == "mmasim_host"
        d_nan = c_bits | np.uint32(0x00400000)  # the accumulator's NaN, quieted
        tiny_in = np.float32(2.0 ** get_format(p.input_format).emin)
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            if self.flush_subnormals:  # inputs and c: subnormals become +0
                a = np.where(np.abs(a) < tiny_in, np.float32(0), a)
                b = np.where(np.abs(b) < tiny_in, np.float32(0), b)
                d = np.where(np.abs(d) < np.float32(2.0**-126), np.float32(0), d)
            prod = a * b  # fp32 rounding of the exact product (exact for fp16; bf16 may overflow or underflow)
            zero = (prod == 0) & ((a == 0) | (b == 0))
            if zero.any():
                prod[zero] = 0  # fma(a, b, +0): an exact zero product gives +0
            prod = self._flush(prod)
            if track:  # fmaf(a, b, 0): b's NaN before a's
                a_nan, b_nan = (operand_nan32(np.asarray(x).astype(np.int64).T, p.input_format)
                                for x in (a_bits, b_bits))
                p_nan = binary_nan_bits(a, a_nan, b, b_nan, y_first=True)
            for k0 in range(0, a.shape[0], p.n_fma):
                group_nans = list(p_nan[k0 : k0 + p.n_fma]) if track else None
                g, g_nan = self._tree(list(prod[k0 : k0 + p.n_fma]), group_nans)
                d_new = self._flush(d + g)
                if track:  # torch's sum + group_sum: the group sum's NaN first
                    d_nan = binary_nan_bits(d, d_nan, g, g_nan, y_first=True)
                d = d_new
        out = d.view(np.uint32).copy()
        nan = np.isnan(d)
        out[nan] = d_nan[nan] if track else self.nan_bits
        return out


@dataclass(frozen=True)
class FusedRoundDown:
    """CDNA3 MFMA: per group, truncated products summed exactly, then sum and c aligned by rounding down."""

    sum_frac_bits: int = 31
    c_frac_bits: int = 24
    fp8_pairs: bool = False
    c_drop_gap: int | None = None
    zero_exp: int | None = -126
    nan_bits: int = AMD_NAN32
    kind: str = "fused_rd"
    nan_rule: str = "constant"

    def check(self, p) -> None:
        _check_nan_rule(self.nan_rule)
        ins = ("tf32", "fp16", "bf16", "e4m3fnuz", "e5m2fnuz")
        if p.input_format not in ins or p.b_format not in ins or p.output_format != "fp32":
            raise ValueError(f"tcemu: the fused round-down MFMA scheme takes {ins} -> fp32, got {p.input_format} "
                             f"x {p.b_format} -> {p.output_format}")
        if p.k_instr % p.n_fma or (self.fp8_pairs and p.n_fma % 2):
            raise ValueError(f"tcemu: n_fma must divide k_instr (and be even with fp8_pairs), got {p.n_fma}")
        if not p.frac_bits <= self.sum_frac_bits <= 40 or self.c_frac_bits > self.sum_frac_bits:
            raise ValueError("tcemu: need frac_bits <= sum_frac_bits <= 40 and c_frac_bits <= sum_frac_bits")

    def describe(self, p) -> str:
        fin = p.input_format + (f" x {p.b_format}" if p.b_format != p.input_format else "")
        s = (f"{fin}, K={p.k_instr}, groups of {p.n_fma}: products truncated to F={p.frac_bits} at their maximum "
             f"exponent, summed exactly; sum and c rounded down to {self.sum_frac_bits} and {self.c_frac_bits} "
             f"fraction bits at max(that, c); fp32 RNE")
        if self.fp8_pairs:
            s += f"; even and odd k summed apart, joined rounding down; c dropped {self.c_drop_gap} below"
        zero = "left out" if self.zero_exp is None else f"at exponent {self.zero_exp}"
        return s + f"; zero factors {zero}; NaN results {_nan_text(self)}"

    def bits(self, a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, p) -> np.ndarray:
        fa, fb = get_format(p.input_format), get_format(p.b_format)
        c_all = np.asarray(c_bits).astype(np.uint32)
        out = np.empty_like(c_all)
        for r0 in range(0, len(c_all), _CHUNK):  # (K, chunk) operands stay in cache
            rs = slice(r0, r0 + _CHUNK)
            ia = np.ascontiguousarray(np.asarray(a_bits[rs]).astype(np.int64).T) >> fa.container_shift  # (K, S)
            ib = np.ascontiguousarray(np.asarray(b_bits[rs]).astype(np.int64).T) >> fb.container_shift
            d = c_all[rs]
            for k0 in range(0, ia.shape[0], p.n_fma):
                d = self._group_fast(ia[k0 : k0 + p.n_fma], ib[k0 : k0 + p.n_fma], d, fa, fb, p.frac_bits)
            out[rs] = d
        return out

    def _group_fast(self, ia, ib, c_bits, fa, fb, frac_bits: int) -> np.ndarray:
        """One group in int32 through packed tables; rows with Inf/NaN or huge products go to :meth:`_group`."""
        lshift = frac_bits - fa.frac_bits - fb.frac_bits  # significands pre-shifted: every alignment a right shift
        if lshift < 0:
            return self._group(ia, ib, c_bits, fa, fb, frac_bits)
        sa, ea = _fields(ia, _packed(fa.name, lshift, self.zero_exp))
        sb, eb = _fields(ib, _packed(fb.name, 0, self.zero_exp))
        m = sa * sb  # signed, |m| < 2**(frac_bits + 2)
        e = ea + eb
        if self.fp8_pairs:
            s0, e0 = _trunc_sum32(m[0::2], e[0::2])
            s1, e1 = _trunc_sum32(m[1::2], e[1::2])
            e_s = np.maximum(e0, e1)
            total = (s0 >> np.minimum(e_s - e0, 62)) + (s1 >> np.minimum(e_s - e1, 62))  # rounded down (floor)
        else:
            total, e_s = _trunc_sum32(m, e)
        c_sig, c_e, c_special = _fp32_fields(c_bits)
        e_max = np.maximum(e_s, c_e)  # zero and subnormal c at -126
        s_al = (total << (self.sum_frac_bits - frac_bits)) >> np.minimum(e_max - e_s, 62)  # floor
        c_al = (c_sig << (self.c_frac_bits - 23)) >> np.minimum(e_max - c_e, 62)  # floor
        if self.c_drop_gap is not None:
            c_al = np.where(c_e < e_max - self.c_drop_gap, 0, c_al)
        out_sum = s_al + (c_al << (self.sum_frac_bits - self.c_frac_bits))  # |out_sum| < 2**40: exact in float64
        with np.errstate(over="ignore"):  # (the slow rows' sentinel exponents; replaced below)
            out = np.ldexp(out_sum.astype(np.float64), e_max - self.sum_frac_bits).astype(np.float32)
        out = out.view(np.uint32)  # one rounding to fp32, nearest even; out_sum = 0 gives +0
        slow = (e_s >= 125) | c_special  # Inf/NaN inputs (sentinel exponents), products near 2^128, Inf/NaN c
        if np.any(slow):
            rows = np.nonzero(slow)[0]
            out[rows] = self._group(ia[:, rows], ib[:, rows], c_bits[rows], fa, fb, frac_bits)
        return out

    def _group(self, ia, ib, c_bits, fa, fb, frac_bits: int) -> np.ndarray:
        na, sa, ea, ca = decode_table(fa.name)
        nb, sb, eb, cb = decode_table(fb.name)
        cla, clb = ca[ia], cb[ib]
        if self.zero_exp is not None:
            ea = np.where(ca == ZERO, self.zero_exp, ea)
            eb = np.where(cb == ZERO, self.zero_exp, eb)
        m = sa[ia] * sb[ib]  # exact products, value m * 2**(e - fa.frac_bits - fb.frac_bits)
        e = ea[ia] + eb[ib]
        if self.zero_exp is None:
            e = np.where(m == 0, -(1 << 20), e)
        neg = na[ia] ^ nb[ib]
        base = fa.frac_bits + fb.frac_bits
        c_neg, c_sig, c_e, c_cls = decode(c_bits, "fp32")
        if self.fp8_pairs:
            s0, e0 = self._trunc_sum(m[0::2], e[0::2], neg[0::2], base, frac_bits)
            s1, e1 = self._trunc_sum(m[1::2], e[1::2], neg[1::2], base, frac_bits)
            e_s = np.maximum(e0, e1)
            total = (s0 >> np.minimum(e_s - e0, 62)) + (s1 >> np.minimum(e_s - e1, 62))  # rounded down (floor)
        else:
            total, e_s = self._trunc_sum(m, e, neg, base, frac_bits)
        e_c = np.where(c_cls == FINITE, c_e, -126)  # zero and subnormal c at -126 (fp32 emin)
        e_max = np.maximum(e_s, e_c)
        lift = self.sum_frac_bits - frac_bits
        s_al = (total << lift) >> np.minimum(e_max - e_s, 62)  # floor on 2**(e_max - sum_frac_bits)
        c_signed = np.where(c_neg, -c_sig, c_sig)
        c_al = (c_signed << (self.c_frac_bits - 23)) >> np.minimum(e_max - e_c, 62)  # floor on 2**(e_max - c_frac)
        if self.c_drop_gap is not None:
            c_al = np.where(e_c < e_max - self.c_drop_gap, 0, c_al)
        out_sum = s_al + (c_al << (self.sum_frac_bits - self.c_frac_bits))
        out = encode(out_sum < 0, np.abs(out_sum), e_max - self.sum_frac_bits, "fp32", Rounding.RNE)
        # special values: IEEE sum of the (exact) products and c; else products beyond fp32's range give Inf
        nan = (cla == NAN).any(0) | (clb == NAN).any(0) | (c_cls == NAN)
        nan |= ((cla == INF) & (clb == ZERO)).any(0) | ((cla == ZERO) & (clb == INF)).any(0)
        inf_p = (cla == INF) | (clb == INF)
        pos = (inf_p & ~neg).any(0) | ((c_cls == INF) & ~c_neg)
        negi = (inf_p & neg).any(0) | ((c_cls == INF) & c_neg)
        big = ~inf_p & (cla == FINITE) & (clb == FINITE) & (bit_length(m) - 1 - base + e >= 128)
        pos_big, neg_big = (big & ~neg).any(0), (big & neg).any(0)
        special = pos | negi
        nan |= pos & negi
        nan |= ~special & pos_big & neg_big
        out = np.where(~special & pos_big, np.uint32(0x7F800000), out)
        out = np.where(~special & neg_big, np.uint32(0xFF800000), out)
        out = np.where(pos & ~negi, np.uint32(0x7F800000), out)
        out = np.where(negi & ~pos, np.uint32(0xFF800000), out)
        nan_out = (fused_group_nan_bits(ia, ib, c_bits, fa.name, fb.name) if self.nan_rule == "mmasim_host"
                   else np.uint32(self.nan_bits))
        return np.where(nan, nan_out, out).astype(np.uint32)

    @staticmethod
    def _trunc_sum(m, e, neg, base: int, frac_bits: int):
        """Products truncated toward zero on 2**(e_max - frac_bits), e_max their largest exponent; exact sum."""
        e_max = np.maximum.reduce(e, axis=0)
        t = (m << frac_bits) >> np.clip(base + e_max - e, 0, 62)
        return np.add.reduce(np.where(neg, -t, t), axis=0), e_max


@dataclass(frozen=True)
class ExactGroupRound:
    """The toolbox's CDNA1 model (MI100MC, ``correct_rounding = 1``): each group of ``n_fma`` products and the
    accumulator summed exactly and rounded once to fp32, to nearest even; subnormals kept, products unlimited.

    An exact zero sum is +0 and a nonzero sum that rounds to zero keeps its sign (assumed: the toolbox's MATLAB
    does not pin them down). Runs in float64 where every partial sum is exact (:meth:`_group_fast`), else on
    integers (:meth:`_group`).
    """

    nan_bits: int = AMD_NAN32
    kind: str = "exact_group"

    def check(self, p) -> None:
        if p.input_format not in ("fp16", "bf16") or p.output_format != "fp32" or p.k_instr % p.n_fma:
            raise ValueError(f"tcemu: the exact-group scheme takes fp16/bf16 -> fp32 with n_fma dividing k_instr, "
                             f"got {p.input_format} -> {p.output_format}, {p.n_fma}, {p.k_instr}")

    def describe(self, p) -> str:
        return (f"K={p.k_instr}, each group of {p.n_fma} products and the accumulator summed exactly, rounded once "
                f"to fp32 (RNE); NaN results {self.nan_bits:#x}")

    def bits(self, a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, p) -> np.ndarray:
        f = get_format(p.input_format)
        c_all = np.asarray(c_bits).astype(np.uint32)
        out = np.empty_like(c_all)
        for r0 in range(0, len(c_all), _CHUNK):
            rs = slice(r0, r0 + _CHUNK)
            a_kt = np.ascontiguousarray(np.asarray(a_bits[rs]).T)  # (K, chunk)
            b_kt = np.ascontiguousarray(np.asarray(b_bits[rs]).T)
            with np.errstate(invalid="ignore", over="ignore"):
                prod = _values64(a_kt, f.name) * _values64(b_kt, f.name)  # exact: <= 22-bit significands
            d = c_all[rs]
            for k0 in range(0, prod.shape[0], p.n_fma):
                d = self._group_fast(prod[k0 : k0 + p.n_fma], a_kt[k0 : k0 + p.n_fma], b_kt[k0 : k0 + p.n_fma],
                                     d, f)
            out[rs] = d
        return out

    def _group_fast(self, prod: np.ndarray, a_kt, b_kt, c_bits: np.ndarray, f) -> np.ndarray:
        """One group in float64: c and the exact products summed in order, each addition checked exact (its
        TwoSum error is zero), so the float64 sum is the exact sum and one cast rounds it once to fp32 (RNE);
        rows with an inexact step, Inf or NaN (a NaN error) go to :meth:`_group`."""
        inexact = np.zeros(c_bits.shape, bool)
        with np.errstate(invalid="ignore", over="ignore"):
            s = c_bits.view(np.float32).astype(np.float64)
            for t in prod:
                x = s
                s = x + t
                z = s - x
                inexact |= ((x - (s - z)) + (t - z)) != 0
            out = np.where(s == 0, 0.0, s).astype(np.float32).view(np.uint32)  # an exact zero sum is +0
        if inexact.any():
            rows = np.nonzero(inexact)[0]
            out[rows] = self._group(a_kt[:, rows].astype(np.int64), b_kt[:, rows].astype(np.int64), c_bits[rows], f)
        return out

    def _group(self, ia, ib, c_bits, f) -> np.ndarray:
        neg_t, sig_t, e_t, cls_t = decode_table(f.name)
        m = sig_t[ia] * sig_t[ib]
        m = np.where(neg_t[ia] ^ neg_t[ib], -m, m)
        q = e_t[ia] + e_t[ib] - 2 * f.frac_bits  # value = m * 2**q
        c_neg, c_sig, c_e, c_cls = decode(c_bits, "fp32")
        mc = np.where(c_neg, -c_sig, c_sig)
        qc = c_e - 23
        terms = np.concatenate([m, mc[None]])  # (n + 1, S)
        qs = np.concatenate([q, qc[None]])
        live = (terms != 0) & (qs < 1 << 11)  # nonzero finite terms (Inf/NaN: sig 0 or flagged below)
        big = 1 << 30
        q_lo = np.min(np.where(live, qs, big), axis=0)
        top = np.max(np.where(live, qs + bit_length(np.abs(terms)), -big), axis=0)
        fast = (top - q_lo <= 49) | ~live.any(0)  # the sum stays below 2**53 (encode reads its bit length)
        q_lo = np.where(live.any(0), q_lo, 0)
        sh = np.where(live, qs - q_lo, 0)
        total = np.where(fast, (terms << np.clip(sh, 0, 62)).sum(axis=0), 0)
        out = encode(total < 0, np.abs(total), q_lo, "fp32", Rounding.RNE)
        for j in np.nonzero(~fast)[0]:  # a span beyond int64: Python integers, compressed with a sticky bit
            lo = int(q_lo[j])
            exact = sum(int(t) << int(s - lo) for t, s, ok in zip(terms[:, j], qs[:, j], live[:, j]) if ok)
            mag, qq = abs(exact), lo
            extra = max(mag.bit_length() - 52, 0)
            if extra:
                mag, qq = (mag >> extra) | int(mag & ((1 << extra) - 1) != 0), lo + extra  # odd: exact for RNE at 24
            out[j] = encode(np.array([exact < 0]), np.array([mag]), np.array([qq]), "fp32", Rounding.RNE)[0]
        # Inf and NaN as the IEEE sum of the products and c
        ca, cb = cls_t[ia], cls_t[ib]
        negp = neg_t[ia] ^ neg_t[ib]
        nan = (ca == NAN).any(0) | (cb == NAN).any(0) | (c_cls == NAN)
        nan |= ((ca == INF) & (cb == ZERO)).any(0) | ((ca == ZERO) & (cb == INF)).any(0)
        inf_p = (ca == INF) | (cb == INF)
        pos = (inf_p & ~negp).any(0) | ((c_cls == INF) & ~c_neg)
        negi = (inf_p & negp).any(0) | ((c_cls == INF) & c_neg)
        nan |= pos & negi
        out = np.where(pos, np.uint32(0x7F800000), out)
        out = np.where(negi, np.uint32(0xFF800000), out)
        return np.where(nan, np.uint32(self.nan_bits), out).astype(np.uint32)
