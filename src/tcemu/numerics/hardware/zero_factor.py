"""Does a product with a zero factor take part in a block's largest exponent? A probe that hardware settles.

MMA-Sim gives a zero input the exponent -126 whatever its format, so ``0 x 2^127`` (tf32, bf16) is a product of
exponent 1 that raises the block's ``E_max`` and truncates its real products; tcemu's model leaves zero products
out of ``E_max``. With c = 0 only inputs with an 8-bit exponent can tell the two apart (fp16's ``0 x 2^15``
sits at -111); beside a tiny c (fp32 near 2^-126) fp16 and FP8 tell too, which these vectors do not try.

The vectors put ``0 x 2^e`` (e = 0..127; the zero in a or in b, +0 or -0) beside one real product at ``2^-100``
or ``2^-20`` whose low bits an alignment to a higher ``E_max`` would cut, with c = 0. Each hypothesis, "a zero
factor has exponent z" for an integer z or "zero products are left out", predicts every vector with the model:
a zero product at ``z + e`` raises ``E_max`` exactly as the c = 0 floor does, so the prediction is the preset with
``czero_floor = max(floor, z + e)``. The hardware's bits keep the hypotheses they agree with.

    python -m tcemu.numerics.hardware.zero_factor --out zero_factor.json   # on a GPU (nvcc, sm_90a)
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace

import numpy as np

from .cases import Case, get_case
from .hypothesis import FMTS, encode_value
from .probe_vectors import Vector, pack_diagonal
from .validate import model_bits, model_params

__all__ = ["ZERO_FACTOR_CASES", "MMASIM_ZERO_EXP", "ZeroVector", "build_zero_vectors", "floor_predictions",
           "consistent_hypotheses", "settle", "settle_case"]

#: the cases probed: 8-bit-exponent inputs (where the question matters) and fp16 as a control
ZERO_FACTOR_CASES = ("mma.k8.tf32.fp32", "mma.k4.tf32.fp32", "mma.k16.bf16.fp32", "mma.k8.bf16.fp32",
                     "wgmma.k8.tf32.fp32", "wgmma.k16.bf16.fp32", "mma.k16.fp16.fp32", "wgmma.k16.fp16.fp32")
#: the exponent MMA-Sim gives a zero input (``extract_significand_exponent``: ``if significand == 0.0: exponent = -126``)
MMASIM_ZERO_EXP = -126
#: hypotheses tried: z from Z_RANGE[0] to Z_RANGE[1]; below about -250 a zero product can never reach 2^-100's block
Z_RANGE = (-260, 0)
_REAL_LEVELS = (-100, -20)  # exponent of the real product beside the zero one


@dataclass(frozen=True)
class ZeroVector:
    """One probe vector and what it varies: the zero's partner exponent, side and sign, the real product's level."""

    vector: Vector
    partner_exp: int  # e of the 2^e beside the zero
    zero_in: str  # "a" or "b"
    zero_sign: int  # +1 or -1
    level: int  # exponent of the real product


def _input_format(case: Case):
    return FMTS["fp32"] if case.input_format == "tf32" else FMTS[case.input_format]


def _mantissa_bits(case: Case) -> int:
    return FMTS[case.input_format].frac_bits


def build_zero_vectors(case: Case) -> list[ZeroVector]:
    """Vectors ``[0 x 2^e, x y, 0 x 1, ...]`` (or the zero in b), c = +0, for every e the format holds."""
    fmt, m = _input_format(case), _mantissa_bits(case)
    zero_c = 0
    one = encode_value(1.0, fmt)
    out = []
    for level in _REAL_LEVELS:
        half = level // 2
        try:  # x y = (2 - 2^-m)(1 + 2^-m) 2^level: low bits down to 2^(level - 2m)
            x = encode_value((2.0 - 2.0**-m) * 2.0**half, fmt)
            y = encode_value((1.0 + 2.0**-m) * 2.0 ** (level - half), fmt)
        except (ValueError, OverflowError):
            continue
        for e in range(0, FMTS[case.input_format].emax + 1):
            big = encode_value(2.0**e, fmt)
            for zero_in in ("a", "b"):
                for sign in (1, -1):
                    zero = encode_value(0.0 if sign > 0 else -0.0, fmt)
                    a = [zero] * case.K
                    b = [one] * case.K
                    if zero_in == "a":
                        a[0], b[0] = zero, big
                    else:
                        a[0], b[0] = big, zero
                    a[1], b[1] = x, y
                    vec = Vector("zerofactor", f"e={e},zero_in={zero_in},sign={sign},level={level}", a, b, zero_c)
                    out.append(ZeroVector(vec, e, zero_in, sign, level))
    return out


def floor_predictions(case: Case, vectors: list[ZeroVector], floors) -> dict[int, np.ndarray]:
    """Model bits of every vector with ``czero_floor`` set to each value in ``floors`` (c = 0 in every vector)."""
    base = model_params(case)
    a = np.array([v.vector.a for v in vectors], dtype=np.uint64).astype(case.in_dtype)
    b = np.array([v.vector.b for v in vectors], dtype=np.uint64).astype(case.in_dtype)
    c = np.array([v.vector.c for v in vectors], dtype=np.uint64).astype(case.out_dtype)
    return {f: model_bits(case, a, b, c, replace(base, czero_floor=f)).astype(np.uint32) for f in floors}


def consistent_hypotheses(case: Case, vectors: list[ZeroVector], bits: np.ndarray) -> dict:
    """Which hypotheses the bits agree with: "excluded" and each z in ``Z_RANGE``, with mismatch counts."""
    base_floor = model_params(case).czero_floor
    base_floor = -(1 << 30) if base_floor is None else base_floor
    e = np.array([max(v.partner_exp, 0) for v in vectors])
    floors = sorted({base_floor} | {max(base_floor, z + int(x)) for z in range(Z_RANGE[0], Z_RANGE[1] + 1)
                                    for x in np.unique(e)})
    preds = floor_predictions(case, vectors, floors)
    bits = np.asarray(bits, dtype=np.uint32)
    excluded = preds[base_floor]
    mismatches = {"excluded": int(np.sum(excluded != bits))}
    for z in range(Z_RANGE[0], Z_RANGE[1] + 1):
        pred = np.array([preds[max(base_floor, z + int(x))][i] for i, x in enumerate(e)], dtype=np.uint32)
        mismatches[z] = int(np.sum(pred != bits))
    mmasim = np.array([preds[max(base_floor, MMASIM_ZERO_EXP + int(x))][i] for i, x in enumerate(e)], np.uint32)
    keep = [z for z in range(Z_RANGE[0], Z_RANGE[1] + 1) if mismatches[z] == 0]
    return {
        "vectors": len(vectors),
        "distinguishing_excluded_vs_mmasim": int(np.sum(excluded != mmasim)),
        "excluded_consistent": mismatches["excluded"] == 0,
        "mmasim_consistent": mismatches[MMASIM_ZERO_EXP] == 0,
        "mismatches_excluded": mismatches["excluded"],
        "mismatches_mmasim": mismatches[MMASIM_ZERO_EXP],
        "consistent_z": [min(keep), max(keep)] if keep else None,
        "consistent_z_contiguous": bool(keep) and len(keep) == max(keep) - min(keep) + 1,
        "examples": _examples(vectors, bits, excluded, mmasim),
    }


def _examples(vectors: list[ZeroVector], bits, excluded, mmasim, n: int = 4) -> list[dict]:
    rows = np.nonzero(excluded != mmasim)[0][:n]
    return [{"tag": vectors[i].vector.tag, "hardware": f"0x{int(bits[i]):08x}", "excluded": f"0x{int(excluded[i]):08x}",
             "mmasim": f"0x{int(mmasim[i]):08x}"} for i in rows]


def settle_case(runner, case: Case) -> dict:
    """Run one case's vectors on ``runner`` (a :class:`.runner.Runner` or a stand-in) and judge the hypotheses."""
    from .probe import _run_vectors

    vectors = build_zero_vectors(case)
    bits = _run_vectors(runner, case, [v.vector for v in vectors], nchain=1)
    return {"case": case.name, "instruction": case.ptx, **consistent_hypotheses(case, vectors, bits)}


