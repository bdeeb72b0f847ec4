"""The small-shape decision (tcemu.emulation.gemm.decision): table files, row thresholds (log-M interpolation,
the conservative margin, the nearest measured shape), the FLOP rule where nothing is measured, the settings and
their environment variables, the backend's use of it and its host cost. CPU only: the GPU is faked by name."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch

pytest.importorskip("triton", reason="needs the 'triton' extra")

import tcemu  # noqa: E402
from tcemu.emulation.configuration import ENV_VARS, EmulationConfig  # noqa: E402
from tcemu.emulation.gemm import decision  # noqa: E402
from tcemu.emulation.gemm import triton_backend as tb  # noqa: E402
from tcemu.emulation.gemm.decision import NEVER, Curve, DecisionTable, Point, flop_threshold  # noqa: E402
from tcemu.emulation.methods import get_method  # noqa: E402
from tcemu.emulation.ops import sgemm_row_limit  # noqa: E402

GPU = "NVIDIA Test GPU 80GB"
FAKE_CUDA = torch.device("cuda", 0)  # a device object only: nothing runs on it


def _point(M: int, speedup: float, spread: float = 0.0) -> dict:
    """A measured point: SGEMM 1 ms at the median, the emulation 1/speedup; each +-spread/2 at p20/p80."""
    emu = 1.0 / speedup
    return {"M": M, "sgemm_ms": [1 - spread / 2, 1.0, 1 + spread / 2], "emu_ms": [emu * (1 - spread / 2), emu,
                                                                                   emu * (1 + spread / 2)]}


def _table(curves: list[dict], device: str = GPU) -> dict:
    return {"format": decision.FORMAT, "device": device, "curves": curves}


def _curve(method: str, role: str, N: int, K: int, points: list[dict]) -> dict:
    return {"method": method, "role": role, "N": N, "K": K, "points": points}


# a curve that turns faster between M = 4,096 (0.8x) and 16,384 (1.3x), and stays faster
RISING = [_point(1024, 0.5), _point(4096, 0.8), _point(16384, 1.3), _point(65536, 1.6)]


def test_flop_threshold_is_the_former_rule():
    for N, K, flops in [(1024, 256, 6e9), (256, 256, 6e9), (7, 3, 100.0), (4096, 1024, 1.0)]:
        m = flop_threshold(N, K, flops)
        assert 2.0 * m * N * K >= flops and 2.0 * (m - 1) * N * K < flops
    assert flop_threshold(1024, 256, 0.0) == 0
    assert flop_threshold(0, 256, 6e9) == NEVER


def test_threshold_interpolates_in_log_m_between_the_last_slower_and_the_first_faster_point():
    c = DecisionTable.from_json(_table([_curve("tf32x3", "fwd", 1024, 256, RISING)])).curves["tf32x3", "fwd", 1024, 256]
    t = c.row_threshold(0.0)
    # log speedup goes from log 0.8 at log 4096 to log 1.3 at log 16384: zero at this fraction of the way
    frac = -math.log(0.8) / (math.log(1.3) - math.log(0.8))
    assert t == math.ceil(math.exp(math.log(4096) + frac * (math.log(16384) - math.log(4096))))
    assert 4096 < t < 16384
    # a margin moves it up; a margin beyond the last points' speedup leaves no row count emulated
    assert t < c.row_threshold(0.2) <= 16384
    assert c.row_threshold(0.7) == NEVER


def test_the_spread_of_the_repeats_counts_against_the_emulation():
    # 1.1x at the median, but SGEMM's p20 over the emulation's p80 is under 1.05 with a 6 % spread
    pts = [_point(4096, 1.1, spread=0.06), _point(16384, 1.1, spread=0.0)]
    c = DecisionTable.from_json(_table([_curve("tf32x3", "fwd", 512, 512, pts)])).curves["tf32x3", "fwd", 512, 512]
    assert c.points[0].conservative_speedup() < 1.05 < c.points[1].conservative_speedup()
    assert c.row_threshold(0.05) > 4096
    assert c.row_threshold(0.0) == 4096  # 0.97 / (1.03 / 1.1) still >= 1 with no margin: the first point


def test_a_slower_point_above_faster_ones_moves_the_threshold_above_it():
    pts = [_point(1024, 1.5), _point(4096, 0.9), _point(16384, 1.4)]  # faster, slower, faster
    c = Curve("bf16x6", "bwd_input", 256, 256, tuple(
        Point(p["M"], tuple(p["sgemm_ms"]), tuple(p["emu_ms"])) for p in pts))
    assert 4096 < c.row_threshold(0.05) <= 16384


def test_nothing_is_assumed_below_the_smallest_measured_row_count():
    pts = [_point(8192, 2.0), _point(32768, 2.0)]
    c = DecisionTable.from_json(_table([_curve("bf16x3", "fwd", 256, 256, pts)])).curves["bf16x3", "fwd", 256, 256]
    assert c.row_threshold(0.05) == 8192


def test_an_unmeasured_shape_takes_its_nearest_measured_neighbour_conservatively():
    t = DecisionTable.from_json(_table([_curve("tf32x3", "fwd", 1024, 256, RISING)]))
    measured = t.threshold("tf32x3", "fwd", 1024, 256, 0.05)
    # twice the work per row: the threshold in rows is kept (not halved)
    assert t.threshold("tf32x3", "fwd", 2048, 256, 0.05) == measured
    # half the work per row: the threshold in FLOPs is kept (twice the rows)
    assert t.threshold("tf32x3", "fwd", 512, 256, 0.05) == math.ceil(measured * 2)
    # beyond a factor of 2 in N or K, another method, or another role: nothing near (the FLOP rule decides)
    assert t.threshold("tf32x3", "fwd", 4096, 256, 0.05) is None
    assert t.threshold("tf32x3", "fwd", 1024, 64, 0.05) is None
    assert t.threshold("bf16x6", "fwd", 1024, 256, 0.05) is None
    assert t.threshold("tf32x3", "bwd_input", 1024, 256, 0.05) is None


def test_equally_near_neighbours_give_the_largest_threshold():
    late = [_point(4096, 0.5), _point(65536, 0.9), _point(262144, 1.5)]
    t = DecisionTable.from_json(_table([_curve("tf32x3", "fwd", 512, 256, RISING),
                                        _curve("tf32x3", "fwd", 2048, 256, late)]))
    # from 512: half the work per row there, its rows kept; from 2048: twice, its FLOPs kept (twice the rows)
    assert t.threshold("tf32x3", "fwd", 1024, 256, 0.05) == max(
        t.threshold("tf32x3", "fwd", 512, 256, 0.05), 2 * t.threshold("tf32x3", "fwd", 2048, 256, 0.05))


@pytest.mark.parametrize("bad, match", [
    ({"format": "something/0", "device": GPU, "curves": []}, "format"),
    (_table([{"method": "tf32x3", "role": "fwd", "N": 4}]), "malformed"),
    (_table([_curve("tf32x3", "wgrad", 4, 4, [_point(8, 1.0)])]), "role"),
    (_table([_curve("tf32x3", "fwd", 4, 4, [_point(8, 1.0), _point(8, 1.2)])]), "increase"),
    (_table([_curve("tf32x3", "fwd", 4, 4, [])]), "no points"),
    (_table([_curve("tf32x3", "fwd", 4, 4, [{"M": 8, "sgemm_ms": [1.0, 1.0], "emu_ms": [1, 1, 1]}])]),
     "p20, p50, p80"),
    (_table([_curve("tf32x3", "fwd", 4, 4, [{"M": 8, "sgemm_ms": [1, 1, 1], "emu_ms": [0, 1, 1]}])]), "positive"),
])
def test_a_bad_table_is_a_clear_error(bad, match):
    with pytest.raises(ValueError, match=match) as err:
        DecisionTable.from_json(bad, "t.json")
    assert "tcemu decision table" in str(err.value)


def test_a_missing_or_broken_table_file_is_a_clear_error(tmp_path, fake_gpu):
    with pytest.raises(FileNotFoundError, match="tcemu decision table .*benchmarks/gemm_decision.py"):
        DecisionTable.load(tmp_path / "absent.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="is not JSON"):
        DecisionTable.load(tmp_path / "broken.json")
    with tcemu.config(small_shape_table=str(tmp_path / "absent.json")), pytest.raises(FileNotFoundError):
        tb._use_fallback(get_method("tf32x3"), 10, 1024, 256, FAKE_CUDA, "fwd", count=False)


def test_the_first_table_of_the_device_decides_and_another_device_gets_the_flop_rule():
    mine = DecisionTable.from_json(_table([_curve("tf32x3", "fwd", 1024, 256, RISING)]))
    other = DecisionTable.from_json(_table([_curve("tf32x3", "fwd", 1024, 256, [_point(1024, 3.0)])], "Other GPU"))
    rows, why = decision.row_threshold([other, mine], GPU, "tf32x3", "fwd", 1024, 256, 0.05, 6e9)
    assert rows == mine.threshold("tf32x3", "fwd", 1024, 256, 0.05) and why.startswith("measured")
    rows, why = decision.row_threshold([other, mine], "Unmeasured GPU", "tf32x3", "fwd", 1024, 256, 0.05, 6e9)
    assert rows == flop_threshold(1024, 256, 6e9) and "FLOP" in why
    # a method with no curve near it on a measured GPU: the FLOP rule too
    assert decision.row_threshold([mine], GPU, "bf16x9", "fwd", 1024, 256, 0.05, 6e9)[0] == flop_threshold(
        1024, 256, 6e9)


def test_settings_and_their_environment_variables():
    env = {"TCEMU_SMALL_SHAPE_RULE": "FLOPS", "TCEMU_SMALL_SHAPE_MARGIN": "0.1", "TCEMU_SMALL_SHAPE_TABLE": "/x.json"}
    cfg = EmulationConfig.from_env(env)
    assert (cfg.small_shape_rule, cfg.small_shape_margin, cfg.small_shape_table) == ("flops", 0.1, "/x.json")
    assert set(env) <= set(ENV_VARS)
    d = EmulationConfig()
    assert (d.small_shape_rule, d.small_shape_margin, d.small_shape_table, d.small_shape_min_flops) == (
        "measured", 0.05, None, 6e9)
    with pytest.raises(ValueError, match="TCEMU_SMALL_SHAPE_MARGIN="):
        EmulationConfig.from_env({"TCEMU_SMALL_SHAPE_MARGIN": "-1"})
    with pytest.raises(ValueError, match="small_shape_rule"):
        EmulationConfig.from_env({"TCEMU_SMALL_SHAPE_RULE": "guess"})
    with pytest.raises(ValueError, match="small_shape_margin"):
        d.replace(small_shape_margin=float("nan"))


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """The backend sees CUDA device 0 as ``GPU``, with a table file of one TF32x3 curve per role."""
    monkeypatch.setattr(tb, "gpu_name", lambda index: GPU)
    monkeypatch.setattr(tb, "_THRESHOLDS", {})
    monkeypatch.setattr(tb, "_TABLES", {})
    slow_bwd = [_point(4096, 0.5), _point(65536, 0.9), _point(262144, 1.4)]
    path = tmp_path / "table.json"
    path.write_text(json.dumps(_table([_curve("tf32x3", "fwd", 1024, 256, RISING),
                                       _curve("tf32x3", "bwd_input", 1024, 256, slow_bwd)])))
    return str(path)


def test_the_backend_decides_per_role_from_the_table(fake_gpu):
    spec = get_method("tf32x3")
    table = DecisionTable.load(fake_gpu)
    fwd = table.threshold("tf32x3", "fwd", 1024, 256, 0.05)
    bwd = table.threshold("tf32x3", "bwd_input", 1024, 256, 0.05)
    assert fwd < bwd
    with tcemu.config(small_shape_table=fake_gpu):
        for M in (fwd - 1, fwd, bwd - 1, bwd):
            assert tb._use_fallback(spec, M, 1024, 256, FAKE_CUDA, "fwd", count=False) is (M < fwd)
            assert tb._use_fallback(spec, M, 1024, 256, FAKE_CUDA, "bwd_input", count=False) is (M < bwd)
        # 2 M N K at the fwd threshold is far below 6 GFLOP: the FLOP rule would have sent it to SGEMM
        assert 2.0 * fwd * 1024 * 256 < 6e9
        with tcemu.config(small_shape_rule="flops"):
            assert tb._use_fallback(spec, fwd, 1024, 256, FAKE_CUDA, "fwd", count=False)
        with tcemu.config(small_shape_fallback=False):
            assert not tb._use_fallback(spec, 1, 1024, 256, FAKE_CUDA, "fwd", count=False)
        assert not tb._use_fallback(spec, 1, 1024, 256, torch.device("cpu"), "fwd", count=False)
    # the shipped tables only (none for this GPU): the FLOP rule, as before
    flops = flop_threshold(1024, 256, 6e9)
    assert tb._use_fallback(spec, flops - 1, 1024, 256, FAKE_CUDA, "fwd", count=False)
    assert not tb._use_fallback(spec, flops, 1024, 256, FAKE_CUDA, "fwd", count=False)


def test_compiled_fp32_linear_rows_need_both_roles_on_sgemm(fake_gpu, monkeypatch):
    # a linear layer (N=1024 outputs, K=256 inputs) traces as FP32's own op only where its forward (1024, 256) and
    # its input gradient (256 outputs, contraction 1024) both fall back; sgemm_row_limit bisects that
    table = DecisionTable.load(fake_gpu)
    be, spec = tb.TritonBackend(), get_method("tf32x3")
    assert torch.backends.cuda.matmul.fp32_precision != "tf32"  # FP32 GEMMs in IEEE mode (torch's default)
    with tcemu.config(small_shape_table=fake_gpu):
        fwd = table.threshold("tf32x3", "fwd", 1024, 256, 0.05)
        bwd = flop_threshold(256, 1024, 6e9)  # no bwd_input curve near (256, 1024): the FLOP rule
        assert be.runs_as_sgemm(min(fwd, bwd) - 1, 1024, 256, FAKE_CUDA, spec)
        assert not be.runs_as_sgemm(min(fwd, bwd), 1024, 256, FAKE_CUDA, spec)
        monkeypatch.setattr("tcemu.emulation.ops.resolve_backend", lambda *a: be)
        assert sgemm_row_limit("triton:tf32x3", "cuda", 0, 1024, 256) == min(fwd, bwd) - 1


def test_under_torch_compile_a_weights_sizes_take_the_table_whatever_dynamo_says_of_their_type(fake_gpu,
                                                                                               monkeypatch):
    """Dynamo of torch 2.11 reports a static size's ``__class__`` as not ``int`` (measured on the H100 machine:
    every compiled product of a layer then took the 6 GFLOP rule, and a 192-atom PET step ran no product
    emulated). A linear layer's N and K are its weight's sizes, static under torch.compile: the table decides
    for them, traced (eager backend, a fake CUDA device) and with ``_plain_int`` answering as torch 2.11 does."""
    spec = get_method("tf32x3")
    table = DecisionTable.load(fake_gpu)
    fwd = table.threshold("tf32x3", "fwd", 1024, 256, 0.05)
    M = fwd + 1  # emulated by the table; far below 6 GFLOP, so the FLOP rule would send it to SGEMM
    assert 2.0 * M * 1024 * 256 < 6e9
    seen = {}

    def decide(x, w):
        N, K = w.shape
        seen["weight"] = tb._use_fallback(spec, x.shape[0], N, K, FAKE_CUDA, "fwd", count=False, weight_dims=True)
        seen["activation"] = tb._use_fallback(spec, x.shape[0], N, K, FAKE_CUDA, "fwd", count=False)
        return x.sum()

    with tcemu.config(small_shape_table=fake_gpu):
        for plain in (True, False):
            if not plain:  # as Dynamo of torch 2.11 answers for every size
                monkeypatch.setattr(tb, "_plain_int", lambda size: False)
            torch._dynamo.reset()
            seen.clear()
            torch.compile(decide, backend="eager")(torch.randn(M, 256), torch.randn(1024, 256))
            assert seen["weight"] is False, plain
            # sizes Dynamo calls symbolic (an activation's) keep the FLOP rule: below 6 GFLOP, SGEMM
            assert seen["activation"] is (not plain), plain
    torch._dynamo.reset()


def test_the_cached_decision_costs_under_a_microsecond_or_two(fake_gpu):
    """The launch path is host-bound for small systems: a cached decision must cost about a microsecond
    (measured on this machine's shared CPU: best of 30 batches, to see past other processes)."""
    spec = get_method("tf32x3")
    with tcemu.config(small_shape_table=fake_gpu):
        tb._use_fallback(spec, 5000, 1024, 256, FAKE_CUDA, "fwd", count=False)
        n, best = 2000, math.inf
        for _ in range(30):
            t0 = time.perf_counter()
            for _ in range(n):
                tb._use_fallback(spec, 5000, 1024, 256, FAKE_CUDA, "fwd", count=False)
            best = min(best, (time.perf_counter() - t0) / n)
    print(f"cached small-shape decision: {best * 1e6:.2f} us per call")
    assert best < 2e-6


# ---------------------------------------------------------------------------------------------------
# GPU: on the benchmark's shapes the decision never picks the slower side
# ---------------------------------------------------------------------------------------------------

#: (role, N, K, M): PET S products at 192, 1,536 and 5,184 atoms (benchmarks/_pet_gemms.py), both sides of the
#: crossovers measured on the H100 and H200
GPU_SHAPES = [("fwd", 1024, 256, 7680), ("fwd", 1024, 256, 61440), ("bwd_input", 256, 1024, 7680),
              ("bwd_input", 256, 1024, 61440), ("fwd", 256, 256, 7680), ("fwd", 256, 256, 207360),
              ("fwd", 512, 512, 61440), ("fwd", 4096, 1024, 1536), ("fwd", 4096, 1024, 5184),
              ("bwd_input", 1024, 4096, 5184)]
#: the chosen side may be this much slower than the other in the re-timing: the repeats' spread between
#: processes (docs/kernels.md: the same kernel moved by 2-4 % between invocations), not a loss the table allows
RETIME_NOISE = 0.08


def _measured_table_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from tcemu._hw import gpu_name

    name = gpu_name(0)
    cfg = tcemu.get_config()
    tables = tb._tables(cfg.small_shape_table)
    if not any(t.device == name for t in tables):
        pytest.skip(f"no small-shape decision table for {name!r}: measure one with benchmarks/gemm_decision.py "
                    "and set TCEMU_SMALL_SHAPE_TABLE to it (or ship it under tcemu/emulation/gemm/data/)")
    return name


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6", "bf16x3"])
def test_the_decision_never_picks_the_slower_side_gpu(method):
    """Re-time each shape both ways as the table was measured (GPU time, calls queued behind a sleep, interleaved
    rounds: benchmarks/gemm_decision.py's ``time_point``) and check the side the decision takes."""
    import importlib.util
    import sys
    from pathlib import Path

    from tcemu.emulation.gemm.triton_backend import _sgemm_impl

    _measured_table_or_skip()
    bench_dir = Path(__file__).resolve().parents[3] / "benchmarks"
    sys.path.insert(0, str(bench_dir))
    spec_ = importlib.util.spec_from_file_location("gemm_decision", bench_dir / "gemm_decision.py")
    bench = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(bench)
    spec, be = get_method(method), tb.TritonBackend()
    dev = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(device="cuda").manual_seed(0)
    worse = []
    for role, N, K, M in GPU_SHAPES:
        emulate = not tb._use_fallback(spec, M, N, K, dev, role, count=False)
        a = torch.randn(M, K, device="cuda", generator=gen)
        w = torch.randn((N, K) if role == "fwd" else (K, N), device="cuda", generator=gen)
        bias = torch.randn(N, device="cuda", generator=gen) if role == "fwd" else None
        b = w.t() if role == "fwd" else w
        with tcemu.config(small_shape_fallback=False):
            emu = (lambda: be.linear(a, w, None, spec, bias)) if role == "fwd" else \
                (lambda: be.linear_input_grad(a, w, None, spec))
            times, _ = bench.time_point({"sgemm": lambda: _sgemm_impl(a, b, bias), "emu": emu})
        ms = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        chosen, other = (ms["emu"], ms["sgemm"]) if emulate else (ms["sgemm"], ms["emu"])
        print(f"{method} {role} M={M} N={N} K={K}: {'emulated' if emulate else 'sgemm'}; "
              f"sgemm {ms['sgemm']:.4f} ms, emulated {ms['emu']:.4f} ms")
        if chosen > other * (1 + RETIME_NOISE):
            worse.append((role, M, N, K, "emulated" if emulate else "sgemm", ms))
    assert not worse, f"the decision picked the slower side: {worse}"


def _gemm_kernels_run(step) -> set[str]:
    """Names of the CUDA kernels one call of ``step`` launches (after two warm-up calls)."""
    from torch.profiler import ProfilerActivity, profile

    step(), step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["eager", "compiled", "compiled-dynamic"])
