"""The zero-factor probe tells "zero products left out of E_max" from MMA-Sim's "zero has exponent -126"."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tcemu.numerics.hardware.cases import get_case
from tcemu.numerics.hardware.fake import ModelRunner
from tcemu.numerics.hardware.validate import model_bits, model_params
from tcemu.numerics.hardware.zero_factor import (MMASIM_ZERO_EXP, TINY_C_CASES, ZERO_FACTOR_CASES,
                                                  build_tiny_c_vectors, build_zero_vectors, decidability,
                                                  floor_predictions, hypothesis_predictions, settle, settle_case)

CASES = ("mma.k8.tf32.fp32", "wgmma.k16.bf16.fp32")
_RECORDS = Path(__file__).parents[3] / "docs/hardware"
#: fp32 accumulation of fp16 and FP8: only a tiny c beside zero products can tell (every case a kernel runs)
TINY_C_DECIDING = ("mma.k16.fp16.fp32", "mma.k8.fp16.fp32", "wgmma.k16.fp16.fp32", "wgmma.k32.e4m3.fp32",
                   "wgmma.k32.e5m2.fp32", "wgmma.k8.tf32.fp32")
#: fp16 accumulation: no input can tell (every nonzero addend lies above the highest zero product)
UNDECIDABLE = ("mma.k16.fp16.fp16", "mma.k8.fp16.fp16", "wgmma.k16.fp16.fp16", "wgmma.k32.e4m3.fp16",
               "wgmma.k32.e5m2.fp16")


def _zero_at(z: int) -> ModelRunner:
    """A stand-in for hardware in which a zero factor has exponent ``z`` (MMA-Sim's model for z = -126)."""
    return ModelRunner({"zero_factor_exp": z})


@pytest.mark.parametrize("name", CASES)
def test_probe_separates_the_hypotheses_for_8_bit_exponents(name):
    vectors = build_zero_vectors(get_case(name))
    assert len(vectors) == 2 * 128 * 2 * 2  # two levels, e = 0..127, zero in a or b, +0 or -0
    result = settle_case(ModelRunner(), get_case(name))
    assert result["distinguishing_excluded_vs_mmasim"] > 100
    assert result["excluded_consistent"] and not result["mmasim_consistent"]
    assert result["consistent_z"][1] < MMASIM_ZERO_EXP - 80  # only zeros far below any product are indistinguishable


def test_fp16_cannot_decide_with_c_zero():
    case = get_case("mma.k16.fp16.fp32")
    result = settle_case(ModelRunner(), case, "c0")
    assert result["distinguishing_excluded_vs_mmasim"] == 0 and not result["decidable"]
    assert decidability(case)["decidable"]  # beside a tiny c it can


def test_probe_recovers_mmasim_model():
    report = settle(_zero_at(MMASIM_ZERO_EXP), cases=CASES[:1])
    for case in report["cases"]:
        assert case["mmasim_consistent"] and not case["excluded_consistent"]
        lo, hi = case["consistent_z"]
        assert lo <= MMASIM_ZERO_EXP <= hi and hi - lo <= 2
    assert "MMA-Sim's model" in report["verdict"]


def test_probe_verdict_for_tcemu_model():
    report = settle(ModelRunner(), cases=CASES)
    assert "left out of E_max" in report["verdict"] and "undecidable" not in report["verdict"]


@pytest.mark.parametrize("name", TINY_C_DECIDING)
def test_tiny_c_separates_the_rules(name):
    """Zero products beside a tiny c: hardware that leaves zeros out and hardware with MMA-Sim's -126 give
    different bits on many vectors, and the probe names each one's rule (z pinned to -126 for the latter)."""
    case = get_case(name)
    assert decidability(case, "tiny_c")["decidable"]
    excluded = settle_case(ModelRunner(), case, "tiny_c")
    assert excluded["distinguishing_excluded_vs_mmasim"] >= 100
    assert excluded["excluded_consistent"] and not excluded["mmasim_consistent"]
    assert excluded["consistent_z"][1] < MMASIM_ZERO_EXP - 5
    mmasim = settle_case(_zero_at(MMASIM_ZERO_EXP), case, "tiny_c")
    assert mmasim["mmasim_consistent"] and not mmasim["excluded_consistent"]
    assert mmasim["consistent_z"] == [MMASIM_ZERO_EXP, MMASIM_ZERO_EXP]


@pytest.mark.parametrize("name,z", [("mma.k16.fp16.fp32", -135), ("wgmma.k32.e5m2.fp32", -139)])
def test_floor_hypotheses_match_the_zero_rule(name, z):
    """The probe predicts "a zero at exponent z" by raising the floors; hardware with the model's own zero rule
    at z (``zero_factor_exp``) is matched by exactly that z."""
    result = settle_case(_zero_at(z), get_case(name), "tiny_c")
    assert result["consistent_z"] == [z, z] and not result["excluded_consistent"]


def _random_vectors(case, n: int, seed: int = 45):
    """Random a, b, c where the rule could show: zeros (+-0), the largest finite values, subnormals and random
    elements, in half the rows a zero factor in every product; c tiny (subnormal or near the smallest normal)
    or random."""
    from tcemu.numerics.hardware.hypothesis import FMTS

    rng = np.random.default_rng(seed)
    fin, fout = FMTS[case.input_format], FMTS[case.output_format]
    width = 32 if case.input_format == "tf32" else fin.exp_bits + fin.frac_bits + 1
    shift = 13 if case.input_format == "tf32" else 0

    def elements(shape):
        x = rng.integers(0, 1 << width, shape, dtype=np.uint64)
        kind = rng.integers(0, 4, shape)
        sign = x & (1 << (width - 1))
        top = (1 << fin.exp_bits) - 1 - fin.ieee  # the largest finite value's exponent field
        largest = ((top << fin.frac_bits) | fin.max_sig - (1 << fin.frac_bits)) << shift
        x = np.where(kind == 0, sign, x)  # +-0
        x = np.where(kind == 1, sign | np.uint64(largest), x)
        x = np.where(kind == 2, x & np.uint64(((1 << width - 1) | (1 << fin.frac_bits + shift) - 1)), x)  # subnormal
        return x.astype(case.in_dtype)

    a, b = elements((n, case.K)), elements((n, case.K))
    every = rng.random(n) < 0.5  # rows where every product has a zero factor, in a or in b
    in_a = rng.random((n, case.K)) < 0.5
    a = np.where(every[:, None] & in_a, a & case.in_dtype(1 << width - 1), a)
    b = np.where(every[:, None] & ~in_a, b & case.in_dtype(1 << width - 1), b)
    cw = fout.exp_bits + fout.frac_bits + 1
    c = rng.integers(0, 1 << cw, n, dtype=np.uint64)
    tiny = np.uint64((1 << cw - 1) | (1 << fout.frac_bits + 1) - 1)  # sign, significand, lowest exponent bit
    c = np.where(rng.random(n) < 0.8, c & tiny, c).astype(case.out_dtype)
    return a, b, c


def _rules_differ(case, n: int = 4000) -> int:
    a, b, c = _random_vectors(case, n)
    base = model_params(case)
    return int(np.sum(model_bits(case, a, b, c, base)
                      != model_bits(case, a, b, c, replace(base, zero_factor_exp=MMASIM_ZERO_EXP))))


@pytest.mark.parametrize("name", UNDECIDABLE)
def test_fp16_accumulation_is_undecidable(name):
    """fp16 output: the proof (every nonzero addend above any zero product) and a search that finds nothing:
    the tiny-c vectors and random vectors with zeros against the largest values, tiny c and subnormal products
    give the same bits under both rules (the same search finds differences with fp32 output, below)."""
    case = get_case(name)
    dec = decidability(case)
    assert not dec["decidable"] and dec["lowest_addend_exp"] > dec["z_top"]
    result = settle_case(ModelRunner(), case, "tiny_c")
    assert result["distinguishing_excluded_vs_mmasim"] == 0 and not result["decidable"]
    assert _rules_differ(case) == 0


@pytest.mark.parametrize("name", ["mma.k16.fp16.fp32", "wgmma.k32.e4m3.fp32"])
def test_random_search_finds_the_rule_with_fp32_output(name):
    assert _rules_differ(get_case(name)) > 0


def test_verdict_names_the_undecidable_cases():
    report = settle(ModelRunner(), cases=("mma.k16.fp16.fp32", "mma.k16.fp16.fp16"), families=("tiny_c",))
    assert report["verdict"].startswith("zero products are left out of E_max")
    assert "undecidable for mma.k16.fp16.fp16" in report["verdict"]
    assert report["cases"][1]["reason"].endswith("no input separates the two rules")


def _variant_bits(case, vectors, variant):
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
    records = json.loads((_RECORDS / "h100-zero-factor.json").read_text())["cases"]
    record = {r["case"]: r for r in records if r.get("family", "c0") == "c0"}[name]
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


@pytest.mark.parametrize("name", TINY_C_CASES)
def test_tiny_c_variants_follow_their_zero_factor_choice(name):
    """On the tiny-c vectors the default preset is the "left out" prediction and variant="mmasim" the -126 one."""
    case = get_case(name)
    vectors = build_tiny_c_vectors(case)
    by_z, excluded = hypothesis_predictions(case, vectors, [MMASIM_ZERO_EXP])
    assert np.array_equal(_variant_bits(case, vectors, "measured").astype(np.uint32), excluded)
    assert np.array_equal(_variant_bits(case, vectors, "mmasim").astype(np.uint32), by_z[0])


def test_tiny_c_record():
    """The hardware's answer on the tiny-c vectors, where a GPU run has recorded it: every decidable case agrees
    with "left out" (the default presets) and the examples are the model's bits."""
    paths = sorted(_RECORDS.glob("*-zero-factor-tiny-c.json"))  # h100-... or h200-..., by the device that ran
    if not paths:
        pytest.skip("no tiny-c hardware record yet (python -m tcemu.numerics.hardware.zero_factor --family tiny_c)")
    for rec in [r for path in paths for r in json.loads(path.read_text())["cases"]]:
        case = get_case(rec["case"])
        assert rec["family"] == "tiny_c" and rec["decidable"] == decidability(case, "tiny_c")["decidable"]
        assert rec["mismatches_excluded"] == 0
        vectors = build_tiny_c_vectors(case)
        assert rec["vectors"] == len(vectors)
        by_z, excluded = hypothesis_predictions(case, vectors, [MMASIM_ZERO_EXP])
        assert rec["distinguishing_excluded_vs_mmasim"] == int(np.sum(excluded != by_z[0]))
        tags = [v.vector.tag for v in vectors]
        for ex in rec["examples"]:
            i = tags.index(ex["tag"])
            assert (f"0x{int(excluded[i]):08x}", f"0x{int(by_z[0][i]):08x}") == (ex["hardware"], ex["mmasim"])


def test_command_line_writes_the_record(tmp_path, monkeypatch, capsys):
    """``python -m tcemu.numerics.hardware.zero_factor --family tiny_c``, the model in the GPU's place: the JSON
    the docs keep (device, per-case results with family, decidability and reason, the verdict)."""
    import tcemu.numerics.hardware.runner as runner_module
    from tcemu.numerics.hardware.zero_factor import main

    monkeypatch.setattr(runner_module, "Runner", ModelRunner)
    out = tmp_path / "zf.json"
    assert main(["--family", "tiny_c", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["case"] for r in report["cases"]] == list(TINY_C_CASES)
    assert {r["case"] for r in report["cases"] if not r["decidable"]} == set(UNDECIDABLE)
    assert "undecidable for" in report["verdict"] and "(undecidable)" in capsys.readouterr().out
