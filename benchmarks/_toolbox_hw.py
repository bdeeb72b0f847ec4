"""Part (a) of benchmarks/toolbox_diff.py: the toolbox's public hardware data (``tcemu.numerics.public_data``, 48
cases x 5,000 dot products) against tcemu's presets and against the toolbox's own models under Octave.

Each case runs through the preset of the instruction the harness issued (WMMA = ``mma.sync`` blocks with the rows
zero-padded to the instruction's K; FP8: inline-PTX ``mma.sync m16n8k32``), as tests/numerics/test_public_data.py
does, with the default and ``variant="toolbox"``; the toolbox's model of the GPU (its Validate_TC_models.m choice:
A100TC for A2, H100TC for H200, AdaTC for L40S) takes the rows as recorded. The H100/H200 FP8 -> fp32 cases, whose
d lacks c, are compared with c = 0 (the toolbox's validation script does the same and says WGMMA recorded them)
and with the published c.
"""

from __future__ import annotations

import numpy as np
from _toolbox_classes import UNEXPLAINED, classify
from _toolbox_octave import run_with_fallback
from _toolbox_tiles import out_bits, tcemu_tile, values

__all__ = ["GPU_MODEL", "TB_FORMAT", "fields_differ", "hardware_part"]

#: the data's GPU -> the toolbox model its validation script runs
GPU_MODEL = {"V100": "V100TC", "A100": "A100TC", "A2": "A100TC", "Ada": "AdaTC", "L40S": "AdaTC", "H100": "H100TC",
             "H200": "H100TC", "B200": "B200TC"}
#: tcemu format -> the toolbox's format name
TB_FORMAT = {"fp16": "fp16", "bf16": "bf16", "tf32": "tf32", "e4m3": "fp8-e4m3", "e5m2": "fp8-e5m2", "xf32": "xf32",
             "fp8": "fp8-e4m3", "bf8": "fp8-e5m2"}


class _Case:  # the classify() view of a hardware case
    def __init__(self, model):
        self.model = model


def _pad(x: np.ndarray, k: int) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, -x.shape[1] % k)))


def _hex(v) -> list[str]:
    return [f"0x{int(x):x}" for x in np.asarray(v).ravel()]


def _repro(case, i, c, **outs) -> dict:
    return {"row": int(i), "a": _hex(case.a[i]), "b": _hex(case.b[i]), "c": f"0x{int(c[i]):x}",
            **{k: (repr(float(v[i])) if v.dtype == np.float64 else f"0x{int(v[i]):x}") for k, v in outs.items()}}


def _tcemu(p, case, c) -> np.ndarray:
    a, b = _pad(case.a, p.k_instr), _pad(case.b, p.k_instr)
    return tcemu_tile(p, a[:, None, :].astype(np.int64), b[:, :, None].astype(np.int64),
                      c[:, None, None].astype(np.int64))[:, 0, 0]


def hardware_part(env: dict, picks: list[str] | None = None) -> list[dict]:
    """One dict per recorded case: agreements of tcemu (default, variant='toolbox') and of the toolbox's model with
    the hardware bits, and the classes of the toolbox's disagreements with their first reproducer (``picks``:
    substrings of "<GPU> <case>" to run, default all)."""
    from tcemu.numerics import get_preset
    from tcemu.numerics.public_data import load_cases

    rows, done = [], {}
    for case in load_cases():
        if picks and not any(x in f"{case.gpu} {case.name}" for x in picks):
            continue
        fin, fout = case.input_format, case.output_format
        default = get_preset(case.arch, "mma.sync", fin, fout)
        tbv = get_preset(case.arch, "mma.sync", fin, fout, variant="toolbox")
        c = case.c if case.c_applied else np.zeros_like(case.c)
        row = {"gpu": case.gpu, "case": case.name, "api": case.api.split(",")[0], "c_applied": case.c_applied,
               "samples": len(case.d), "model": GPU_MODEL[case.gpu]}
        if not case.c_applied:  # the published c against d, then c = 0 with the native wgmma
            row["published_c_mma_sync"] = int((_tcemu(default, case, case.c) == case.d).sum())
            default = get_preset(case.arch, "wgmma", fin, fout)
        mine = _tcemu(default, case, c)
        row["tcemu"] = int((mine == case.d).sum())
        row["tcemu_label"] = default.label
        tb_var = _tcemu(tbv, case, c)
        row["tcemu_toolbox"] = int((tb_var == case.d).sum())
        if (mine != case.d).any():
            i = int(np.nonzero(mine != case.d)[0][0])
            row["tcemu_repro"] = _repro(case, i, c, hardware=case.d, tcemu=mine)
        key = (row["model"], case.name, case.a.tobytes(), case.b.tobytes(), c.tobytes())
        if key not in done:  # L40S: the same bytes as Ada
            cf = "fp16" if fout == "fp16" else "fp32"
            av = values(case.a, fin)[:, None, :]
            bv = values(case.b, fin)[:, :, None]
            cv = values(c, cf)[:, None, None]
            done[key] = run_with_fallback(env["toolbox"], row["model"], TB_FORMAT[fin], fout, av, bv, cv,
                                          env["workers"])
        d, raised, info = done[key]
        row["toolbox_info"] = info
        fo = "fp16" if fout == "fp16" else ("e8m13" if default.output_format == "e8m13" else "fp32")
        tb_bits, tb_ok = out_bits(d[:, 0, 0], fo)
        row["toolbox"] = int(((tb_bits == case.d) & tb_ok).sum())
        # why the toolbox misses the hardware: the toolbox's choice that variant='toolbox' keeps, or a rule
        a3 = _pad(case.a, tbv.k_instr)[:, None, :].astype(np.int64)
        b3 = _pad(case.b, tbv.k_instr)[:, :, None].astype(np.int64)
        hw3 = case.d.astype(np.int64)[:, None, None]
        cls = classify(_Case(row["model"]), default, a3, b3, c[:, None, None].astype(np.int64), d,
                       tb_bits[:, None, None], tb_ok[:, None, None], raised, hw3, _fp32_block(case))[:, 0, 0]
        choice = (cls == UNEXPLAINED) & (tb_var == tb_bits) & tb_ok
        if choice.any():
            cls[choice] = f"the toolbox's choice ({fields_differ(default, tbv)})"
        row["classes"] = {}
        for name in sorted({x for x in cls if x}):
            i = int(np.nonzero(cls == name)[0][0])
            row["classes"][name] = {"count": int((cls == name).sum()),
                                    "repro": _repro(case, i, c, hardware=case.d, toolbox=d[:, 0, 0], tcemu=mine)}
        rows.append(row)
    return rows


def _fp32_block(case):
    from tcemu.numerics import get_preset

    if case.arch != "b200" or case.output_format != "fp16" or case.input_format not in ("e4m3", "e5m2"):
        return None
    return get_preset("b200", "tcgen05", case.input_format, "fp32", variant="toolbox")


def fields_differ(p, q) -> str:
    """The MMAParams fields in which q (the toolbox's choice) differs from p, as "name p -> q"."""
    names = ("n_fma", "frac_bits", "output_format", "czero_floor", "c_exp_floor", "interleave", "scheme",
             "zero_factor_exp")
    def show(x):
        return type(x).__name__ if hasattr(x, "check") else str(x).replace("None", "none")

    return "; ".join(f"{n} {show(getattr(p, n))} -> {show(getattr(q, n))}" for n in names
                     if getattr(p, n) != getattr(q, n))
