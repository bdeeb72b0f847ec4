"""The probe's inferred parameters next to the H200 preset's, field by field (:func:`compare_with_preset`)."""

from __future__ import annotations

from .cases import Case

__all__ = ["compare_with_preset"]


def compare_with_preset(report: dict, case: Case) -> dict:
    """Field by field: the inferred value next to the H200 preset's (``get_preset("h200", ...)``)."""
    from .validate import model_params

    p = model_params(case)
    h = report["final"]["hypothesis"]
    blocks = h["blocks"]
    K = case.K
    sizes = {len(b) for b in blocks}
    contiguous = all(b == list(range(b[0], b[0] + len(b))) for b in blocks)
    inferred_n = sizes.pop() if len(sizes) == 1 and contiguous else None
    inter = None
    if not contiguous and len(blocks) == 2:
        inter = [sorted({k % 4 for k in b}) for b in blocks]
    preset_inter = [list(g) for g in p.interleave] if p.interleave else None
    rows = {
        "n_fma": (inferred_n if inter is None else len(blocks[0]), p.n_fma),
        "interleave": (inter, preset_inter),
        "c_enters": (h["c_where"], "last" if p.interleave else "first"),
        "frac_bits": (h["frac_bits"], p.frac_bits),
        "output_format": (h["out_fmt"], p.output_format),
        "output_rounding": (h["out_rnd"], str(p.output_rounding.value if hasattr(p.output_rounding, "value") else p.output_rounding)),
        "c_add_rounding": (h["c_add_rnd"] if h["c_where"] == "last" else None,
                           str(p.c_add_rounding.value) if p.c_add_rounding is not None else None),
        "czero_floor": (h["czero_floor"], p.czero_floor),
        "c_exp_floor": (h["c_exp_floor"], p.c_exp_floor),
        "overflow": (h["overflow"], p.overflow),
        "tf32_truncate": (h["tf32_conv"] == "trunc" if case.input_format == "tf32" else None,
                          p.tf32_truncate if case.input_format == "tf32" else None),
        "alignment": (h["align"], "trunc"),
        "normalisation": (h["norm"], "late"),
        "subnormals": ("ftz" if h["ftz_in"] or h["ftz_out"] else "kept", "kept"),
        "nan": (h["nan"] or "canonical", "canonical"),
        "zero_result_sign": ("+0 always" if h["underflow_sign"] == "plus" else "IEEE (keeps sign)", "IEEE (keeps sign)"),
        "k_instr": (K, p.k_instr),
    }
    P = report["parameters"]
    sets = {"frac_bits": _consistent(P, "frac_bits", None), "output_format": _consistent(P, "output_precision", None),
            "output_rounding": _consistent(P, "output_rounding", None),
            "czero_floor": _consistent(P, "czero_floor", "czero_floor"),
            "c_exp_floor": _consistent(P, "c_exp_floor", "c_exp_floor"), "overflow": _consistent(P, "overflow", "overflow")}
    out = {}
    for k, (inf, pre) in rows.items():
        undecided = (k == "czero_floor" and P.get("czero_floor", {}).get("inferred") == "undecidable")
        cons = sets.get(k)
        agree = inf == pre or undecided or (k == "n_fma" and p.interleave is not None and inter is not None) \
            or (cons is not None and pre in cons)
        row = {"inferred": inf, "preset": pre, "agree": bool(agree)}
        if undecided:
            row["undecidable"] = True
        if cons is not None and len(cons) > 1:
            row["consistent_values"] = sorted(cons, key=lambda x: (x is None, str(x)))
        out[k] = row
    return out


def _consistent(P: dict, stage: str, key: str | None):
    """The set of values of one parameter that fit every deciding vector (None if the stage did not run)."""
    inf = P.get(stage, {}).get("inferred")
    if not isinstance(inf, list):
        return None
    if key is None:
        return set(inf)
    vals = set()
    for d in inf:
        v = d.get(key)
        vals.add(int(v, 16) if isinstance(v, str) and v.startswith("0x") else v)
    return vals
