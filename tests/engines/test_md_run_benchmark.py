"""benchmarks/md_run.py (issue 24): the whole-run benchmark runs end to end at a tiny size, both engines."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("metatrain")
pytest.importorskip("torch_sim")
ROOT = Path(__file__).resolve().parents[2]


def load_bench():
    spec = importlib.util.spec_from_file_location("md_run", ROOT / "benchmarks" / "md_run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["md_run"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_cpu_smoke_run_writes_the_long_format_csv(tmp_path):
    bench = load_bench()
    out = tmp_path / "md_run.csv"
    rc = bench.main(["--device", "cpu", "--shape", "tiny", "--systems", "water_192", "--steps", "4", "--log-every", "2",
                     "--warmup", "1", "--breakdown-steps", "1", "--compile", "none", "--coverage", "--interleave", "3",
                     "--profile-steps", "1", "--profile-top", "4",
                     "--out", str(out)])
    assert rc == 0
    from tcemu._results import HEADER, parse_case, read_results

    rows = read_results(out)
    assert tuple(rows[0]) == HEADER
    assert all(r["benchmark"] == "md_run" and r["commit"] and r["date"] and r["torch"] for r in rows)

    def where(r):
        return r["impl"], r["method"], r["metric"], parse_case(r["case"]).get("step", "")

    def value(engine, method, metric):
        (r,) = [r for r in rows if where(r) == (engine, method, metric, "")]
        return float(r["value"])

    def series(engine, method, metric):
        return [(int(parse_case(r["case"])["step"]), float(r["value"])) for r in rows
                if where(r)[:3] == (engine, method, metric)]

    for engine in ("ase", "torchsim"):
        for method in ("fp32", "tf32x3+attn"):
            assert value(engine, method, "s_per_step") > 0
            assert math.isfinite(value(engine, method, "drift_meV_per_atom_ps"))
            assert value(engine, method, "nl_ms") > 0 and value(engine, method, "model_ms") > 0
            assert [s for s, _ in series(engine, method, "e_total_eV")] == [0, 2, 4]
            median, longest = value(engine, method, "step_median_s"), value(engine, method, "step_max_s")
            assert 0 < median <= longest <= value(engine, method, "s_per_step") * 4  # one of the 4 timed steps
            assert value(engine, method, "slow_steps") >= 0 and value(engine, method, "slow_steps_excess_s") >= 0
            assert value(engine, method, "triton_variants_timed") == 0  # the CPU runs no Triton kernel
        assert value(engine, "fp32", "speedup_vs_fp32") == 1.0
        # the profile: metatomic's model range holds its own ranges' time, and the top operators are named
        scopes = {parse_case(r["case"])["op"]: float(r["value"]) for r in rows
                  if where(r)[:3] == (engine, "fp32", "profile_scope_cpu_ms")}
        assert scopes and all(v >= 0 for v in scopes.values())
        assert not any(name.startswith(("aten::", "autograd::")) for name in scopes)
        if "Model::forward" in scopes and "PET::predict" in scopes:
            assert scopes["Model::forward"] >= scopes["PET::predict"]
        top = [r for r in rows if where(r)[:3] == (engine, "fp32", "profile_self_cpu_ms")]
        assert len(top) == 4 and all(float(r["value"]) >= 0 and parse_case(r["case"])["op"] for r in top)
        import tcemu

        note = [r for r in rows if where(r)[:3] == (engine, "tf32x3+attn", "coverage_fraction_note")]
        assert bool(note) == (not hasattr(tcemu, "coverage"))  # the meter's share, where tcemu has it
        # the same initial state and FP32-accurate forces: the two methods' energies agree to FP32 rounding
        e32, e = (np.array([v for _, v in series(engine, m, "e_pot_eV")]) for m in ("fp32", "tf32x3+attn"))
        np.testing.assert_allclose(e, e32, rtol=1e-5)


def test_drift_fit_and_method_names():
    bench = load_bench()
    drift, fluct = bench.drift_and_fluct([0, 10, 20], [1.0, 1.1, 1.2], n_atoms=10, dt_fs=1.0)
    assert drift == pytest.approx(1000.0) and fluct > 0  # 0.1 eV per 10 fs = 10 eV/ps, over 10 atoms
    assert bench.split_method("tf32x3+attn") == ("tf32x3", True)
    with pytest.raises(ValueError):
        bench.split_method("fp32+attn")


def test_runs_take_turns_and_a_failing_run_leaves_the_rotation():
    bench = load_bench()
    order = []

    class Fake:
        def __init__(self, name, fail_at=None):
            self.name, self.fail_at, self.done = name, fail_at, 0

        def advance(self, n):
            if self.fail_at is not None and self.done >= self.fail_at:
                raise RuntimeError("out of memory")
            order.append((self.name, n))
            self.done += n

    failures = []
    runs = {"fp32": Fake("fp32"), "tf32x3": Fake("tf32x3", fail_at=4)}
    bench.take_turns(runs, 7, 3, lambda name, exc: failures.append((name, str(exc))))
    # turns of 3 (the last one shorter); the failing run is reported once and the other one goes on alone
    assert order == [("fp32", 3), ("tf32x3", 3), ("fp32", 3), ("tf32x3", 3), ("fp32", 1)]
    assert failures == [("tf32x3", "out of memory")]
    order.clear()
    bench.take_turns({"a": Fake("a"), "b": Fake("b")}, 5, 0, lambda *a: None)
    assert order == [("a", 5), ("b", 5)]  # block 0: one run after the other


def test_emulation_scopes():
    """``--emulation-scope layers`` swaps the layers and scopes the attention blocks only; ``model`` also puts
    the model's own code inside the emulation mode (an instance ``forward`` on the model's modules)."""
    bench = load_bench()
    from tcemu.emulation.linear import EmulatedLinear
    from tcemu.mlip.models import build_pet, is_pet_attention_block

    base = build_pet("tiny", 0)

    def scoped(model):  # modules given an instance forward by tcemu's scopes
        return [m for m in model.modules() if "forward" in vars(m)]

    layers = bench.build_model(base, "tf32x3+attn", "none", emulation_scope="layers")
    whole = bench.build_model(base, "tf32x3+attn", "none", emulation_scope="model")
    for model in (layers, whole):
        assert any(isinstance(m, EmulatedLinear) for m in model.modules())
    assert scoped(layers) and all(is_pet_attention_block(m) for m in scoped(layers))
    assert any(not is_pet_attention_block(m) for m in scoped(whole))
    with pytest.raises(ValueError):
        bench.build_model(base, "tf32x3", "none", emulation_scope="everything")
