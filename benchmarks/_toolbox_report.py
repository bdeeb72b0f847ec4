"""The summary of benchmarks/toolbox_diff.py: ``tcemu._results`` rows (CSV) and a Markdown report with every class
of disagreement, its first reproducer, its explanation and the side the hardware data or ISA documents support."""

from __future__ import annotations

import json
from pathlib import Path

from _toolbox_classes import CLASSES, UNEXPLAINED

__all__ = ["write"]

UNITS = {"samples": "dot products", "agree": "dot products", "disagree": "dot products",
         "unexplained": "dot products", "raised": "dot products", "tcemu_agree": "dot products",
         "tcemu_toolbox_agree": "dot products", "toolbox_agree": "dot products", "classes": "text"}


def _explain(name: str, hw: list[dict]) -> tuple[str, str]:
    """(what differs and why, the side the hardware data or documents support) of one class."""
    if name in CLASSES:
        return CLASSES[name]
    if not name.startswith("the toolbox's choice"):
        return "no rule explains it", "unexplained"
    what = "the toolbox's modelling choice, which tcemu's variant='toolbox' keeps and its default does not"
    if "interleave" in name:
        fits = [f"{r['gpu']} {r['case']}: default {r['tcemu']}, toolbox choice {r['tcemu_toolbox']}, toolbox model "
                f"{r['toolbox']} of {r['samples']}" for r in hw
                if r["c_applied"] and r["gpu"] in ("H100", "H200", "B200") and r["case"][:4] in ("e4m3", "e5m2")]
        return (what + ": FP8 mma.sync as one 32-term block (the toolbox) rather than the fp16-path emulation",
                "tcemu's default, by the toolbox's own hardware rows (" + "; ".join(fits) + "); cutlass#1986, "
                "DeepGEMM#37 (Hopper FP8 mma.sync runs on the fp16 path)" if fits else
                "tcemu's default (part (a) of a full run gives the hardware rows)")
    if "ExactGroupRound" in name:
        return (what + ": CDNA1 fp16/bf16 groups summed exactly with c and rounded once (MI100MC correct_rounding "
                "= 1), against MMA-Sim's pairwise fp32 tree", ("none: no MI100 hardware data here; the CDNA1 ISA "
                "does not specify the summation"))
    if "floor" in name:
        return (what + ": the E_max floor (the toolbox's L, which also floors a nonzero fp16 c) against the H200's "
                "measured floors", ("tcemu's default for fp16/bf16/tf32, measured on the H200 (docs/hardware/"
                "h200-probe.json, T24-T26); unmeasured for FP8 and for other GPUs"))
    return what, "see docs/numerics.md, Disputed points"


def _class_text(classes: dict) -> str:
    return " | ".join(f"{k}: {e['count']}" for k, e in sorted(classes.items()))


def result_rows(hw: list[dict], rows: list[dict]) -> list:
    from tcemu._results import case as case_text
    from tcemu._results import measurement

    out = []
    for r in hw:
        vals = {"samples": r["samples"], "tcemu_agree": r["tcemu"], "tcemu_toolbox_agree": r["tcemu_toolbox"],
                "toolbox_agree": r["toolbox"], "classes": _class_text(r["classes"])}
        out += measurement("toolbox_diff", "tcemu", "hardware", case_text(gpu=r["gpu"], case=r["case"],
                                                                          model=r["model"]), vals, UNITS)
    for r in rows:
        for t in r["targets"]:
            unexplained = t["classes"].get(UNEXPLAINED, {}).get("count", 0)
            raised = t["classes"].get("raised", {}).get("count", 0)
            vals = {"samples": r["samples"], "agree": t["agree"], "disagree": r["samples"] - t["agree"],
                    "unexplained": unexplained, "raised": raised, "classes": _class_text(t["classes"])}
            out += measurement("toolbox_diff", "tcemu", f"target={t['target']}",
                               case_text(model=r["case"], preset=t["preset"], K=r["k"]), vals, UNITS)
    return out


