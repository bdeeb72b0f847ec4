"""The emulated-GEMM validation pipeline (tcemu validate --emulation) on a CPU, and the H200 replay set.

* the plan: every (method, kernel family), the dispatcher's configurations, the K classes of each compiled
  variant, enough outputs;
* the pipeline with a stand-in GPU that answers with the twin: 0 mismatches, the summary and the replay set,
  outputs through the range fix-up in the 'huge' and 'special' families (and the replay block) only;
* with a perturbed stand-in: the mismatches are found, saved, and shrunk to a shorter K, and the replay check
  fails on the perturbed bits;
* the H200 replay set (data/h200_emulation_replay.npz, from the integrator's H200 run): the twin reproduces every
  stored GPU output. Skipped until that file exists.
* ``gpu``: the validation itself on a few GEMMs per kernel family (needs CUDA; the H200 for the Gluon kernels).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("triton")

from tcemu.numerics.hardware.emulation_validate import (  # noqa: E402
    REPLAY_PATH,
    EmulationValidationConfig,
    TwinGemmRunner,
    check_replay,
    run_emulation_validation,
)
from tcemu.numerics.hardware.gemm_families import GEMM_FAMILIES, family_configs, gemm_inputs, plan  # noqa: E402
from tcemu.numerics.schedule import KERNEL_FAMILIES, kernel_family  # noqa: E402

METHODS = ("tf32x3", "bf16x3", "bf16x6", "bf16x9")


def test_plan_covers_every_kernel_family_and_its_variants():
    jobs = plan(METHODS, KERNEL_FAMILIES, 200_000, max_mn=256)
    pairs = {(j.method, j.kernel) for j in jobs}
    assert pairs == {(m, k) for m in METHODS for k in KERNEL_FAMILIES if m != "bf16x9" or k == "triton"}
    for m, k in pairs:
        js = [j for j in jobs if (j.method, j.kernel) == (m, k)]
        assert sum(j.m * j.n for j in js) >= 200_000
        assert {j.family for j in js if j.replay} == set(GEMM_FAMILIES)
        for j in js:  # each job runs the kernel family it is counted under (on the H200)
            assert kernel_family(m, j.config, "h200", j.k)[0] == k, j
        if k == "triton":
            assert {j.config for j in js} == set(family_configs(m, k))
            assert any(j.k % 16 for j in js) and any(j.k % int(j.config.split("x")[2].split("w")[0]) == 0 for j in js)


@pytest.mark.parametrize("family", GEMM_FAMILIES)
def test_gemm_inputs_are_float32_of_their_family(family):
    a, b = gemm_inputs(family, 32, 40, 24, np.random.default_rng(0))
    assert a.shape == (32, 40) and b.shape == (40, 24) and a.dtype == b.dtype == np.float32
    finite = np.isfinite(a).all() and np.isfinite(b).all()
    assert finite == (family != "special")


def _small(**kw) -> EmulationValidationConfig:
    return EmulationValidationConfig(methods=("tf32x3", "bf16x6"), kernels=("triton", "pgw"), outputs=2500,
                                     k_max=72, max_mn=48, workers=2, progress=False, **kw)


def test_pipeline_with_the_twin_as_gpu(tmp_path):
    summary = run_emulation_validation(TwinGemmRunner(), _small(), str(tmp_path), log=lambda *a: None)
    assert summary["total_mismatches"] == 0 and summary["total_outputs"] >= 4 * 2500
    assert set(summary["pairs"]) == {"tf32x3__triton", "tf32x3__pgw", "bf16x6__triton", "bf16x6__pgw"}
    for r in summary["pairs"].values():
        assert set(r["families"]) == set(GEMM_FAMILIES) and r["schedules"]
        fams = r["families"]
        # the range fix-up: in 'huge' (top of the range, finite results among them) and 'special'; nowhere else
        assert fams["huge"]["fixed_finite"] > 0 and fams["special"]["fixed"] > 0, fams
        assert all(fams[f]["fixed"] == 0 for f in ("normal", "wide", "cancel", "tiny")), fams
        assert r["fixed"] == sum(f["fixed"] for f in fams.values()) and r["fixed_mismatches"] == 0
    assert summary["total_fixed"] == sum(r["fixed"] for r in summary["pairs"].values())
    json.loads((tmp_path / "h200_emulation_summary.json").read_text())
    rep = check_replay(str(tmp_path / "h200_emulation_replay.npz"))
    assert rep["mismatches"] == 0 and len(rep["groups"]) == 4 * len(GEMM_FAMILIES)
    assert rep["outputs"] == 256 * 4 * len(GEMM_FAMILIES)
    assert all(rep["groups"][g]["fixed"] > 0 for g in rep["groups"] if g.endswith(("__huge", "__special")))


def test_mismatches_are_found_saved_and_shrunk(tmp_path):
    """A stand-in GPU whose TF32x3 output differs in the last bit wherever A's row has a value above 2.5 in its
    first 20 columns: found, saved, shrunk on the 'GPU' to a K of at most 20, and the replay check sees it."""
    def perturb(method, config, a, b, bits):
        if method != "tf32x3":
            return bits
        hit = (np.abs(np.nan_to_num(a[:, :20])) > 2.5).any(axis=1)
        out = bits.copy()
        out[hit] ^= np.uint32(1)
        return out

    summary = run_emulation_validation(TwinGemmRunner(perturb=perturb), _small(shrink=2), str(tmp_path),
                                       log=lambda *a: None)
    assert summary["pairs"]["tf32x3__triton"]["mismatches"] > 0
    assert summary["pairs"]["bf16x6__triton"]["mismatches"] == 0
    reps = summary["reproducers"]
    assert reps and all(r["in_16x16"] and r["k"] <= 20 for r in reps)
    assert all(np.count_nonzero(r["a"]) <= 2 for r in reps)  # reduced to the entries that matter
    z = np.load(tmp_path / "h200_emulation_mismatches.npz")
    assert any(k.startswith("min__") for k in z.files)
    assert check_replay(str(tmp_path / "h200_emulation_replay.npz"))["mismatches"] > 0


def test_a_mark_the_fixup_left_is_a_mismatch(tmp_path):
    """A stand-in GPU that leaves the range check's mark (NaN 0x7FF0DEAD) where the twin computes a NaN by the
    fix-up: a mismatch there, not a NaN payload difference."""
    from tcemu.emulation.gemm.range_fixup import RANGE_MARK_BITS

    def perturb(method, config, a, b, bits):
        twin_nan = np.isnan(bits.view(np.float32))
        out = bits.copy()
        out[twin_nan] = RANGE_MARK_BITS
        return out

    cfg = EmulationValidationConfig(methods=("tf32x3",), kernels=("triton",), outputs=1000, k_max=40, max_mn=32,
                                    workers=1, progress=False, families=("special",), shrink=0)
    summary = run_emulation_validation(TwinGemmRunner(perturb=perturb), cfg, str(tmp_path), log=lambda *a: None)
    r = summary["pairs"]["tf32x3__triton"]
    assert r["mismatches"] > 0 and r["fixed_mismatches"] > 0 and r["nan_payload_differences"] == 0


@pytest.mark.skipif(not os.path.exists(REPLAY_PATH), reason="the H200 replay set data/h200_emulation_replay.npz (from "
                    "tcemu validate --emulation on the H200) is missing")
def test_twin_reproduces_every_h200_replay_output():
    """The stored H200 outputs of every (method, kernel, family): a change to the split, the kernels' order or
    the Tensor Core model that the twin does not follow fails here."""
    res = check_replay()
    bad = {g: v for g, v in res["groups"].items() if v["mismatches"]}
    assert res["mismatches"] == 0, bad
    assert res["outputs"] >= 256 * 16 * 5
    assert res["fixed"] > 0  # the range fix-up's outputs are among them


@pytest.mark.gpu
def test_validation_on_this_gpu(tmp_path):
    """A short validation on the GPU: TF32x3 on every kernel family this GPU runs (14 compiled variants), 0
    mismatches, outputs through the range fix-up, no Gluon configuration falling back (on the H200)."""
    import torch

    from tcemu.numerics.hardware.emulation_validate import TorchGemmRunner

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cfg = EmulationValidationConfig(methods=("tf32x3",), outputs=20_000, max_mn=128, k_max=96, progress=False,
                                    shrink=1)
    summary = run_emulation_validation(TorchGemmRunner(), cfg, str(tmp_path), log=print)
    assert summary["total_mismatches"] == 0, {k: v["mismatches"] for k, v in summary["pairs"].items()}
    assert summary["total_fixed"] > 0 and summary["total_fixed_mismatches"] == 0  # the fix-up ran, bit for bit
    if summary["arch_preset"] == "h200":
        assert all(v["fell_back"] == 0 for v in summary["pairs"].values()), summary["pairs"]


@pytest.mark.interpret
def test_pipeline_dry_run_with_the_kernels_under_the_interpreter(tmp_path):
    """The whole pipeline with the real launcher (emu_mm, split_t, explicit configurations) on the CPU
    interpreter, tl.dot by the Tensor Core model: what runs on the H200, minus the GPU. The Gluon configurations
    run the Triton kernel there (as on any non-Hopper device), so 'pgw' is that kernel's mode 1. Without the
    'special' family: Triton 3.9's interpreter flushes BF16 subnormals to zero when it widens them to FP32
    (0x0001 -> 0.0), which the kernels do only there (DOT_FMT 2), so a BF16 piece 2^-133 times Inf gives NaN."""
    from tcemu.numerics.hardware.emulation_validate import TorchGemmRunner

    cfg = EmulationValidationConfig(methods=("tf32x3", "bf16x9"), kernels=("triton", "pgw"), outputs=600, k_max=40,
                                    max_mn=32, workers=1, progress=False,
                                    families=("normal", "wide", "cancel", "tiny", "huge"))
    summary = run_emulation_validation(TorchGemmRunner("cpu"), cfg, str(tmp_path), log=lambda *a: None)
    assert summary["total_mismatches"] == 0 and summary["total_outputs"] >= 3 * 600
    assert summary["fp_fusion"] is False
    assert all(r["families"]["huge"]["fixed_finite"] > 0 for r in summary["pairs"].values())  # the fix-up ran
