"""benchmarks/equivariant_step.py runs (CPU smoke size): the CSV has every metric of every configuration, the
emulated configuration's step is fully emulated, FP32's not at all, and the provenance columns are filled."""

import csv
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("mace")

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "equivariant_step.py"


def test_cpu_smoke_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("equivariant_step", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "eq.csv"
    assert bench.main(["--device", "cpu", "--channels", "4", "--max-ell", "1", "--interactions", "1",
                       "--correlation", "2", "--replicate", "1,1,1", "--methods", "fp32,tf32x3", "--modes", "eager",
                       "--rounds", "1", "--warmup", "0", "--out", str(out)]) == 0
    with out.open() as f:
        rows = list(csv.DictReader(f))
    got = {(r["config"], r["metric"]): r for r in rows}
    for config in ("fp32:eager", "tf32x3:eager"):
        for metric in ("coverage", "fallback_share", "fp32_share", "flops", "force_max_err", "force_mean_err",
                       "energy_err", "step_ms", "speedup_vs_fp32"):
            assert (config, metric) in got, (config, metric)
    assert float(got["tf32x3:eager", "coverage"]["value"]) == 1.0
    assert float(got["fp32:eager", "coverage"]["value"]) == 0.0
    assert float(got["tf32x3:eager", "flops"]["value"]) == float(got["fp32:eager", "flops"]["value"])
    assert float(got["tf32x3:eager", "force_max_err"]["value"]) < 1e-4
    r = rows[0]
    assert r["n_atoms"] == "192" and r["torch"] and r["e3nn"] and r["mace"] and r["date"]
    assert "tf32x3:eager" in capsys.readouterr().out
