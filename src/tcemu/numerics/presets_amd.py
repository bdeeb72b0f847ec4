"""Presets of AMD CDNA Matrix Cores (``v_mfma_*``): MI100 (CDNA1, gfx908), MI250 (CDNA2, gfx90a), MI300 (CDNA3,
gfx942), per instruction and format. Literature-based: no hardware data here.

Source (tag ``MMA-Sim``): microsoft/MMA-Sim @ c785138, ``mmasim/isa/amd.py`` (the instructions per
architecture) and ``mmasim/simulator/amd.py`` / ``arithmetic.py`` (how each accumulates), read and restated
as the schemes of :mod:`tcemu.numerics.model_amd` and :mod:`tcemu.numerics.model_fma`:

===================== ===================================================== ====================================
format                CDNA1 / CDNA2                                          CDNA3
===================== ===================================================== ====================================
fp64 (CDNA2+)         chain of fp64 FMAs (RNE)                                same
fp32                  chain of fp32 FMAs (RNE)                                same
xf32 (CDNA3)          --                                                      fused round-down, groups of 4
fp16                  pairwise fp32 tree of 4, then fp32 add (CDNA2: flush)  fused round-down, groups of min(8, K)
bf16                  pairwise of 2 (``_1k``: 4), fp32 add (CDNA2: flush)    fused round-down, groups of min(8, K)
fp8/bf8 (CDNA3)       --                                                      fused round-down, 16, even/odd halves
===================== ===================================================== ====================================

Instruction names are AMD's (``v_mfma_f32_16x16x16f16`` on CDNA1/2, ``v_mfma_f32_16x16x16_f16`` on CDNA3), with
or without the ``v_mfma_`` prefix; ``mfma`` picks the default instruction of the format (:data:`DEFAULT_MFMA`).
The ``_Nb`` (multi-block) forms differ in their M x N tiling only.
"""

from __future__ import annotations

import re
from dataclasses import replace

from .model_amd import ExactGroupRound, FusedRoundDown, PairwiseTree
from .model_amd_nan import HOST_NAN32, HOST_NAN64
from .model_fma import FMAChain
from .params import MMAParams
from .rounding import Rounding

__all__ = ["AMD_ARCHS", "AMD_PRESETS", "DEFAULT_MFMA", "amd_preset", "amd_keys", "canon_amd_arch"]

AMD_ARCHS = {"mi100": "cdna1", "cdna1": "cdna1", "gfx908": "cdna1", "mi250": "cdna2", "mi250x": "cdna2",
             "mi210": "cdna2", "cdna2": "cdna2", "gfx90a": "cdna2", "mi300": "cdna3", "mi300x": "cdna3",
             "mi300a": "cdna3", "cdna3": "cdna3", "gfx942": "cdna3"}

# MMA-Sim's instruction lists (mmasim/isa/amd.py): the shape and type qualifier after "v_mfma_"
_CDNA1 = ["f32_32x32x2f32", "f32_32x32x1f32", "f32_16x16x4f32", "f32_16x16x1f32", "f32_4x4x1f32",
          "f32_32x32x8f16", "f32_32x32x4f16", "f32_16x16x16f16", "f32_16x16x4f16", "f32_4x4x4f16",
          "f32_32x32x4bf16", "f32_32x32x2bf16", "f32_16x16x8bf16", "f32_16x16x2bf16", "f32_4x4x2bf16"]
_CDNA2 = _CDNA1 + ["f64_16x16x4f64", "f64_4x4x4f64", "f32_32x32x8bf16_1k", "f32_32x32x4bf16_1k",
                   "f32_16x16x16bf16_1k", "f32_16x16x4bf16_1k", "f32_4x4x4bf16_1k"]
_CDNA3 = (["f64_16x16x4_f64", "f64_4x4x4_4b_f64", "f32_32x32x1_2b_f32", "f32_16x16x1_4b_f32", "f32_4x4x1_16b_f32",
           "f32_32x32x2_f32", "f32_16x16x4_f32", "f32_16x16x8_xf32", "f32_32x32x4_xf32"]
          + [f"f32_{s}_{t}" for t in ("f16", "bf16")
             for s in ("32x32x4_2b", "16x16x4_4b", "4x4x4_16b", "32x32x8", "16x16x16")]
          + [f"f32_{s}_{x}_{y}" for s in ("16x16x32", "32x32x16") for x in ("bf8", "fp8") for y in ("bf8", "fp8")])
_LISTS = {"cdna1": _CDNA1, "cdna2": _CDNA2, "cdna3": _CDNA3}
_ARCH_NAME = {"cdna1": "mi100", "cdna2": "mi250", "cdna3": "mi300"}

