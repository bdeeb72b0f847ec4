"""Classes of disagreement between tcemu and the Khattak & Mikaitis toolbox, each with its explanation and the side
the hardware data or the PTX/CDNA ISA documents support (helper of benchmarks/toolbox_diff.py).

:func:`classify` names the class of every disagreeing output from rules that look at the operands and both results
and from what-if replays of tcemu (:data:`WHAT_IF`); an output no rule explains is ``unexplained``. The rules
describe what the toolbox's code does (models/tools/GEMM.m and Generic_BFMA_TC.m @ b12b5a7), found by reading it
and confirmed by the reproducers in the report.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from _toolbox_tiles import tcemu_tile, values

__all__ = ["CLASSES", "UNEXPLAINED", "classify", "what_ifs"]

UNEXPLAINED = "unexplained"

#: class -> (what differs and why, which side the hardware data / PTX / CDNA ISA support)
CLASSES = {
    "raised": (
        ("the toolbox raises under Octave on this input, also with the MATLAB shims, so there is no output to compare: "
         "MI300MC (the deleted CDNA3 model, run on HEAD's Generic_BFMA_TC.m) with a group whose products are all zero "
         "and a nonzero c (late partial sum) gives dot() operands of different sizes ('dot: sizes of X and Y must "
         "match')"), "-"),
    "FP8 fp16 D with 0 fraction bits": (
        ("GEMM.m adds a negative neab to the output's fraction bits (NoManBitsOut + neab, meant for the 13-bit FP8 "
        "accumulator of fp32 D); AdaTC/L40STC/H100TC set neab = -10 for FP8, so their fp16 D keeps 10 - 10 = 0 "
        "fraction bits: every result is 0 or +-2^e"),
        ("tcemu: the toolbox's own Ada/L40S/H100/H200 e4m3/e5m2 -> fp16 hardware data have 10 fraction bits (Public "
        "hardware data table); PTX: D is .f16")),
    "FP8 fp16 D returned as fp32": (
        ("B200TC.m sets outformat = 'fp32' for FP8 inputs before it tests for fp16, so an fp16 D comes back as the "
        "fp32 (RZ) result, which fp16 cannot hold"),
        "tcemu: the toolbox's B200 e4m3/e5m2 -> fp16 hardware data are fp16 values; PTX: D is .f16"),
    "overflow kept finite": (
        ("the toolbox turns a block result into Inf only when its biased exponent equals 2^e - 1 exactly (Generic_BFMA"
         "_TC.m); a larger one stays a finite double beyond the output format's range, and GEMM.m checks for Inf/NaN "
         "only among the inputs: a block result beyond the range, or an Inf/NaN block result (the AMD models' product "
         "limit), is chained as c into the next block as if finite (typecast to single reads NaN/Inf as exponent "
         "128), so the toolbox ends finite where tcemu gives +-Inf or NaN"),
        ("tcemu: the D/C registers hold fp32/fp16 (PTX, CDNA ISA), so a value beyond their range is +-Inf and an "
         "Inf/NaN accumulator stays Inf/NaN; overflow to Inf measured on the H200 (docs/hardware/h200.md, T21)")),
    "sign of a zero result": (
        "the toolbox keeps the sign of a nonzero sum that rounds to zero (-0, IEEE); tcemu returns +0",
        ("tcemu: the H200 returned +0 for every zero result (docs/numerics.md, Disputed points; underflow_sign='keep' "
        "gives the toolbox's -0); no toolbox hardware row has a zero result")),
    "c = 0 floor for FP8 fp16 D": (
        ("for FP8 inputs with fp16 D the toolbox's E_max floor (min_exp_limit) stays at its fp32 value (-132/-133): "
        "it sets the fp16 limit only for fp16 inputs; tcemu's measured presets floor at the fp16 L (-20/-21)"),
        "none: unmeasured for FP8 (the H200's -21 was measured with fp16 inputs); no hardware row reaches it"),
    "zero factor at -126 (MMA-Sim)": (
        ("tcemu's CDNA3 presets follow MMA-Sim, where a zero factor counts at exponent -126 in a group's maximum; the "
        "toolbox removes zero products first"),
        "none: no AMD hardware data here; the CDNA3 ISA does not specify the alignment"),
    "CDNA3 FP8 c drop (MMA-Sim)": (
        ("tcemu's CDNA3 FP8 preset (MMA-Sim) drops c when its exponent is more than 25 below the joint maximum; the "
        "toolbox (MI300MC) rounds c down instead of dropping it"),
        "none: no AMD hardware data here; the CDNA3 ISA does not specify it"),
}


def _fmt_max(fmt: str) -> float:
    return 65504.0 if fmt == "fp16" else float(np.finfo(np.float32).max)


def what_ifs(p) -> list[tuple[str, object]]:
    """(class, tcemu what-if params) tried in order on the outputs no rule explains."""
    out = [("sign of a zero result", replace(p, underflow_sign="keep") if p.scheme is None else None)]
    if p.scheme is not None and hasattr(p.scheme, "zero_exp") and p.scheme.zero_exp is not None:
        out.append(("zero factor at -126 (MMA-Sim)", replace(p, scheme=replace(p.scheme, zero_exp=None))))
    if p.scheme is not None and getattr(p.scheme, "c_drop_gap", None) is not None:
        sch = replace(p.scheme, c_drop_gap=None)
        out.append(("CDNA3 FP8 c drop (MMA-Sim)", replace(p, scheme=sch)))
        if getattr(sch, "zero_exp", None) is not None:
            out.append(("zero factor at -126 (MMA-Sim)", replace(p, scheme=replace(sch, zero_exp=None))))
    if p.output_format == "fp16" and p.input_format in ("e4m3", "e5m2") and p.czero_floor not in (None, -133, -132):
        out.append(("c = 0 floor for FP8 fp16 D", replace(p, czero_floor=-133, c_exp_floor=-133)))
    return [(name, q) for name, q in out if q is not None]


def classify(case, p, a, b, c, tb_d, tb_bits, tb_ok, raised, mine, fp32_block=None) -> np.ndarray:
    """The class of each output (T, M, N) as an object array: '' where both agree (NaN and NaN agree).

    ``case``: the ModelCase (model, fin, fout); ``p``: tcemu's params compared; a, b, c: operand bits (T, M, K),
    (T, K, N), (T, M, N); tb_d: the toolbox's float64 results, tb_bits / tb_ok: as output bits and whether the
    output format holds them; raised: (T, M, N) bool; mine: tcemu's bits; ``fp32_block``: params of the same block
    with fp32 D (for B200 FP8 fp16).
    """
    fout = "fp16" if p.c_format == "fp16" else "fp32"
    mine_v = values(mine, fout)
    both_nan = np.isnan(tb_d) & np.isnan(mine_v)
    cls = np.full(mine.shape, "", dtype=object)
    bad = ((tb_bits != mine) | ~tb_ok) & ~both_nan
    cls[bad] = UNEXPLAINED
    cls[raised] = "raised"
    todo = (cls == UNEXPLAINED)
    fp8 = p.input_format in ("e4m3", "e5m2")
    if fp8 and fout == "fp16" and case.model in ("AdaTC", "L40STC", "H100TC", "H200TC"):
        fin = np.isfinite(tb_d) & (tb_d != 0)
        m, _ = np.frexp(np.where(fin, tb_d, 1.0))
        pow2 = ~fin | (np.abs(m) == 0.5)
        cls[todo & pow2] = "FP8 fp16 D with 0 fraction bits"
    if fp8 and fout == "fp16" and case.model in ("B200TC", "RTXPRO6000TC") and fp32_block is not None:
        c32 = values(c, "fp16").astype(np.float32).view(np.uint32).astype(np.int64)
        ref32 = tcemu_tile(fp32_block, a, b, c32)
        same = tb_d.astype(np.float32).view(np.uint32) == ref32
        cls[(cls == UNEXPLAINED) & same & (tb_d.astype(np.float32) == tb_d)] = "FP8 fp16 D returned as fp32"
    todo = cls == UNEXPLAINED
    big = np.abs(np.where(np.isnan(tb_d), 0, tb_d)) > _fmt_max(fout)
    finite_in = _finite_inputs(p, a, b, c)
    lost = ~np.isfinite(mine_v) & np.isfinite(tb_d)  # tcemu's Inf/NaN where the toolbox ends finite
    cls[todo & finite_in & (big | np.isinf(mine_v) | lost)] = "overflow kept finite"
    todo = cls == UNEXPLAINED
    if todo.any():
        for name, q in what_ifs(p):
            alt = tcemu_tile(q, a, b, c)
            hit = todo & (alt == tb_bits) & tb_ok
            cls[hit] = name
            todo &= ~hit
    return cls


def _finite_inputs(p, a, b, c) -> np.ndarray:
    """(T, M, N): no Inf/NaN among the row's a, the column's b and c."""
    fa = np.isfinite(values(a, p.input_format)).all(axis=2)  # (T, M)
    fb = np.isfinite(values(b, p.b_format)).all(axis=1)  # (T, N)
    fc = np.isfinite(values(c, "fp16" if p.c_format == "fp16" else "fp32"))
    return fa[:, :, None] & fb[:, None, :] & fc