def _verdict(results: list[dict]) -> str:
    deciding = [r for r in results if r["distinguishing_excluded_vs_mmasim"]]
    if not deciding:
        return "undecided: no vector separates the hypotheses"
    if all(r["excluded_consistent"] and not r["mmasim_consistent"] for r in deciding):
        return "zero products are left out of E_max (tcemu's model); MMA-Sim's exponent -126 for zero is refuted"
    if all(r["mmasim_consistent"] and not r["excluded_consistent"] for r in deciding):
        return "a zero factor counts at exponent -126 (MMA-Sim's model); tcemu's exclusion is refuted"
    return "mixed: see the per-case results"


def settle(runner, cases=ZERO_FACTOR_CASES) -> dict:
    """The probe over ``cases``; returns the per-case results, the device and one verdict line."""
    results = [settle_case(runner, get_case(name)) for name in cases]
    return {"device": runner.device, "cases": results, "verdict": _verdict(results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file for the results")
    args = parser.parse_args(argv)
    from .runner import Runner

    report = settle(Runner())
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)
    print(report["verdict"])
    for r in report["cases"]:
        print(f"{r['case']:22s} vectors {r['vectors']:5d} deciding {r['distinguishing_excluded_vs_mmasim']:4d} "
              f"excluded ok {r['excluded_consistent']} mmasim ok {r['mmasim_consistent']} z {r['consistent_z']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