#: instruction="mfma": the instruction taken per (architecture, input format)
DEFAULT_MFMA = {
    ("cdna1", "fp32"): "f32_16x16x4f32", ("cdna1", "fp16"): "f32_16x16x16f16", ("cdna1", "bf16"): "f32_16x16x8bf16",
    ("cdna2", "fp32"): "f32_16x16x4f32", ("cdna2", "fp16"): "f32_16x16x16f16",
    ("cdna2", "bf16"): "f32_16x16x16bf16_1k", ("cdna2", "fp64"): "f64_16x16x4f64",
    ("cdna3", "fp32"): "f32_16x16x4_f32", ("cdna3", "xf32"): "f32_16x16x8_xf32", ("cdna3", "fp16"): "f32_16x16x16_f16",
    ("cdna3", "bf16"): "f32_16x16x16_bf16", ("cdna3", "fp64"): "f64_16x16x4_f64",
    ("cdna3", "e4m3fnuz"): "f32_16x16x32_fp8_fp8", ("cdna3", "e5m2fnuz"): "f32_16x16x32_bf8_bf8",
    ("cdna3", "e4m3fnuz.e5m2fnuz"): "f32_16x16x32_fp8_bf8", ("cdna3", "e5m2fnuz.e4m3fnuz"): "f32_16x16x32_bf8_fp8",
}
_TYPE = {"f64": "fp64", "f32": "fp32", "xf32": "xf32", "f16": "fp16", "bf16": "bf16", "fp8": "e4m3fnuz",
         "bf8": "e5m2fnuz"}
_FORMAT_ALIASES = {"tf32": "xf32", "fp8": "e4m3fnuz", "bf8": "e5m2fnuz", "float8_e4m3fnuz": "e4m3fnuz",
                   "float8_e5m2fnuz": "e5m2fnuz", "float32": "fp32", "f32": "fp32", "float64": "fp64",
                   "f64": "fp64", "float16": "fp16", "f16": "fp16", "bfloat16": "bf16"}
_QUAL = re.compile(r"^f(?:32|64)_(\d+)x(\d+)x(\d+)(?:_\d+b)?_?(f64|f32|xf32|f16|bf16|fp8|bf8)(?:_(fp8|bf8))?(_1k)?$")
_SRC = "MMA-Sim @ c785138 mmasim/simulator/amd.py + arithmetic.py (literature; no hardware data here)"
# the Khattak & Mikaitis toolbox @ b12b5a7 (models/MI100MC.m, MI210MC.m, MI300XMC.m, tools/Generic_BFMA_TC.m):
# fp32/fp64 are sequential FMAs there too; CDNA2 (MI210MC: pairwise fp32 sums, subnormals flushed, products
# limited to fp32's range) has MMA-Sim's structure; these two are not encoded as variants:
_TOOLBOX_GAPS = {"cdna3": "the toolbox's MI300XMC/MI300AMC call MI300MC, which is not in the toolbox at b12b5a7"}
_TOOLBOX_CDNA1_SRC = ("toolbox @ b12b5a7 models/MI100MC.m (fma = 4, bf16 2; correct_rounding = 1: each group of "
                      "products and c summed exactly, rounded once RNE; recursive over groups); differs from MMA-Sim "
                      "(pairwise fp32); literature, no hardware data here")


def _params(arch: str, qual: str) -> MMAParams:
    """The preset of one instruction (``qual``: MMA-Sim's qualifier, the name after ``v_mfma_``)."""
    m = _QUAL.match(qual)
    k = int(m.group(3))
    ta = _TYPE[m.group(4)]
    tb = _TYPE[m.group(5)] if m.group(5) else ta
    label = f"{_ARCH_NAME[arch]} v_mfma_{qual}"
    if ta in ("fp32", "fp64"):
        return MMAParams(ta, ta, k, 1, 0, Rounding.RNE, scheme=FMAChain(nan_bits=0x7FC00000 if ta == "fp32" else None),
                         label=label, sources=f"chain of {ta} FMAs in k order: {_SRC}; NaN bits assumed")
    if arch in ("cdna1", "cdna2"):
        group = 2 if ta == "bf16" and not m.group(6) else 4
        flush = arch == "cdna2"
        src = (f"groups of {group} summed pairwise in fp32, then added (RNE)"
               + ("; subnormals flushed (CDNA2)" if flush else "") + f": {_SRC}")
        return MMAParams(ta, "fp32", k, group, 0, Rounding.RNE, scheme=PairwiseTree(flush_subnormals=flush),
                         label=label, sources=src)
    fp8 = ta in ("e4m3fnuz", "e5m2fnuz")
    group = 16 if fp8 else 4 if ta == "xf32" else min(8, k)
    scheme = FusedRoundDown(fp8_pairs=fp8, c_drop_gap=25 if fp8 else None)
    src = (f"groups of {group}: products truncated to 24 fraction bits at their maximum exponent (zero factors at "
           "-126), sum and c rounded down to 31 and 24 bits, fp32 RNE" + ("; even/odd k halves, c dropped 25 below"
                                                                          if fp8 else "") + f": {_SRC}")
    return MMAParams("tf32" if ta == "xf32" else ta, "fp32", k, group, 24, Rounding.RNE, scheme=scheme, label=label,
                     sources=src, input_format_b=tb if tb != ta else None)


