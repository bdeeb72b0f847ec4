"""Presets: :class:`MMAParams` per (architecture, instruction, input format, output format), with sources.

Values are the literature's (docs/numerics.md, "Presets" and "Sources"); the short tags in ``sources`` are:

- ``Fasi``: Fasi, Higham, Mikaitis, Pranesh, PeerJ CS 7:e330 (2021), V100/T4/A100 feature tests.
- ``HPEC``: Khattak & Mikaitis, IEEE HPEC 2025 (A30 feature tests).
- ``toolbox``: Khattak & Mikaitis MATLAB models @ b12b5a7, ``models/<GPU>TC.m`` (fma, neab, frmode, limits).
- ``MMA-Sim``: microsoft/MMA-Sim @ c785138, ``mmasim/simulator/nv_ptx.py`` / ``arithmetic.py``.
- ``refit``: tcemu's re-fit of the toolbox's published hardware data (docs/numerics.md, "Public hardware
  data"; tests/numerics).
- ``cutlass#1986``, ``DeepGEMM#37``: FP8 ``mma.sync`` on sm_90 is emulated on the fp16 path and keeps c.

Two fields were disputed in the literature (docs/numerics.md, "Disputed points and the choices made"):
``czero_floor`` and ``c_exp_floor``. The H200 settled them (``tcemu probe``, docs/hardware/h200-probe.json):
with c = 0 the block exponent is floored at the toolbox's L (-133 for fp32 output, -21 for fp16 output), and a
subnormal fp16 c is aligned at fp16's emin (-14), MMA-Sim's choice. ``variant="measured"`` (default)
takes that combination, with each architecture's toolbox L (measured on the H200 only; the other
architectures' L are the toolbox's). ``variant="mmasim"`` and ``variant="toolbox"`` keep each
source's own choices as what-if models; the toolbox's also take its FP8 ``mma.sync`` on H100/H200 and B200 (one
32-term block, as ``wgmma`` / ``tcgen05``, which its own hardware data refute) and its L as a floor of E_max
whether or not c is zero (fp16 D of fp16 inputs; benchmarks/toolbox_diff.py runs its models). Every preset gives +0 for every zero result: an exact zero
sum is +0 (docs/numerics.md, "Rounding"), and so is a nonzero sum that rounds to zero
(``underflow_sign="positive"``) and the final add of emulated FP8 ``mma.sync``, as the H200 does (it never
returned -0).

Architectures: ``v100`` (sm_70), ``a100`` (sm_80), ``ada`` (sm_89; not in the issue's list, added
for the public Ada/L40S data), ``h100`` = ``h200`` (sm_90), ``b200`` (sm_100), ``sm120`` (RTX Blackwell).
The FP8/FP6/FP4 pairs, mixed e4m3 x e5m2 and the block-scaled kinds are in :mod:`.presets_blackwell`.
Instructions: ``mma.sync`` (also ``mma``), ``wgmma`` (sm_90), ``tcgen05`` (sm_100), and ``wmma``: CUDA's WMMA API
is not an instruction; the compiler lowers it to ``mma.sync`` shapes (:data:`WMMA_LOWERING`), so its preset is
the one of the instructions it becomes, chained over the WMMA shape's K.
"""

from __future__ import annotations

import re
from dataclasses import replace

from .params import MMAParams
from .presets_blackwell import BLOCK_SCALED_INSTRUCTIONS, LOWP_PRESETS, canon_input
from .presets_extra import C16_SRC, canon_output
from .rounding import Rounding

__all__ = ["get_preset", "list_presets", "canon_output", "ARCHS", "INSTRUCTIONS", "PRESETS", "WMMA_LOWERING",
           "WMMA_SHAPES"]

ARCHS = ("v100", "a100", "ada", "h100", "h200", "b200", "sm120")
_ARCH_ALIASES = {"sm_70": "v100", "sm_80": "a100", "a2": "a100", "a30": "a100", "sm_89": "ada", "l40s": "ada",
                 "sm_90": "h100", "sm_90a": "h100", "sm_100": "b200", "sm_100a": "b200",
                 "sm_120": "sm120", "sm_120a": "sm120", "rtx_blackwell": "sm120", "rtx5090": "sm120",
                 "rtx_pro_6000": "sm120"}
