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


# comparison row -> the probe stages whose vectors decided it
_STAGES = {"n_fma": ["blocks"], "interleave": ["blocks"], "c_enters": ["blocks"], "frac_bits": ["frac_bits"],
           "output_format": ["output_precision"], "output_rounding": ["output_rounding"],
           "c_add_rounding": ["c_add_rounding"], "czero_floor": ["czero_floor"], "c_exp_floor": ["c_exp_floor"],
           "overflow": ["overflow"], "tf32_truncate": ["tf32_conversion"], "alignment": ["alignment"],
           "normalisation": ["normalisation"], "subnormals": ["subnormals"], "nan": ["nan"],
           "zero_result_sign": ["czero_floor", "nan"], "k_instr": []}


def _pick_evidence(evs: list, preset, inferred, n: int = 5) -> list:
    """The rejections of the preset's value, of the values next to the answer, and of None first."""
    def score(e):
        vals = list(e.get("rejected", {}).values())
        v = vals[0] if vals else None
        if vals and v == preset:
            return 0
        if isinstance(inferred, int) and isinstance(v, int) and abs(v - inferred) == 1:
            return 1
        if vals and v is None:
            return 2
        return 3
    return sorted(evs, key=score)[:n]


def compact_probe(rep: dict, measured: dict | None = None) -> dict:
    """The probe report as kept in docs/hardware/h200-probe.json: per case and parameter the inferred value,
    the preset's, whether they agree, the values that fit, and the vectors that decided it."""
    out = {"device": rep.get("device", {}), "method": "tcemu probe (src/tcemu/numerics/hardware/probe.py); "
           "hardware bits in src/tcemu/numerics/hardware/data/h200_probe_raw.npz", "cases": []}
    for c in rep["cases"]:
        P = c["parameters"]
        params = {}
        for name, row in c.get("preset_comparison", {}).items():
            evs = [e for st in _STAGES.get(name, []) for e in P.get(st, {}).get("evidence", [])]
            nvec = sum(P.get(st, {}).get("vectors", 0) for st in _STAGES.get(name, []))
            params[name] = {"inferred": row["inferred"], "preset": row["preset"], "agree": row["agree"],
                            **({"consistent_values": row["consistent_values"]} if "consistent_values" in row else {}),
                            **({"undecidable": True} if row.get("undecidable") else {}),
                            "deciding_vectors": _pick_evidence(evs, row["preset"], row["inferred"]),
                            "vectors_tried": nvec}
        entry = {"case": c["case"], "instruction": c["instruction"], "ptx": c["ptx"],
                 "input_format": c["input_format"], "output_format": c["output_format"], "parameters": params,
                 "chaining": P.get("chaining"), "checks": c.get("checks", {}),
                 "final_hypothesis": c["final"]["hypothesis"],
                 "final_hypothesis_vectors": c["final"]["vectors"],
                 "final_hypothesis_mismatches": c["final"]["mismatches"]}
        if measured and c["case"] in measured:
            entry["measured_model"] = measured[c["case"]]
        out["cases"].append(entry)
    out["mma_sync_vs_wgmma"] = rep.get("mma_sync_vs_wgmma", [])
    return out
