"""Presets of the low-precision Tensor Core kinds: FP8/FP6/FP4 pairs, mixed e4m3 x e5m2, block scaling.

Registered into :func:`tcemu.numerics.presets.get_preset` (and ``list_presets``) by :mod:`.presets`. Keys are
``(arch, instruction, input, output)`` as for the other presets, with two extensions of ``input``:

- ``"<a>.<b>"``: a and b in two formats (PTX's ``.atype.btype``), e.g. ``"e4m3.e5m2"``, ``"e2m1.e4m3"``;
- ``"<a>[.<b>]:<scale>x<block>"`` for the block-scaled kinds, e.g. ``"e4m3:ue8m0x32"`` (MX),
  ``"e2m1:ue4m3x16"`` (NVFP4), ``"e2m1:ue8m0x32"`` (MXFP4).

Block-scaled instructions: ``tcgen05.mxf8f6f4`` and ``tcgen05.mxf4nvf4`` (B200, ``tcgen05.mma ...
.kind::mxf8f6f4.block_scale`` / ``kind::mxf4nvf4``), ``mma.sync.mxf8f6f4`` and ``mma.sync.mxf4nvf4`` (sm_120,
``mma.sync.aligned.m16n8k32 / m16n8k64 ... .block_scale``); ``mxf4`` is ``mxf4nvf4`` with ue8m0 x 32.

Every value here is literature-based (no hardware data for Blackwell's FP6/FP4 or block-scaled kinds, nor for
mixed FP8, in tcemu's sources). Tags:

- ``MMA-Sim``: microsoft/MMA-Sim @ c785138, ``mmasim/simulator/nv_ptx.py`` (``tcgen05mma``,
  ``tcgen05mma_block_scale``, ``mma`` and ``mma_block_scale`` for "RTX Blackwell") and ``arithmetic.py``
  (``nv_fused_dot_add`` with scales: the scale exponents join each product's exponent; ``..._with_block_scale``:
  exact sums of 16 fp4 products, times the scale significands, aligned at the scale exponents, F = 35);
  its ISA lists ``mmasim/isa/nv_ptx/*.py`` (which pairs and scale blocks each instruction takes).
- ``PTX``: PTX ISA (8.7 and later), ``tcgen05.mma`` kinds and ``mma.sync`` block scaling: operand types, K, block sizes
  (scale_vec::1X/2X/4X), ue8m0/ue4m3, e2m3/e3m2 in kind::f8f6f4 and kind::mxf8f6f4.
- ``toolbox``: Khattak & Mikaitis, B200TC.m and RTXPRO6000TC.m (= B200TC): FP8 one 32-term block, F = 25; no
  FP6/FP4 or block-scaled model.
- ``extrapolated``: a case no source models, given the datapath of the kind it belongs to (named in the label).
"""

from __future__ import annotations

from itertools import product

from .formats import get_format
from .params import MMAParams
from .rounding import Rounding

__all__ = ["LOWP_PRESETS", "F8F6F4", "canon_input", "parse_input", "BLOCK_SCALED_INSTRUCTIONS"]

F8F6F4 = ("e4m3", "e5m2", "e2m3", "e3m2", "e2m1")
BLOCK_SCALED_INSTRUCTIONS = ("tcgen05.mxf8f6f4", "tcgen05.mxf4nvf4", "mma.sync.mxf8f6f4", "mma.sync.mxf4nvf4")
_MMASIM_F8F6F4 = ("e4m3", "e5m2", "e2m1")  # MMA-Sim's lists (e2m3, e3m2: its TODO; e2m1 runs only at K=64)

_RND = "fp32 out RZ, fp16 out RNE (as kind::f16, MMA-Sim)"
_LIT = "literature-based (no hardware data)"


def parse_input(spec: str) -> tuple[str, str, str | None, int]:
    """``"e4m3.e5m2:ue8m0x32"`` -> ("e4m3", "e5m2", "ue8m0", 32); ``"e4m3"`` -> ("e4m3", "e4m3", None, 0)."""
    from .formats_mx import get_scale_format

    elems, _, scale = str(spec).lower().partition(":")
    parts = [get_format(p).name for p in elems.split(".")]
    if len(parts) not in (1, 2):
        raise ValueError(f"tcemu: input format {spec!r}: give one format or a pair a.b, e.g. e4m3.e5m2")
    fa, fb = parts[0], parts[-1]
    if not scale:
        return fa, fb, None, 0
    sname, _, block = scale.partition("x")
    if not block.isdigit():
        raise ValueError(f"tcemu: input format {spec!r}: the scale is <format>x<block>, e.g. ue8m0x32 or ue4m3x16")
    return fa, fb, get_scale_format(sname).name, int(block)


def canon_input(spec) -> str:
    """The key form of an input format: ``"fp16"``, ``"e4m3.e5m2"``, ``"e2m1:ue4m3x16"``; tuples (a, b) too."""
    if isinstance(spec, tuple):
        spec = ".".join(spec)
    fa, fb, sf, block = parse_input(spec)
    key = fa if fa == fb else f"{fa}.{fb}"
    return key + (f":{sf}x{block}" if sf else "")