INSTRUCTIONS = ("mma.sync", "wgmma", "tcgen05", "wmma") + BLOCK_SCALED_INSTRUCTIONS
_INSTR_ALIASES = {"mma": "mma.sync", "wgmma.mma_async": "wgmma", "tcgen05.mma": "tcgen05", "wmma.mma_sync": "wmma",
                  **{f"{i}.{alias}": f"{i}.{kind}" for i in ("tcgen05", "mma.sync")
                     for kind in ("mxf8f6f4", "mxf4nvf4") for alias in (f"kind::{kind}", f"{kind}.block_scale")},
                  "tcgen05.mxf4": "tcgen05.mxf4nvf4", "mma.sync.mxf4": "mma.sync.mxf4nvf4"}

#: WMMA shapes per input format (CUDA's ``nvcuda::wmma``), the first the default; their K
WMMA_SHAPES = {"fp16": ("m16n16k16", "m32n8k16", "m8n32k16"), "bf16": ("m16n16k16", "m32n8k16", "m8n32k16"),
               "tf32": ("m16n16k8",)}
#: per architecture and input format: the K of the mma.sync instruction ``wmma::mma_sync`` compiles to, and the
#: evidence. nvcc 13.0 (-gencode arch=compute_XX,code=sm_XX), cuobjdump -sass: a m16n16k16 fp16/bf16 WMMA is two
#: HMMA.16816 (one m16n8k16 per 16 x 8 half), a m16n16k8 tf32 WMMA four HMMA.1684.F32.TF32 (two K = 4 steps per
#: half), on sm_80, sm_86, sm_89, sm_90a, sm_100a and sm_120a alike (tests/numerics/hardware: the runner's WMMA kernels).
#: V100 (sm_70, no longer in nvcc 13): the literature's WMMA measurements (Fasi et al. 2021, the toolbox), whose
#: model is the mma.m8n8k4 preset (HMMA.884, N = 4).
WMMA_LOWERING = {
    ("v100", "fp16"): (4, "WMMA on sm_70: HMMA.884 (mma.m8n8k4), as measured through WMMA by Fasi et al. and the "
                          "toolbox (V100TC); not compiled here (nvcc 13 has no sm_70)"),
    **{(a, f): (16, "nvcc 13.0 SASS: 2 x HMMA.16816 per m16n16k16 (m16n8k16 per 16x8 half)")
       for a in ("a100", "ada", "h100", "b200", "sm120") for f in ("fp16", "bf16")},
    **{(a, "tf32"): (4, "nvcc 13.0 SASS: 4 x HMMA.1684.F32.TF32 per m16n16k8 (two m16n8k4 per 16x8 half)")
       for a in ("a100", "ada", "h100", "b200", "sm120")},
}

# c = 0 clamp L of the toolbox (docs/numerics.md, "Disputed points and the choices made"): its f050de5 of
# 2026-05-13 and the Aug 2026 fp16 limits
_TOOLBOX_CZERO = {
    ("v100", "fp32"): None, ("a100", "fp32"): -132, ("ada", "fp32"): -132, ("h100", "fp32"): -133,
    ("b200", "fp32"): -133, ("sm120", "fp32"): -133, ("sm120", "fp16"): -21,
    ("v100", "fp16"): -19, ("a100", "fp16"): -20, ("ada", "fp16"): -20, ("h100", "fp16"): -21, ("b200", "fp16"): -21,
}

_F_SRC = "F: Fasi D1; toolbox neab; MMA-Sim arch_accum_fractional_bits; refit 100 %"
_RND_SRC = "fp32/e8m13 out RZ, fp16 out RNE: Fasi C1-C3; HPEC F5/F6; toolbox frmode; MMA-Sim"