def write(out: Path, hw: list[dict], rows: list[dict], meta: dict) -> None:
    """Write ``out``.csv and ``out``.md."""
    from tcemu._results import Provenance, write_results

    out.parent.mkdir(parents=True, exist_ok=True)
    write_results(out.with_suffix(".csv"), result_rows(hw, rows), Provenance.current(device="cpu"))
    lines = [f"# tcemu vs the Khattak & Mikaitis toolbox @ {meta['toolbox_commit'][:7]}: every output bit\n",
             f"Toolbox: github.com/north-numerical-computing/MATLAB-tensor-core @ {meta['toolbox_commit']}"
             + "".join(f"; {n}.m (deleted at {d['deleted_at']}) taken from {d['taken_from']}"
                       for n, d in meta["deleted"].items()) + ". "
             f"{meta['octave']}; {meta['machine']}. Command: `{meta['command']}` ({meta['wall_s']:.0f} s wall, "
             f"{meta['octave_cpu_s'] / 60:.1f} CPU-minutes in Octave).\n"]
    lines += _hw_lines(hw) + _model_lines(rows, meta) + _class_lines(hw, rows)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def _hw_lines(hw: list[dict]) -> list[str]:
    if not hw:
        return []
    total = sum(r["samples"] for r in hw)
    lines = ["## (a) Public hardware data\n",
             (f"{len(hw)} cases, {total} dot products. tcemu: the preset of the instruction the harness issued "
             "(default; `variant=\"toolbox\"`); toolbox: its model of the GPU under Octave, rows as recorded. "
             "Agreements are every output bit.\n"),
             "| GPU | case | tcemu preset | samples | tcemu | tcemu toolbox variant | toolbox model | toolbox |",
             "|---|---|---|---:|---:|---:|---|---:|"]
    for r in hw:
        note = "" if r["c_applied"] else " (c = 0)"
        lines.append(f"| {r['gpu']} | {r['case']}{note} | {r['tcemu_label']} | {r['samples']} | {r['tcemu']} | "
                     f"{r['tcemu_toolbox']} | {r['model']} | {r['toolbox']} |")
    lacks = [r for r in hw if not r["c_applied"]]
    if lacks:
        lines.append("\nThe cases marked c = 0 (H100/H200 FP8 -> fp32): with the published c, tcemu's `mma.sync` "
                     "preset matches " + ", ".join(f"{r['gpu']} {r['case']} {r['published_c_mma_sync']}"
                                                   for r in lacks)
                     + " of 5000 rows; with c = 0 its `wgmma` preset (N = 32, F = 13, e8m13) matches the counts "
                       "above. The recorded d is A.B without c: the toolbox's Validate_TC_models.m loads C as zeros "
                       "for exactly these cases ('D = AB + D where D is zero for fp8 with WGMMA'), while its "
                       "published CUDA source (mma_fp8_output_fp32.cu) issues mma.sync with c; the H100 and H200 d "
                       "are byte-identical with identical a and b and different c.")
    for r in hw:
        if "tcemu_repro" in r:
            lines.append(f"- tcemu differs from the hardware in {r['gpu']} {r['case']}: `{json.dumps(r['tcemu_repro'])}`")
        info = r["toolbox_info"]
        if info["raised_tiles"]:
            lines.append(f"- {r['gpu']} {r['case']}: the toolbox raised on {info['raised_tiles']} rows as shipped "
                         f"({info['message'].splitlines()[0]}); with the MATLAB shims {info['raised_rows']} still raise")
    return lines


def _model_lines(rows: list[dict], meta: dict) -> list[str]:
    if not rows:
        return []
    lines = ["\n## (b) The toolbox's models under Octave\n",
             ("Random and adversarial 16 x 16 tiles (families: normal, wide, cancel, finite, subnormal, zeros, random, "
             "special, in turn), K = two of the toolbox's blocks at least; each model call computes one tile. NaN "
             "against NaN counts as agreement (the toolbox returns MATLAB's NaN, no payload).\n"),
             "| model case | K | samples | tcemu target | tcemu preset | agree | unexplained | classes |",
             "|---|---:|---:|---|---|---:|---:|---|"]
    for r in rows:
        for t in r["targets"]:
            un = t["classes"].get(UNEXPLAINED, {}).get("count", 0)
            lines.append(f"| {r['case']} | {r['k']} | {r['samples']} | {t['target']} | {t['preset']} | {t['agree']} "
                         f"| {un} | {_class_text({k: v for k, v in t['classes'].items() if k != UNEXPLAINED})} |")
    raised = sorted({f"{r['case']} on {r['raised_tiles']} tiles ({r['message'].splitlines()[0]}), of whose "
                     f"outputs {r['raised_rows']} raised again one by one with the shims"
                     + (f" ({r['shim_message'].splitlines()[0]})" if r["shim_message"] else "")
                     for r in rows if r["raised_tiles"]})
    lines.append("\nWhat ran: every model case above ran under Octave, the AMD models with the MATLAB shims "
                 "(`_toolbox_octave.COMPAT_SHIMS`) throughout" + (". As shipped (NVIDIA) or with the shims (AMD), "
                 "these raised: " + "; ".join(raised) + "; their tiles were rerun output by output with the shims"
                 if raised else "") + ".")
    for w in meta.get("wrappers", []):
        what = "as shipped" if w["inner"] == "as shipped" else f"(calls {w['inner']})"
        lines.append(f"- {w['wrapper']} {what}, one {w['formats']} tile: {w['note']}")
    return lines


def _class_lines(hw: list[dict], rows: list[dict]) -> list[str]:
    seen: dict[str, list[str]] = {}
    for r in rows:
        for t in r["targets"]:
            for name, e in t["classes"].items():
                seen.setdefault(name, []).append(f"{r['case']} vs {t['target']} x{e['count']}: "
                                                 f"`{json.dumps(e['repro'])}`")
    for r in hw:
        for name, e in r["classes"].items():
            seen.setdefault(name, []).append(f"hardware {r['gpu']} {r['case']}, toolbox model x{e['count']}: "
                                             f"`{json.dumps(e['repro'])}`")
    n_un = sum(t["classes"].get(UNEXPLAINED, {}).get("count", 0) for r in rows for t in r["targets"]) + \
        sum(r["classes"].get(UNEXPLAINED, {}).get("count", 0) for r in hw)
    lines = ["\n## Classes of disagreement\n", f"Unexplained outputs in all: {n_un}.\n"]
    for name in sorted(seen):
        what, side = _explain(name, hw)
        lines.append(f"### {name}\n\n{what}. Supported: {side}.\n")
        lines += [f"- {x}" for x in seen[name]]
        lines.append("")
    return lines
