"""Differential check of tcemu.numerics against MMA-Sim, every output bit, per (arch, instruction, qualifier).

MMA-Sim (microsoft/MMA-Sim @ c785138, needs only torch) is run from a throwaway checkout given by ``--mmasim``;
none of its code is part of tcemu. Every case MMA-Sim models (its qualifier lists ``mmasim/isa/nv_ptx/*.py`` and
``mmasim/isa/amd.py``; ``wgmma`` / ``tcgen05`` from their shape checks) is mapped to tcemu's preset by
:data:`ARCH_MAP` and :func:`tcemu_key`; a case :func:`tcemu.numerics.get_preset` refuses is reported
"not modelled by tcemu". Each case runs ``--samples`` dot products (whole MMA tiles) drawn from random and
adversarial families (:data:`FAMILIES`) through MMA-Sim and through tcemu with ``variant="mmasim"`` and the default
``variant="measured"``, and compares the output bits. Disagreements are grouped by class with the first
reproducer of each (a, b, c and scale bits).

    git --git-dir=<mirror of microsoft/MMA-Sim> archive c785138 | tar -x -C /tmp/mmasim
    PYTHONPATH=src python benchmarks/mmasim_diff.py --mmasim /tmp/mmasim --samples 1000000 --workers 64

MMA-Sim is a scalar Python loop (about 1.4e4 dot products per second per core): 1e6 samples for each of the
~145 cases tcemu models is about 3 core-hours. Output: ``--out``.csv (``tcemu._results`` rows: per case and variant, samples, agreements, disagreements and
their classes, MMA-Sim errors) and ``--out``.md (the table, every class of disagreement with its first
reproducer, and what decides it); the stored run is benchmarks/results/cpu/numerics/mmasim_diff.{csv,md}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: MMA-Sim architecture -> tcemu arch name (a name get_preset does not know is reported as not modelled)
ARCH_MAP = {"Volta": "v100", "Turing": "turing", "Ampere": "a100", "Ada Lovelace": "ada", "Hopper": "h100",
            "Blackwell": "b200", "RTX Blackwell": "sm120", "CDNA1": "cdna1", "CDNA2": "cdna2", "CDNA3": "cdna3"}
#: MMA-Sim / PTX / AMD type name -> tcemu format name
TYPE_MAP = {"f64": "fp64", "f32": "fp32", "tf32": "tf32", "xf32": "xf32", "f16": "fp16", "bf16": "bf16",
            "e4m3": "e4m3", "e5m2": "e5m2", "e2m1": "e2m1", "e2m3": "e2m3", "e3m2": "e3m2", "fp8": "fp8",
            "bf8": "bf8", "ue8m0": "ue8m0", "ue4m3": "ue4m3"}  # fp8, bf8: AMD float8_e4m3fnuz, e5m2fnuz
#: (exponent bits, fraction bits, finite_only, e4m3-style NaN only at all ones) of the generated element formats
ENC = {"fp64": (11, 52, False, False), "fp32": (8, 23, False, False), "tf32": (8, 23, False, False),
       "xf32": (8, 23, False, False), "fp16": (5, 10, False, False), "bf16": (8, 7, False, False),
       "e4m3": (4, 3, False, True), "e5m2": (5, 2, False, False), "e2m1": (2, 1, True, False),
       "e2m3": (2, 3, True, False), "e3m2": (3, 2, True, False), "fp8": (4, 3, True, False),
       "bf8": (5, 2, True, False)}
FAMILIES = ("random", "finite", "cancel", "zeros", "subnormal", "special", "scales")


@dataclass(frozen=True)
class Case:
    """One MMA-Sim instruction: its class ("mma", "mma_block_scale", "wgmma", "tcgen05mma", ..., "mfma")."""

    kind: str
    arch: str
    qualifier: str
    m: int
    n: int
    k: int
    a: str
    b: str
    c: str
    d: str
    scale: str | None = None
    block: int = 0

    @property
    def name(self) -> str:
        return f"{self.arch}/{self.kind}.{self.qualifier}"


def enumerate_cases(mmasim_path: str) -> list[Case]:
    """Every case MMA-Sim's ISA lists (imported from the checkout at ``mmasim_path``)."""
    sys.path.insert(0, mmasim_path)
    from mmasim.isa import amd
    from mmasim.isa.nv_ptx import nv_mma

    out: list[Case] = []
    for arch, quals in nv_mma.arch_mma_qualifiers.items():
        for q in quals:
            shape, d, a, b, c = q.split(".")
            m, n, k = _mnk(shape)
            out.append(Case("mma", arch, q, m, n, k, a, b, c, d))
    for arch, quals in nv_mma.arch_mma_block_scale_qualifiers.items():
        for q in quals:
            shape, blk, d, a, b, c, s = q.split(".")
            m, n, k = _mnk(shape)
            out.append(Case("mma_block_scale", arch, q, m, n, k, a, b, c, d, s, int(blk[5:])))
    # wgmma (nv_wgmma.py shape checks): k8 tf32 f32; k16 f16 f32/f16, bf16 f32; k32 e4m3/e5m2 pairs f32/f16
    wg = [("8", "f32", "tf32", "tf32"), ("16", "f32", "f16", "f16"), ("16", "f16", "f16", "f16"),
          ("16", "f32", "bf16", "bf16")]
    wg += [("32", d, a, b) for d in ("f32", "f16") for a in ("e5m2", "e4m3") for b in ("e5m2", "e4m3")]
    for k, d, a, b in wg:
        out.append(Case("wgmma", "Hopper", f"m64n8k{k}.{d}.{a}.{b}", 64, 8, int(k), a, b, d, d))
    # tcgen05.mma (nv_tcgen05mma.py): k8 tf32; k16 f16/bf16 pairs f32, f16 f16; k32 e5m2/e4m3/e2m1 pairs f32/f16
    tc = [("8", "f32", "tf32", "tf32")] + [("16", "f32", a, b) for a in ("f16", "bf16") for b in ("f16", "bf16")]
    tc += [("16", "f16", "f16", "f16")]
    f8 = ("e5m2", "e4m3", "e2m1")
    tc += [("32", d, a, b) for d in ("f32", "f16") for a in f8 for b in f8]
    for k, d, a, b in tc:
        out.append(Case("tcgen05mma", "Blackwell", f"m64n8k{k}.{d}.{a}.{b}", 64, 8, int(k), a, b, d, d))
    bs = [("32", "block32", a, b, "ue8m0") for a in f8 for b in f8]
    bs += [("64", blk, "e2m1", "e2m1", s) for s, blk in (("ue8m0", "block32"), ("ue8m0", "block16"),
                                                        ("ue4m3", "block16"))]
    for k, blk, a, b, s in bs:
        out.append(Case("tcgen05mma_block_scale", "Blackwell", f"m128n8k{k}.{blk}.f32.{a}.{b}.{s}", 128, 8, int(k),
                        a, b, "f32", "f32", s, int(blk[5:])))
    for arch, quals in amd.arch_mfma_qualifiers.items():
        for q in quals:
            inst = amd.mfma(arch, q)  # noqa: the ISA class only parses the qualifier
            names = {v: k for k, v in _amd_types().items()}
            ta, tb, td = (names[t] for t in (inst.a_type, inst.b_type, inst.d_type))
            if q.endswith("xf32"):
                ta = tb = "xf32"
            out.append(Case("mfma", arch, q, inst.m, inst.n, inst.k, ta, tb, td, td))
    return list(dict.fromkeys(out))  # RTX Blackwell's list repeats the Ada FP8 qualifiers


