"""Reports of benchmarks/mmasim_diff.py: the result rows and the markdown of one run, the explanations of its
disagreement classes (what decides each, with the hardware record or document), and the consolidated summary of
every stored run (benchmarks/results/cpu/numerics/mmasim_diff_summary.md), whose count of unexplained
disagreements is computed from the stored CSVs, not written by hand."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

#: which point the default variant departs from MMA-Sim on, and the record that decides it (class prefixes)
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
                 "outputs); MMA-Sim's glibc fma on its x86-64 host (the FMA instruction) b's, then a's, then the "
                 "sum's (tcemu's variant='mmasim')",
    "NaN bits": "AMD: tcemu's default returns one canonical NaN (0x7fc00000, fp64 0x7ff8000000000000), MMA-Sim the "
                "NaN its host arithmetic yields (tcemu.numerics.model_amd_nan, tcemu's variant='mmasim'). No AMD "
                "document or hardware record here states the NaN bits of an MFMA result (Findings, CDNA)",
}
#: disagreements with MMA-Sim and its failures, explained (cases whose names hold all the substrings)
FINDINGS = {
    ("n8k32.", "e2m1"): "MMA-Sim's K=32 kinds pass e2m1 as raw uint8 containers: `extract_significand_exponent` "
                      "rejects uint8 (AssertionError, counted as MMA-Sim errors), except where its FP64 pre-check "
                      "finds Inf/NaN and returns early, having read each container as an integer (0xc as 12, not "
                      "-2 x ...): the sign and NaN-vs-Inf classes there. The OCP MX / PTX e2m1 encoding (0xc = -2) "
                      "supports tcemu",
    ("k64.",): "MMA-Sim's mxf4nvf4 path (`nv_fused_dot_add_with_block_scale`) checks only NaN: an Inf c, or a sum "
               "beyond fp32's range under large scales, reaches `math.trunc(inf)` and raises OverflowError (counted "
               "as MMA-Sim errors, not compared: the rows give the outputs compared). tcemu gives +-Inf there, as "
               "every kind does (overflow to Inf under RZ measured on the H200, T21; unmeasured for block scales)",
    ("f64.f64.f64.f64",): "NVIDIA fp64: NaN bits only. tcemu's default follows the H100's DMMA (docs/hardware/"
                          "h100-dmma.json): a NaN operand's payload quieted, 0xfff8000000000000 for invalid "
                          "operations, and where NaNs meet in one FMA b's, then the running sum's, then a's. MMA-Sim "
                          "calls glibc's fma on its x86-64 host (the FMA instruction): b's, then a's, then the sum's, "
                          "x86's default NaN 0xfff8000000000000 for invalid operations; variant='mmasim' keeps that "
                          "order. The H100 data supports the default. Finite and infinite outputs agree",
    ("CDNA",): "AMD: NaN bits only. MMA-Sim computes in host arithmetic: fp32/fp64 chains glibc fmaf/fma (b's NaN, "
               "then a's, then the sum's; 0xffc00000 / 0xfff8000000000000 for invalid operations); CDNA3 groups the "
               "NaN of a float64 sum in torch (products: b's NaN first in groups of 8 or more, a's in groups of 4; "
               "four partial sums; c's NaN first; fnuz fp8 NaN 0x7fc00001; products beyond 2^128 of both signs "
               "0x7fc00000). tcemu.numerics.model_amd_nan states these and variant='mmasim' follows them; the "
               "default returns one canonical NaN. Documents: none found states MFMA NaN bits. The CDNA ISA "
               "guides' MODE register (as LLVM's AMDGPU backend, SIModeRegisterDefaults.h, cites it) says that "
               "with IEEE=1, the compute-kernel default, floating-point opcodes that gather exception flags quiet "
               "and propagate signaling NaN inputs per IEEE 754-2008, and DX10_CLAMP makes the clamp modifier "
               "turn NaN into 0: VALU rules that lean toward propagating an input's quieted NaN, not a constant, "
               "but say nothing of MFMA, of which NaN wins or of the invalid-operation NaN. Neither choice is "
               "supported by a document or hardware data here. Finite and infinite outputs agree",
    ("CDNA1", "f16"): "MMA-Sim's fp16 and bf16 paths of CDNA1 and CDNA2 call `pairwise_dot`, which asserts fp32 "
                      "operands, on fp16/bf16 tensors: every input raises (counted as MMA-Sim errors; CDNA2's "
                      "fp16 and bf16 alike). With the operands cast to fp32 first they agree with tcemu "
                      "(benchmarks/results/cpu/numerics/mmasim_diff_schemes.json); variant='mmasim' gives the NaN "
                      "bits MMA-Sim computes with its assertions off (python -O)",
}
#: (case substrings, variant or None for both, class regex) -> the explanation (a key of CAUSES or FINDINGS) and
#: the side the hardware data or documents support; the first rule that matches explains a class
EXPLAINED = [
    (("n8k32.", "e2m1"), None, r"^[a-z]+: (other: )?(sign differs|tcemu (inf|nan) vs MMA-Sim (inf|nan))$",
     ("n8k32.", "e2m1"), "tcemu (OCP MX / PTX e2m1 encoding); an MMA-Sim defect"),
    ((), "measured", r"^[a-z]+: zero-factor rule(: | \+ c floors: )", "zero-factor rule",
     "tcemu's default (H100 measurements); variant='mmasim' keeps MMA-Sim's"),
    ((), "measured", r"^[a-z]+: c floors: ", "c floors", "tcemu's default (H200 measurements)"),
    (("f64.f64.f64.f64",), "measured", r"^[a-z]+: NaN order: NaN bits differ$", "NaN order",
     "tcemu's default (H100 DMMA record); variant='mmasim' keeps MMA-Sim's host order"),
    (("CDNA",), "measured", r"^[a-z]+: NaN bits: NaN bits differ$", "NaN bits",
     "neither: no AMD document or hardware data states MFMA NaN bits; variant='mmasim' keeps MMA-Sim's"),
]
UNITS = {"generated": "dot products", "compared": "dot products", "agree": "dot products",
         "disagree": "dot products", "mmasim_errors": "tiles", "classes": "text", "status": "text"}
_VARIANTS = ("mmasim", "measured")


def explain(case: str, variant: str, cls: str) -> tuple[str, str] | None:
    """(explanation key, supported side) of one disagreement class, or None if no rule explains it."""
    for subs, var, pattern, key, side in EXPLAINED:
        if all(s in case for s in subs) and var in (None, variant) and re.search(pattern, cls):
            return (key if isinstance(key, str) else " and ".join(key)), side
    return None


def failure_finding(case: str) -> str | None:
    """The Findings entry that explains MMA-Sim raising on a case's inputs, or None."""
    if "k64." in case:
        return "k64."
    if "n8k32." in case and "e2m1" in case:
        return "n8k32. and e2m1"
    if case.startswith(("CDNA1/", "CDNA2/")) and ("f16" in case or "bf16" in case):
        return "CDNA1 and f16"
    return None