def test_a_layer_above_its_row_thresholds_runs_the_emulated_kernels_gpu(mode):
    """The decision the table makes holds in every mode: a linear layer with more rows than its forward's and its
    input gradient's thresholds runs tcemu's kernels (not cuBLAS SGEMM) eagerly and under torch.compile."""
    name = _measured_table_or_skip()
    spec, dev = get_method("tf32x3"), torch.device("cuda", torch.cuda.current_device())
    fwd = tb._row_threshold(dev.index, spec.name, "fwd", 1024, 256)
    bwd = tb._row_threshold(dev.index, spec.name, "bwd_input", 256, 1024)
    if max(fwd, bwd) >= NEVER:
        pytest.skip(f"the table for {name!r} never emulates (N, K) = (1024, 256)")
    net = torch.nn.Sequential(torch.nn.Linear(256, 1024)).to(dev)
    tcemu.emulate_(net, spec.name)
    x = torch.randn(2 * max(fwd, bwd), 256, device=dev, requires_grad=True)
    torch._dynamo.reset()
    f = (lambda x: net(x).square().sum()) if mode == "eager" else \
        torch.compile(lambda x: net(x).square().sum(), dynamic=mode == "compiled-dynamic")

    def step():
        return torch.autograd.grad(f(x), x)[0]

    names = _gemm_kernels_run(step)
    emulated = [n for n in names if n.startswith("_emu_mm")]
    assert emulated, f"{mode}: {x.shape[0]} rows, thresholds {fwd} and {bwd}, no tcemu GEMM ran: {sorted(names)}"