def _p(inp: str, out: str, k: int, n: int, f: int, label: str, src: str, **kw) -> MMAParams:
    rnd = Rounding.RNE if out == "fp16" else Rounding.RZ
    return MMAParams(input_format=inp, output_format=out, k_instr=k, n_fma=n, frac_bits=f, output_rounding=rnd,
                     label=label, sources=f"{src}; {_F_SRC}; {_RND_SRC}", **kw)


def _table() -> dict[tuple[str, str, str, str], MMAParams]:
    t: dict[tuple[str, str, str, str], MMAParams] = {}
    # ---- V100 sm_70: mma.m8n8k4 (HMMA.884), N=4, F=23 (Fasi D1, D4; toolbox V100TC.m; MMA-Sim Volta)
    for out in ("fp32", "fp16"):
        t["v100", "mma.sync", "fp16", out] = _p("fp16", out, 4, 4, 23, f"v100 mma.m8n8k4 fp16->{out}",
                                               "N=4: toolbox V100TC fma=4, MMA-Sim Volta")
    # c fp16 -> d fp32 (.f32.f16.f16.f16): c converted exactly to fp32, then the fp32-output block FMA
    t["v100", "mma.sync", "fp16", "fp32.fp16"] = _p("fp16", "fp32", 4, 4, 23,
                                                   "v100 mma.m8n8k4 fp16->fp32 (c fp16)",
                                                   "N=4: toolbox V100TC fma=4, MMA-Sim Volta; " + C16_SRC,
                                                   c_input_format="fp16")
    # ---- A100 sm_80 and Ada sm_89: m16n8k16 = 8+8 (split-k), tf32 m16n8k8 = 4+4; F=24
    for arch in ("a100", "ada"):
        src = "N=8 (tf32 4): toolbox A100TC/AdaTC fma, MMA-Sim is_split_k, HPEC A30 FMA size 8"
        for inp, outs in (("fp16", ("fp32", "fp16")), ("bf16", ("fp32",))):
            for out in outs:
                t[arch, "mma.sync", inp, out] = _p(inp, out, 16, 8, 24, f"{arch} mma.m16n8k16 {inp}->{out}", src)
        t[arch, "mma.sync", "tf32", "fp32"] = _p("tf32", "fp32", 8, 4, 24, f"{arch} mma.m16n8k8 tf32->fp32", src)
    # Ada FP8 mma.m16n8k32 = 16+16, F=13, e8m13 (MMA-Sim; toolbox neab=-10; refit 100 % of Ada/L40S data)
    for inp in ("e4m3", "e5m2"):
        src = "Ada FP8: N=16, F=13, e8m13 RZ: MMA-Sim; toolbox neab=-10; refit 100 % (Ada, L40S data)"
        t["ada", "mma.sync", inp, "fp32"] = _p(inp, "e8m13", 32, 16, 13, f"ada mma.m16n8k32 {inp}->fp32(e8m13)", src)
        t["ada", "mma.sync", inp, "fp16"] = _p(inp, "fp16", 32, 16, 13, f"ada mma.m16n8k32 {inp}->fp16", src)
    # ---- H100 = H200 sm_90 and B200 sm_100: one instruction's K is one block, F=25
    for arch in ("h100", "b200"):
        instrs = ("mma.sync", "wgmma") if arch == "h100" else ("mma.sync", "tcgen05")
        for ins in instrs:
            src = (f"N=16 (tf32 8), F=25: toolbox {arch.upper()}TC fma; MMA-Sim {ins}; refit 100 %"
                   + ("; wgmma = mma.sync per MMA-Sim, not measured side by side in the sources"
                      if ins == "wgmma" else ""))
            shape = {"mma.sync": "m16n8k16", "wgmma": "m64nNk16", "tcgen05": "kind::f16"}[ins]
            for inp, outs in (("fp16", ("fp32", "fp16")), ("bf16", ("fp32",))):
                for out in outs:
                    t[arch, ins, inp, out] = _p(inp, out, 16, 16, 25, f"{arch} {ins} {shape} {inp}->{out}", src)
            tshape = {"mma.sync": "m16n8k8", "wgmma": "m64nNk8", "tcgen05": "kind::tf32"}[ins]
            t[arch, ins, "tf32", "fp32"] = _p("tf32", "fp32", 8, 8, 25, f"{arch} {ins} {tshape} tf32->fp32", src)
        # FP8 mma.sync m16n8k32: emulated, F2FP + 2 x HMMA.16816 (k mod 4 in {0,1}, then {2,3}) + RNE add of c
        for inp in ("e4m3", "e5m2"):
            src = ("FP8 mma.sync emulated on the fp16 path: cutlass#1986, DeepGEMM#37 (C kept); groups and "
                   "c-last RNE add: refit 100 % of toolbox H100/H200 fp16-out and B200 data")
            for out in ("fp32", "fp16"):
                t[arch, "mma.sync", inp, out] = _p(inp, out, 32, 16, 25, f"{arch} mma.m16n8k32 {inp}->{out} (emulated)",
                                                   src, interleave=((0, 1), (2, 3)), c_add_rounding=Rounding.RNE)
    for inp in ("e4m3", "e5m2"):
        # H100 wgmma m64nNk32 FP8 (QGMMA): one 32-term block, F=13, e8m13; C cut to 13 bits by the alignment
        src = ("wgmma FP8: N=32, F=13, e8m13: MMA-Sim wgmma; toolbox H100TC fma=32 neab=-10; SageAttention2; "
               "DeepSeek-V3; refit 100 % of the H100/H200 fp32-out data only with c = 0 (docs/numerics.md: "
               "public hardware data)")
        t["h100", "wgmma", inp, "fp32"] = _p(inp, "e8m13", 32, 32, 13, f"h100 wgmma m64nNk32 {inp}->fp32(e8m13)", src)
        t["h100", "wgmma", inp, "fp16"] = _p(inp, "fp16", 32, 32, 13, f"h100 wgmma m64nNk32 {inp}->fp16",
                                             src + "; fp16 D: assumed same block, RNE (no public data)")
        # B200 tcgen05.mma kind::f8f6f4: one 32-term block, F=25 (MMA-Sim; B200TC; DeepGEMM#176)
        src = "tcgen05 f8f6f4: N=32, F=25: MMA-Sim; toolbox B200TC; DeepGEMM#176"
        t["b200", "tcgen05", inp, "fp32"] = _p(inp, "fp32", 32, 32, 25, f"b200 tcgen05 kind::f8f6f4 {inp}->fp32", src)
        t["b200", "tcgen05", inp, "fp16"] = _p(inp, "fp16", 32, 32, 25, f"b200 tcgen05 kind::f8f6f4 {inp}->fp16",
                                               src + "; fp16 D: RNE assumed (no public data)")
    # MMA-Sim's disputed choices: c = 0 takes part at exponent -126 (fp32-like D) / no floor (fp16 D);
    # c aligned with at least its format's emin (-126 fp32, -14 fp16)
    for key, prm in list(t.items()):
        fp16_out = prm.output_format == "fp16"
        t[key] = replace(prm, czero_floor=None if fp16_out else -126, c_exp_floor=-14 if fp16_out else -126)
    return t


