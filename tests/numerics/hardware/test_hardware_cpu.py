"""CPU tests of the hardware side of tcemu.numerics: the probe's hypothesis space, the inference (fed by the
model itself as a stand-in for the GPU), tile packing, the validation pipeline, and the H200 replay set."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tcemu.numerics.hardware.cases import CASES, VALIDATION_CASES, get_case
from tcemu.numerics.hardware.families import FAMILIES, generate
from tcemu.numerics.hardware.fake import ModelRunner
from tcemu.numerics.hardware.hypothesis import FMTS, decode, encode_value, evaluate, hyp_from_params
from tcemu.numerics.hardware.probe import collect, infer, load_raw
from tcemu.numerics.hardware.probe_vectors import build_vectors, pack_diagonal
from tcemu.numerics.hardware.replay import REPLAY_PATH, check_replay, load_replay, measured_table
from tcemu.numerics.hardware.validate import ValidationConfig, model_bits, model_params, rows_from_tiles, run_validation

ROOT = Path(__file__).resolve().parents[3]
RAW = ROOT / "src/tcemu/numerics/hardware/data/h200_probe_raw.npz"


def test_encode_decode_roundtrip():
    for name in ("fp16", "bf16", "e4m3", "e5m2", "fp32"):
        f = FMTS[name]
        for x in (1.0, -1.5, 2.0**-9, 0.0, -0.0, 3.0):
            b = encode_value(x, f)
            st, s, sig, e, _ = decode(b, f)
            assert st == "num" and (-1) ** s * sig * 2.0**e == x


@pytest.mark.parametrize("name", ["mma.k16.fp16.fp32", "mma.k16.fp16.fp16",
                                  "mma.k32.e4m3.fp32", "mma.k32.e5m2.fp16", "wgmma.k32.e4m3.fp32", "mma.k8.tf32.fp32"])
def test_hypothesis_equals_model_on_probe_vectors(name):
    """The probe's independent hypothesis model, set to a preset, reproduces the numerics model bit for bit."""
    case = get_case(name)
    p = model_params(case)
    h = hyp_from_params(p)
    vecs = [v for v in build_vectors(case) if v.nchain == 1][::3]
    a = np.array([v.a for v in vecs], np.uint64).astype(case.in_dtype)
    b = np.array([v.b for v in vecs], np.uint64).astype(case.in_dtype)
    c = np.array([v.c for v in vecs], np.uint64).astype(case.out_dtype)
    want = model_bits(case, a, b, c).astype(np.int64)
    got = np.array([evaluate(h, v.a, v.b, v.c, case.input_format, case.output_format) for v in vecs])
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(vecs[i].family, vecs[i].tag, hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_pack_diagonal_places_vectors():
    case = get_case("mma.k16.fp16.fp32")
    vecs = build_vectors(case)[:20]
    a, b, c, where = pack_diagonal(case, vecs, 1)
    for v, (t, i) in zip(vecs, where):
        assert list(a[t, 0, i]) == v.a and list(b[t, 0, :, i]) == v.b and c[t, i, i] == v.c


@pytest.mark.parametrize("family", FAMILIES)
def test_families_shapes(family):
    for case in (get_case("mma.k16.bf16.fp32"), get_case("wgmma.k32.e5m2.fp16"), get_case("mma.k8.tf32.fp32")):
        a, b, c = generate(case, family, 3, np.random.default_rng(0))
        assert a.shape == (3, case.M, case.K) and b.shape == (3, case.K, case.N) and c.shape == (3, case.M, case.N)
        assert a.dtype == case.in_dtype and c.dtype == case.out_dtype


def test_rows_from_tiles_matches_mma_api():
    from tcemu.numerics import mma

    case = get_case("mma.k16.fp16.fp32")
    a, b, c = generate(case, "normal", 2, np.random.default_rng(1))
    d = mma(a.view(np.float16), b.view(np.float16), c.view(np.float32), arch="h200").view(np.uint32)
    ar, bc, cf = rows_from_tiles(a, b, c)
    assert np.array_equal(model_bits(case, ar, bc, cf), d.reshape(-1))


def test_probe_recovers_what_if_parameters():
    """With the model (F = 24, c = 0 floor -133) standing in for the GPU, the probe infers exactly that."""
    case = get_case("mma.k16.bf16.fp32")
    runner = ModelRunner({"frac_bits": 24, "czero_floor": -133})
    rep = infer(collect(runner, [case], log=lambda *a: None)[case.name], case, log=lambda *a: None)
    assert rep["parameters"]["frac_bits"]["inferred"] == [24]
    assert {d["czero_floor"] for d in rep["parameters"]["czero_floor"]["inferred"]} == {-133}
    assert rep["final"]["mismatches"] == 0


def test_validation_pipeline_with_model_runner(tmp_path):
    runner = ModelRunner()
    cfg = ValidationConfig(cases=("mma.k16.fp16.fp32", "wgmma.k32.e4m3.fp16"), samples=4096, workers=1,
                           batch_samples=2048, progress=False)
    s = run_validation(runner, cfg, str(tmp_path), log=lambda *a: None)
    assert s["total_mismatches"] == 0 and s["total_samples"] >= 8192
    runner = ModelRunner({"frac_bits": 23})
    cfg = replace(cfg, cases=("mma.k16.fp16.fp32",))
    s = run_validation(runner, cfg, str(tmp_path), log=lambda *a: None)
    assert s["total_mismatches"] > 0
    z = np.load(tmp_path / "h200_validation_mismatches.npz")
    assert "mma.k16.fp16.fp32__min_a" in z.files  # shrunk reproducers
    assert np.count_nonzero(z["mma.k16.fp16.fp32__min_a"], axis=1).max() <= 16


# ---------------------------------------------------------------------------------------------------------------
# Real H200 bits
# ---------------------------------------------------------------------------------------------------------------
def test_replay_covers_every_case_and_family():
    groups = load_replay()
    for case in VALIDATION_CASES:
        for fam in FAMILIES:
            assert f"{case.name}__{fam}" in groups
    for case in CASES:
        assert any(g.startswith(f"{case.name}__probe_") for g in groups)


def test_measured_model_matches_every_h200_replay_sample():
    """The presets corrected by the H200 probe reproduce every stored H200 sample, bit for bit."""
    res = check_replay(REPLAY_PATH, table=measured_table())
    bad = {k: v for k, v in res["groups"].items() if v["mismatches"]}
    assert res["mismatches"] == 0, bad
    assert res["samples"] > 40_000


def test_shipped_presets_match_every_h200_replay_sample():
    """The default (measured) presets reproduce every stored H200 sample bit for bit."""
    assert check_replay(REPLAY_PATH)["mismatches"] == 0


def test_literature_variants_fail_the_h200_replay_set():
    """The replay set decides: MMA-Sim's c = 0 floor and IEEE signs of underflowed zeros do not fit the H200."""
    from dataclasses import replace

    from tcemu.numerics import get_preset
    from tcemu.numerics.hardware.validate import variant_bits

    data = np.load(REPLAY_PATH)
    mism = {}
    for name, instr, fin in (("mma.k16.bf16.fp32", "mma.sync", "bf16"), ("wgmma.k8.tf32.fp32", "wgmma", "tf32")):
        case = get_case(name)
        stems = sorted({k.rsplit("__", 1)[0] for k in data.files if k.startswith(name + "__")})
        assert stems, f"replay set has {name} samples"
        for variant in ("measured", "mmasim"):
            for sign in ("positive", "keep"):
                prm = replace(get_preset("h200", instr, fin, "fp32", variant=variant), underflow_sign=sign)
                n = 0
                for stem in stems:
                    a, b, c, d = (data[f"{stem}__{x}"] for x in "abcd")
                    got = variant_bits(case, a, b, c, replace(prm, k_instr=case.K, n_fma=min(prm.n_fma, case.K)), False)
                    n += int(np.count_nonzero(got.astype(np.uint64) != d.astype(np.uint64)))
                mism[name, variant, sign] = n
    for name in ("mma.k16.bf16.fp32", "wgmma.k8.tf32.fp32"):
        assert mism[name, "measured", "positive"] == 0, mism
        assert mism[name, "mmasim", "positive"] > 0, mism
    assert mism["wgmma.k8.tf32.fp32", "measured", "keep"] > 0, mism


@pytest.mark.parametrize("name,czero", [("mma.k16.bf16.fp32", -133), ("wgmma.k8.tf32.fp32", -133),
                                        ("mma.k16.fp16.fp16", -21)])
def test_probe_inference_from_stored_h200_bits(name, czero):
    """The inference, rerun on the stored H200 probe bits, gives the answers written in docs/hardware."""
    raw, _ = load_raw(RAW)
    case = get_case(name)
    rep = infer(raw[name], case, log=lambda *a: None)
    assert rep["final"]["mismatches"] == 0
    assert {d["czero_floor"] for d in rep["parameters"]["czero_floor"]["inferred"]} == {czero}
    doc = json.loads((ROOT / "docs/hardware/h200-probe.json").read_text())
    row = next(c for c in doc["cases"] if c["case"] == name)["parameters"]["czero_floor"]
    assert row["inferred"] == czero
