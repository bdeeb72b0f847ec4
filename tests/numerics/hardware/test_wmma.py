"""CUDA's WMMA API as the compiler lowers it: presets (get_preset/mma with instruction="wmma"), the offline SASS
of the runner's WMMA kernels on several architectures, and the probe inferring the lowered blocks from a model
standing in for the GPU (the H200 run: tcemu probe --wmma, tcemu validate --wmma)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tcemu.numerics import get_preset, mma
from tcemu.numerics.hardware.cases import WMMA_CASES, get_case
from tcemu.numerics.hardware.fake import ModelRunner
from tcemu.numerics.hardware.probe import collect, compare_with_preset, infer
from tcemu.numerics.hardware.replay import REPLAY_PATH, check_replay, load_replay
from tcemu.numerics.hardware.runner import check_case_sass, wmma_sass
from tcemu.numerics.presets import WMMA_LOWERING


@pytest.mark.parametrize("arch", ["a100", "h200", "b200"])
def test_wmma_tf32_is_two_chained_m16n8k4(arch):
    """A m16n16k8 tf32 WMMA gives the bits of two chained m16n8k4 (not of one m16n8k8 on Hopper/Blackwell)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((16, 48)).astype(np.float32)
    c = rng.standard_normal((64, 48)).astype(np.float32)
    w = mma(a, b, c, arch=arch, instruction="wmma", input_format="tf32").view(np.uint32)
    k4 = mma(a, b, c, arch=arch, instruction="mma.sync.m16n8k4", input_format="tf32").view(np.uint32)
    k8 = mma(a, b, c, arch=arch, instruction="mma.sync", input_format="tf32").view(np.uint32)
    assert np.array_equal(w, k4)
    assert (np.count_nonzero(w != k8) > 0) == (arch != "a100")  # A100's m16n8k8 is 4 + 4 already


@pytest.mark.parametrize(("fmt", "out"), [("fp16", "fp32"), ("fp16", "fp16"), ("bf16", "fp32")])
def test_wmma_16bit_is_m16n8k16(fmt, out):
    import ml_dtypes

    dt = np.float16 if fmt == "fp16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((32, 32)).astype(dt), rng.standard_normal((32, 16)).astype(dt)
    c = rng.standard_normal((32, 16)).astype(np.float16 if out == "fp16" else np.float32)
    for shape in ("wmma", "wmma.m32n8k16"):
        assert np.array_equal(mma(a, b, c, arch="h200", instruction=shape, output_format=out),
                              mma(a, b, c, arch="h200", instruction="mma.sync", output_format=out))
    p = get_preset("h200", "wmma", fmt, out)
    assert (p.k_instr, p.n_fma) == (16, 16) and "wmma lowering" in p.sources


def test_wmma_refusals():
    with pytest.raises(ValueError, match="WMMA takes fp16, bf16, tf32"):
        get_preset("h200", "wmma", "e4m3")
    with pytest.raises(ValueError, match="valid: m16n16k8"):
        get_preset("h200", "wmma.m16n16k16", "tf32")
    with pytest.raises(ValueError, match="on v100"):
        get_preset("v100", "wmma", "bf16")
    with pytest.raises(ValueError, match="multiple of the instruction's K=8"):
        mma(np.ones((16, 4), np.float32), np.ones((4, 16), np.float32), np.zeros((16, 16), np.float32),
            arch="h200", instruction="wmma", input_format="tf32")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (compiles the WMMA kernels for their SASS)")
@pytest.mark.parametrize("arch", ["80", "90a", "100a"])
def test_wmma_kernels_compile_to_the_lowering(arch):
    """nvcc's SASS of the runner's WMMA kernels: only the opcode of WMMA_LOWERING, as many per K-slice as the
    lowering says (2 m16n8k16 or 4 m16n8k4 for a 16 x 16 tile), on sm_80, sm_90a and sm_100a."""
    kernels = wmma_sass(arch)
    for case in WMMA_CASES:
        res = check_case_sass(case, kernels)
        assert res["ok"], (arch, case.name, res)
        k_emit = WMMA_LOWERING["h100", case.input_format][0]
        assert case.sass_count == 2 * case.K // k_emit  # two 16 x 8 halves, K / k_emit steps each


@pytest.mark.parametrize("name", ["wmma.k8.tf32.fp32", "wmma.k16.bf16.fp32"])
def test_probe_infers_the_lowered_blocks(name):
    """With the model standing in for the GPU, the probe of a WMMA case infers its lowered blocks (tf32: 2 blocks
    of 4; bf16: one block of 16) and agrees with the wmma preset."""
    case = get_case(name)
    rep = infer(collect(ModelRunner(), [case], log=lambda *a: None)[case.name], case, log=lambda *a: None)
    assert rep["final"]["mismatches"] == 0
    want = "2 blocks of 4" if case.input_format == "tf32" else "1 block of 16"
    assert rep["parameters"]["blocks"]["inferred"][0] == want
    cmp = compare_with_preset(rep, case)
    for key in ("n_fma", "k_instr", "frac_bits", "czero_floor", "c_exp_floor", "output_rounding"):
        assert cmp[key]["agree"], (key, cmp[key])


def test_wmma_validation_pipeline_with_the_model_as_gpu(tmp_path):
    """tcemu validate --wmma's pipeline on the WMMA cases, the model standing in for the GPU: 0 mismatches; with
    the m16n8k8 model (one block of 8) standing in for the tf32 case, the wmma preset mismatches."""
    from dataclasses import replace

    from tcemu.numerics.hardware.validate import ValidationConfig, run_validation

    names = tuple(c.name for c in WMMA_CASES)
    cfg = ValidationConfig(cases=names, samples=2048, workers=1, batch_samples=1024, progress=False)
    s = run_validation(ModelRunner(), cfg, str(tmp_path), log=lambda *a: None)
    assert s["total_mismatches"] == 0 and s["total_samples"] >= 4 * 2048
    s = run_validation(ModelRunner({"n_fma": 8}), replace(cfg, cases=("wmma.k8.tf32.fp32",)), str(tmp_path),
                       log=lambda *a: None)
    assert s["total_mismatches"] > 0


WMMA_REPLAY = REPLAY_PATH.with_name("h200_wmma_replay.npz")


def test_model_reproduces_the_h200_wmma_replay():
    """The stored H200 WMMA samples (tcemu validate --wmma and tcemu probe --wmma on the H200, every case and input
    family, the probe's vectors too): the wmma presets reproduce every one of them bit for bit."""
    res = check_replay(WMMA_REPLAY)
    assert res["mismatches"] == 0, {g: v["first"] for g, v in res["groups"].items() if v["mismatches"]}
    assert {g.split("__", 1)[0] for g in res["groups"]} == {c.name for c in WMMA_CASES}
    assert res["samples"] >= 10_000


def test_the_wmma_replay_tells_the_lowering_apart():
    """The same tf32 samples against one m16n8k8 block of 8 (what wmma m16n16k8 is not lowered to on the H200):
    mismatches, so the replay test above can fail."""
    from dataclasses import replace

    from tcemu.numerics.hardware.validate import model_params

    case = get_case("wmma.k8.tf32.fp32")
    table = {case.name: (replace(model_params(case), n_fma=8), False)}
    groups = [g for g in load_replay(WMMA_REPLAY) if g.startswith(case.name + "__")]
    assert check_replay(WMMA_REPLAY, groups=groups, table=table)["mismatches"] > 0