def _amd_types():
    from mmasim.isa.common import amd_torch_dtype

    return {k: v for k, v in amd_torch_dtype.items() if k != "xf32"}


def _mnk(shape: str) -> tuple[int, int, int]:
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def tcemu_key(case: Case) -> tuple[str, str, str, str]:
    """(arch, instruction, input format, output format) for :func:`tcemu.numerics.get_preset`."""
    arch = ARCH_MAP[case.arch]
    fa, fb = TYPE_MAP[case.a], TYPE_MAP[case.b]
    fin = fa if fa == fb else f"{fa}.{fb}"
    fout = TYPE_MAP[case.d] if case.c == case.d else f"{TYPE_MAP[case.d]}.{TYPE_MAP[case.c]}"  # d.c: c fp16, d fp32
    if case.kind == "mma":
        instr = f"mma.sync.m{case.m}n{case.n}k{case.k}"
    elif case.kind == "wgmma":
        instr = "wgmma"
    elif case.kind == "tcgen05mma":
        instr = "tcgen05"
    elif case.kind in ("mma_block_scale", "tcgen05mma_block_scale"):
        base = "mma.sync" if case.kind == "mma_block_scale" else "tcgen05"
        instr = f"{base}.{'mxf8f6f4' if case.k == 32 else 'mxf4nvf4'}"
        fin += f":{TYPE_MAP[case.scale]}x{case.block}"
    else:  # AMD
        instr = f"v_mfma_{case.qualifier}"
    return arch, instr, fin, fout


def resolve(case: Case, variant: str):
    """tcemu's preset for a case, or the reason there is none."""
    from tcemu.numerics import get_preset

    try:
        key = tcemu_key(case)
        p = get_preset(*key, variant=variant)
    except (ValueError, KeyError) as exc:
        return None, f"not modelled by tcemu: {str(exc).splitlines()[0][:160]}"
    if p.k_instr != case.k:
        return None, f"not modelled by tcemu: preset K={p.k_instr}, MMA-Sim K={case.k}"
    return p, None