PRESETS: dict[tuple[str, str, str, str], MMAParams] = _table()


# shapes of mma.sync that a preset's default shape may be replaced by (PTX ISA, mma shapes per type)
# (FP8 m16n8k16: sm_89+, PTX 8.7; one block of 16 where the preset is not the emulated fp16 path)
_MMA_SYNC_K = {"fp16": (8, 16), "bf16": (8, 16), "tf32": (4, 8),
               **{f: (16, 32) for f in ("e4m3", "e5m2", "e4m3.e5m2", "e5m2.e4m3")}}
_SHAPE = re.compile(r"^(?P<base>[a-z0-9_.]+?)(?:\.?(?P<shape>m\d+n\w*k(?P<k>\d+)))?$")


def _canon(arch: str, instruction: str) -> tuple[str, str, int | None]:
    """(arch, instruction, K of an explicit shape or None); e.g. "mma.sync.m16n8k8" -> ("mma.sync", 8)."""
    a = _ARCH_ALIASES.get(str(arch).lower(), str(arch).lower())
    if a not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; valid: {list(ARCHS)}")
    m = _SHAPE.match(str(instruction).lower().replace("kind::", "kind_"))
    base = (m.group("base") if m else str(instruction).lower()).replace("kind_", "kind::")
    k = int(m.group("k")) if m and m.group("k") else None
    i = _INSTR_ALIASES.get(base, base)
    if i == "wmma" and m and m.group("shape"):
        k = m.group("shape")  # the WMMA shape, checked per format by _wmma_preset
    if i not in INSTRUCTIONS:
        raise ValueError(f"unknown instruction {instruction!r}; valid: {list(INSTRUCTIONS)}, optionally with a "
                         f"shape, e.g. mma.sync.m16n8k8")
    return a, i, k


