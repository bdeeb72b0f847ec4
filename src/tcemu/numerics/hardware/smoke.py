"""Smoke checks of the runners: the intended SASS instruction is there, and the fragment layouts are right.

``check_layouts`` runs every case on small integers (|a|, |b| <= 4, integer c), where every rounding model is
exact, and compares with the exact product: a wrong fragment map or descriptor shows as a wrong element.
For ``wgmma`` it also tries the swapped descriptor strides if the default fails, and reports which worked.
"""

from __future__ import annotations

import numpy as np

from .cases import ALL_CASES, Case
from .families import _to_bits, _values

__all__ = ["check_layouts", "integer_tiles"]


def integer_tiles(case: Case, ntiles: int, nchain: int, rng: np.random.Generator):
    lim = 4
    a = rng.integers(-lim, lim + 1, (ntiles, nchain, case.M, case.K)).astype(np.float64)
    b = rng.integers(-lim, lim + 1, (ntiles, nchain, case.K, case.N)).astype(np.float64)
    c = rng.integers(-64, 65, (ntiles, case.M, case.N)).astype(np.float64)
    exact = np.einsum("tsmk,tskn->tmn", a, b) + c
    fc = case.output_format
    return _to_bits(a, case.input_format), _to_bits(b, case.input_format), _to_bits(c, fc), _to_bits(exact, fc)


def check_layouts(runner, ntiles: int = 64, seed: int = 1) -> dict[str, dict]:
    rng = np.random.default_rng(seed)
    out = {}
    for case in ALL_CASES:
        res = {}
        for nchain in (1, 2):
            a, b, c, want = integer_tiles(case, ntiles, nchain, rng)
            d = runner.run(case, a, b, c)
            bad = int(np.count_nonzero(d != want))
            if bad and case.instruction == "wgmma" and nchain == 1:
                lbo, sbo = runner.lbo, runner.sbo
                runner.lbo, runner.sbo = sbo, lbo
                d2 = runner.run(case, a, b, c)
                bad2 = int(np.count_nonzero(d2 != want))
                res["swapped_strides_wrong"] = bad2
                runner.lbo, runner.sbo = lbo, sbo
            res[f"chain{nchain}_wrong"] = bad
            res[f"chain{nchain}_total"] = int(d.size)
            if bad:
                i = np.argwhere(d != want)[0]
                res[f"chain{nchain}_first"] = {"index": i.tolist(), "got": int(d[tuple(i)]), "want": int(want[tuple(i)])}
        # scale-d = 0 ignores C (wgmma only)
        if case.instruction == "wgmma":
            a, b, c, want = integer_tiles(case, ntiles, 1, rng)
            d = runner.run(case, a, b, c, scale_d=0)
            want0 = _to_bits(_values(want, case.output_format) - _values(c, case.output_format), case.output_format)
            res["scale_d0_wrong"] = int(np.count_nonzero(d != want0))
        res["ok"] = all(v == 0 for k, v in res.items() if k.endswith("_wrong"))
        out[case.name] = res
    return out
