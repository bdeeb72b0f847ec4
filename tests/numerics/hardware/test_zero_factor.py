"""The zero-factor probe tells "zero products left out of E_max" from MMA-Sim's "zero has exponent -126"."""

import numpy as np
import pytest

from tcemu.numerics.hardware.cases import get_case
from tcemu.numerics.hardware.fake import ModelRunner
from tcemu.numerics.hardware.probe_vectors import pack_diagonal
from tcemu.numerics.hardware.validate import model_params
from tcemu.numerics.hardware.zero_factor import (MMASIM_ZERO_EXP, ZERO_FACTOR_CASES, build_zero_vectors,
                                                  floor_predictions, settle, settle_case)

CASES = ("mma.k8.tf32.fp32", "wgmma.k16.bf16.fp32")


class _ZeroAtExponent:
    """A stand-in for the hardware in which a zero factor has exponent ``z`` (MMA-Sim's model for z = -126)."""

    device = {"gpu": "zero-at-exponent stand-in"}

    def __init__(self, z: int):
        self.z = z

    def run(self, case, a, b, c, *, scale_d: int = 1):
        t, _, m, k = a.shape
        d = np.zeros(c.shape, c.dtype)
        vecs = build_zero_vectors(case)
        ref_a, ref_b, *_ = pack_diagonal(case, [v.vector for v in vecs], 1)
        assert ref_a.shape == a.shape and np.array_equal(ref_a, a) and np.array_equal(ref_b, b)
        floor = model_params(case).czero_floor
        for idx, v in enumerate(vecs):
            f = max(floor, self.z + max(v.partner_exp, 0))
            ti, i = divmod(idx, min(case.M, case.N))
            d[ti, i, i] = floor_predictions(case, [v], [f])[f][0]
        return d


@pytest.mark.parametrize("name", CASES)
def test_probe_separates_the_hypotheses_for_8_bit_exponents(name):
    vectors = build_zero_vectors(get_case(name))
    assert len(vectors) == 2 * 128 * 2 * 2  # two levels, e = 0..127, zero in a or b, +0 or -0
    result = settle_case(ModelRunner(), get_case(name))
    assert result["distinguishing_excluded_vs_mmasim"] > 100
    assert result["excluded_consistent"] and not result["mmasim_consistent"]
    assert result["consistent_z"][1] < MMASIM_ZERO_EXP - 80  # only zeros far below any product are indistinguishable


def test_fp16_cannot_decide():
    result = settle_case(ModelRunner(), get_case("mma.k16.fp16.fp32"))
    assert result["distinguishing_excluded_vs_mmasim"] == 0


def test_probe_recovers_mmasim_model():
    report = settle(_ZeroAtExponent(MMASIM_ZERO_EXP), cases=CASES[:1])
    (case,) = report["cases"]
    assert case["mmasim_consistent"] and not case["excluded_consistent"]
    lo, hi = case["consistent_z"]
    assert lo <= MMASIM_ZERO_EXP <= hi and hi - lo <= 2
    assert "MMA-Sim's model" in report["verdict"]


def test_probe_verdict_for_tcemu_model():
    report = settle(ModelRunner(), cases=CASES)
    assert "left out of E_max" in report["verdict"]


def _variant_bits(case, vectors, variant):
    from dataclasses import replace

    from tcemu.numerics.hardware.validate import model_bits
    from tcemu.numerics.presets import get_preset

    p = get_preset("h200", case.instruction, case.input_format, case.output_format, variant=variant)
    if case.K != p.k_instr:
        p = replace(p, k_instr=case.K, n_fma=min(p.n_fma, case.K))
    a, b, c = (np.array([getattr(v.vector, f) for v in vectors], dtype=np.uint64) for f in "abc")
    return model_bits(case, a.astype(case.in_dtype), b.astype(case.in_dtype), c.astype(case.out_dtype), p)


@pytest.mark.parametrize("name", ZERO_FACTOR_CASES)
def test_variants_follow_their_zero_factor_choice(name):
    """The default preset gives the H100's stored answer on every probe vector (the record: 0 mismatches with
    "left out"); variant="mmasim" gives MMA-Sim's (a zero at exponent -126), as many vectors apart as recorded."""
    import json
    from pathlib import Path

    record = {r["case"]: r for r in json.loads((Path(__file__).parents[3] / "docs/hardware/h100-zero-factor.json")
                                               .read_text())["cases"]}[name]
    case = get_case(name)
    vectors = build_zero_vectors(case)
    default, mmasim = (_variant_bits(case, vectors, v).astype(np.uint32) for v in ("measured", "mmasim"))
    floor = model_params(case).czero_floor
    e = [max(v.partner_exp, 0) for v in vectors]
    floors = sorted({floor} | {max(floor, MMASIM_ZERO_EXP + x) for x in e})
    preds = floor_predictions(case, vectors, floors)
    assert record["mismatches_excluded"] == 0 and np.array_equal(default, preds[floor])
    assert np.array_equal(mmasim, [preds[max(floor, MMASIM_ZERO_EXP + x)][i] for i, x in enumerate(e)])
    assert int(np.sum(default != mmasim)) == record["distinguishing_excluded_vs_mmasim"] == record["mismatches_mmasim"]
    tags = [v.vector.tag for v in vectors]
    for ex in record["examples"]:
        i = tags.index(ex["tag"])
        assert (f"0x{int(default[i]):08x}", f"0x{int(mmasim[i]):08x}") == (ex["hardware"], ex["mmasim"])