# ---------------------------------------------------------------- inputs


def _width(fmt: str) -> int:
    e, f, *_ = ENC[fmt]
    return 1 + e + f


def _rand_bits(rng, width: int, shape):
    """Uniform bit patterns of ``width`` bits (fp64's as int64 with the sign in bit 63)."""
    if width == 64:
        return rng.integers(0, 1 << 63, shape) ^ (rng.integers(0, 2, shape) << 63)
    return rng.integers(0, 1 << width, shape)


def _finite_mask(bits, fmt):
    e, f, finite_only, nan_all_ones = ENC[fmt]
    if fmt in ("fp8", "bf8"):
        return bits != 0x80
    if finite_only:
        return np.ones(bits.shape, bool)
    mag = bits & ((1 << (e + f)) - 1)
    if nan_all_ones:
        return mag != (1 << (e + f)) - 1
    return (mag >> f) != (1 << e) - 1


def _rand_finite(rng, fmt, shape, exp_lo=None, exp_hi=None):
    """Random finite bits of ``fmt``, exponent fields in [exp_lo, exp_hi] if given."""
    e, f, *_ = ENC[fmt]
    top = (1 << e) - 1
    lo = 0 if exp_lo is None else exp_lo
    hi = (top - 1 if not ENC[fmt][2] else top) if exp_hi is None else exp_hi
    ef = rng.integers(lo, hi + 1, shape, dtype=np.int64)
    frac = rng.integers(0, 1 << f, shape, dtype=np.int64)
    sign = rng.integers(0, 2, shape, dtype=np.int64)
    bits = (sign << (e + f)) | (ef << f) | frac
    bad = ~_finite_mask(bits, fmt)
    bits[bad] &= ~np.int64(1)  # e4m3's 0x7F / 0xFF: the largest finite instead
    return bits


def _special(fmt, rng, shape):
    e, f, finite_only, nan_all_ones = ENC[fmt]
    if finite_only:
        return np.where(rng.random(shape) < 0.5, 0, 1 << (e + f)) if fmt in ("fp8", "bf8") else \
            _rand_finite(rng, fmt, shape, (1 << e) - 1, (1 << e) - 1)
    if nan_all_ones:
        return (rng.integers(0, 2, shape) << (e + f)) | ((1 << (e + f)) - 1)
    inf = ((1 << e) - 1) << f
    return (rng.integers(0, 2, shape) << (e + f)) | inf | np.where(rng.random(shape) < 0.5, 0, 1 << (f - 1))


def gen_tile(case: Case, fa, fb, fc, family: str, rng):
    """(A (m, k), B (k, n), C (m, n), scale_A, scale_B) bits (int64) for one tile of ``family``."""
    m, n, k = case.m, case.n, case.k
    ea, eb = ENC[fa][0], ENC[fb][0]
    if family == "random":
        a = _rand_bits(rng, _width(fa), (m, k))
        b = _rand_bits(rng, _width(fb), (k, n))
    elif family == "subnormal":
        a = _rand_finite(rng, fa, (m, k), 0, 1)
        b = _rand_finite(rng, fb, (k, n), 0, 1)
    else:
        a = _rand_finite(rng, fa, (m, k))
        b = _rand_finite(rng, fb, (k, n))
    if family == "cancel":  # pairs of products that cancel, some perturbed in the last bit
        a[:, 1::2] = a[:, 0::2]
        sign_bit = np.array(1 << (_width(fb) - 1), dtype=np.uint64).astype(b.dtype)  # fp64: bit 63 of an int64
        b[1::2, :] = b[0::2, :] ^ sign_bit ^ (rng.random(b[0::2].shape) < 0.25).astype(b.dtype)
    if family == "zeros":  # zero x huge beside ordinary products
        za = rng.random((m, k)) < 0.3
        zb = rng.random((k, n)) < 0.3
        a = np.where(za, rng.integers(0, 2, (m, k)) << (_width(fa) - 1), a)
        b = np.where(zb, rng.integers(0, 2, (k, n)) << (_width(fb) - 1), b)
        top_a = (1 << ea) - (1 if ENC[fa][2] else 2)
        top_b = (1 << eb) - (1 if ENC[fb][2] else 2)
        a = np.where(~za & (rng.random((m, k)) < 0.5), _rand_finite(rng, fa, (m, k), top_a, top_a), a)
        b = np.where(~zb & (rng.random((k, n)) < 0.5), _rand_finite(rng, fb, (k, n), top_b, top_b), b)
        if fa in ("fp8", "bf8"):
            a = np.where(a == 0x80, 0, a)
            b = np.where(b == 0x80, 0, b)
    if family == "special":
        a = np.where(rng.random((m, k)) < 0.03, _special(fa, rng, (m, k)), a)
        b = np.where(rng.random((k, n)) < 0.03, _special(fb, rng, (k, n)), b)
    c = _gen_c(fc, family, rng, (m, n))
    sa = sb = None
    if case.scale:
        nb = k // case.block
        sa, sb = _gen_scales(case.scale, family, rng, (m, nb)), _gen_scales(case.scale, family, rng, (nb, n))
    return a, b, c, sa, sb


