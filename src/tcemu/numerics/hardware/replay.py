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

__all__ = ["REPLAY_PATH", "load_replay", "check_replay"]

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


def check_replay(path: str | Path = REPLAY_PATH, groups: list[str] | None = None) -> dict:
    """Model vs stored hardware bits; returns totals and per-group counts with the first mismatches."""
    from .validate import model_bits

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
        dm = model_bits(case, a, b, c).astype(np.uint64)
        bad = np.nonzero(dm != d)[0]
        out["groups"][key] = {"samples": int(d.size), "mismatches": int(bad.size),
                              "first": [(int(i), f"{int(d[i]):#x}", f"{int(dm[i]):#x}") for i in bad[:5]]}
        out["samples"] += int(d.size)
        out["mismatches"] += int(bad.size)
    return out
