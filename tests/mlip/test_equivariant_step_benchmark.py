"""benchmarks/equivariant_step.py runs (CPU smoke size): the CSV has every metric of every configuration, the
emulated configuration's step is fully emulated, FP32's not at all, and the provenance columns are filled."""

import importlib.util
from pathlib import Path

import pytest

from tcemu._results import read_results, read_wide

pytest.importorskip("mace")

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "equivariant_step.py"


def test_cpu_smoke_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("equivariant_step", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "results.csv"
    assert bench.main(["--device", "cpu", "--channels", "4", "--max-ell", "1", "--interactions", "1",
                       "--correlation", "2", "--replicate", "1,1,1", "--methods", "fp32,tf32x3", "--modes", "eager",
                       "--rounds", "1", "--warmup", "0", "--out", str(out)]) == 0
    rows = read_results(out)
    assert {r["benchmark"] for r in rows} == {"equivariant_step"} and all(r["commit"] and r["date"] for r in rows)
    got = {r["method"]: r for r in read_wide(out)}
    assert set(got) == {"fp32", "tf32x3"} and got["fp32"]["impl"] == "torch" and got["tf32x3"]["impl"] == "tcemu"
    for r in got.values():
        for metric in ("coverage", "fallback_share", "fp32_share", "flops", "force_max_err", "force_mean_err",
                       "energy_err", "step_ms", "speedup_vs_fp32"):
            assert r[metric], (r["method"], metric)
        assert r["n_atoms"] == "192" and r["mode"] == "eager" and r["e3nn"] and r["mace"]
    assert float(got["tf32x3"]["coverage"]) == 1.0 and float(got["fp32"]["coverage"]) == 0.0
    assert float(got["tf32x3"]["flops"]) == float(got["fp32"]["flops"])
    assert float(got["tf32x3"]["force_max_err"]) < 1e-4
    assert "tf32x3:eager" in capsys.readouterr().out


@pytest.mark.slow(reason="torch.compile of MACE, FP32 and emulated, takes about 4 minutes on 2 CPU cores")
def test_cpu_compiled_run(tmp_path):
    """The compiled mode (MACE as mace-torch prepares it for torch.compile): FP32 and TF32x3 both compile (no
    note row), the emulated step stays fully emulated and FP32-accurate, speedups against compiled FP32."""
    spec = importlib.util.spec_from_file_location("equivariant_step", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "results.csv"
    assert bench.main(["--device", "cpu", "--channels", "4", "--max-ell", "1", "--interactions", "1",
                       "--correlation", "2", "--replicate", "1,1,1", "--methods", "fp32,tf32x3", "--modes",
                       "compile", "--rounds", "1", "--warmup", "0", "--budget-s", "3000", "--out", str(out)]) == 0
    got = {r["method"]: r for r in read_wide(out)}
    for r in got.values():
        assert not r.get("note"), r["note"]
        assert r["mode"] == "compile" and r["step_ms"] and r["speedup_vs_fp32"]
    assert float(got["fp32"]["speedup_vs_fp32"]) == 1.0
    assert float(got["tf32x3"]["force_max_err"]) < 1e-4 and float(got["fp32"]["force_max_err"]) < 1e-4


def test_the_compile_ready_mace_gives_eager_forces_under_dynamo():
    """build_mace(for_compile=True) under Dynamo (its graphs run eagerly: backend="eager", seconds) gives the eager
    model's energy and forces; with autograd.grad traced into the graph, as mace-torch's prepare does by
    default, the forces came out zero."""
    import copy

    import torch

    from tcemu.mlip import calculators, systems

    spec = importlib.util.spec_from_file_location("equivariant_step", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    shape = (4, 1, 1, 2, (1, 8), 5.0, 0)
    eager, ready = calculators.build_mace(*shape), calculators.build_mace(*shape, for_compile=True)
    batch = bench.prepare_batch(systems.water_box(), 5.0, (1, 8), torch.device("cpu"), torch.float32)
    e0, f0 = bench.step(eager, batch)
    torch._dynamo.reset()
    e1, f1 = bench.step(torch.compile(copy.deepcopy(ready), backend="eager"), batch)
    assert float(f0.abs().max()) > 1e-3  # forces to compare
    torch.testing.assert_close(e1, e0, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(f1, f0, rtol=1e-5, atol=1e-6)