def _gen_c(fc, family, rng, shape):
    e, f, *_ = ENC[fc]
    bias = (1 << (e - 1)) - 1
    if family == "random":
        return _rand_bits(rng, _width(fc), shape)
    if family in ("subnormal", "zeros"):  # tiny or zero c: the alignment floors and zero factors show
        tiny = _rand_finite(rng, fc, shape, 0, 2)
        return np.where(rng.random(shape) < 0.3, rng.integers(0, 2, shape) << (_width(fc) - 1), tiny)
    lo, hi = max(1, bias - 40), min((1 << e) - 2, bias + 20)
    c = _rand_finite(rng, fc, shape, lo, hi)
    if family == "special":
        c = np.where(rng.random(shape) < 0.05, _special(fc, rng, shape), c)
    return c


def _gen_scales(sf, family, rng, shape):
    if sf == "ue8m0":
        if family in ("scales", "zeros", "special"):
            pick = np.array([0, 1, 2, 100, 126, 127, 128, 200, 252, 253, 254] + ([255] if family == "special" else []))
            return pick[rng.integers(0, len(pick), shape)]
        return rng.integers(110, 145, shape)
    if family in ("scales", "zeros", "special"):  # ue4m3: unsigned e4m3 (0x7F NaN)
        pick = np.array([0, 1, 2, 7, 8, 0x38, 0x3F, 0x70, 0x7D, 0x7E] + ([0x7F] if family == "special" else []))
        return pick[rng.integers(0, len(pick), shape)]
    return rng.integers(0x30, 0x48, shape)


# ---------------------------------------------------------------- running both


def _torch_tensor(bits, fmt_type: str, torch):
    """MMA-Sim's operand from bits: its dtypes (``nv_torch_dtype``; e2m1 as raw uint8, K=64 packed in pairs)."""
    view = {"fp16": (np.int16, torch.float16), "bf16": (np.int16, torch.bfloat16), "fp32": (np.int32, torch.float32),
            "tf32": (np.int32, torch.float32), "xf32": (np.int32, torch.float32), "fp64": (np.int64, torch.float64),
            "e4m3": (np.uint8, torch.float8_e4m3fn), "e5m2": (np.uint8, torch.float8_e5m2),
            "fp8": (np.uint8, torch.float8_e4m3fnuz), "bf8": (np.uint8, torch.float8_e5m2fnuz),
            "ue8m0": (np.uint8, torch.float8_e8m0fnu), "ue4m3": (np.uint8, torch.float8_e4m3fn)}
    if fmt_type == "e2m1":
        return torch.from_numpy(np.ascontiguousarray(bits.astype(np.uint8)))
    npd, td = view[fmt_type]
    return torch.from_numpy(np.ascontiguousarray(bits.astype(np.uint64).astype(npd))).view(td)


def _mmasim_instance(case: Case):
    from mmasim.simulator import amd, nv_ptx

    cls = {"mma": nv_ptx.mma, "mma_block_scale": nv_ptx.mma_block_scale, "wgmma": nv_ptx.wgmma,
           "tcgen05mma": nv_ptx.tcgen05mma, "tcgen05mma_block_scale": nv_ptx.tcgen05mma_block_scale,
           "mfma": amd.mfma}[case.kind]
    return cls(case.arch, case.qualifier)


def run_mmasim(inst, case: Case, fa, fb, fc, a, b, c, sa, sb, torch) -> np.ndarray:
    """MMA-Sim's D bits (m, n) as uint64."""
    ta, tb = _torch_tensor(a, fa, torch), _torch_tensor(b, fb, torch)
    if case.k == 64 and case.scale:  # packed fp4: element 2i in the low nibble
        ta = torch.from_numpy((a[:, 0::2] | (a[:, 1::2] << 4)).astype(np.uint8))
        tb = torch.from_numpy((b[0::2, :] | (b[1::2, :] << 4)).astype(np.uint8))
    tc = _torch_tensor(c, fc, torch)
    if case.scale:
        d = inst(ta, tb, tc, _torch_tensor(sa, case.scale, torch), _torch_tensor(sb, case.scale, torch))
    else:
        d = inst(ta, tb, tc)
    npd = {torch.float16: np.uint16, torch.float32: np.uint32, torch.float64: np.uint64}[d.dtype]
    ints = {np.uint16: torch.int16, np.uint32: torch.int32, np.uint64: torch.int64}[npd]
    return d.contiguous().view(ints).numpy().astype(npd).astype(np.uint64)


