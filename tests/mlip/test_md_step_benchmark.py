"""benchmarks/md_step.py (issue 7): its step computes the same energy and forces as metatomic's ASE calculator."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tcemu._results import read_wide

pytest.importorskip("metatrain")
ROOT = Path(__file__).resolve().parents[2]


def load_bench(name: str = "md_step"):
    """benchmarks/<name>.py as a module (``_pet_step``: the step it shares with md_step_host_profile.py)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_step_matches_the_ase_calculator_in_fp64():
    from metatomic_ase import MetatomicCalculator

    from tcemu.mlip import systems
    from tcemu.mlip.models import build_pet

    bench = load_bench()
    atoms = systems.build("water_192")
    model = build_pet("tiny").double().export()
    inp = bench.prepare_inputs(atoms, model, torch.device("cpu"), torch.float64)
    energy, forces = bench.energy_and_forces(model, inp, torch.float64)
    atoms.calc = MetatomicCalculator(model, device="cpu")
    np.testing.assert_allclose(energy.item(), atoms.get_potential_energy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(forces.numpy(), atoms.get_forces(), rtol=1e-8, atol=1e-10)


def test_cpu_smoke_run_writes_every_column(tmp_path):
    bench = load_bench()
    out = tmp_path / "md.csv"
    rc = bench.main(["--device", "cpu", "--shapes", "tiny", "--systems", "water_192", "--methods", "fp32,bf16x3",
                     "--modes", "eager", "--repeats", "2", "--warmup", "1", "--out", str(out)])
    assert rc == 0
    rows = read_wide(out)
    assert [(r["benchmark"], r["impl"], r["method"]) for r in rows] == [("md_step", "torch", "fp32"),
                                                                        ("md_step", "tcemu", "bf16x3")]
    for r in rows:  # the case, the timings, the force error and the provenance of the run
        assert {"model", "n_atoms", "mode", "attention", "round", "median_ms", "p20_ms", "p80_ms", "nl_build_ms",
                "force_err_vs_fp64", "fp32_noise_floor", "note", "gpu", "torch", "commit", "date"} <= set(r), r
        assert r["gpu"].startswith("CPU: ") and r["model"] == "pet-tiny" and r["n_atoms"] == "192"
    err = {r["method"]: float(r["force_err_vs_fp64"]) for r in rows}
    assert 0 < err["fp32"] < 1e-4 and err["bf16x3"] > 0 and not math.isnan(float(rows[0]["median_ms"]))


def test_gemm_kernel_classification():
    """The GEMM share counts GEMM and split kernels only: not attention, and not Inductor's fused pointwise
    kernels named after the emulated GEMM they follow (both were counted once, inflating the share)."""
    bench = load_bench("_pet_step")
    gemm = ["_emu_mm_kernel", "_emu_mm_wgmma_kernel", "_emu_mm_wgmma_ws_kernel", "_split_t_kernel", "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8",
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>", "triton_tem_fused_mm_0",
            "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, cublasGemvParamsEx"]
    other = ["fmha_cutlassB_f32_aligned_64x64_k32_sm80", "triton_poi_fused_cat_emu_mm_mul_sigmoid_3",
             "triton_per_fused_add_addmm_cat_index_native_layer_norm_12", "indexing_backward_kernel_small_stride"]
    assert all(bench.is_gemm_kernel(k) for k in gemm)
    assert not any(bench.is_gemm_kernel(k) for k in other)


def test_no_fp64_leaves_the_force_error_empty(tmp_path):
    bench = load_bench()
    out = tmp_path / "md.csv"
    rc = bench.main(["--device", "cpu", "--shapes", "tiny", "--systems", "water_192", "--methods", "fp32",
                     "--modes", "eager", "--repeats", "1", "--warmup", "0", "--no-fp64", "--out", str(out)])
    assert rc == 0
    (row,) = read_wide(out)
    assert "force_err_vs_fp64" not in row and float(row["median_ms"]) > 0


def test_rounds_interleave_and_aggregate(tmp_path):
    """--rounds repeats the configuration list; each round's speedup is against its own FP32 compiled, and
    the aggregate is the median over rounds."""
    bench = load_bench()
    out = tmp_path / "md.csv"
    rc = bench.main(["--device", "cpu", "--shapes", "tiny", "--systems", "water_192", "--configs",
                     "fp32:eager,bf16x3:eager", "--repeats", "1", "--warmup", "0", "--no-fp64", "--rounds", "2",
                     "--out", str(out)])
    assert rc == 0
    rows = read_wide(out)
    assert [(r["method"], r["round"]) for r in rows] == [("fp32", "1"), ("bf16x3", "1"), ("fp32", "2"),
                                                         ("bf16x3", "2")]
    agg = {a["method"]: a for a in bench.aggregate_rounds(rows)}
    times = [float(r["median_ms"]) for r in rows if r["method"] == "bf16x3"]
    assert agg["bf16x3"]["rounds"] == 2 and agg["bf16x3"]["median_ms"] == sum(times) / 2
    assert agg["bf16x3"]["round_min_ms"] == min(times)


def test_full_compile_scope_keeps_fp32_forces():
    """``--compile-scope full`` also compiles PET's preprocessing (its gathers' backward then runs as Inductor
    atomics instead of eager PyTorch's sorting kernel): the forces stay FP32's, within 3 times eager FP32's
    own error against FP64 (the MD-step goal's accuracy criterion), and the compiled methods are the scope's."""
    import copy

    from tcemu.mlip import systems
    from tcemu.mlip.models import build_pet

    bench = load_bench()
    assert bench.COMPILE_SCOPES["full"] == ("preprocess",) + bench.COMPILE_SCOPES["backend"]
    atoms = systems.build("water_192")
    base = build_pet("tiny")
    inp = bench.prepare_inputs(atoms, base.export(), torch.device("cpu"), torch.float32)
    inp64 = bench.prepare_inputs(atoms, base.export(), torch.device("cpu"), torch.float64)
    _, f64 = bench.energy_and_forces(copy.deepcopy(base).double().export(), inp64, torch.float64)
    _, f_eager = bench.energy_and_forces(base.export(), inp, torch.float32)
    pet = copy.deepcopy(base)
    bench.compile_backend(pet, scope="full")
    assert all(name in vars(pet.backend) for name in bench.COMPILE_SCOPES["full"])  # compiled copies set
    torch._dynamo.reset()
    _, f_full = bench.energy_and_forces(pet.export(), inp, torch.float32)
    err_eager = (f_eager.double() - f64).norm(dim=1).mean().item()
    err_full = (f_full.double() - f64).norm(dim=1).mean().item()
    assert 0 < err_full <= 3 * err_eager, (err_full, err_eager)


def test_attention_suffix_emulates_attention_for_one_configuration(tmp_path):
    """``tf32x3+attn`` runs beside plain ``tf32x3`` in one invocation: same method column, ``attention`` says which
    emulated PET's attention (its forces then differ from the plain row's, within FP32 accuracy), and where
    (``+attn``: PET's attention blocks; ``+attn-step``: the whole step inside the mode)."""
    bench = load_bench()
    assert bench.split_config_method("bf16x6+attn") == ("bf16x6", "blocks")
    assert bench.split_config_method("bf16x6+attn-step") == ("bf16x6", "step")
    assert bench.split_config_method("bf16x6", emulate_attention=True) == ("bf16x6", "blocks")
    assert bench.split_config_method("fp32", emulate_attention=True) == ("fp32", "")
    with pytest.raises(ValueError, match="methods only"):
        bench.split_config_method("fp32+attn")
    with pytest.raises(ValueError, match="unknown suffix"):
        bench.split_config_method("tf32x3+flash")
    out = tmp_path / "md.csv"
    rc = bench.main(["--device", "cpu", "--shapes", "tiny", "--systems", "water_192", "--configs",
                     "fp32:eager,tf32x3:eager,tf32x3+attn:eager,tf32x3+attn-step:eager", "--repeats", "1",
                     "--warmup", "0",
                     "--out", str(out)])
    assert rc == 0
    rows = read_wide(out)
    assert [(r["method"], r["attention"]) for r in rows] == [("fp32", "fp32"), ("tf32x3", "fp32"),
                                                             ("tf32x3", "emulated"), ("tf32x3", "emulated-step")]
    err = [float(r["force_err_vs_fp64"]) for r in rows]
    assert err[1] != err[2] and max(err[1:]) <= 3 * err[0], err
    # PET's only functional products are its attention's: scoping the mode to the attention blocks gives the
    # forces of the whole step inside it, bit for bit
    assert err[2] == err[3], err
    assert len(bench.aggregate_rounds(rows)) == 4


def test_interleaved_steps_time_every_configuration_in_turn(tmp_path):
    """``--interleave-steps``: every configuration is built first and timed one step each in turn; each row has
    its median, its force error, and the per-cycle speedup against FP32 compiled in the note."""
    bench = load_bench()
    out = tmp_path / "md.csv"
    rc = bench.main(["--device", "cpu", "--shapes", "tiny", "--systems", "water_192", "--configs",
                     "fp32:compile,tf32x3:eager,tf32x3+attn:eager", "--repeats", "4", "--warmup", "1",
                     "--interleave-steps", "--rounds", "2", "--out", str(out)])
    assert rc == 0
    rows = read_wide(out)
    assert [(r["method"], r["mode"], r["attention"], r["round"]) for r in rows] == [
        (m, mode, a, str(rnd)) for rnd in (1, 2)
        for m, mode, a in (("fp32", "compile", "fp32"), ("tf32x3", "eager", "fp32"), ("tf32x3", "eager", "emulated"))]
    for r in rows:
        assert float(r["median_ms"]) > 0 and float(r["p20_ms"]) <= float(r["p80_ms"])
        assert "interleaved steps" in r["note"] and "of 4 cycles" in r["note"], r["note"]
        assert 0 < float(r["force_err_vs_fp64"]) < 1e-3
    assert float(rows[0]["speedup_vs_fp32_compile"]) == 1.0
    assert "median 1.000" in rows[0]["note"]  # FP32 compiled against itself, cycle by cycle
    err = [float(r["force_err_vs_fp64"]) for r in rows[:3]]
    assert err[1] != err[2]  # the attention really is emulated in the third configuration
