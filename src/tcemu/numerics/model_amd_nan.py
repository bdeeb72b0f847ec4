"""MMA-Sim's NaN results on its host: the NaN bits of the AMD presets' ``variant="mmasim"``.

MMA-Sim (microsoft/MMA-Sim @ c785138) computes its AMD paths in host float arithmetic, so a NaN result carries
whichever NaN that arithmetic yields; no AMD document states the bits (docs/numerics.md, "FMA chains, Turing and
AMD Matrix Cores (literature-based)", its NaN results). Read
from MMA-Sim's code and checked bit for bit against it (benchmarks/mmasim_diff.py) on an x86-64 host with FMA3 and
AVX-512, glibc 2.36 and PyTorch 2.13 (CPU); another host may pick other NaNs where several meet. Every NaN is
carried here at fp32 precision (the result's): an fp16, bf16, tf32 or fp32 NaN keeps its sign and payload with the
quiet bit set (torch's conversions to float64 and back), fnuz fp8's NaN becomes 0x7FC00001, and an invalid
operation (Inf x 0, Inf - Inf) gives x86's default NaN 0xFFC00000 (:data:`HOST_NAN32`).

- FMA chains (fp32, fp64 MFMA): glibc's ``fmaf``/``fma`` (the FMA instruction): see
  :class:`tcemu.numerics.model_fma.FMAChain` with ``nan_rule="propagate"`` and ``nan_order="bad"`` (b's NaN,
  then a's, then the running sum's).
- CDNA3 fused groups (:func:`fused_group_nan_bits`): a group's NaN is the one of the float64 sum
  ``(a.double() * b.double()).sum() + c.double()``. Products: b's NaN before a's in groups of 8 or more (torch's
  vectorised multiply), a's before b's in groups of 4 (its scalar loop). ``sum()``: four partial sums, product k
  in partial ``k % 4`` in increasing k (a partial's NaN before the new product's), then the partials added in
  order 0..3 (the later partial's NaN first); then ``+ c`` (c's NaN first). Products of magnitude >= 2^128 of both
  signs give MMA-Sim's ``float("nan")``, 0x7FC00000 (:data:`PY_NAN32`).
- CDNA1/CDNA2 pairwise groups (:class:`tcemu.numerics.model_amd.PairwiseTree` with :func:`binary_nan_bits`;
  MMA-Sim at c785138 asserts fp32 operands there and raises on fp16/bf16, so these are its bits with the
  assertion off, ``python -O``): products ``fmaf(a, b, 0)`` (b's NaN before a's), tree sums
  ``fmaf(left, 1, right)`` (left's before right's), then ``sum + group_sum`` in torch (the group sum's NaN
  before the accumulator's).
"""

from __future__ import annotations

import numpy as np

from .formats import INF, NAN, ZERO, decode_table, get_format

__all__ = ["HOST_NAN32", "HOST_NAN64", "PY_NAN32", "fused_group_nan_bits", "fused_group_nan_scalar", "operand_nan32",
           "binary_nan_bits"]

HOST_NAN32 = 0xFFC00000  # x86's default NaN ("QNaN indefinite") of an invalid fp32 operation
HOST_NAN64 = 0xFFF8000000000000  # the same in fp64
PY_NAN32 = 0x7FC00000  # Python's float("nan") converted to fp32
_QUIET32 = 0x00400000
_FNUZ_NAN32 = 0x7FC00001  # torch's float of an fnuz fp8 NaN
_LANES = 4  # the partial sums of torch's float64 sum() here
_VECTOR_MUL_FROM = 8  # group sizes whose products take torch's vectorised multiply (b's NaN first)
# classes of a running value: finite, +Inf, -Inf, NaN
_FIN, _PINF, _NINF, _NAN = 0, 1, 2, 3


def operand_nan32(bits: np.ndarray, fmt: str) -> np.ndarray:
    """The fp32 NaN MMA-Sim's torch conversion gives for each NaN pattern of ``fmt`` (the format's own bits,
    container bits ``>> container_shift``); other patterns give meaningless bits."""
    f = get_format(fmt)
    u = np.asarray(bits).astype(np.int64)
    if f.fnuz:
        return np.full(u.shape, _FNUZ_NAN32, np.uint32)
    sign = (u >> (f.width - 1)) & 1
    frac = u & ((1 << f.frac_bits) - 1)
    return ((sign << 31) | 0x7F800000 | _QUIET32 | (frac << (23 - f.frac_bits))).astype(np.uint32)


def _add(xc: np.ndarray, xb: np.ndarray, yc: np.ndarray, yb: np.ndarray, y_first: bool):
    """x + y on classes and NaN bits: a NaN operand's bits (y's first if ``y_first``, else x's); +Inf + -Inf is
    invalid (:data:`HOST_NAN32`). Finite sums cannot overflow here (float64 sums of fp32-range products)."""
    xn, yn = xc == _NAN, yc == _NAN
    bits = np.where(yn & (~xn | y_first), yb, xb)
    inf_cls = np.where((yc == _FIN) | (yc == xc), xc, _NAN)
    cls = np.where(xn | yn, _NAN, np.where(xc == _FIN, yc, inf_cls))
    bits = np.where(~xn & ~yn & (cls == _NAN), np.uint32(HOST_NAN32), bits)
    return cls, bits