def run_tcemu(p, a, b, c, sa, sb) -> np.ndarray:
    """tcemu's D bits (m, n) for one tile (rows of a against columns of b)."""
    from tcemu.numerics.formats import get_format
    from tcemu.numerics.model import block_fma_bits

    m, k = a.shape
    n = b.shape[1]
    fa, fb = get_format(p.input_format), get_format(p.b_format)
    a_rows = np.repeat(a, n, axis=0).astype(fa.container_dtype)
    b_cols = np.tile(b.T, (m, 1)).astype(fb.container_dtype)
    c_flat = c.reshape(-1).astype(get_format(p.c_in_format).container_dtype)
    scales = (None, None)
    if sa is not None:
        scales = (np.repeat(sa, n, axis=0).astype(np.uint8), np.tile(sb.T, (m, 1)).astype(np.uint8))
    return np.asarray(block_fma_bits(a_rows, b_cols, c_flat, p, *scales)).astype(np.uint64).reshape(m, n)


def classify(x: int, y: int, fc: str) -> str:
    """A disagreement's class from the two output bit patterns (tcemu x, MMA-Sim y) in format ``fc``."""
    e, f, *_ = ENC[fc]
    w = 1 + e + f
    mag = (1 << (w - 1)) - 1
    top = ((1 << e) - 1) << f

    def kind(v):
        if v & mag > top:
            return "nan"
        return "inf" if v & mag == top else ("zero" if v & mag == 0 else "finite")

    kx, ky = kind(x), kind(y)
    if kx == ky == "nan":
        return "NaN bits differ"
    if kx != ky:
        return f"tcemu {kx} vs MMA-Sim {ky}"
    if kx == "zero":
        return "sign of zero"
    if (x ^ y) >> (w - 1):
        return "sign differs"
    d = abs(int(x & mag) - int(y & mag))
    return "1 ulp" if d == 1 else ("<= 2^4 ulp" if d <= 16 else "> 2^4 ulp")


def _hex(v, w):
    return "0x" + format(int(v) & ((1 << w) - 1), f"0{(w + 3) // 4}x")  # (int64 containers: two's complement)


#: which point the default variant departs from MMA-Sim on, and the hardware record that decides it
CAUSES = {
    "zero-factor rule": "tcemu's default leaves zero products out of E_max, MMA-Sim puts a zero at exponent -126. "
                        "Measured on the H100: left out, for tf32 and bf16 (mma.sync, wgmma; docs/hardware/"
                        "h100-zero-factor.json) and, beside a tiny c, for fp16, e4m3 and e5m2 with f32 accumulate "
                        "(docs/hardware/h100-zero-factor-tiny-c.json); fp16 accumulate cannot tell. FP6/FP4, block "
                        "scales and other architectures are unmeasured: there the default extends the H100's rule",
    "c floors": "c = 0 floor and c alignment exponent: measured on the H200 (docs/hardware/h200-probe.json "
                "T24-T26): the toolbox's L and fp16 emin, tcemu's default",
    "zero-factor rule + c floors": "both of the above in one output",
    "NaN order": "where NaN operands meet in one FMA of an fp64 chain: the H100 keeps b's NaN, then the running "
                 "sum's, then a's (docs/hardware/h100-dmma.json, the check's nan_priority inputs: 32,768 of 32,768 "
                 "outputs); MMA-Sim's host fma mostly a's, then b's, then the sum's (tcemu's variant='mmasim')",
}
#: disagreements with MMA-Sim and its failures, explained (cases whose names hold all the substrings)
FINDINGS = {
    ("k32.", "e2m1"): "MMA-Sim's K=32 kinds pass e2m1 as raw uint8 containers: `extract_significand_exponent` rejects "
              "uint8 (AssertionError, counted as MMA-Sim errors), except where its FP64 pre-check finds Inf/NaN "
              "and returns early, having read each container as an integer (0xc as 12, not -2 x ...): the sign and "
              "NaN-vs-Inf classes there. The OCP MX / PTX e2m1 encoding (0xc = -2) supports tcemu",
    ("k64.",): "MMA-Sim's mxf4nvf4 path (`nv_fused_dot_add_with_block_scale`) checks only NaN: an Inf c, or a sum "
            "beyond fp32's range under large scales, reaches `math.trunc(inf)` and raises OverflowError (counted "
            "as MMA-Sim errors, not compared). tcemu gives +-Inf there, as every kind does (overflow to Inf "
            "under RZ measured on the H200, T21; unmeasured for block scales)",
    ("f64",): "NaN bits differ. NVIDIA fp64: tcemu follows the H100's DMMA (docs/hardware/h100-dmma.json: a NaN "
              "operand's payload quieted, 0xfff8000000000000 for invalid operations), as MMA-Sim's libm fma does; "
              "where NaN operands meet in one FMA the H100 keeps b's, then the running sum's, then a's (the check's "
              "nan_priority inputs), MMA-Sim's host fma mostly a's, then b's, then the sum's (tcemu's "
              "variant='mmasim'). AMD fp64: tcemu returns one canonical NaN (0x7ff8000000000000), an assumption. "
              "Finite and infinite outputs agree",
    ("CDNA1", "f16"): "MMA-Sim's fp16 and bf16 paths of CDNA1 and CDNA2 call `pairwise_dot`, which asserts fp32 "
                      "operands, on fp16/bf16 tensors: every input raises (counted as MMA-Sim errors; CDNA2's "
                      "fp16 and bf16 alike). With the operands cast to fp32 first they agree with tcemu "
                      "(benchmarks/results/cpu/numerics/mmasim_diff_schemes.json)",
    ("CDNA",): "NaN bits differ: MMA-Sim's AMD paths compute in host (x86) float arithmetic, whose NaN results are "
               "negative default NaNs or an input's payload; tcemu returns the canonical +qNaN 0x7fc00000, an "
               "assumption (no AMD hardware or document here states the bits). Finite and infinite outputs agree",
}