def result_rows(rows: list[dict]) -> list:
    """tcemu._results rows: per case and variant, dot products generated and compared, agreements, disagreements
    by class, MMA-Sim errors (tiles it raised on: generated, not compared)."""
    from tcemu._results import case as case_text, measurement

    out = []
    for r in rows:
        if r["status"] != "compared":
            out += measurement("mmasim_diff", "tcemu", "", case_text(mmasim=r["case"]), {"status": r["status"]}, UNITS)
            continue
        for v in _VARIANTS:
            classes = " | ".join(f"{k}: {e['count']}" for k, e in sorted(r["classes"][v].items()))
            values = {"generated": r["generated"], "compared": r["compared"], "agree": r["agree"][v],
                      "disagree": r["compared"] - r["agree"][v], "mmasim_errors": r["mmasim_errors"],
                      "classes": classes}
            fields = case_text(mmasim=r["case"], preset=r["tcemu"], seed=r["seed"])  # seeds: disjoint samples
            out += measurement("mmasim_diff", "tcemu", f"variant={v}", fields, values, UNITS)
    return out


def write(rows: list[dict], args, wall: float) -> None:
    """The run's CSV (``args.out``) and markdown beside it: the table, every class of disagreement with its first
    reproducer, the findings and what decides each class of the default's disagreements."""
    from tcemu._results import Provenance, write_results

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_results(out.with_suffix(".csv"), result_rows(rows), Provenance.current())
    compared = [r for r in rows if r["status"] == "compared"]
    ran = [r for r in compared if r["compared"]]
    clean = {v: sum(r["agree"][v] == r["compared"] for r in ran) for v in _VARIANTS}
    lines = ["# tcemu vs MMA-Sim @ c785138: every output bit\n",
             f"Command: `{' '.join(sys.argv)}` ({wall:.0f} s wall for this call, {args.workers} workers; "
             f"{sum(r.get('seconds', 0.0) for r in compared) / 3600:.2f} core-hours over every share"
             f"{', shares kept in --parts-dir' if args.parts_dir else ''}). {getattr(args, 'mmasim_note', '')}.\n",
             f"{len(rows)} MMA-Sim cases; {len(compared)} modelled by tcemu and compared; "
             f"{len(rows) - len(compared)} not modelled by tcemu (listed below). MMA-Sim ran on {len(ran)} of the "
             f"{len(compared)} ({len(compared) - len(ran)} raise on every input: Findings); "
             f"{sum(r['generated'] for r in compared)} dot products generated, "
             f"{sum(r['compared'] for r in compared)} outputs compared (the rest are tiles MMA-Sim raised on). "
             f"Every output bit agrees in {clean['mmasim']} of the {len(ran)} cases with `variant=\"mmasim\"` and "
             f"in {clean['measured']} with the default.\n",
             "| case | tcemu preset | generated | compared | agree (mmasim) | agree (measured) | "
             "MMA-Sim errors (tiles) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in compared:
        lines.append(f"| {r['case']} | {r['tcemu']} | {r['generated']} | {r['compared']} | {r['agree']['mmasim']} | "
                     f"{r['agree']['measured']} | {r['mmasim_errors']} |")
    lines.append("\n## Disagreements (first reproducer per class)\n")
    for r in compared:
        for v in _VARIANTS:
            for cls, e in sorted(r["classes"][v].items()):
                lines.append(f"- {r['case']} variant={v} [{cls}] x{e['count']}: `{json.dumps(e['repro'])}`")
        if r["mmasim_error"]:
            lines.append(f"- {r['case']}: MMA-Sim raised on {r['mmasim_errors']} tiles: {r['mmasim_error']}")
    lines += explanation_sections([r["case"] for r in compared])
    lines.append("\n## Not modelled by tcemu\n")
    lines += [f"- {r['case']}: {r['status']}" for r in rows if r["status"] != "compared"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def explanation_sections(cases: list[str]) -> list[str]:
    """The Findings (those matching ``cases``) and the causes of the default's disagreements, as markdown lines."""
    lines = ["\n## Findings\n"]
    lines += [f"- cases named with {' and '.join(f'`{x}`' for x in k)}: {v}" for k, v in FINDINGS.items()
              if any(all(x in c for x in k) for c in cases)]
    lines.append("\n## What decides each class of the default variant's disagreements\n")
    lines += [f"- {k}: {v}" for k, v in CAUSES.items()]
    return lines