def _mmasim_nans(prm: MMAParams) -> MMAParams:
    """The preset with MMA-Sim's NaN results on its host (tcemu.numerics.model_amd_nan) in place of one constant."""
    s = prm.scheme
    if s.kind == "fma_chain":
        host_nan = HOST_NAN32 if prm.output_format == "fp32" else HOST_NAN64
        scheme = replace(s, nan_bits=host_nan, nan_rule="propagate", nan_order="bad")
    else:
        scheme = replace(s, nan_rule="mmasim_host")
    return replace(prm, scheme=scheme, sources=prm.sources + "; NaN bits: MMA-Sim's host arithmetic (model_amd_nan)")


def _build() -> dict[tuple[str, str], MMAParams]:
    return {(arch, q): _params(arch, q) for arch, quals in _LISTS.items() for q in quals}


AMD_PRESETS: dict[tuple[str, str], MMAParams] = _build()


def canon_amd_arch(arch: str) -> str | None:
    """``cdna1``/``cdna2``/``cdna3`` for an AMD architecture name (mi100, gfx90a, ...), else None."""
    return AMD_ARCHS.get(str(arch).lower())


def _canon_format(fmt: str) -> str:
    parts = [_FORMAT_ALIASES.get(x, x) for x in str(fmt).lower().split(".")]
    return ".".join(parts)


def amd_preset(arch: str, instruction: str = "mfma", input_format: str = "fp16", output_format: str = "fp32",
               variant: str = "measured") -> MMAParams:
    """The preset of an AMD MFMA instruction (see the module docstring): MMA-Sim's model for ``measured`` (no
    hardware data exist here; NaN results one canonical NaN, an assumption) and ``mmasim`` (NaN results as MMA-Sim's
    host arithmetic gives them, :mod:`tcemu.numerics.model_amd_nan`); ``toolbox``: the toolbox's where it differs (CDNA1 fp16/bf16: exact
    group sums, :class:`ExactGroupRound`), the same where it agrees (FMA chains, CDNA2), refused where its model
    is missing (CDNA3: ``_TOOLBOX_GAPS``)."""
    cdna = canon_amd_arch(arch)
    if variant not in ("measured", "mmasim", "toolbox"):
        raise ValueError(f"tcemu: variant must be 'measured', 'mmasim' or 'toolbox', got {variant!r}")
    toolbox_gap = _TOOLBOX_GAPS.get(cdna) if variant == "toolbox" else None
    fin = _canon_format(input_format)
    ins = str(instruction).lower().removeprefix("v_mfma_")
    quals = _LISTS[cdna]
    if ins in ("mfma", "v_mfma", "mma", "mma.sync"):  # mma.sync: the API's default instruction
        if (cdna, fin) not in DEFAULT_MFMA:
            have = sorted(f for (a, f) in DEFAULT_MFMA if a == cdna)
            raise ValueError(f"tcemu: no {fin} MFMA on {arch} ({cdna}); formats: {have}")
        ins = DEFAULT_MFMA[cdna, fin]
    spelled = {q.replace("_", ""): q for q in quals}  # either spelling: 16x16x16f16 or 16x16x16_f16
    ins = spelled.get(ins.replace("_", ""), ins)
    if ins not in quals:
        raise ValueError(f"tcemu: unknown instruction {instruction!r} on {arch} ({cdna}); valid: "
                         f"{', '.join('v_mfma_' + q for q in quals)}, or 'mfma'")
    prm = AMD_PRESETS[cdna, ins]
    if variant == "mmasim":
        prm = _mmasim_nans(prm)
    if variant == "toolbox" and cdna == "cdna1" and prm.scheme.kind == "pairwise":
        prm = replace(prm, scheme=ExactGroupRound(), sources=_TOOLBOX_CDNA1_SRC)
    elif toolbox_gap and prm.scheme.kind != "fma_chain":
        raise ValueError(f"tcemu: variant='toolbox' is not encoded for {arch} {prm.input_format}: {toolbox_gap}; "
                         "use variant='mmasim'")
    want = prm.input_format if prm.input_format_b is None else f"{prm.input_format}.{prm.input_format_b}"
    if fin not in (want, "xf32" if want == "tf32" else want):
        raise ValueError(f"tcemu: v_mfma_{ins} takes {want if want != 'tf32' else 'xf32'} inputs, not {fin}")
    out = _canon_format(output_format)
    if out != prm.output_format:
        raise ValueError(f"tcemu: v_mfma_{ins} returns {prm.output_format}, not {out}")
    return replace(prm, label=prm.label.replace(_ARCH_NAME[cdna], str(arch).lower()))


def amd_keys() -> list[tuple[str, str, str, str]]:
    """(arch, instruction, input, output) of every AMD preset."""
    keys = []
    for (cdna, q), p in AMD_PRESETS.items():
        fin = p.input_format if p.input_format != "tf32" else "xf32"
        if p.input_format_b is not None:
            fin += "." + p.input_format_b
        keys.append((_ARCH_NAME[cdna], "v_mfma_" + q, fin, p.output_format))
    return sorted(keys)