def _causes(measured, mmasim, got, ref, tile, got_mmasim) -> dict:
    """For the default variant's disagreements: which disputed choice, taken as MMA-Sim's, removes each one."""
    from dataclasses import replace

    bad = got != ref
    if not bad.any() or measured.interleave is not None:
        return {}
    zf = run_tcemu(replace(measured, zero_factor_exp=mmasim.zero_factor_exp), *tile)
    fl = run_tcemu(replace(measured, czero_floor=mmasim.czero_floor, c_exp_floor=mmasim.c_exp_floor), *tile)
    no = run_tcemu(replace(measured, scheme=mmasim.scheme), *tile) if measured.scheme != mmasim.scheme else None
    out = {}
    for i, j in zip(*np.nonzero(bad)):
        if no is not None and no[i, j] == ref[i, j]:
            out[i, j] = "NaN order"
        elif zf[i, j] == ref[i, j]:
            out[i, j] = "zero-factor rule"
        elif fl[i, j] == ref[i, j]:
            out[i, j] = "c floors"
        else:
            out[i, j] = "zero-factor rule + c floors" if got_mmasim[i, j] == ref[i, j] else "other"
    return out


def worker(args) -> dict:
    """One case's share: ``tiles`` tiles from ``seed``; counts per variant and the first reproducer per class."""
    case, mmasim_path, tiles, seed = args
    if mmasim_path not in sys.path:
        sys.path.insert(0, mmasim_path)
    import torch

    torch.set_num_threads(1)
    fa, fb, fc = TYPE_MAP[case.a], TYPE_MAP[case.b], TYPE_MAP[case.d]
    fci = TYPE_MAP[case.c]  # c's format: d's, or fp16 with fp32 d (V100/Turing m8n8k4 .f32.f16.f16.f16)
    params = {v: resolve(case, v)[0] for v in ("mmasim", "measured")}
    inst = _mmasim_instance(case)
    rng = np.random.default_rng(seed)
    fams = [f for f in FAMILIES if f != "scales" or case.scale]
    res = {"samples": 0, "mmasim_errors": 0, "mmasim_error": "", "seconds": 0.0,
           "agree": {v: 0 for v in params}, "classes": {v: {} for v in params}}
    t0 = time.perf_counter()
    for t in range(tiles):
        family = fams[t % len(fams)]
        a, b, c, sa, sb = gen_tile(case, fa, fb, fci, family, rng)
        try:
            ref = run_mmasim(inst, case, fa, fb, fci, a, b, c, sa, sb, torch)
        except Exception as exc:  # MMA-Sim itself fails on this input: recorded, not compared
            res["mmasim_errors"] += 1
            res["mmasim_error"] = res["mmasim_error"] or f"{type(exc).__name__}: {str(exc)[:120]}"
            continue
        res["samples"] += ref.size
        for v, p in params.items():
            got = run_tcemu(p, a, b, c, sa, sb)
            res["agree"][v] += int(np.sum(got == ref))
            if v == "mmasim":
                got_mmasim = got
            causes = (_causes(p, params["mmasim"], got, ref, (a, b, c, sa, sb), got_mmasim) if v == "measured"
                      else {})
            for i, j in zip(*np.nonzero(got != ref)):
                cause = causes.get((i, j), "")
                cls = f"{family}: {cause + ': ' if cause else ''}{classify(int(got[i, j]), int(ref[i, j]), fc)}"
                entry = res["classes"][v].setdefault(cls, {"count": 0})
                entry["count"] += 1
                if "repro" not in entry:
                    w = _width(fc)
                    entry["repro"] = {"a": [_hex(x, _width(fa)) for x in a[i]], "b": [_hex(x, _width(fb)) for x in b[:, j]],
                                      "c": _hex(c[i, j], _width(fci)), "tcemu": _hex(got[i, j], w), "mmasim": _hex(ref[i, j], w)}
                    if sa is not None:
                        entry["repro"]["scale_a"] = [_hex(x, 8) for x in sa[i]]
                        entry["repro"]["scale_b"] = [_hex(x, 8) for x in sb[:, j]]
    res["seconds"] = time.perf_counter() - t0
    return res