def _products(ia, ib, fa: str, fb: str, b_first: bool):
    """Classes and NaN bits of the products a_k b_k: a NaN factor's (b's first if ``b_first``), Inf x 0 invalid."""
    na, _, _, ca = decode_table(fa)
    nb, _, _, cb = decode_table(fb)
    cla, clb = ca[ia], cb[ib]
    an, bn = cla == NAN, clb == NAN
    bits = np.where(bn & (~an | b_first), operand_nan32(ib, fb), operand_nan32(ia, fa))
    inf = (cla == INF) | (clb == INF)
    invalid = inf & ((cla == ZERO) | (clb == ZERO))
    sign_inf = np.where(na[ia] ^ nb[ib], _NINF, _PINF)
    cls = np.where(an | bn | invalid, _NAN, np.where(inf, sign_inf, _FIN))
    bits = np.where(~an & ~bn & invalid, np.uint32(HOST_NAN32), bits)
    return cls, bits


def _fp32_classes(c_bits: np.ndarray):
    """Classes and quieted NaN bits of fp32 accumulator bits."""
    c = np.asarray(c_bits).astype(np.uint32)
    mag = c & np.uint32(0x7FFFFFFF)
    cls = np.where(mag > 0x7F800000, _NAN, np.where(mag == 0x7F800000, np.where(c >> 31, _NINF, _PINF), _FIN))
    return cls, c | np.uint32(_QUIET32)


def fused_group_nan_bits(ia: np.ndarray, ib: np.ndarray, c_bits: np.ndarray, fa: str, fb: str) -> np.ndarray:
    """(n, S) operand bits (the formats' own), (S,) fp32 c bits -> (S,) the NaN MMA-Sim's CDNA3 fused group
    returns where its result is NaN: that of its float64 sum, else (products beyond 2^128 of both signs)
    :data:`PY_NAN32`. Bits of rows whose result is not NaN are meaningless."""
    n = ia.shape[0]
    pc, pb = _products(ia, ib, fa, fb, b_first=n >= _VECTOR_MUL_FROM)
    zero_c = np.zeros(ia.shape[1:], np.int64)
    zero_b = np.zeros(ia.shape[1:], np.uint32)
    total_c, total_b = zero_c, zero_b
    for lane in range(_LANES):
        lc, lb = zero_c, zero_b
        for k in range(lane, n, _LANES):
            lc, lb = _add(lc, lb, pc[k], pb[k], y_first=False)
        total_c, total_b = _add(total_c, total_b, lc, lb, y_first=True)
    cc, cb = _fp32_classes(c_bits)
    out_c, out_b = _add(total_c, total_b, cc, cb, y_first=True)
    return np.where(out_c == _NAN, out_b, np.uint32(PY_NAN32)).astype(np.uint32)


def binary_nan_bits(x: np.ndarray, xb: np.ndarray, y: np.ndarray, yb: np.ndarray, y_first: bool) -> np.ndarray:
    """NaN bits of a host operation on values x and y (a product or a sum, overflow and flushing already in the
    values): a NaN operand's tracked bits (y's first if ``y_first``), else :data:`HOST_NAN32` (Inf x 0,
    Inf - Inf); meaningless where the result is not NaN."""
    xn, yn = np.isnan(x), np.isnan(y)
    return np.where(yn & (~xn | y_first), yb, np.where(xn, xb, np.uint32(HOST_NAN32))).astype(np.uint32)


def fused_group_nan_scalar(a_bits: list[int], b_bits: list[int], c_bits: int, fa: str, fb: str) -> int:
    """One CDNA3 fused group's NaN, element by element (the reference of :func:`fused_group_nan_bits`): the
    first NaN met in MMA-Sim's host evaluation order, :data:`HOST_NAN32` for an invalid step."""

    def kind(bits: int, fmt: str) -> tuple:  # (class, sign, NaN bits)
        neg, _, _, cls = (t[bits] for t in decode_table(fmt))
        nan = int(operand_nan32(np.array([bits]), fmt)[0]) if cls == NAN else 0
        return ({NAN: "nan", INF: "inf", ZERO: "zero"}.get(int(cls), "fin"), -1 if neg else 1, nan)

    def add(x: tuple, y: tuple, y_first: bool) -> tuple:
        if x[0] == "nan" and (y[0] != "nan" or not y_first):
            return x
        if y[0] == "nan":
            return y
        if x[0] == "inf" and y[0] == "inf" and x[1] != y[1]:
            return ("nan", 0, HOST_NAN32)
        return x if x[0] == "inf" else y if y[0] == "inf" else ("fin", 1, 0)

    n = len(a_bits)
    prods = []
    for x, y in zip(a_bits, b_bits):
        ka, kb = kind(int(x), fa), kind(int(y), fb)
        first, second = (kb, ka) if n >= _VECTOR_MUL_FROM else (ka, kb)
        if "nan" in (ka[0], kb[0]):
            prods.append(first if first[0] == "nan" else second)
        elif "inf" in (ka[0], kb[0]):
            prods.append(("nan", 0, HOST_NAN32) if "zero" in (ka[0], kb[0]) else ("inf", ka[1] * kb[1], 0))
        else:
            prods.append(("fin", 1, 0))
    total = ("fin", 1, 0)
    for lane in range(_LANES):
        part = ("fin", 1, 0)
        for p in prods[lane::_LANES]:
            part = add(part, p, y_first=False)
        total = add(total, part, y_first=True)
    c = int(c_bits) & 0xFFFFFFFF
    mag = c & 0x7FFFFFFF
    kc = ("nan", 0, c | _QUIET32) if mag > 0x7F800000 else ("inf", -1 if c >> 31 else 1, 0) if mag == 0x7F800000 \
        else ("fin", 1, 0)
    out = add(total, kc, y_first=True)
    return out[2] if out[0] == "nan" else PY_NAN32
