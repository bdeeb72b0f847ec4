"""The probe's hypothesis space: an exact, scalar block-FMA with a knob for every disputed choice.

This is deliberately separate from :mod:`tcemu.numerics.model`: the probe must be able to *reject* the
production model, so its hypotheses include variants the model does not implement (floor or round-to-nearest
at alignment, normalisation after every addition, saturation on overflow, flush-to-zero, tf32 conversion by
rounding, any partition of k into blocks, c added first or last). Everything is Python integers: a value is
``sig * 2**exp`` with an integer significand; nothing is ever rounded by a float.

``Hyp`` holds one hypothesis; ``evaluate(h, a_bits, b_bits, c_bits, fin, fout)`` returns the output bits it
predicts for one dot product (any K, chained over instructions of ``h.k_instr``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["Fmt", "FMTS", "Hyp", "evaluate", "decode", "round_bits", "encode_value"]


@dataclass(frozen=True)
class Fmt:
    """Exponent: exp_bits, Mantissa: frac_bits, bias; ``ieee``: Inf/NaN at the top exponent (else OCP fn)."""

    name: str
    exp_bits: int
    frac_bits: int
    bias: int
    ieee: bool = True
    shift: int = 0  # the format sits this far left in its container (tf32 13, e8m13 10)

    @property
    def p(self) -> int:
        return self.frac_bits + 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def emax(self) -> int:
        top = (1 << self.exp_bits) - 1
        return (top - 1 if self.ieee else top) - self.bias

    @property
    def max_sig(self) -> int:
        """Largest significand at emax."""
        full = (1 << self.p) - 1
        return full if self.ieee else full - 1

    @property
    def sign_bit(self) -> int:
        return 1 << (self.exp_bits + self.frac_bits + self.shift)


FMTS = {f.name: f for f in (
    Fmt("fp32", 8, 23, 127), Fmt("fp16", 5, 10, 15), Fmt("bf16", 8, 7, 127), Fmt("tf32", 8, 10, 127, shift=13),
    Fmt("e4m3", 4, 3, 7, ieee=False), Fmt("e5m2", 5, 2, 15), Fmt("e8m13", 8, 13, 127, shift=10),
)}


def decode(bits: int, f: Fmt):
    """-> ("nan"|"inf"|"num", sign, sig, exp, E): value = (-1)^sign * sig * 2^exp; E = the field exponent
    (subnormals: emin). Container bits below ``shift`` are ignored (tf32 conversion is done by the caller)."""
    bits = int(bits) >> f.shift
    s = (bits >> (f.exp_bits + f.frac_bits)) & 1
    e = (bits >> f.frac_bits) & ((1 << f.exp_bits) - 1)
    m = bits & ((1 << f.frac_bits) - 1)
    top = (1 << f.exp_bits) - 1
    if f.ieee and e == top:
        return ("nan" if m else "inf", s, 0, 0, 0)
    if not f.ieee and e == top and m == (1 << f.frac_bits) - 1:
        return ("nan", s, 0, 0, 0)
    if e == 0:
        return ("num", s, m, f.emin - f.frac_bits, f.emin)
    return ("num", s, m | (1 << f.frac_bits), e - f.bias - f.frac_bits, e - f.bias)


def _shift_round(mag: int, sh: int, neg: bool, mode: str) -> int:
    """round(mag / 2**sh) to an integer with ``mode`` (magnitude in, magnitude out; the sign is ``neg``)."""
    if sh <= 0:
        return mag << -sh
    q, r = mag >> sh, mag & ((1 << sh) - 1)
    if r == 0 or mode == "rz":
        return q
    half = 1 << (sh - 1)
    if mode == "rne":
        return q + (r > half or (r == half and q & 1))
    if mode == "rna":
        return q + (r >= half)
    if mode == "ru":
        return q + (not neg)
    if mode == "rd":
        return q + neg
    raise ValueError(mode)


def round_bits(neg: bool, mag: int, exp: int, f: Fmt, mode: str, overflow: str = "inf", ftz: bool = False,
               zero_plus: bool = False) -> int:
    """Bits of ``(-1)^neg * mag * 2^exp`` rounded to format ``f`` with ``mode``.

    overflow "inf": any result beyond the largest finite is Inf (or NaN-free saturation for fn formats);
    "ieee": IEEE rules (RZ, and RD/RU away from the overflow side, stop at the largest finite).
    zero_plus: a nonzero value that rounds to zero gives +0 (else the zero keeps the sign, as in IEEE).
    """
    sign = f.sign_bit if neg else 0
    if mag == 0:
        return sign
    lead = mag.bit_length() - 1 + exp  # floor(log2 |v|)
    e = max(lead, f.emin)
    q = e - f.frac_bits  # quantum of the target binade
    m = _shift_round(mag, q - exp, neg, mode)
    if m >> f.p:  # carried into the next binade
        m >>= 1
        e += 1
    big = e > f.emax or (e == f.emax and m > f.max_sig)
    if big:
        to_max = overflow == "ieee" and (mode == "rz" or (mode == "rd" and not neg) or (mode == "ru" and neg))
        if to_max or not f.ieee:
            return sign | (((f.emax + f.bias) << f.frac_bits | (f.max_sig - (1 << f.frac_bits))) << f.shift)
        return sign | ((((1 << f.exp_bits) - 1) << f.frac_bits) << f.shift)
    if m == 0:
        return 0 if zero_plus else sign
    if m < (1 << f.frac_bits):  # subnormal
        if ftz:
            return 0 if zero_plus else sign
        return sign | (m << f.shift)
    return sign | ((((e + f.bias) << f.frac_bits) | (m - (1 << f.frac_bits))) << f.shift)


def encode_value(x: float, f: Fmt) -> int:
    """Bits of a Python float that must be exactly representable in ``f`` (ValueError otherwise)."""
    import math

    if math.isnan(x):
        raise ValueError("NaN")
    neg = math.copysign(1.0, x) < 0
    if x == 0:
        return f.sign_bit if neg else 0
    if math.isinf(x):
        if not f.ieee:
            raise ValueError("no Inf")
        return (f.sign_bit if neg else 0) | ((((1 << f.exp_bits) - 1) << f.frac_bits) << f.shift)
    mant, ex = math.frexp(abs(x))  # abs(x) = mant * 2^ex, mant in [0.5, 1)
    mag = int(mant * (1 << 60))
    exp = ex - 60
    bits = round_bits(neg, mag, exp, f, "rz")
    st, s, sig, e, _ = decode(bits, f)
    if st != "num" or sig * 2.0 ** e != abs(x):
        raise ValueError(f"{x!r} not representable in {f.name}")
    return bits


# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hyp:
    """One hypothesis about an instruction. Defaults: the model of docs/numerics.md, N = K, F = 25."""

    k_instr: int  # K of one instruction
    blocks: tuple[tuple[int, ...], ...] = ()  # partition of range(k_instr) into blocks, in order; () = one block
    c_where: str = "first"  # "first": c is an addend of the first block; "last": added after all blocks
    frac_bits: int = 25  # F
    align: str = "trunc"  # addend alignment: "trunc" (toward zero), "floor", "rne"
    out_fmt: str = "fp32"  # each block's (and the final) result format: fp32, fp16, e8m13
    out_rnd: str = "rz"  # rounding of each block result
    c_add_rnd: str = "rne"  # with c_where == "last": rounding of the final c add
    czero_floor: int | None = None  # c == 0: E_max >= czero_floor (None: c == 0 simply drops out)
    c_exp_floor: int | None = None  # c aligned with max(true exponent of c, c_exp_floor); None: true exponent
    prod_exp: str = "field"  # product exponent: "field" (subnormal inputs at emin) or "true" (normalised)
    overflow: str = "inf"  # "inf" or "ieee" (RZ saturates at the largest finite)
    norm: str = "late"  # "late": one normalisation per block; "seq": normalise (and truncate) after every add
    nan: int | None = None  # NaN output bits; None: the output format's all-ones canonical NaN
    ftz_in: bool = False  # subnormal a, b, c read as zero
    ftz_out: bool = False  # subnormal results flushed to zero
    tf32_conv: str = "trunc"  # fp32 bits -> tf32: "trunc", "rne", "rna"
    zero_sign: str = "plus"  # an exactly zero sum: "plus" (+0) or "ieee" (-0 when every addend is -0)
    underflow_sign: str = "keep"  # a nonzero result that rounds to zero: "keep" its sign (IEEE) or "plus" (+0)
    extras: dict = field(default_factory=dict, compare=False)

    def with_(self, **kw) -> Hyp:
        return replace(self, **kw)


def _canonical_nan(f: Fmt) -> int:
    return ((1 << (f.exp_bits + f.frac_bits)) - 1) << f.shift | ((1 << f.shift) - 1)


def _tf32_convert(bits: int, mode: str) -> int:
    if mode == "trunc":
        return bits & 0xFFFFE000
    st, s, sig, exp, _ = decode(bits, FMTS["fp32"])
    if st != "num":
        return bits & 0xFFFFE000 if st == "inf" else (bits & 0xFFFFE000) | 0x00400000
    return round_bits(bool(s), sig, exp, FMTS["tf32"], mode, overflow="ieee" if mode != "rna" else "inf")


def _lead(sig: int, exp: int) -> int:
    return sig.bit_length() - 1 + exp


def _align(neg: bool, sig: int, exp: int, g: int, mode: str) -> int:
    """Signed integer multiple of 2^g that the addend (-1)^neg sig 2^exp becomes at alignment."""
    if exp >= g:
        v = sig << (exp - g)
        return -v if neg else v
    sh = g - exp
    if mode == "trunc":
        v = sig >> sh
        return -v if neg else v
    if mode == "floor":
        v = sig >> sh if not neg else -((sig + (1 << sh) - 1) >> sh)
        return v
    if mode == "rne":
        v = _shift_round(sig, sh, neg, "rne")
        return -v if neg else v
    raise ValueError(mode)


def _bfma(addends, c_zero: bool, h: Hyp, fo: Fmt):
    """addends: list of (neg, sig, exp, E) (nonzero, finite). Returns (neg, mag, exp) exact pre-rounding."""
    if not addends:
        return None
    F = h.frac_bits
    if h.norm == "seq":
        acc = 0  # integer multiple of 2^g
        g = None
        for neg, sig, exp, E in addends:
            emax = E if g is None or acc == 0 else max(E, _lead(abs(acc), g))
            gn = emax - F
            if g is not None and acc != 0:
                acc = _align(acc < 0, abs(acc), g, gn, h.align)
            acc += _align(neg, sig, exp, gn, h.align)
            g = gn
        return (acc < 0, abs(acc), g)
    emax = max(a[3] for a in addends)
    if c_zero and h.czero_floor is not None:
        emax = max(emax, h.czero_floor)
    g = emax - F
    s = sum(_align(neg, sig, exp, g, h.align) for neg, sig, exp, E in addends)
    return (s < 0, abs(s), g)


def evaluate(h: Hyp, a_bits, b_bits, c_bits: int, fin: str, fout: str) -> int:
    """Output bits of one dot product ``sum_k a_k b_k + c`` under hypothesis ``h`` (K a multiple of k_instr)."""
    fi, fc = FMTS[fin], FMTS[fout]
    fo = FMTS[h.out_fmt]
    nan = h.nan if h.nan is not None else _canonical_nan(fc)
    a_bits = [int(x) for x in a_bits]
    b_bits = [int(x) for x in b_bits]
    if fin == "tf32":
        a_bits = [_tf32_convert(x, h.tf32_conv) for x in a_bits]
        b_bits = [_tf32_convert(x, h.tf32_conv) for x in b_bits]
    K = len(a_bits)
    blocks = h.blocks or (tuple(range(h.k_instr)),)
    d = int(c_bits)
    for base in range(0, K, h.k_instr):
        prods = []  # per k: ("nan"|"inf"|"num"|"zero", neg, sig, exp, E)
        for k in range(base, base + h.k_instr):
            sa, na, ma, xa, Ea = decode(a_bits[k], fi)
            sb, nb, mb, xb, Eb = decode(b_bits[k], fi)
            neg = bool(na ^ nb)
            if h.ftz_in:
                ma = 0 if sa == "num" and Ea == fi.emin and ma < (1 << fi.frac_bits) else ma
                mb = 0 if sb == "num" and Eb == fi.emin and mb < (1 << fi.frac_bits) else mb
            if sa == "nan" or sb == "nan":
                prods.append(("nan", neg, 0, 0, 0))
            elif sa == "inf" or sb == "inf":
                zero = (sa == "num" and ma == 0) or (sb == "num" and mb == 0)
                prods.append(("nan" if zero else "inf", neg, 0, 0, 0))
            elif ma == 0 or mb == 0:
                prods.append(("zero", neg, 0, 0, 0))
            else:
                sig, exp = ma * mb, xa + xb
                E = Ea + Eb if h.prod_exp == "field" else _lead(ma, xa) + _lead(mb, xb)
                prods.append(("num", neg, sig, exp, E))
        # the accumulator entering this instruction
        sc, nc, mc, xc, Ec = decode(d, fc if base == 0 else fo)
        if h.ftz_in and base == 0 and sc == "num" and mc < (1 << (fc.frac_bits)):
            mc = 0
        cval = (sc, bool(nc), mc, xc, Ec)
        d = _instruction(prods, cval, blocks, base, h, fo, fc, nan)
    return d


def _special(items, nan):
    """items: list of (state, neg). Returns output bits for NaN/Inf, or None if all finite."""
    states = [s for s, _ in items]
    if "nan" in states:
        return "nan"
    infs = {neg for s, neg in items if s == "inf"}
    if len(infs) == 2:
        return "nan"
    if infs:
        return ("inf", infs.pop())
    return None


def _instruction(prods, cval, blocks, base, h: Hyp, fo: Fmt, fc: Fmt, nan: int) -> int:
    sc, cneg, mc, xc, Ec = cval
    items = [(p[0], p[1]) for p in prods] + [(sc, cneg)]
    sp = _special(items, nan)
    inf_bits = (((1 << fo.exp_bits) - 1) << fo.frac_bits) << fo.shift
    if sp == "nan":
        return nan
    if sp is not None and (not fo.ieee or (len(blocks) == 1 and h.c_where == "first")):
        if not fo.ieee:
            return nan
        return (fo.sign_bit if sp[1] else 0) | inf_bits
    # several blocks (or c added last) with an Inf somewhere: Infs propagate block by block, and an Inf from an
    # earlier block (or an overflow) can meet an Inf of the other sign later (-> NaN)
    c_zero = mc == 0
    if not c_zero:
        Ec_al = _lead(mc, xc) if h.c_exp_floor is None else max(_lead(mc, xc), h.c_exp_floor)
        c_add = (cneg, mc, xc, Ec_al)
    all_negzero_c = c_zero and cneg
    cur = None  # (neg, mag, exp) of the running block result, exactly as stored in fo
    cur_bits = None
    first = True
    for blk in blocks:
        infs = {prods[k][1] for k in blk if prods[k][0] == "inf"}
        if first and h.c_where == "first" and sc == "inf":
            infs.add(cneg)
        if cur_bits is not None and decode(cur_bits, fo)[0] == "inf":
            infs.add(bool(decode(cur_bits, fo)[1]))
        if len(infs) == 2:
            return nan
        if infs:
            cur_bits = (fo.sign_bit if infs.pop() else 0) | inf_bits
            first = False
            continue
        adds = []
        negzero = True
        for k in blk:
            st, neg, sig, exp, E = prods[k]
            if st == "num":
                adds.append((neg, sig, exp, E))
            negzero = negzero and neg
        if first and h.c_where == "first":
            cz = c_zero
            if not c_zero:
                adds.insert(0, c_add)
            negzero = negzero and all_negzero_c
        else:
            cz = False
            if cur_bits is not None:
                st, n, s_, x_, E_ = decode(cur_bits, fo)
                if st != "num":  # an earlier block overflowed: finite products cannot change an Inf
                    first = False
                    continue
                if s_:
                    adds.insert(0, (bool(n), s_, x_, _lead(s_, x_) if h.c_exp_floor is None else max(_lead(s_, x_), h.c_exp_floor)))
                    negzero = False
                else:
                    negzero = negzero and bool(n)
                    cz = True
            else:
                cz = True
                negzero = negzero and (h.c_where != "first" or all_negzero_c)
        r = _bfma(adds, cz, h, fo)
        if r is None or r[1] == 0:
            cur_bits = fo.sign_bit if (h.zero_sign == "ieee" and negzero) else 0
        else:
            cur_bits = round_bits(r[0], r[1], r[2], fo, h.out_rnd, h.overflow, h.ftz_out, h.underflow_sign == "plus")
        first = False
    d_bits = cur_bits
    if h.c_where == "last":
        st, n, s_, x_, _ = decode(d_bits, fo)
        if sc == "inf" and st == "inf" and bool(n) != cneg:
            return nan
        if st != "num":
            return d_bits if fo.ieee else nan
        if sc == "inf":
            return (fc.sign_bit if cneg else 0) | ((((1 << fc.exp_bits) - 1) << fc.frac_bits) << fc.shift)
        tot = []
        if s_:
            tot.append((bool(n), s_, x_))
        if mc:
            tot.append((cneg, mc, xc))
        if not tot:
            return (fc.sign_bit if (n and cneg) else 0)
        g = min(t[2] for t in tot)
        v = sum((-(m << (x - g)) if ng else (m << (x - g))) for ng, m, x in tot)
        if v == 0:
            return 0
        return round_bits(v < 0, abs(v), g, fc, h.c_add_rnd, h.overflow, h.ftz_out, h.underflow_sign == "plus")
    # convert fo container to the c/d container (e8m13 lives in fp32 bits already)
    return d_bits


def hyp_from_params(p, k_instr: int | None = None) -> Hyp:
    """The hypothesis equivalent to a :class:`tcemu.numerics.params.MMAParams` (for cross-checks)."""
    K = k_instr or p.k_instr
    if p.interleave is not None:
        period = sum(len(g) for g in p.interleave)
        blocks = tuple(tuple(k for k in range(K) if k % period in g) for g in p.interleave)
        c_where, prod_exp = "last", "true"
    else:
        n = min(p.n_fma, K)
        blocks = tuple(tuple(range(s, s + n)) for s in range(0, K, n))
        c_where, prod_exp = "first", "field"
    rnd = lambda r: None if r is None else str(getattr(r, "value", r))  # noqa: E731
    return Hyp(K, blocks=blocks, c_where=c_where, frac_bits=p.frac_bits, out_fmt=p.output_format,
               out_rnd=rnd(p.output_rounding), c_add_rnd=rnd(p.c_add_rounding) or "rne", czero_floor=p.czero_floor,
               c_exp_floor=p.c_exp_floor, prod_exp=prod_exp, overflow=p.overflow,
               tf32_conv="trunc" if p.tf32_truncate else "rne",
               underflow_sign="plus" if getattr(p, "underflow_sign", "keep") == "positive" else "keep")
