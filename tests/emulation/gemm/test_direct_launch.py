"""Direct launches of compiled kernels (tcemu.emulation.gemm.direct) and the plans of emu_mm's call signatures.

* CPU: the launch logic on a stand-in kernel (what goes to Triton's path, what goes directly, with which
  arguments), and emu_mm's plan cache (one plan per signature, checks kept, bounded).
* GPU: every kernel path emu_mm takes gives the same bits launched directly as through Triton's path, and the
  later calls of a signature do launch directly.
"""

from __future__ import annotations

import types

import pytest
import torch

pytest.importorskip("triton", reason="needs the 'triton' extra")

from _gemm_cases import DEVICE, _bits, gpu  # noqa: E402

import tcemu  # noqa: E402
from tcemu.emulation.gemm import direct, launch  # noqa: E402
from tcemu.emulation.gemm.direct import DirectKernel, TmaDesc, direct_stats  # noqa: E402
from tcemu.emulation.methods import get_method  # noqa: E402


class _Param(types.SimpleNamespace):
    pass


class _Compiled:
    """A compiled kernel's stand-in: records its direct launches."""

    def __init__(self, log):
        self.function, self.packed_metadata, self._log = object(), ("meta",), log

    def run(self, *args):
        self._log.append(("direct", args))


class _Kernel:
    """A JIT kernel's stand-in with parameters (x, n, BLOCK constexpr, FLAG constexpr = True): records the launches
    through Triton's path and returns a compiled kernel."""

    def __init__(self):
        self.log: list = []
        self.params = [_Param(name="x", has_default=False), _Param(name="n", has_default=False),
                       _Param(name="BLOCK", has_default=False), _Param(name="FLAG", has_default=True, default=True)]

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(("triton", grid, args, kwargs))
            return _Compiled(self.log)
        return launch


class _Ptr:
    """A tensor's stand-in: a dtype and a data pointer."""

    dtype = torch.float32

    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