def get_preset(
    arch: str,
    instruction: str = "mma.sync",
    input_format: str = "fp16",
    output_format: str | None = None,
    *,
    variant: str = "measured",
) -> MMAParams:
    """The model parameters of one hardware configuration.

    Args:
        arch: ``v100``, ``a100``, ``ada``, ``h100``, ``h200`` (= h100) or ``b200``.
        instruction: ``mma.sync``, ``wgmma`` (h100/h200) or ``tcgen05`` (b200). ``mma.sync`` may carry a
            shorter PTX shape, e.g. ``mma.sync.m16n8k8`` (fp16/bf16) or ``mma.sync.m16n8k4`` (tf32): one
            instruction then holds K products in blocks of ``min(N, K)``, and a longer K chains them.
        input_format: ``fp16``, ``bf16``, ``tf32``, ``e4m3``, ``e5m2`` (ml_dtypes names accepted).
        output_format: ``fp32`` (default) or ``fp16`` (fp32 output of FP8 on Ada and Hopper ``wgmma`` is e8m13);
            ``fp64`` for fp64 inputs (the default then); ``fp32.fp16`` (d.c): fp32 d with c in fp16 (V100 and
            Turing ``mma.m8n8k4``).
        variant: ``measured`` (what the H200 answered), ``mmasim`` or ``toolbox``: whose choice to take
            for the c = 0 floor, the c exponent floor and a zero factor's part in E_max (``mmasim``: a zero
            input at exponent -126) that the literature disputes (docs/numerics.md, "Disputed points and the
            choices made"); ``toolbox`` also for FP8 ``mma.sync`` on h100/h200/b200 (one 32-term block).

    Raises:
        ValueError: unknown names or a combination the sources do not cover; the message lists the
            valid combinations.
    """
    from .presets_extra import extra_preset  # Turing, FP64 DMMA, AMD CDNA (literature-based)

    if output_format is None:  # fp32, or fp64 for fp64 inputs
        output_format = "fp64" if str(input_format).lower() in ("fp64", "f64", "float64") else "fp32"
    extra = extra_preset(arch, instruction, input_format, output_format, variant)
    if extra is not None:
        return extra
    a, i, k_shape = _canon(arch, instruction)
    key_arch = "h100" if a == "h200" else a
    fin = canon_input(input_format)
    fout = canon_output(output_format)
    if i == "wmma":
        return _wmma_preset(a, key_arch, fin, fout, k_shape, variant)
    key = (key_arch, i, fin, fout)
    if i in BLOCK_SCALED_INSTRUCTIONS and ":" not in fin and i.endswith("mxf8f6f4"):
        key = (key_arch, i, fin + ":ue8m0x32", fout)  # the kind's only scale
    table = PRESETS if key in PRESETS else LOWP_PRESETS
    if key not in table:
        every = list(PRESETS) + list(LOWP_PRESETS)
        valid = sorted(f"{k[2]}->{k[3]}" for k in every if k[0] == key_arch and k[1] == i)
        instrs = sorted({k[1] for k in every if k[0] == key_arch})
        raise ValueError(
            f"no preset for arch={a}, instruction={i}, {fin}->{fout}; "
            f"{a} has instructions {instrs}" + (f"; {i} supports {valid}" if valid else "")
        )
    prm = table[key]
    if k_shape is not None and k_shape != prm.k_instr:
        allowed = (4,) if key_arch == "v100" else _MMA_SYNC_K.get(fin, (prm.k_instr,))
        if prm.interleave is not None:  # emulated FP8: only the m16n8k32 that cutlass and DeepGEMM describe
            allowed = (prm.k_instr,)
        if i != "mma.sync" or k_shape not in allowed:
            raise ValueError(f"no {fin} shape with K={k_shape} for {a} {i}; valid K: "
                             f"{allowed if i == 'mma.sync' else (prm.k_instr,)}")
        # a shorter instruction: one block of at most k_shape products per instruction
        prm = replace(prm, k_instr=k_shape, n_fma=min(prm.n_fma, k_shape),
                      label=f"{key_arch} mma.sync m16n8k{k_shape} {fin}->{fout}")
    if a == "h200":
        prm = replace(prm, label=prm.label.replace("h100", "h200"))
    fp16_out = prm.output_format == "fp16"
    toolbox_floor = _TOOLBOX_CZERO[key_arch, "fp16" if fp16_out else "fp32"]
    if variant == "measured":
        src = _MEASURED_SRC if table is PRESETS else _LOWP_FLOOR_SRC
        prm = replace(prm, czero_floor=toolbox_floor, sources=prm.sources + "; " + src)
    elif variant == "toolbox":
        if prm.interleave is not None and (key_arch, fin) in _TOOLBOX_FP8_BLOCK:
            prm = _toolbox_fp8_block(prm, key_arch, fin, fout, a)
        if fp16_out and prm.input_format != "fp16":  # the toolbox sets its fp16-D limit for fp16 inputs only
            toolbox_floor = _TOOLBOX_CZERO[key_arch, "fp32"]
        # its L floors E_max whether or not c is zero (AlignSignficand): for fp16 D a nonzero c counts at >= L
        prm = replace(prm, czero_floor=toolbox_floor, c_exp_floor=toolbox_floor if fp16_out else -126)
    elif variant != "mmasim":
        raise ValueError(f"variant must be 'measured', 'mmasim' or 'toolbox', got {variant!r}")
    elif prm.interleave is None:
        # MMA-Sim gives a zero input exponent -126 (``extract_significand_exponent``), so a zero factor's product
        # takes part in E_max; refuted on the H100 (docs/hardware/h100-zero-factor.json): a what-if only.
        # (Emulated FP8 mma.sync forms fp16 products; MMA-Sim does not model it.)
        prm = replace(prm, zero_factor_exp=MMASIM_ZERO_EXP)
    return prm