def _p(fa, fb, out, k, n, f, label, src, **kw) -> MMAParams:
    fp16 = out == "fp16"
    return MMAParams(input_format=fa, input_format_b=fb, output_format=out, k_instr=k, n_fma=n, frac_bits=f,
                     output_rounding=Rounding.RNE if fp16 else Rounding.RZ,
                     czero_floor=None if fp16 else -126, c_exp_floor=-14 if fp16 else -126,
                     label=label, sources=f"{src}; {_RND}; {_LIT}", **kw)


#: kind::f16 with fp16 x bf16 operands
F16_MIXED_SRC = ("tcgen05 kind::f16 fp16 x bf16, f32 D: N=16, F=25 as kind::f16: MMA-Sim tcgen05mma "
                 "(its kind::f16 check takes f16 or bf16 for a and for b with f32 D); PTX: the instruction "
                 "descriptor encodes atype and btype apart (F16 = 0, BF16 = 1 each) and lists .f16, .bf16 "
                 "for .f32 D; extrapolated: CUTLASS documents matched pairs only, and no source shows a "
                 "mixed pair run on hardware")


def _pair_src(fa, fb, base: str) -> str:
    if fa in _MMASIM_F8F6F4 and fb in _MMASIM_F8F6F4 and "e2m1" not in (fa, fb):
        return base
    return base + f"; {fa} x {fb}: extrapolated (MMA-Sim lists e4m3/e5m2/e2m1 only, and its K=32 code passes e2m1 " \
                  "as raw uint8 containers that its decoder rejects; PTX: every f8f6f4 pair shares the kind's datapath)"


