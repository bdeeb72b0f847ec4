"""benchmarks/gemm_decision.py on the CPU with the GPU's timings faked: its plan of products and row counts, its
stopping rule, and the table it writes, which the library reads back."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton", reason="needs the 'triton' extra")

from tcemu.emulation.gemm.decision import NEVER, DecisionTable  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _load():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("gemm_decision", ROOT / "benchmarks" / "gemm_decision.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gemm_decision"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_pet_products_cover_both_roles_at_every_size():
    _load()  # puts benchmarks/ on the path
    from _pet_gemms import ATOMS, products  # noqa: PLC0415 - beside the benchmark

    prods = products()
    assert ("fwd", 1024, 256) in prods and ("bwd_input", 256, 1024) in prods  # PET S's 256 -> 1024 layer
    assert ("fwd", 6144, 1536) in prods  # PET M's node feed-forward
    assert {m for lbl, m in prods["fwd", 1024, 256] if "edge" in lbl} == {40 * n for n in ATOMS}


def test_a_run_with_faked_timings_writes_a_table_the_library_reads(tmp_path, monkeypatch):
    bench = _load()

    class FakeProduct:  # no operands: the calls are names only
        def __init__(self, role, N, K, max_m, gen):
            self.N, self.K = N, K

        def calls(self, M, methods):
            return {n: (M, self.N, self.K) for n in ("sgemm", "tf32", *methods)}

    timed = []

    def fake_time_point(calls):
        # SGEMM 1 ms per GFLOP plus 20 us; the emulation 0.6 ms per GFLOP plus 60 us: it pays from ~3.4 GFLOP
        M, N, K = calls["sgemm"]
        timed.append(M)
        g = 2.0 * M * N * K / 1e9
        t = {n: [(0.02 + g) if n == "sgemm" else (0.005 + g / 4) if n == "tf32" else (0.06 + 0.6 * g)] * 5
             for n in calls}
        return t, {n: 10.0 for n in calls}

    monkeypatch.setattr(bench, "Product", FakeProduct)
    monkeypatch.setattr(bench, "time_point", fake_time_point)
    monkeypatch.setattr(bench, "precompile", lambda jobs, workers: {})
    cpu = bench.Provenance.current("cpu")
    monkeypatch.setattr(bench.Provenance, "current", classmethod(lambda cls, device=None: cpu))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA Fake GPU")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch, "Generator", lambda device=None: type("G", (), {"manual_seed": lambda s, x: s})())
    table_copy = tmp_path / "copy.json"
    assert bench.main(["--out-dir", str(tmp_path), "--models", "pet-s", "--methods", "tf32x3",
                       "--table", str(table_copy)]) == 0
    path = tmp_path / "decision_fake_gpu.json"
    assert json.loads(path.read_text()) == json.loads(table_copy.read_text())
    table = DecisionTable.load(path)
    assert table.device == "NVIDIA Fake GPU" and len(table.curves) == 18  # PET S: 9 fwd + 9 bwd_input products
    c = table.curves["tf32x3", "fwd", 1024, 256]
    # the faked emulation is faster by 5 % from 2 M N K = 0.04 / 0.35 GFLOP... so from ~1.5 GFLOP conservatively
    t = c.row_threshold(0.05)
    assert t < NEVER and 2.0 * (t - 1) * 1024 * 256 < 4e9 < 2.0 * c.points[-1].M * 1024 * 256
    # the stopping rule: grid points above two won in a row are skipped; the systems' row counts never are
    ms = [p.M for p in c.points]
    assert 691200 in ms and 262144 not in ms
    assert (tmp_path / "gemm_decision.csv").is_file()


@pytest.mark.interpret
@pytest.mark.parametrize("role", ["fwd", "bwd_input"])
def test_the_timed_calls_compute_the_product_of_their_role(role):
    """The three calls a point times (SGEMM, cuBLAS TF32, the emulated call) give one (M, N) product, the one the
    decision's key names: N outputs, contraction K (kernels under TRITON_INTERPRET=1 on the CPU)."""
    from tcemu.testing import fp64_product, normwise_bound, relative_errors

    bench = _load()
    M, N, K = 24, 40, 32
    prod = bench.Product(role, N, K, 64, torch.Generator().manual_seed(0), device="cpu")
    calls = prod.calls(M, ("tf32x3",))
    ref = fp64_product(prod.a[:M], prod.w.T if role == "fwd" else prod.w, prod.bias)
    # on the CPU the "tf32" call is FP32 (no TF32 there); each within its method's normwise error model
    for name, method in (("sgemm", "fp32"), ("tf32", "fp32"), ("tf32x3", "tf32x3")):
        out = calls[name]()
        assert out.shape == (M, N), name
        assert relative_errors(out, ref)[0] <= normwise_bound(method, K), name