@pytest.fixture
def fake_cuda(monkeypatch):
    """CUDA as a direct launch sees it (a device, a stream), with direct launches on."""
    monkeypatch.setattr(direct, "_cuda", lambda: True)
    monkeypatch.setattr(direct.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(direct.torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    with tcemu.config(direct_launch=True):
        yield


def test_direct_launches_are_on_by_default():
    assert tcemu.EmulationConfig().direct_launch is True


def test_first_launch_of_a_signature_takes_tritons_path_then_the_kernel_directly(fake_cuda):
    k = _Kernel()
    dk = DirectKernel(k)
    cx = {"BLOCK": 64, "num_warps": 4}
    dk((3, 2), (_Ptr(1024), 100), cx)
    dk((5,), (_Ptr(2048), 100), cx)  # same signature, another pointer and grid
    assert [e[0] for e in k.log] == ["triton", "direct"]
    _, args = k.log[1]
    # grid padded to 3-D, the current stream, the compiled function and metadata, no launch metadata or hooks, then
    # every parameter in order: the call's arguments and the constexprs (a default where the dict has none)
    assert args[:4] == (5, 1, 1, 7) and args[5] == ("meta",) and args[6:9] == (None, None, None)
    assert args[9].ptr == 2048 and args[10:] == (100, 64, True)


@pytest.mark.parametrize("change", ["int", "constexprs", "dtype"])
def test_a_new_signature_takes_tritons_path_again(fake_cuda, change):
    k = _Kernel()
    dk = DirectKernel(k)
    cx = {"BLOCK": 64}
    dk((1,), (_Ptr(1024), 100), cx)
    x, n, cx2 = _Ptr(1024), 100, cx
    if change == "int":
        n = 101
    elif change == "constexprs":
        cx2 = {"BLOCK": 64}  # equal, but another dict: constexpr dicts are named by identity
    else:
        x.dtype = torch.bfloat16
    dk((1,), (x, n), cx2)
    assert [e[0] for e in k.log] == ["triton", "triton"]


def test_unaligned_pointers_hooks_and_the_setting_take_tritons_path(fake_cuda, monkeypatch):
    k = _Kernel()
    dk = DirectKernel(k)
    cx = {"BLOCK": 64}
    dk((1,), (_Ptr(1024), 100), cx)
    dk((1,), (_Ptr(1028), 100), cx)  # not 16-byte aligned: Triton specializes on alignment
    with tcemu.config(direct_launch=False):
        dk((1,), (_Ptr(1024), 100), cx)
    monkeypatch.setattr(direct, "_hooks_set", lambda: True)
    dk((1,), (_Ptr(1024), 100), cx)
    assert [e[0] for e in k.log] == ["triton"] * 4
    monkeypatch.setattr(direct, "_hooks_set", lambda: False)
    dk((1,), (_Ptr(1024), 100), cx)
    assert k.log[-1][0] == "direct"


def test_descriptors_reach_triton_as_gluon_descriptors_and_the_launcher_as_they_are(fake_cuda, monkeypatch):
    k = _Kernel()
    dk = DirectKernel(k, descriptors=True)
    cx = {"BLOCK": 64}
    made = []
    monkeypatch.setattr(TmaDesc, "gluon", lambda self: made.append(self) or ("gluon", self.block_shape))
    desc = TmaDesc(_Ptr(4096), (8, 32), (32, 1), (8, 16), layout="L")
    dk((1,), (desc, 5), cx)
    assert k.log[0][2][0] == ("gluon", (8, 16)) and made == [desc]
    dk((1,), (desc._replace(base=_Ptr(8192)), 5), cx)
    assert k.log[1][0] == "direct" and k.log[1][1][9].base.ptr == 8192
    dk((1,), (desc._replace(block_shape=(8, 32)), 5), cx)  # another block: another kernel
    assert k.log[2][0] == "triton"


def test_a_missing_constexpr_keeps_tritons_path(fake_cuda):
    k = _Kernel()
    dk = DirectKernel(k)
    cx: dict = {}  # BLOCK has no default: the tail cannot be made
    for _ in range(2):
        dk((1,), (_Ptr(1024), 100), cx)
    assert [e[0] for e in k.log] == ["triton", "triton"]


def test_emu_mm_keeps_one_plan_per_signature_and_checks_every_new_one(monkeypatch):
    monkeypatch.setattr(launch, "_PLANS", {})
    calls = []

    def plan(*args):
        calls.append(args[2].name)
        return (lambda a, bt, bias, b, out: "ran"), True

    monkeypatch.setattr(launch, "_plan", plan)
    spec = get_method("tf32x3")
    a, w = torch.ones(4, 8), torch.ones(3, 8)
    pieces = (w, w)
    assert launch._emu_mm(a, pieces, spec) == "ran"
    launch._emu_mm(torch.zeros(4, 8), pieces, spec)  # same signature, other data
    launch._emu_mm(torch.ones(5, 8), pieces, spec)  # another M
    launch._emu_mm(torch.ones(8, 4).t(), pieces, spec)  # other strides
    with tcemu.config(range_fixup=False):
        launch._emu_mm(a, pieces, spec)  # another setting read by the plan
    assert len(calls) == 4 and len(launch._PLANS) == 4


def test_the_plan_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(launch, "_PLANS", {})
    monkeypatch.setattr(launch, "PLAN_CACHE_SIZE", 3)
    monkeypatch.setattr(launch, "_plan", lambda *args: ((lambda *a: None), True))
    spec = get_method("tf32x3")
    w = torch.ones(3, 8)
    for m in range(1, 6):
        launch._emu_mm(torch.ones(m, 8), (w, w), spec)
    assert [k[2] for k in launch._PLANS] == [torch.Size([m, 8]) for m in (3, 4, 5)]


def test_a_bad_operand_is_refused_at_every_call_not_planned():
    spec = get_method("tf32x3")
    w = torch.ones(3, 8)
    for _ in range(2):
        with pytest.raises(ValueError, match="needs 2 pieces"):
            launch._emu_mm(torch.ones(4, 8), (w,), spec)
        with pytest.raises(TypeError, match="a must be float32"):
            launch._emu_mm(torch.ones(4, 8, dtype=torch.float64), (w, w), spec)


# ---------------------------------------------------------------------------------------------------
# GPU: the same bits by either path, and the direct path taken
# ---------------------------------------------------------------------------------------------------

#: (method, configuration) of every kernel path emu_mm takes on Hopper: the default, the Triton kernel ("m1", and
#: "p" with A split beforehand), the Gluon "g", "pg", "gw" (warp-specialised splitter), "pgw", "tgw"
#: (persistent), "gwe" (TMA-store epilogue) and "gr" (register A)
_CONFIGS = [None] + [f"128x128x32w8s3m1{suffix}" for suffix in ("", "p", "g", "pg", "gw", "pgw", "tgw", "gwe", "gr")]


def _config_for(method: str, config: str) -> str:
    """``config`` for ``method``: the BF16 kernels' K-tile of 64, and two stages for three BF16 pieces (three
    stages of 128 x 64 tiles of A's and B's three pieces need 288 KiB of shared memory, over Hopper's 227 KiB)."""
    if method == "tf32x3":
        return config
    config = config.replace("32w", "64w")
    return config.replace("s3", "s2") if get_method(method).n_pieces == 3 else config


@gpu
@pytest.mark.parametrize("method", ["tf32x3", "bf16x3", "bf16x6", "bf16x9"])
@pytest.mark.parametrize("config", _CONFIGS)
def test_direct_launches_give_the_bits_of_tritons_path_gpu(method, config):
    from tcemu.emulation.gemm import KernelConfig, split_t  # noqa: PLC0415

    spec = get_method(method)
    cfg = KernelConfig.parse(_config_for(method, config)) if config else None
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    a = torch.randn(777, 256, device=DEVICE, generator=gen)
    a[5, 7] = 3e38  # a row the range check flags (the fix-up launch too)
    w = torch.randn(320, 256, device=DEVICE, generator=gen)
    bias = torch.randn(320, device=DEVICE, generator=gen)
    pieces = split_t(w.t(), spec)
    with tcemu.config(direct_launch=False):
        want = launch._emu_mm(a, pieces, spec, bias, config=cfg, b=w)
    before = direct_stats()["direct"]
    with tcemu.config(direct_launch=True):
        got = [launch._emu_mm(a.clone(), pieces, spec, bias, config=cfg, b=w) for _ in range(3)]
    torch.cuda.synchronize()
    assert direct_stats()["direct"] > before, "the later calls did not launch directly"
    for g in got:
        assert torch.equal(_bits(g), _bits(want))


@pytest.mark.parametrize(("config", "tma_rows", "want"), [
    ("128x128x32w8s3m1gw", True, ("_launch_wgmma_ws", "a3")),
    ("128x128x32w8s3m1tgw", True, ("_launch_wgmma_ws", "a3")),
    ("128x128x32w8s3m1gr", True, ("_launch_wgmma_rega", "a3")),
    ("128x128x32w8s3m1g", True, ("_launch_wgmma", "(a3,)", True)),
    ("128x128x32w8s3m1pg", True, ("_launch_wgmma", "pieces", False)),
    ("128x128x32w8s3m1pgw", True, ("_launch_wgmma_pieces_ws", "pieces")),
    ("128x128x32w8s3m1gw", False, ("_launch_wgmma", "pieces", False)),  # A's rows unfit for TMA: split first
    ("128x128x32w8s3m1gr", False, ("_launch_wgmma", "pieces", False)),
])
def test_the_plan_picks_the_gluon_launcher_of_each_configuration(monkeypatch, config, tma_rows, want):
    """Which Gluon launcher a plan calls, with which A, for each kind of configuration (Hopper, TMA-able pieces)."""
    from tcemu.emulation.gemm import KernelConfig  # noqa: PLC0415

    calls = []

    def recorder(name):
        def launch(spec, cfg, ap, bp, bias, out3, M, N, K, split_a=None, *, flags=None, range_check=None):
            what = "a3" if ap is a3 else "(a3,)" if isinstance(ap, tuple) and ap[0] is a3 else "pieces"
            calls.append((name, what) + ((split_a,) if name == "_launch_wgmma" else ()))
        return launch

    for name in ("_launch_wgmma", "_launch_wgmma_ws", "_launch_wgmma_rega", "_launch_wgmma_pieces_ws"):
        monkeypatch.setattr(launch, name, recorder(name))
    monkeypatch.setattr(launch, "_wgmma_eligible", lambda *args: True)
    monkeypatch.setattr(launch, "_tma_rows", lambda a3: tma_rows)
    monkeypatch.setattr(launch, "_split_t", lambda b, spec: ("piece0", "piece1"))
    spec = get_method("tf32x3")
    a3, bt3 = torch.ones(1, 64, 32), (torch.ones(1, 48, 32), torch.ones(1, 48, 32))
    gemm = launch._gemm_plan(spec, KernelConfig.parse(config), a3, bt3, False, 48, True)
    gemm(a3, bt3, None, torch.empty(1, 64, 48), torch.zeros(64, dtype=torch.int8))
    assert calls == [want]


def test_a_failing_gluon_launch_runs_the_triton_kernel_and_is_remembered(monkeypatch):
    from tcemu.emulation.gemm import KernelConfig  # noqa: PLC0415

    monkeypatch.setattr(launch, "_WGMMA_FAILED", set())
    monkeypatch.setattr(launch, "_wgmma_eligible", lambda *args: True)
    monkeypatch.setattr(launch, "_tma_rows", lambda a3: True)

    def broken(*args, **kwargs):
        raise RuntimeError("no such Gluon API")

    triton_calls = []
    monkeypatch.setattr(launch, "_launch_wgmma_ws", broken)
    monkeypatch.setattr(launch, "_EMU_MM", lambda grid, args, constexprs: triton_calls.append(constexprs["MODE"]))
    spec = get_method("tf32x3")
    a3, bt3 = torch.ones(1, 64, 32), (torch.ones(1, 48, 32), torch.ones(1, 48, 32))
    cfg = KernelConfig.parse("128x128x32w8s3m1gw")
    gemm = launch._gemm_plan(spec, cfg, a3, bt3, False, 48, True)
    gemm(a3, bt3, None, torch.empty(1, 64, 48), torch.zeros(64, dtype=torch.int8))
    assert triton_calls == [1] and launch._WGMMA_FAILED == {("tf32x3", str(cfg))}
