"""Readable summaries of the probe report and the validation summary (Markdown)."""

from __future__ import annotations

__all__ = ["probe_markdown", "validation_markdown"]


def _dev(d: dict) -> str:
    keys = ("gpu", "compute_capability", "driver", "cuda_runtime", "nvcc", "torch", "numpy", "ml_dtypes")
    return ", ".join(f"{k} {d[k]}" for k in keys if d.get(k))


def probe_markdown(rep: dict) -> str:
    out = ["# Tensor Core probe", "", f"Device: {_dev(rep.get('device', {}))}", ""]
    out += ["| case | parameter | inferred | preset | agree |", "|---|---|---|---|---|"]
    for c in rep["cases"]:
        cmp = c.get("preset_comparison", {})
        if "error" in cmp:
            out.append(f"| {c['case']} | (preset comparison failed: {cmp['error']}) | | | |")
            continue
        for k, v in cmp.items():
            mark = "yes" if v["agree"] else "**NO**"
            if v.get("undecidable"):
                mark = "undecidable"
            out.append(f"| {c['case']} | {k} | {v['inferred']} | {v['preset']} | {mark} |")
    out += ["", "## Final hypothesis on every vector", "",
            "| case | vectors | mismatches | by family | notes |", "|---|---|---|---|---|"]
    for c in rep["cases"]:
        f = c["final"]
        notes = "; ".join(c["parameters"].get("_notes", []))
        out.append(f"| {c['case']} | {f['vectors']} | {f['mismatches']} | {f['mismatches_by_family']} | {notes} |")
    out += ["", "## Checks", ""]
    for c in rep["cases"]:
        for k, v in c.get("checks", {}).items():
            out.append(f"- {c['case']}: {k}: {v}")
    out += ["", "## mma.sync vs wgmma on identical vectors", ""]
    for p in rep.get("mma_sync_vs_wgmma", []):
        out.append(f"- {p['mma.sync']} vs {p['wgmma']}: {p['identical']}/{p['vectors']} identical; "
                   f"differ by family {p['differ_by_family']}")
    out += ["", "## Deciding vectors (first per rejected value)", ""]
    for c in rep["cases"]:
        out.append(f"### {c['case']}")
        for name, par in c["parameters"].items():
            if name.startswith("_") or not isinstance(par, dict):
                continue
            for ev in par.get("evidence", [])[:3]:
                out.append(f"- {name}: rejects `{ev.get('rejects')}` by `{ev['vector']}` ({ev['family']}): "
                           f"hardware {ev['hardware']}, predicted {ev['predicted']}")
        out.append("")
    return "\n".join(out) + "\n"


def validation_markdown(s: dict) -> str:
    out = ["# Tensor Core validation", "", f"Device: {_dev(s.get('device', {}))}", "",
           f"{s['total_samples']:,d} samples, {s['total_mismatches']:,d} mismatches, {s['seconds']:.0f} s", "",
           "| instruction | input | output | samples | mismatches | families with mismatches |",
           "|---|---|---|---|---|---|"]
    for c in s["cases"]:
        fam = {f: v["mismatches"] for f, v in c["families"].items() if v["mismatches"]}
        out.append(f"| {c['ptx']} | {c['input_format']} | {c['output_format']} | {c['samples']:,d} | "
                   f"{c['mismatches']:,d} | {fam or ''} |")
    return "\n".join(out) + "\n"