#: FP8 ``mma.sync`` as the toolbox models it (H100TC.m, B200TC.m @ b12b5a7: ``fma = 32``, one block per
#: instruction, not the fp16-path emulation): the native kind with the same arithmetic (wgmma: N = 32, F = 13
#: from ``neab = -10``, e8m13 for fp32 D; tcgen05 kind::f8f6f4: N = 32, F = 25)
_TOOLBOX_FP8_BLOCK = {(arch, fin): native for arch, native in (("h100", "wgmma"), ("b200", "tcgen05"))
                      for fin in ("e4m3", "e5m2")}
_TOOLBOX_FP8_SRC = {
    "h100": "toolbox H100TC.m FP8: fma = 32, neab = -10 (F = 13), fp32 D cut to 13 fraction bits (GEMM.m: "
            "NoManBitsOut + neab); its fp16 D gets 0 fraction bits that way, not kept here: fp16 RNE",
    "b200": "toolbox B200TC.m FP8: fma = 32, neab = 2 (F = 25), fp32 D RZ; for fp16 D it returns the fp32 result "
            "(outformat set to fp32 first), not kept here: fp16 RNE",
}


def _toolbox_fp8_block(prm: MMAParams, key_arch: str, fin: str, fout: str, arch: str) -> MMAParams:
    """The toolbox's FP8 ``mma.sync``: one 32-term block as the native kind (docs/numerics.md, "Public hardware
    data": the hardware data refute it for ``mma.sync``)."""
    native = PRESETS[key_arch, _TOOLBOX_FP8_BLOCK[key_arch, fin], fin, fout]
    return replace(native, label=f"{arch} mma.m16n8k32 {fin}->{fout} (toolbox: one 32-term block)",
                   sources=f"{_TOOLBOX_FP8_SRC[key_arch]}; refuted for mma.sync by the toolbox's own hardware data "
                           "(docs/numerics.md, Public hardware data)")


