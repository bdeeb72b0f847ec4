"""benchmarks/md_batched.py (issue 42): a CPU smoke run of the batched TorchSim benchmark writes every column."""

import importlib.util
import sys
from pathlib import Path

import pytest

from tcemu._results import read_wide

pytest.importorskip("metatrain")
pytest.importorskip("torch_sim")
ROOT = Path(__file__).resolve().parents[2]


def _load():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("md_batched", ROOT / "benchmarks" / "md_batched.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["md_batched"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_batch_copies_differ_and_a_cluster_becomes_periodic():
    bench = _load()
    atoms = bench.batch("water_cluster_6", 3, 0.01)
    assert len(atoms) == 3 and all(a.pbc.all() for a in atoms)
    assert not (atoms[0].positions == atoms[1].positions).all()


def test_cpu_smoke_run_writes_every_column(tmp_path):
    bench = _load()
    out = tmp_path / "mdb.csv"
    rc = bench.main(["--device", "cpu", "--shape", "tiny", "--system", "water_cluster_6", "--n-systems", "2",
                     "--steps", "2", "--warmup", "1", "--interleave", "1", "--compile", "none", "--modes", "nve",
                     "--methods", "fp32,bf16x3", "--out", str(out)])
    assert rc == 0
    rows = read_wide(out)
    assert [(r["benchmark"], r["impl"], r["method"], r["mode"]) for r in rows] == [
        ("md_batched", "torchsim", "fp32", "nve"), ("md_batched", "torchsim", "bf16x3", "nve")]
    for r in rows:
        assert {"model", "system", "n_systems", "n_atoms", "s_per_step", "p20_s", "p80_s", "speedup_vs_fp32",
                "first_steps_s", "e_pot_diff_meV_per_atom", "steps", "gpu", "commit"} <= set(r), r
        assert r["n_atoms"] == "12" and r["n_systems"] == "2" and float(r["s_per_step"]) > 0
    fp32, bf16x3 = rows
    assert float(fp32["speedup_vs_fp32"]) == 1.0 and float(fp32["e_pot_diff_meV_per_atom"]) == 0.0
    assert float(bf16x3["e_pot_diff_meV_per_atom"]) != 0.0  # BF16x3 keeps about 16 bits: not FP32's energy
