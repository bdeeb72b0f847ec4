"""The measured model: the preset of each case with every field the hardware probe decided otherwise replaced.

``measured_params`` derives it from a probe report (``tcemu probe``, the campaign); ``measured_table`` reads the
stored H200 result (``data/h200_measured.json``). The campaign, the probe and the replay check use both; keeping
them here leaves those modules free of imports of each other.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from .cases import get_case

__all__ = ["MEASURED_PATH", "measured_params", "measured_table"]


def _consistent_czero(rep_case: dict):
    inf = rep_case["parameters"].get("czero_floor", {}).get("inferred")
    if not isinstance(inf, list):
        return None
    return {d["czero_floor"] for d in inf}


def _zero_plus(rc: dict) -> bool:
    """Zero results are +0 unless a probe vector contradicts it (exact zero sums and underflows alike)."""
    P = rc["parameters"]
    for stage in ("czero_floor", "nan"):
        inf = P.get(stage, {}).get("inferred")
        if isinstance(inf, list) and inf and "underflow_sign" in inf[0]:
            if not any(d.get("underflow_sign") == "plus" for d in inf):
                return False
    inf = P.get("nan", {}).get("inferred")
    if isinstance(inf, list) and inf and not any(d.get("zero_sign") == "plus" for d in inf):
        return False
    return True


def measured_params(report: dict) -> tuple[dict, dict]:
    """case name -> (MMAParams, zero_plus): the preset with every field the probe decided otherwise replaced.

    A field is changed only where the preset's value does not fit the probe vectors; it then takes the probe's
    adopted value. Returns the table and a record of the changes."""
    from tcemu.numerics.rounding import Rounding

    from .validate import model_params

    table, changes = {}, {}
    for rc in report["cases"]:
        case = get_case(rc["case"])
        p = model_params(case)
        cmp = rc.get("preset_comparison", {})
        h = rc["final"]["hypothesis"]
        kw = {}
        if "error" not in cmp:
            for field in ("frac_bits", "c_exp_floor"):
                row = cmp.get(field)
                if row and not row["agree"]:
                    kw[field] = row["inferred"]
            row = cmp.get("output_rounding")
            if row and not row["agree"]:
                kw["output_rounding"] = Rounding(row["inferred"])
            row = cmp.get("overflow")
            if row and not row["agree"]:
                kw["overflow"] = row["inferred"]
            cz = _consistent_czero(rc)
            if cz is not None and p.czero_floor not in cz:
                kw["czero_floor"] = h["czero_floor"]  # the probe's adopted value (unique where the vectors decide)
        zero_plus = _zero_plus(rc)
        if kw:
            what = ", ".join(f"{k}={v}" for k, v in kw.items())
            kw["sources"] = f"{p.sources}; {what}: measured by tcemu probe (docs/hardware/h200-probe.json)"
        try:
            q = replace(p, **kw) if kw else p
        except Exception as exc:  # noqa: BLE001
            changes[case.name] = {"error": f"{type(exc).__name__}: {exc}", "wanted": {k: str(v) for k, v in kw.items()}}
            q = p
        table[case.name] = (q, zero_plus)
        changes[case.name] = {**{k: str(v) for k, v in kw.items() if k != "sources"}, "zero_result_plus": zero_plus}
    return table, changes


MEASURED_PATH = Path(__file__).with_name("data") / "h200_measured.json"


def measured_table(path: str | Path = MEASURED_PATH) -> dict:
    """case name -> (MMAParams, zero_plus): the preset corrected by the H200 probe (``data/h200_measured.json``,
    written from docs/hardware/h200-probe.json). ``zero_plus``: every zero result is +0."""
    from .validate import model_params

    raw = json.loads(Path(path).read_text())["cases"]
    out = {}
    for name, ch in raw.items():
        case = get_case(name)
        kw = {}
        if "czero_floor" in ch:
            kw["czero_floor"] = None if ch["czero_floor"] in ("None", None) else int(ch["czero_floor"])
        for f in ("frac_bits", "c_exp_floor"):
            if f in ch:
                kw[f] = None if ch[f] in ("None", None) else int(ch[f])
        p = model_params(case)
        out[name] = (replace(p, **kw) if kw else p, bool(ch.get("zero_result_plus", False)))
    return out
