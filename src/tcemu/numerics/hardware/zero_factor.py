"""Does a product with a zero factor take part in a block's largest exponent? A probe that hardware settles.

MMA-Sim gives a zero input the exponent -126 whatever its format, so ``0 x 2^e`` is a product of exponent
``e - 126`` that can raise the block's ``E_max`` and truncate the other addends; tcemu's model leaves zero
products out of ``E_max``. Two families of vectors (:mod:`.zero_factor_vectors`) ask the question:

- ``c0``: ``0 x 2^e`` (e = 0..emax) beside one real product at ``2^-100`` or ``2^-20``, c = 0. Only inputs with an
  8-bit exponent (tf32, bf16) can tell with c = 0: an fp16 product is never below 2^-48, a zero at -111 at most.
- ``tiny_c``: every product has a zero factor (one against 2^e or the largest finite value), c tiny (fp32
  subnormals, near 2^-126), so that a zero counted at ``e - 126`` sets ``E_max`` above c's exponent and cuts
  c's low bits at the alignment. This is how fp16 and FP8 inputs with fp32 accumulation tell.

Each hypothesis, "a zero factor has exponent z" for an integer z or "zero products are left out", predicts every
vector with the model: a zero product at ``t = z + e`` raises ``E_max`` exactly as the c = 0 floor and the c
exponent floor do, so the prediction is the preset with both floors raised to ``t``. The hardware's bits keep
the hypotheses they agree with. Where no input at all can separate "left out" from MMA-Sim's -126
(:func:`decidability`: every nonzero addend of the format sits above the highest zero product) the probe says so
instead of judging.

    python -m tcemu.numerics.hardware.zero_factor --out zero_factor.json   # on a GPU (nvcc, sm_90a)
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np

from .cases import Case, get_case
from .hypothesis import FMTS
from .validate import model_bits, model_params
from .zero_factor_vectors import (FAMILY_CASES, MMASIM_ZERO_EXP, TINY_C_CASES, ZERO_FACTOR_CASES, ZeroVector,
                                  build_family, build_tiny_c_vectors, build_zero_vectors)

__all__ = ["ZERO_FACTOR_CASES", "TINY_C_CASES", "FAMILY_CASES", "MMASIM_ZERO_EXP", "ZeroVector", "build_zero_vectors",
           "build_tiny_c_vectors", "build_family", "decidability", "floor_predictions", "hypothesis_predictions",
           "consistent_hypotheses", "settle", "settle_case"]

#: hypotheses tried: z from Z_RANGE[0] to Z_RANGE[1]; below about -250 a zero product can never reach 2^-100's block
Z_RANGE = (-260, 0)


def _floor_or_min(x: int | None) -> int:
    return -(1 << 30) if x is None else x


def decidability(case: Case, family: str | None = None) -> dict:
    """Whether any input can separate "zero products left out" from MMA-Sim's zero at exponent -126, and why.

    A zero product counts at most at ``z_top = -126 + emax`` (the input format's largest exponent). It changes a
    result only if it sets ``E_max``, i.e. lies above every nonzero addend: the smallest nonzero product has
    exponent ``2 (emin - m)`` (two smallest subnormals), the smallest nonzero c ``emin_c - m_c``. If both are above
    ``z_top`` (and with every addend zero both rules give +0) no vector can tell: the question is undecidable for
    the format, whatever the hardware does. ``family="c0"`` leaves c out (c = 0 in every vector of that family).
    """
    fin, fout = FMTS[case.input_format], FMTS[case.output_format]
    z_top = MMASIM_ZERO_EXP + fin.emax
    product_low = 2 * (fin.emin - fin.frac_bits)
    c_low = fout.emin - fout.frac_bits
    low = product_low if family == "c0" else min(product_low, c_low)
    decidable = low <= z_top
    what = "products" if family == "c0" else "products and c"
    reason = (f"the highest zero product under MMA-Sim's rule is at 2^{z_top} ({case.input_format} emax "
              f"{fin.emax} - 126); the smallest nonzero {case.input_format} product is 2^{product_low}"
              + ("" if family == "c0" else f", the smallest nonzero {case.output_format} c 2^{c_low}"))
    if decidable:
        reason += (f": a zero product can sit above every nonzero addend ({what}); "
                   "distinguishing_excluded_vs_mmasim counts the vectors that tell")
    else:
        reason += (f": every nonzero addend ({what}) lies above any zero product, which never sets E_max, and with "
                   "every addend zero both rules give +0; no input " + ("with c = 0 " if family == "c0" else "")
                   + "separates the two rules")
    return {"decidable": bool(decidable), "z_top": z_top, "lowest_addend_exp": int(low), "reason": reason}


def floor_predictions(case: Case, vectors: list[ZeroVector], floors) -> dict[int, np.ndarray]:
    """Model bits of every vector with the c = 0 floor and the c exponent floor raised to each value in ``floors``.

    With every zero product left out, a floor ``t`` gives exactly the ``E_max`` that a zero product at exponent
    ``t`` gives (for c = 0 through ``czero_floor``, for a nonzero c through ``c_exp_floor``): each vector is one
    block, so ``E_max = max(nonzero addends, t)`` either way.
    """
    base = model_params(case)
    cz, ce = _floor_or_min(base.czero_floor), _floor_or_min(base.c_exp_floor)
    a = np.array([v.vector.a for v in vectors], dtype=np.uint64).astype(case.in_dtype)
    b = np.array([v.vector.b for v in vectors], dtype=np.uint64).astype(case.in_dtype)
    c = np.array([v.vector.c for v in vectors], dtype=np.uint64).astype(case.out_dtype)
    out = {}
    for f in floors:
        prm = replace(base, czero_floor=max(cz, int(f)), c_exp_floor=max(ce, int(f)))
        out[int(f)] = model_bits(case, a, b, c, prm).astype(np.uint32)
    return out


def hypothesis_predictions(case: Case, vectors: list[ZeroVector], zs) -> tuple[np.ndarray, np.ndarray]:
    """Predicted bits ``(len(zs), len(vectors))`` under "a zero factor has exponent z" for each z, and the bits
    under "zero products are left out" ``(len(vectors),)``."""
    base = model_params(case)
    lo = min(_floor_or_min(base.czero_floor), _floor_or_min(base.c_exp_floor))
    e = np.array([max(v.partner_exp, 0) for v in vectors], dtype=np.int64)
    t = np.maximum(np.asarray(zs, np.int64)[:, None] + e[None, :], lo)  # the highest zero product of each vector
    keys = np.unique(np.append(t.ravel(), lo))
    preds = floor_predictions(case, vectors, keys)
    table = np.stack([preds[int(k)] for k in keys])
    return table[np.searchsorted(keys, t), np.arange(len(vectors))], preds[int(lo)]


def consistent_hypotheses(case: Case, vectors: list[ZeroVector], bits: np.ndarray) -> dict:
    """Which hypotheses the bits agree with: "excluded" and each z in ``Z_RANGE``, with mismatch counts."""
    zs = np.arange(Z_RANGE[0], Z_RANGE[1] + 1)
    by_z, excluded = hypothesis_predictions(case, vectors, zs)
    bits = np.asarray(bits, dtype=np.uint32)
    mismatches = (by_z != bits[None, :]).sum(axis=1)
    mmasim = by_z[int(np.nonzero(zs == MMASIM_ZERO_EXP)[0][0])]
    keep = [int(z) for z, m in zip(zs, mismatches) if m == 0]
    n_excl = int(np.sum(excluded != bits))
    n_mm = int(np.sum(mmasim != bits))
    return {
        "vectors": len(vectors),
        "distinguishing_excluded_vs_mmasim": int(np.sum(excluded != mmasim)),
        "excluded_consistent": n_excl == 0,
        "mmasim_consistent": n_mm == 0,
        "mismatches_excluded": n_excl,
        "mismatches_mmasim": n_mm,
        "consistent_z": [min(keep), max(keep)] if keep else None,
        "consistent_z_contiguous": bool(keep) and len(keep) == max(keep) - min(keep) + 1,
        "examples": _examples(vectors, bits, excluded, mmasim),
    }


def _examples(vectors: list[ZeroVector], bits, excluded, mmasim, n: int = 4) -> list[dict]:
    rows = np.nonzero(excluded != mmasim)[0][:n]
    return [{"tag": vectors[i].vector.tag, "hardware": f"0x{int(bits[i]):08x}", "excluded": f"0x{int(excluded[i]):08x}",
             "mmasim": f"0x{int(mmasim[i]):08x}"} for i in rows]


def settle_case(runner, case: Case, family: str = "c0") -> dict:
    """Run one case's vectors of ``family`` on ``runner`` (a :class:`.runner.Runner` or a stand-in) and judge."""
    from .probe import _run_vectors

    vectors = build_family(case, family)
    bits = _run_vectors(runner, case, [v.vector for v in vectors], nchain=1)
    dec = decidability(case, family)
    return {"case": case.name, "instruction": case.ptx, "family": family,
            **consistent_hypotheses(case, vectors, bits), "decidable": dec["decidable"], "reason": dec["reason"]}


def _verdict(results: list[dict]) -> str:
    undecidable = sorted({r["case"] for r in results if not decidability(get_case(r["case"]))["decidable"]})
    tail = (f"; undecidable for {', '.join(undecidable)} (no input separates the rules: every nonzero addend lies "
            "above any zero product, see each case's reason)") if undecidable else ""
    deciding = [r for r in results if r["distinguishing_excluded_vs_mmasim"]]
    if not deciding:
        return "undecided: no vector separates the hypotheses" + tail
    if all(r["excluded_consistent"] and not r["mmasim_consistent"] for r in deciding):
        return ("zero products are left out of E_max (tcemu's model); MMA-Sim's exponent -126 for zero is refuted"
                + tail)
    if all(r["mmasim_consistent"] and not r["excluded_consistent"] for r in deciding):
        return "a zero factor counts at exponent -126 (MMA-Sim's model); tcemu's exclusion is refuted" + tail
    return "mixed: see the per-case results" + tail


def settle(runner, cases=None, families=("c0", "tiny_c")) -> dict:
    """The probe over ``families`` (each on its :data:`FAMILY_CASES`, or on ``cases`` if given); returns the
    per-case results, the device and one verdict line."""
    results = [settle_case(runner, get_case(name), fam) for fam in families
               for name in (FAMILY_CASES[fam] if cases is None else cases)]
    return {"device": runner.device, "cases": results, "verdict": _verdict(results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file for the results")
    parser.add_argument("--family", choices=("all", "c0", "tiny_c"), default="all",
                        help="vector family: c0 (c = 0, tf32/bf16), tiny_c (tiny c, every format), all (default)")
    args = parser.parse_args(argv)
    from .runner import Runner

    families = ("c0", "tiny_c") if args.family == "all" else (args.family,)
    report = settle(Runner(), families=families)
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)
    print(report["verdict"])
    for r in report["cases"]:
        print(f"{r['family']:6s} {r['case']:22s} vectors {r['vectors']:5d} deciding "
              f"{r['distinguishing_excluded_vs_mmasim']:4d} excluded ok {r['excluded_consistent']} "
              f"mmasim ok {r['mmasim_consistent']} z {r['consistent_z']}"
              + ("" if r["decidable"] else " (undecidable)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
