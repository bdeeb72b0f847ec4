"""Crafted probe vectors, in families that each decide one question about an instruction.

The families and what they decide: docs/numerics.md, "Test vectors" and "What the probe infers".

A vector is one dot product ``d = sum_k a_k b_k + c`` over the K of one instruction (or of ``nchain``
instructions issued back to back). Families, per case:

- ``blocks``: FPRev-style masks: +B at k=p, -B at k=q (B a power of two 2^28+ times larger than the unit),
  a unit u at every other k, and c in {0, u}. The surviving units say which k share a block with p and q,
  the block order, and whether c enters the first block or is added last. Also run over two chained
  instructions (K_total = 2K): do blocks straddle instruction boundaries?
- ``fbits``: c = ±2^s plus n = 1, 2, 4, 8 tiny terms ±2^(s-j), j = 1..34, and terms of significand 1.5: decides
  F and the alignment rounding (truncation toward zero, floor, round to nearest); all signs (mirrors).
- ``round``: exact sums that fall between output values by 1/4, 1/2, 3/4 ulp (ties to odd and even), both
  signs, with c in the first position or alone: decides the output rounding and the rounding of a final c add.
- ``norm``: test vectors T8-T12 scaled to the format: late vs per-addition normalisation, carry-out bits.
- ``czero``: c = ±0 and products near the bottom of the output range (T24, T24b, T25, T25b families, plus
  random pairs): decides the c = 0 exponent floor; ``cexp``: subnormal c with tiny products (T26).
- ``overflow``: sums just beyond the largest finite output, under each sign (T21 and variants).
- ``special``: NaN payloads (quiet, signalling, both signs) in a, b and c, 0 x Inf, Inf - Inf, -0 handling.
- ``subnormal``: subnormal inputs, subnormal c, subnormal results (T18).
- ``tf32conv`` (tf32 only): fp32 operands whose low 13 bits are nonzero (T23): truncation or rounding.
- ``random``: random vectors of mixed magnitude, for the final consistency check of the inferred model.

Vectors whose values the input format cannot represent are skipped, so every family adapts to the case.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from .cases import Case
from .hypothesis import FMTS, Fmt, encode_value

__all__ = ["Vector", "build_vectors", "pack_diagonal", "FAMILIES"]

FAMILIES = ("blocks", "fbits", "round", "norm", "czero", "cexp", "overflow", "special", "subnormal", "tf32conv",
            "random")


@dataclass
class Vector:
    family: str
    tag: str
    a: list  # K_total input bits
    b: list
    c: int  # c bits (output container)
    nchain: int = 1


class _Builder:
    def __init__(self, case: Case):
        self.case = case
        self.fi: Fmt = FMTS[case.input_format]
        self.fc: Fmt = FMTS[case.output_format]
        self.K = case.K
        self.vectors: list[Vector] = []
        self._cache: dict = {}
        fi = self.fi
        self.in_lo = fi.emin - fi.frac_bits  # smallest subnormal exponent
        self.in_hi = fi.emax

    # exact encodings ----------------------------------------------------------------------------------------
    def enc_in(self, x: float) -> int:
        return encode_value(x, FMTS["fp32"] if self.fi.name == "tf32" else self.fi)

    def enc_c(self, x: float) -> int:
        return encode_value(x, self.fc)

    def prod(self, x: float, normal: bool = True) -> tuple[int, int]:
        """(a, b) bits with a * b == x exactly; prefers normal, balanced operands."""
        key = (x, normal)
        if key not in self._cache:
            try:
                self._cache[key] = self._prod(x, normal)
            except ValueError as e:
                self._cache[key] = e
        r = self._cache[key]
        if isinstance(r, Exception):
            raise r
        return r

    def _prod(self, x: float, normal: bool) -> tuple[int, int]:
        if x == 0:
            return self.enc_in(x), self.enc_in(1.0)
        m, e = math.frexp(abs(x))
        lo, hi = self.fi.emin if normal else self.in_lo, self.in_hi
        cands = sorted(range(lo, hi + 1), key=lambda eb: abs((e - eb) - eb))
        for eb in cands:
            try:
                b = 2.0**eb
                a = x / b
                ab, bb = self.enc_in(a), self.enc_in(b)
                if normal and abs(a) < 2.0**self.fi.emin:
                    continue
                return ab, bb
            except (ValueError, OverflowError):
                continue
        if normal:
            return self._prod(x, normal=False)
        raise ValueError(f"{x!r} is no product of two {self.fi.name} values")

    def add(self, family: str, tag: str, terms: dict, c: float | int, nchain: int = 1, raw_c: bool = False):
        """terms: {k: product value} or {k: (a_bits, b_bits)}; c: value (or bits if raw_c)."""
        K = self.K * nchain
        try:
            zero = self.enc_in(0.0)
            one = self.enc_in(1.0)
            a, b = [zero] * K, [one] * K
            for k, v in terms.items():
                if isinstance(v, tuple):
                    a[k], b[k] = v
                else:
                    a[k], b[k] = self.prod(v)
            cb = int(c) if raw_c else self.enc_c(c)
        except (ValueError, OverflowError):
            return False
        self.vectors.append(Vector(family, tag, a, b, cb, nchain))
        return True

    # product range available in this format
    @property
    def prod_hi(self) -> int:
        return 2 * self.fi.emax

    @property
    def prod_lo_normal(self) -> int:
        return 2 * self.fi.emin


def _blocks(v: _Builder):
    fi, fc = v.fi, v.fc
    # B/u >= 2^28 (so units in B's block are lost for any F <= 26), sums of units exact in the output.
    eB = min(v.prod_hi - 1, fc.emax - 1, 30)
    eu = eB - 28
    while eu > eB - 40 and eu - 1 >= max(2 * fi.emin, fc.emin - fc.frac_bits + 6):
        eu -= 1
        if eB - eu >= 32:
            break
    B, u = 2.0**eB, 2.0**eu
    for nchain in (1, 2):
        K = v.K * nchain
        pairs = [(p, q) for p in range(K) for q in range(K) if p < q]
        if len(pairs) > 600:
            rng = random.Random(7)
            pairs = rng.sample(pairs, 600)
        for p, q in pairs:
            for cu in (0.0, u):
                terms = {k: u for k in range(K)}
                terms[p], terms[q] = B, -B
                v.add("blocks", f"p={p} q={q} c={'u' if cu else 0} chain={nchain}", terms, cu, nchain)
        # no big terms: every unit survives
        v.add("blocks", f"units only chain={nchain}", {k: u for k in range(K)}, u, nchain)


def _fbits(v: _Builder):
    fc = v.fc
    s = min(fc.emax - 2, max(8, 2 * v.fi.emin + 36))  # c = 2^s
    for j in range(1, 36):
        for n in (1, 2, 4, 8):
            if n > v.K - 1:
                continue
            for sc in (1, -1):
                for st in (1, -1):
                    terms = {k: st * 2.0 ** (s - j) for k in range(1, n + 1)}
                    v.add("fbits", f"c={sc}*2^{s} + {n}x{st}*2^{s - j}", terms, sc * 2.0**s)
                    # the big term as a product instead of c (c = 0), in the same group of 4 k as the tiny ones
                    sp = min(s, v.prod_hi - 1, fc.emax - 2)
                    ks = [k for k in (1, 4, 5, 8, 9, 12, 13, 16) if k < v.K][:n]
                    t2 = {k: st * 2.0 ** (sp - j) for k in ks}
                    t2[0] = sc * 2.0**sp
                    if len(ks) == n:
                        v.add("fbits", f"p0={sc}*2^{sp} + {n}x{st}*2^{sp - j} at k={ks}, c=0", t2, 0.0)
            # exact cancellation of the big terms (p0 = -p1 = 2^sq), tiny terms survive iff j <= F: the result is
            # the tiny sum itself, exact in any output format (decides F even for fp16 output)
            sq = min(4, v.prod_hi - 1)
            ks = [k for k in (4, 5, 8, 9, 12, 13, 16, 17) if k < v.K][:n]
            if len(ks) == n:
                for st in (1, -1):
                    t3 = {0: 2.0**sq, 1: -(2.0**sq)}
                    t3.update({k: st * 2.0 ** (sq - j) for k in ks})
                    v.add("fbits", f"p0=-p1=2^{sq} + {n}x{st}*2^{sq - j} at k={ks}, c=0", t3, 0.0)
            # significand 1.5 tiny terms (round-to-nearest at alignment would round them up)
            for st in (1, -1):
                terms = {k: st * 1.5 * 2.0 ** (s - j) for k in range(1, min(n, v.K - 1) + 1)}
                v.add("fbits", f"c=2^{s} + {n}x{st}*1.5*2^{s - j}", terms, 2.0**s)


def _round(v: _Builder):
    fc = v.fc
    p = fc.p if v.case.output_format == "fp16" else 24
    s = min(max(4, 2 * v.fi.emin + p + 3), fc.emax - 3)
    ulp = 2.0 ** (s - p + 1)
    for frac in (0.25, 0.5, 0.75, 1.5, 1.25):
        for odd in (0, 1):
            for sg in (1, -1):
                base = 2.0**s + odd * ulp
                # c carries the base, products the fraction of an ulp (as two terms: ulp/2^k sums)
                v.add("round", f"c={sg}*(2^{s}+{odd}ulp) + {sg}*{frac}ulp", {1: sg * frac * ulp}, sg * base)
                # c alone base, fraction as product at k=0
                v.add("round", f"p0={sg}*{frac}ulp c={sg}*(2^{s}+{odd}ulp)", {0: sg * frac * ulp}, sg * base)
                # everything in products, c = 0
                v.add("round", f"p0={sg}*(2^{s}+{odd}ulp) p1={sg}*{frac}ulp c=0",
                      {0: sg * base, 1: sg * frac * ulp}, 0.0)
                # opposite signs: base - fraction
                v.add("round", f"c={sg}*(2^{s}+{odd}ulp) - {sg}*{frac}ulp", {1: -sg * frac * ulp}, sg * base)
    # carries: n terms of 1.5 (sum has more integer bits) plus a small term on the accumulator grid: tells a
    # 24-bit output from a 14-bit (e8m13) one
    for nb in (4, 8, 16, 31):
        if nb >= v.K:
            continue
        for t in range(6, 16):
            for sg in (1, -1):
                terms = {k: sg * 1.5 for k in range(nb)}
                terms[nb] = sg * 2.0**-t
                v.add("round", f"carry {nb}x1.5 + 2^-{t} sign={sg}", terms, 0.0)
    # T5 / T6b scaled: three products of 1 and c = 1 + small
    for sg in (1, -1):
        v.add("round", f"T5 sign={sg}", {0: sg * 1.0, 1: sg * 1.0, 2: sg * 1.0}, sg * (1 + 2.0 ** -(p - 1) + 2.0 ** -(p - 2)))


def _norm(v: _Builder):
    p = 24 if v.case.output_format == "fp32" else v.fc.p
    sn = 2.0 ** min(max(0, 2 * v.fi.emin + p + 10), v.fc.emax - 4)
    for sg0 in (1, -1):
        sg = sg0 * sn
        # T8: a0 = a1 = 2^-21 + 2^-24 (scaled to output precision), c = 1 - 2^-21
        q = p - 3
        v.add("norm", f"T8 sign={sg0}", {0: sg * (2.0**-q + 2.0**-p), 1: sg * (2.0**-q + 2.0**-p)}, sg * (1 - 2.0**-q))
        # T9: four terms 2^-p, c = 1 - 2^-p
        v.add("norm", f"T9 sign={sg0}", {k: sg * 2.0**-p for k in range(4)}, sg * (1 - 2.0**-p))
        # T10: 1 - 2^-p*1 ... exact cancellation to zero
        v.add("norm", f"T10 sign={sg0}", {0: sg * 1.0, 1: -sg * 2.0**-p}, sg * (-1 + 2.0**-p))
        # T11: carry-out bits
        v.add("norm", f"T11 sign={sg0}", {0: sg * 1.0, 1: sg * 1.5, 2: sg * 1.75, 3: sg * 1.875}, sg * 1.875)
        # T12: monotonicity pair
        v.add("norm", f"T12a sign={sg0}", {k: sg * 2.0**-p for k in range(4)}, sg * (1 - 2.0**-p))
        v.add("norm", f"T12b sign={sg0}", {k: sg * 2.0**-p for k in range(4)}, sg * 1.0)
        # cancellation then small terms: normalisation after cancellation
        for j in range(1, 12):
            v.add("norm", f"cancel j={j} sign={sg0}", {0: sg * 1.0, 1: -sg * (1 - 2.0**-j), 2: sg * 2.0 ** -(p + j - 2)},
                  sg * 2.0 ** -(p + 1))
    # T13 (Valpey) in fp16
    if v.fi.name == "fp16" and v.case.output_format == "fp32":
        x = 1.9990234375
        v.add("norm", "T13", {0: x * 2**-9 * x * 2**-1, 1: x * 2**-1 * x * 2**-1}, float(np.float32(1.0021368265151978 * 2**15)))


def _czero(v: _Builder, rng: random.Random):
    fc, fi = v.fc, v.fi
    # output subnormal range bottom: fp32 2^-149, fp16 2^-24
    bot = fc.emin - fc.frac_bits
    for sgn0 in (0.0, -0.0):
        # two-term pairs around the bottom (T24 family): p1 = 2^e1, p2 = -2^(e1-d)*(1..), c = 0
        for e1 in range(bot - 6, fc.emin + 14):
            for d in (1, 2, 3, 4, 5, 6, 8, 10, 12):
                for sig2 in (1.0, 1.5, 1.75):
                    v.add("czero", f"c={sgn0} p0=2^{e1} p1=-{sig2}*2^{e1 - d}", {0: 2.0**e1, 1: -sig2 * 2.0 ** (e1 - d)}, sgn0)
        # test vectors T24/T24b/T25/T25b literally (bf16 / fp16)
    if fi.name in ("bf16", "tf32"):
        v.add("czero", "T24", {0: (v.enc_in(2.0**-74), v.enc_in(2.0**-74)), 1: (v.enc_in(-(2.0**-76)), v.enc_in(2.0**-76))}, 0.0)
        v.add("czero", "T24b", {0: (v.enc_in(2.0**-74), v.enc_in(2.0**-74)), 1: (v.enc_in(-(2.0**-78)), v.enc_in(2.0**-79))}, 0.0)
    if fi.name == "fp16" and v.case.output_format == "fp16":
        v.add("czero", "T25", {0: (v.enc_in(2.0**-13), v.enc_in(2.0**-12)), 1: (v.enc_in(2.0**-23), v.enc_in(2.0**-23))}, 0.0)
        v.add("czero", "T25b", {0: (v.enc_in(2.0**-13), v.enc_in(2.0**-12)), 1: (v.enc_in(2.0**-24), v.enc_in(2.0**-23))}, 0.0)
    # random tiny pairs and triples
    for _ in range(300):
        e1 = rng.randint(bot - 8, fc.emin + 12)
        terms = {}
        ks = rng.sample(range(v.K), 3)
        for i, k in enumerate(ks):
            sig = 1 + rng.randrange(8) / 8
            e = e1 - (0 if i == 0 else rng.randint(0, 30))
            terms[k] = rng.choice((1, -1)) * sig * 2.0**e
        v.add("czero", f"random tiny e1={e1}", terms, rng.choice((0.0, -0.0)))


def _cexp(v: _Builder):
    fc = v.fc
    bot = fc.emin - fc.frac_bits
    # T26 family: subnormal c, products around it
    for ce in range(bot, fc.emin):
        for d in range(1, 26, 2):
            for sgn in (1, -1):
                v.add("cexp", f"c=2^{ce} p0=2^{ce - 1} p1={-sgn}*2^{ce - 1 - d}",
                      {0: 2.0 ** (ce - 1), 1: -sgn * 2.0 ** (ce - 1 - d)}, 2.0**ce)
    if v.fi.name == "fp16" and v.case.output_format == "fp16":
        v.add("cexp", "T26", {0: (v.enc_in(2.0**-13), v.enc_in(2.0**-12)), 1: (v.enc_in(-(2.0**-22)), v.enc_in(2.0**-23))}, 2.0**-24)


def _overflow(v: _Builder):
    fc = v.fc
    top = 2.0**fc.emax
    maxf = (2 - 2.0 ** -(fc.p - 1)) * top if v.case.output_format == "fp16" else float(np.finfo(np.float32).max)
    for sg in (1, -1):
        # c = max finite, plus a product of various sizes
        for e in range(fc.emax - 30, fc.emax + 1):
            v.add("overflow", f"c={sg}*max + {sg}*2^{e}", {0: sg * 2.0**e}, sg * maxf)
        v.add("overflow", f"T21 c={sg}*2^emax + p0={sg}*2^emax", {0: sg * top}, sg * top)
        v.add("overflow", f"p0={sg}*2^emax p1={sg}*2^emax c=0", {0: sg * top, 1: sg * top}, 0.0)
        v.add("overflow", f"p0=2^(emax+1) c=0 sign={sg}", {0: sg * 2 * top}, 0.0)
        v.add("overflow", f"p0=2^(emax+1) - 2^(emax+1) c={sg}", {0: 2 * top, 1: -2 * top}, sg * 1.0)
        # fp16 output: between max and the rounding boundary
        if v.case.output_format == "fp16":
            for fr in (0.25, 0.5, 0.75, 1.0, 1.5):
                v.add("overflow", f"c={sg}*max + {fr}ulp", {0: sg * fr * 2.0 ** (fc.emax - fc.frac_bits)}, sg * maxf)
    # no internal overflow (T20)
    big = 2.0 ** min(v.fi.emax, 100)
    v.add("overflow", "T20", {0: (v.enc_in(big), v.enc_in(big)), 1: (v.enc_in(-big), v.enc_in(big))}, 1.0)


def _special(v: _Builder):
    fi, fc = v.fi, v.fc
    ib = 32 if fi.name == "tf32" else fi.exp_bits + fi.frac_bits + 1
    sh = fi.shift
    # NaN patterns of the input format
    if fi.ieee:
        top = ((1 << fi.exp_bits) - 1) << (fi.frac_bits + sh)
        quiet = 1 << (fi.frac_bits - 1 + sh)
        nans = [top | quiet, top | quiet | (1 << sh), top | (1 << sh)]  # qNaN, qNaN+payload, sNaN (lowest payload)
        if fi.name == "tf32":
            nans += [top | 1, top | (1 << 12)]  # payload only in the 13 dropped bits: becomes Inf after truncation
        inf = top
    else:
        nans = [(1 << (ib - 1)) - 1]
        inf = None
    sign = 1 << (ib - 1)
    one = v.enc_in(1.0)
    zero = v.enc_in(0.0)
    for nb in nans:
        for sgn in (0, sign):
            x = nb | sgn
            v.add("special", f"a0=NaN {x:#x}", {0: (x, one)}, 1.0)
            v.add("special", f"b0=NaN {x:#x}", {0: (one, x)}, 1.0)
    # NaN and signed patterns in c
    cw = 32 if v.case.output_format == "fp32" else 16
    ctop = ((1 << fc.exp_bits) - 1) << fc.frac_bits
    cq = 1 << (fc.frac_bits - 1)
    for cn in (ctop | cq, ctop | cq | 1, ctop | 1, ctop | (cq >> 1)):
        for sgn in (0, 1 << (cw - 1)):
            v.add("special", f"c=NaN {cn | sgn:#x}", {}, cn | sgn, raw_c=True)
            v.add("special", f"c=NaN {cn | sgn:#x} p0=1", {0: 1.0}, cn | sgn, raw_c=True)
    cinf = ctop
    for sgn in (0, 1 << (cw - 1)):
        v.add("special", f"c=Inf sign={sgn > 0} p0=1", {0: 1.0}, cinf | sgn, raw_c=True)
    if inf is not None:
        for sa in (0, sign):
            v.add("special", f"0*Inf sa={sa > 0}", {0: (inf | sa, zero)}, 0.0)
            v.add("special", f"Inf*1 + 1 sa={sa > 0}", {0: (inf | sa, one)}, 1.0)
            v.add("special", f"Inf*-Inf sa={sa > 0}", {0: (inf | sa, inf | sign)}, 0.0)
            v.add("special", f"Inf + c=-Inf sa={sa > 0}", {0: (inf | sa, one)}, cinf | (1 << (cw - 1)), raw_c=True)
            v.add("special", f"Inf + c=+Inf sa={sa > 0}", {0: (inf | sa, one)}, cinf, raw_c=True)
        v.add("special", "Inf - Inf in a", {0: (inf, one), 1: (inf | sign, one)}, 0.0)
        v.add("special", "Inf + NaN", {0: (inf, one), 1: (nans[0], one)}, 0.0)
    # signed zeros
    nz = v.enc_in(-0.0)
    for cz in (0.0, -0.0):
        v.add("special", f"all zero c={cz}", {}, cz)
        v.add("special", f"-0*1 c={cz}", {k: (nz, one) for k in range(v.K)}, cz)
        v.add("special", f"1-1 c={cz}", {0: 1.0, 1: -1.0}, cz)
        v.add("special", f"-1+1 c={cz}", {0: -1.0, 1: 1.0}, cz)
    v.add("special", "c=1 p0=-1", {0: -1.0}, 1.0)
    v.add("special", "c=-1 p0=1", {0: 1.0}, -1.0)


def _subnormal(v: _Builder):
    fi, fc = v.fi, v.fc
    lo = v.in_lo
    for e in range(lo, fi.emin):
        for be in (0, 2, fi.emin - lo):
            try:
                x = 2.0**e
                v.add("subnormal", f"a0=2^{e} b0=2^{be}", {0: (v.enc_in(x), v.enc_in(2.0**be))}, 0.0)
                v.add("subnormal", f"a0=2^{e} b0=2^{be} c=1", {0: (v.enc_in(x), v.enc_in(2.0**be))}, 1.0)
                v.add("subnormal", f"a0=-3*2^{e} b0=2^{be}", {0: (v.enc_in(-3 * x) if e + 2 < fi.emin else v.enc_in(-x), v.enc_in(2.0**be))}, 0.0)
            except ValueError:
                pass
    # subnormal c, no products
    bot = fc.emin - fc.frac_bits
    for e in range(bot, fc.emin + 1):
        for sg in (1, -1):
            v.add("subnormal", f"c={sg}*2^{e}", {}, sg * 2.0**e)
            v.add("subnormal", f"c={sg}*3*2^{e}", {}, sg * 3 * 2.0**e)
    # products landing in the output's subnormal range
    for e in range(bot - 2, fc.emin + 2):
        for sg in (1, -1):
            v.add("subnormal", f"p0={sg}*2^{e} c=0", {0: sg * 2.0**e}, 0.0)
            v.add("subnormal", f"p0={sg}*1.5*2^{e} c=0", {0: sg * 1.5 * 2.0**e}, 0.0)


def _tf32conv(v: _Builder):
    if v.fi.name != "tf32":
        return
    one = v.enc_in(1.0)
    for base in (0x3F800000, 0x3F802000, 0x40400000, 0x00800000, 0x00002000):
        for low in (0x1, 0xFFF, 0x1000, 0x1001, 0x1800, 0x1FFF):
            for sgn in (0, 0x80000000):
                x = base | low | sgn
                v.add("tf32conv", f"a0={x:#010x} b0=1", {0: (x, one)}, 0.0)
                v.add("tf32conv", f"a0=1 b0={x:#010x}", {0: (one, x)}, 0.0)


def _random(v: _Builder, rng: random.Random, n: int = 400):
    fi = v.fi
    w = 32 if fi.name == "tf32" else 1 + fi.exp_bits + fi.frac_bits
    for i in range(n):
        a, b = [], []
        for k in range(v.K):
            vals = []
            for _ in range(2):
                if rng.random() < 0.15:
                    vals.append(0)
                    continue
                e = fi.bias + rng.randint(-4, 4)
                m = rng.getrandbits(fi.frac_bits)
                bits = (rng.getrandbits(1) << (fi.exp_bits + fi.frac_bits) | e << fi.frac_bits | m) << fi.shift
                vals.append(bits if w == 32 or bits < (1 << w) else 0)
            a.append(vals[0])
            b.append(vals[1])
        c = rng.choice((0.0, 1.0, -1.0, 3.0, 0.1, -2.0**-10, 100.0))
        c = float(np.float32(c)) if v.case.output_format == "fp32" else float(np.float16(c))
        v.add("random", f"random {i}", {k: (a[k], b[k]) for k in range(v.K)}, c)


def build_vectors(case: Case, seed: int = 0) -> list[Vector]:
    """All probe vectors for one case (a few thousand)."""
    # the same vectors for mma.sync and wgmma of one format pair, so the two paths can be compared directly
    rng = random.Random(f"{seed}:{case.input_format}:{case.output_format}:{case.K}")
    v = _Builder(case)
    _blocks(v)
    _fbits(v)
    _round(v)
    _norm(v)
    _czero(v, rng)
    _cexp(v)
    _overflow(v)
    _special(v)
    _subnormal(v)
    _tf32conv(v)
    _random(v, rng)
    return v.vectors


def pack_diagonal(case: Case, vectors: list[Vector], nchain: int):
    """Tiles holding up to 8 vectors each on the diagonal: A row i = a, B column i = b, C[i, i] = c.

    Returns a (T, nchain, M, K), b (T, nchain, K, N), c (T, M, N) and the (tile, i) of each vector."""
    M, N, K = case.M, case.N, case.K
    per = min(M, N)
    T = max(1, -(-len(vectors) // per))
    zero_in = 0
    a = np.full((T, nchain, M, K), zero_in, case.in_dtype)
    b = np.zeros((T, nchain, K, N), case.in_dtype)
    c = np.zeros((T, M, N), case.out_dtype)
    where = []
    for idx, vec in enumerate(vectors):
        t, i = divmod(idx, per)
        av = np.asarray(vec.a, np.uint64).astype(case.in_dtype).reshape(nchain, K)
        bv = np.asarray(vec.b, np.uint64).astype(case.in_dtype).reshape(nchain, K)
        a[t, :, i, :] = av
        b[t, :, :, i] = bv
        c[t, i, i] = vec.c
        where.append((t, i))
    return a, b, c, where