def _table() -> dict[tuple[str, str, str, str], MMAParams]:
    t: dict[tuple[str, str, str, str], MMAParams] = {}
    pairs = list(product(F8F6F4, F8F6F4))
    # ---- B200 tcgen05.mma kind::f8f6f4 (unscaled): one 32-term block, F=25 (e4m3/e5m2 pairs in presets.py)
    for fa, fb in pairs:
        if fa == fb and fa in ("e4m3", "e5m2"):
            continue
        key_in = fa if fa == fb else f"{fa}.{fb}"
        src = _pair_src(fa, fb, "tcgen05 kind::f8f6f4: N=32, F=25: MMA-Sim tcgen05mma; toolbox B200TC (FP8); PTX")
        for out in ("fp32", "fp16"):
            t["b200", "tcgen05", key_in, out] = _p(fa, fb, out, 32, 32, 25,
                                                   f"b200 tcgen05 kind::f8f6f4 {fa}x{fb}->{out}", src)
    # ---- B200 tcgen05.mma kind::f16, a and b of two formats (fp16 x bf16, f32 D): one 16-term block, F=25
    for fa, fb in (("fp16", "bf16"), ("bf16", "fp16")):
        t["b200", "tcgen05", f"{fa}.{fb}", "fp32"] = _p(fa, fb, "fp32", 16, 16, 25,
                                                        f"b200 tcgen05 kind::f16 {fa}x{fb}->fp32",
                                                        F16_MIXED_SRC)
    # ---- B200 kind::mxf8f6f4 (ue8m0 per 32 k): scale exponents join each product's exponent; F=25; fp32 D
    for fa, fb in pairs:
        key_in = (fa if fa == fb else f"{fa}.{fb}") + ":ue8m0x32"
        src = _pair_src(fa, fb, "tcgen05 kind::mxf8f6f4: N=32, F=25, scale exponents added to each product's "
                                "before alignment: MMA-Sim tcgen05mma_block_scale, nv_fused_dot_add; PTX (ue8m0, "
                                "scale_vec::1X, block 32, f32 D)")
        t["b200", "tcgen05.mxf8f6f4", key_in, "fp32"] = _p(
            fa, fb, "fp32", 32, 32, 25, f"b200 tcgen05 kind::mxf8f6f4 {fa}x{fb} ue8m0x32->fp32", src,
            scale_format="ue8m0", scale_block=32)
    # ---- B200 kind::mxf4nvf4 (K=64): exact sums of 16 products, scaled, aligned at scale exponents, F=35
    nvf4_src = ("kind::mxf4nvf4: K=64, chunks of 16 summed exactly, x scale significands, aligned at the scales' "
                "exponents, F=35, fp32 RZ: MMA-Sim nv_fused_dot_add_with_block_scale; PTX (scale_vec::2X ue8m0 "
                "block 32, ::4X ue8m0/ue4m3 block 16)")
    for sf, blk in (("ue8m0", 32), ("ue8m0", 16), ("ue4m3", 16)):
        t["b200", "tcgen05.mxf4nvf4", f"e2m1:{sf}x{blk}", "fp32"] = _p(
            "e2m1", "e2m1", "fp32", 64, 64, 35, f"b200 tcgen05 kind::mxf4nvf4 e2m1 {sf}x{blk}->fp32",
            "MMA-Sim tcgen05mma_block_scale; " + nvf4_src, scale_format=sf, scale_block=blk, scale_chunk=16)
    # ---- sm_120 (RTX Blackwell) mma.sync: fp16/bf16 (N=16), tf32 (N=8), F=25 as B200; f8f6f4 one 32-term block
    src = "sm_120 mma: F=25, no split-k: MMA-Sim mma 'RTX Blackwell'; toolbox RTXPRO6000TC (= B200TC)"
    for fin, outs in (("fp16", ("fp32", "fp16")), ("bf16", ("fp32",))):
        for out in outs:
            t["sm120", "mma.sync", fin, out] = _p(fin, fin, out, 16, 16, 25, f"sm120 mma.m16n8k16 {fin}->{out}", src)
    t["sm120", "mma.sync", "tf32", "fp32"] = _p("tf32", "tf32", "fp32", 8, 8, 25, "sm120 mma.m16n8k8 tf32->fp32", src)
    for fa, fb in pairs:
        key_in = fa if fa == fb else f"{fa}.{fb}"
        s8 = _pair_src(fa, fb, "sm_120 mma.m16n8k32 f8f6f4: N=32, F=25, fp32 (not e8m13) D: MMA-Sim mma "
                               "'RTX Blackwell'; toolbox RTXPRO6000TC fma=32; PTX")
        for out in ("fp32", "fp16"):
            t["sm120", "mma.sync", key_in, out] = _p(fa, fb, out, 32, 32, 25,
                                                     f"sm120 mma.m16n8k32 {fa}x{fb}->{out}", s8)
        t["sm120", "mma.sync.mxf8f6f4", key_in + ":ue8m0x32", "fp32"] = _p(
            fa, fb, "fp32", 32, 32, 25, f"sm120 mma.m16n8k32 kind::mxf8f6f4 {fa}x{fb} ue8m0x32->fp32",
            _pair_src(fa, fb, "sm_120 mma block_scale kind::mxf8f6f4: as tcgen05: MMA-Sim mma_block_scale; PTX"),
            scale_format="ue8m0", scale_block=32)
    for sf, blk in (("ue8m0", 32), ("ue8m0", 16), ("ue4m3", 32), ("ue4m3", 16)):
        t["sm120", "mma.sync.mxf4nvf4", f"e2m1:{sf}x{blk}", "fp32"] = _p(
            "e2m1", "e2m1", "fp32", 64, 64, 35, f"sm120 mma.m16n8k64 kind::mxf4nvf4 e2m1 {sf}x{blk}->fp32",
            "MMA-Sim mma_block_scale 'RTX Blackwell' (its qualifier list); " + nvf4_src, scale_format=sf,
            scale_block=blk, scale_chunk=16)
    # ---- mixed e4m3 x e5m2 on Ada (mma.sync 16+16, F=13, e8m13), Hopper wgmma (32, F=13) and the emulated
    # Hopper/Blackwell mma.sync (each operand converted exactly to fp16)
    for fa, fb in (("e4m3", "e5m2"), ("e5m2", "e4m3")):
        key_in = f"{fa}.{fb}"
        src = "Ada FP8 mixed: N=16, F=13, e8m13 RZ: MMA-Sim (Ada lists e4m3.e5m2 and e5m2.e4m3); PTX sm_89"
        t["ada", "mma.sync", key_in, "fp32"] = _p(fa, fb, "e8m13", 32, 16, 13, f"ada mma.m16n8k32 {fa}x{fb}->fp32"
                                                  "(e8m13)", src)
        t["ada", "mma.sync", key_in, "fp16"] = _p(fa, fb, "fp16", 32, 16, 13, f"ada mma.m16n8k32 {fa}x{fb}->fp16", src)
        src = ("wgmma FP8 mixed: N=32, F=13, e8m13: MMA-Sim wgmma (its FP8 path keys on a's type; PTX wgmma takes "
               "e4m3/e5m2 in any pair)")
        t["h100", "wgmma", key_in, "fp32"] = _p(fa, fb, "e8m13", 32, 32, 13, f"h100 wgmma m64nNk32 {fa}x{fb}->fp32"
                                                "(e8m13)", src)
        t["h100", "wgmma", key_in, "fp16"] = _p(fa, fb, "fp16", 32, 32, 13, f"h100 wgmma m64nNk32 {fa}x{fb}->fp16",
                                                src + "; fp16 D: assumed same block, RNE")
        for arch in ("h100", "b200"):
            src = ("FP8 mma.sync emulated on the fp16 path (cutlass#1986, DeepGEMM#37) as the e4m3/e5m2 presets; "
                   "mixed: extrapolated (each operand converted exactly to fp16)")
            for out in ("fp32", "fp16"):
                t[arch, "mma.sync", key_in, out] = _p(fa, fb, out, 32, 16, 25,
                                                      f"{arch} mma.m16n8k32 {fa}x{fb}->{out} (emulated)", src,
                                                      interleave=((0, 1), (2, 3)), c_add_rounding=Rounding.RNE)
    return t


LOWP_PRESETS: dict[tuple[str, str, str, str], MMAParams] = _table()
