"""The replay set: stored H200 hardware samples, checked against the model on any CPU (``make test``).

``data/h200_replay.npz`` holds, per ``<case>__<family>`` group, one-sample reproducers: ``__a`` and ``__b``
(S, K) input bits, ``__c`` (S,) and ``__d`` (S,) the hardware's output bits, for every validation case and input
family and for the probe families (groups ``<case>__probe_<family>``). ``check_replay`` runs the model on all of
them and counts mismatches per group.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .cases import get_case
from .measured import MEASURED_PATH, measured_table

__all__ = ["REPLAY_PATH", "MEASURED_PATH", "load_replay", "measured_table", "check_replay"]

REPLAY_PATH = Path(__file__).with_name("data") / "h200_replay.npz"


def load_replay(path: str | Path = REPLAY_PATH) -> dict[str, dict[str, np.ndarray]]:
    z = np.load(path, allow_pickle=False)
    groups: dict[str, dict[str, np.ndarray]] = {}
    for key in z.files:
        if key.startswith("__"):
            continue
        group, field = key.rsplit("__", 1)
        groups.setdefault(group, {})[field] = z[key]
    return groups


def check_replay(path: str | Path = REPLAY_PATH, groups: list[str] | None = None, table: dict | None = None) -> dict:
    """Model vs stored hardware bits; returns totals and per-group counts with the first mismatches.

    ``table``: case name -> (MMAParams, zero_plus) to check instead of the shipped presets (e.g.
    ``measured_table()``)."""
    from .validate import model_bits, variant_bits

    data = load_replay(path)
    out = {"samples": 0, "mismatches": 0, "groups": {}}
    for key, g in sorted(data.items()):
        if groups and key not in groups:
            continue
        case = get_case(key.split("__", 1)[0])
        a = g["a"].astype(case.in_dtype)
        b = g["b"].astype(case.in_dtype)
        c = g["c"].astype(case.out_dtype)
        d = g["d"].astype(np.uint64)
        if table is not None and case.name in table:
            dm = variant_bits(case, a, b, c, *table[case.name]).astype(np.uint64)
        else:
            dm = model_bits(case, a, b, c).astype(np.uint64)
        bad = np.nonzero(dm != d)[0]
        out["groups"][key] = {"samples": int(d.size), "mismatches": int(bad.size),
                              "first": [(int(i), f"{int(d[i]):#x}", f"{int(dm[i]):#x}") for i in bad[:5]]}
        out["samples"] += int(d.size)
        out["mismatches"] += int(bad.size)
    return out


def build_replay(validation_npz: str | Path, probe_raw_npz: str | Path, out: str | Path = REPLAY_PATH,
                 per_probe_family: int = 120, seed: int = 0) -> dict:
    """Assemble the replay set: every validation (case, family) sample kept by ``tcemu validate``, plus up to
    ``per_probe_family`` probe vectors per (case, probe family, chain length), always including every vector on
    which the preset and the hardware disagree."""
    from .probe import load_raw
    from .validate import model_bits

    arrays: dict[str, np.ndarray] = {}
    z = np.load(validation_npz)
    for key in z.files:
        arrays[key] = z[key]
    raw, device = load_raw(probe_raw_npz)
    rng = np.random.default_rng(seed)
    for cname, e in raw.items():
        case = get_case(cname)
        fams = e["family"]
        for fam in np.unique(fams):
            for nch in (1, 2):
                idx = np.nonzero((fams == fam) & (e["nchain"] == nch))[0]
                if not idx.size:
                    continue
                K = case.K * nch
                a, b = e["a"][idx, :K].astype(case.in_dtype), e["b"][idx, :K].astype(case.in_dtype)
                c, d = e["c"][idx].astype(case.out_dtype), e["d"][idx]
                try:
                    bad = np.nonzero(model_bits(case, a, b, c).astype(np.uint64) != d.astype(np.uint64))[0]
                except Exception:  # noqa: BLE001
                    bad = np.zeros(0, np.int64)
                rest = np.setdiff1d(np.arange(idx.size), bad)
                take = np.union1d(bad, rng.choice(rest, min(per_probe_family, rest.size), replace=False))
                g = f"{cname}__probe_{fam}" + ("_chain2" if nch == 2 else "")
                arrays[f"{g}__a"], arrays[f"{g}__b"] = a[take], b[take]
                arrays[f"{g}__c"], arrays[f"{g}__d"] = c[take], d[take].astype(case.out_dtype)
    import json

    arrays["__device__"] = np.array(json.dumps(device))
    np.savez_compressed(out, **arrays)
    return {"groups": len({k.rsplit("__", 1)[0] for k in arrays if not k.startswith("__")}),
            "samples": sum(int(v.shape[0]) for k, v in arrays.items() if k.endswith("__d"))}