def _merge(parts: list[dict]) -> dict:
    out = {"samples": 0, "mmasim_errors": 0, "mmasim_error": "", "seconds": 0.0, "agree": {}, "classes": {}}
    for r in parts:
        out["samples"] += r["samples"]
        out["mmasim_errors"] += r["mmasim_errors"]
        out["mmasim_error"] = out["mmasim_error"] or r["mmasim_error"]
        out["seconds"] += r["seconds"]
        for v, n in r["agree"].items():
            out["agree"][v] = out["agree"].get(v, 0) + n
        for v, classes in r["classes"].items():
            dst = out["classes"].setdefault(v, {})
            for cls, e in classes.items():
                d = dst.setdefault(cls, {"count": 0, "repro": e.get("repro")})
                d["count"] += e["count"]
    return out


def _part_path(parts_dir: str, case: "Case", chunk: int, chunks: int, samples: int, seed: int) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in case.name)
    return Path(parts_dir) / f"{safe}.s{samples}.seed{seed}.{chunk:03d}of{chunks}.json"


def cached_worker(args) -> dict:
    """:func:`worker` with its result kept in ``path`` (read back if another run already wrote it)."""
    path, job = args
    if path is not None and path.exists():
        return json.loads(path.read_text())
    res = worker(job)
    if path is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(res))
        tmp.replace(path)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mmasim", required=True, help="a checkout of microsoft/MMA-Sim (c785138)")
    ap.add_argument("--samples", type=int, default=1_000_000, help="dot products per case (rounded up to tiles)")
    ap.add_argument("--workers", type=int, default=mp.cpu_count())
    ap.add_argument("--chunks", type=int, default=64,
                    help="shares per case, each with its own seed: the results do not depend on --workers")
    ap.add_argument("--parts-dir", default=None,
                    help="keep each share's result here and reuse those already there (a run can stop and resume, "
                         "and machines can share the work: copy their parts into one folder)")
    ap.add_argument("--reverse", action="store_true", help="take the shares in reverse order (a second machine)")
    ap.add_argument("--parts-only", action="store_true", help="compute the shares, write no summary")
    ap.add_argument("--complete-only", action="store_true",
                    help="summarize only the cases whose every share is in --parts-dir (computes nothing)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="only cases whose name contains this text")
    ap.add_argument("--cases-file", default=None, help="only the cases named in this file, one exact name per line")
    ap.add_argument("--out", default="benchmarks/results/cpu/numerics/mmasim_diff.csv",
                    help="the CSV; the markdown summary is written beside it (.md)")
    args = ap.parse_args(argv)
    if args.parts_dir:
        Path(args.parts_dir).mkdir(parents=True, exist_ok=True)
    rows, jobs = [], []
    listed = set(Path(args.cases_file).read_text().split("\n")) - {""} if args.cases_file else None
    for ci, case in enumerate(enumerate_cases(args.mmasim)):  # ci over every case: seeds do not depend on --only
        if args.only not in case.name or (listed is not None and case.name not in listed):
            continue
        p, why = resolve(case, "mmasim")
        if p is None:
            if not args.complete_only:
                rows.append({"case": case.name, "tcemu": "", "status": why})
            continue
        tiles = -(-args.samples // (case.m * case.n))
        shares = [tiles // args.chunks + (w < tiles % args.chunks) for w in range(args.chunks)]
        if args.complete_only and not all(
                _part_path(args.parts_dir, case, w, args.chunks, args.samples, args.seed).exists()
                for w, t in enumerate(shares) if t):
            continue
        for w, t in enumerate(shares):
            if t:
                path = (_part_path(args.parts_dir, case, w, args.chunks, args.samples, args.seed)
                        if args.parts_dir else None)
                jobs.append((len(rows), (path, (case, args.mmasim, t, [args.seed, ci, w]))))
        rows.append({"case": case.name, "tcemu": " ".join(tcemu_key(case)), "status": "compared", "parts": []})
    order = list(reversed(jobs)) if args.reverse else jobs
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for (ri, _), res in zip(order, pool.imap(cached_worker, [j for _, j in order])):
            rows[ri]["parts"].append(res)
    if args.parts_only:
        return 0
    for r in rows:
        if "parts" in r:
            r.update(_merge(r.pop("parts")))
    write(rows, args, time.perf_counter() - t0)
    return 0


UNITS = {"samples": "dot products", "agree": "dot products", "disagree": "dot products",
         "mmasim_errors": "tiles", "classes": "text", "status": "text"}


def result_rows(rows: list[dict]) -> list:
    """tcemu._results rows: per case and variant, samples, agreements, disagreements by class, MMA-Sim errors."""
    from tcemu._results import case as case_text, measurement

    out = []
    for r in rows:
        if r["status"] != "compared":
            out += measurement("mmasim_diff", "tcemu", "", case_text(mmasim=r["case"]), {"status": r["status"]}, UNITS)
            continue
        for v in ("mmasim", "measured"):
            classes = " | ".join(f"{k}: {e['count']}" for k, e in sorted(r["classes"][v].items()))
            values = {"samples": r["samples"], "agree": r["agree"][v], "disagree": r["samples"] - r["agree"][v],
                      "mmasim_errors": r["mmasim_errors"], "classes": classes}
            out += measurement("mmasim_diff", "tcemu", f"variant={v}", case_text(mmasim=r["case"], preset=r["tcemu"]),
                               values, UNITS)
    return out


def write(rows: list[dict], args, wall: float) -> None:
    from tcemu._results import Provenance, write_results

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_results(out.with_suffix(".csv"), result_rows(rows), Provenance.current())
    compared = [r for r in rows if r["status"] == "compared"]
    ran = [r for r in compared if r["samples"]]
    total = sum(r["samples"] for r in compared)
    clean = {v: sum(r["agree"][v] == r["samples"] for r in ran) for v in ("mmasim", "measured")}
    lines = [f"# tcemu vs MMA-Sim @ c785138: every output bit\n",
             f"Command: `{' '.join(sys.argv)}` ({wall:.0f} s wall for this call, {args.workers} workers; "
             f"{sum(r.get('seconds', 0.0) for r in compared) / 3600:.1f} core-hours over every share"
             f"{', shares kept in --parts-dir' if args.parts_dir else ''}).\n",
             f"{len(rows)} MMA-Sim cases; {len(compared)} modelled by tcemu and compared; "
             f"{len(rows) - len(compared)} not modelled by tcemu (listed below). MMA-Sim ran on {len(ran)} of the "
             f"{len(compared)} ({len(compared) - len(ran)} raise on every input: Findings); {total} dot products "
             f"compared. Every output bit agrees in {clean['mmasim']} of the {len(ran)} cases with "
             f"`variant=\"mmasim\"` and in {clean['measured']} with the default.\n",
             "| case | tcemu preset | samples | agree (mmasim) | agree (measured) | MMA-Sim errors |",
             "|---|---|---:|---:|---:|---:|"]
    for r in compared:
        lines.append(f"| {r['case']} | {r['tcemu']} | {r['samples']} | {r['agree']['mmasim']} | "
                     f"{r['agree']['measured']} | {r['mmasim_errors']} |")
    lines.append("\n## Disagreements (first reproducer per class)\n")
    for r in compared:
        for v in ("mmasim", "measured"):
            for cls, e in sorted(r["classes"][v].items()):
                lines.append(f"- {r['case']} variant={v} [{cls}] x{e['count']}: `{json.dumps(e['repro'])}`")
        if r["mmasim_error"]:
            lines.append(f"- {r['case']}: MMA-Sim raised on {r['mmasim_errors']} tiles: {r['mmasim_error']}")
    lines.append("\n## Findings\n")
    lines += [f"- cases named with {' and '.join(f'`{x}`' for x in k)}: {v}" for k, v in FINDINGS.items()
              if any(all(x in r["case"] for x in k) for r in compared)]
    lines.append("\n## What decides each class of the default variant's disagreements\n")
    lines += [f"- {k}: {v}" for k, v in CAUSES.items()]
    lines.append("\n## Not modelled by tcemu\n")
    lines += [f"- {r['case']}: {r['status']}" for r in rows if r["status"] != "compared"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