_MEASURED_SRC = ("c = 0 floor (toolbox L) and c exponent floor (fp16 emin, MMA-Sim): measured on H200, "
                 "docs/hardware/h200-probe.json (T24, T24b, T25, T25b, T26); zero products take no part in E_max: "
                 "measured on H100, docs/hardware/h100-zero-factor.json")


_LOWP_FLOOR_SRC = ("c = 0 floor (toolbox L) and c exponent floor (fp16 emin) as the architecture's measured presets "
                   "(measured on H200 for fp16/bf16/tf32; unmeasured for this kind); zero products take no part "
                   "(measured on H100 for tf32/bf16, docs/hardware/h100-zero-factor.json; variant='mmasim': at "
                   "exponent -126)")

#: the exponent MMA-Sim gives a zero input whatever its format (``mmasim/simulator/arithmetic.py``)
MMASIM_ZERO_EXP = -126


def list_presets(extra: bool = True) -> list[tuple[str, str, str, str]]:
    """Every (arch, instruction, input, output) with a preset (h200 listed like h100; wmma per architecture);
    ``extra``: also the literature-based Turing, FP64 DMMA and AMD presets (:mod:`.presets_extra`)."""
    keys = list(PRESETS) + list(LOWP_PRESETS)
    keys += [(arch, "wmma", fin, out) for (arch, fin) in WMMA_LOWERING for out in ("fp32", "fp16")
             if out == "fp32" or fin == "fp16"]
    keys += [("h200",) + k[1:] for k in keys if k[0] == "h100"]
    from .presets_extra import extra_keys

    return sorted(keys) + (extra_keys() if extra else [])


def _wmma_preset(a: str, key_arch: str, fin: str, fout: str, shape: str | None, variant: str) -> MMAParams:
    """The preset of ``wmma::mma_sync``: the mma.sync instructions it compiles to (:data:`WMMA_LOWERING`), chained
    over the WMMA shape's K (``k_instr``), blocks of the emitted instruction's N."""
    shapes = WMMA_SHAPES.get(fin)
    if shapes is None or (key_arch, fin) not in WMMA_LOWERING:
        have = sorted(f for (ar, f) in WMMA_LOWERING if ar == key_arch)
        raise ValueError(f"no wmma preset for {a} {fin}; WMMA takes fp16, bf16, tf32 (on {a}: {have or 'none'})")
    shape = shapes[0] if shape is None else shape
    if shape not in shapes:
        raise ValueError(f"no {fin} WMMA shape {shape}; valid: {', '.join(shapes)}")
    k_emit, evidence = WMMA_LOWERING[key_arch, fin]
    base = get_preset(a, "mma.sync" if key_arch == "v100" else f"mma.sync.m16n8k{k_emit}", fin, fout,
                      variant=variant)
    k_wmma = int(shape.rsplit("k", 1)[1])
    emitted = "mma.m8n8k4" if key_arch == "v100" else f"m16n8k{k_emit}"
    return replace(base, k_instr=k_wmma, n_fma=min(base.n_fma, k_emit),
                   label=f"{a} wmma {shape} {fin}->{fout} ({emitted} chained)",
                   sources=base.sources + "; wmma lowering: " + evidence)
