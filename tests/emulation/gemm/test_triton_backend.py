"""The Triton GEMM backend: matmul broadcasting, linear with bias, gradients, the small-shape fallback,
torch.compile, CUDA graphs and the custom ops."""

from __future__ import annotations

import collections
import copy
import math

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs the 'triton' extra")

from _gemm_cases import (  # noqa: E402 - the shared markers, device, tolerances and checks
    DEVICE,
    INTERPRET,
    METHODS,
    _bits,
    assert_close_to_fp64,
    gemm_bound,
    gpu,
    interpret,
)

import tcemu  # noqa: E402
from tcemu.emulation.gemm import (  # noqa: E402
    TritonBackend,
    split_t_reference,
)
from tcemu.emulation.linear import EmulatedLinear  # noqa: E402
from tcemu.emulation.methods import get_method  # noqa: E402
from tcemu.emulation.reference import ieee_fp32_matmul  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


# ---------------------------------------------------------------------------------------------------
# the backend: matmul broadcasting, linear + bias, input gradient
# ---------------------------------------------------------------------------------------------------


def _check_backend(method: str, device: str, sizes: tuple[int, int, int]) -> None:
    M, K, N = sizes
    be, spec = TritonBackend(), get_method(method)
    assert be.unavailable_reason(torch.device(device), spec) is None
    gen = torch.Generator().manual_seed(7)
    with tcemu.config(small_shape_fallback=False):
        # broadcasting: (2, 1, M, K) @ (3, K, N) -> (2, 3, M, N); a transposed (non-contiguous)
        a = torch.randn(2, 1, K, M, generator=gen).to(device).transpose(-1, -2)
        b = torch.randn(3, K, N, generator=gen).to(device)
        out = be.matmul(a, b, spec)
        assert out.shape == (2, 3, M, N)
        for i in range(2):
            for j in range(3):
                assert_close_to_fp64(out[i, j], a[i, 0], b[j], method)
        # 2-D b folded into M
        b2 = torch.randn(K, N, generator=gen).to(device)
        out2 = be.matmul(a, b2, spec)
        assert out2.shape == (2, 1, M, N)
        assert_close_to_fp64(out2[1, 0], a[1, 0], b2, method)
        # linear with bias, and the input gradient
        w = torch.randn(N, K, generator=gen).to(device)
        bias = torch.randn(N, generator=gen).to(device)
        x = torch.randn(M, K, generator=gen).to(device)
        pw = be.prepare_weight(w, spec)
        assert_close_to_fp64(be.linear(x, w, pw, spec, bias), x, w.T, method, bias)
        dy = torch.randn(M, N, generator=gen).to(device)
        assert_close_to_fp64(be.linear_input_grad(dy, w, pw, spec), dy, w, method)
        # the pieces the backend caches are split() bit for bit
        for got, want in zip(pw.fwd, split_t_reference(w.T, spec)):
            assert torch.equal(_bits(got), _bits(want))


@interpret
@pytest.mark.parametrize("method", METHODS)
def test_backend_interpret(method):
    _check_backend(method, "cpu", (19, 23, 13))



@gpu
@pytest.mark.parametrize("method", METHODS)
def test_backend_gpu(method):
    _check_backend(method, DEVICE, (300, 260, 130))



def test_unavailable_reasons():
    be = TritonBackend()
    assert "fp32" in be.unavailable_reason(torch.device("cpu"), get_method("fp32"))
    assert "tf32" in be.unavailable_reason(torch.device("cpu"), get_method("tf32"))
    if not INTERPRET:
        assert "CUDA" in be.unavailable_reason(torch.device("cpu"), get_method("tf32x3"))


# ---------------------------------------------------------------------------------------------------
# small-shape fallback, torch.compile, CUDA graphs (GPU)
# ---------------------------------------------------------------------------------------------------


@gpu
def test_small_shape_fallback_gpu():
    import tcemu.emulation.gemm as gemm

    be, spec = TritonBackend(), get_method("bf16x6")
    x = torch.randn(8, 16, device=DEVICE)
    w = torch.randn(4, 16, device=DEVICE)
    with tcemu.config(small_shape_fallback=True):
        n0 = sum(gemm.fallback_stats().values())
        y = be.linear(x, w, None, spec, None)
        assert sum(gemm.fallback_stats().values()) == n0 + 1
        torch.testing.assert_close(y, ieee_fp32_matmul(x, w.T))
    with tcemu.config(small_shape_fallback=False):
        y2 = be.linear(x, w, None, spec, None)
        assert sum(gemm.fallback_stats().values()) == n0 + 1
        assert_close_to_fp64(y2, x, w.T, "bf16x6")



@gpu
def test_torch_compile_and_cuda_graph_gpu():
    be, spec = TritonBackend(), get_method("tf32x3")
    w = torch.randn(256, 512, device=DEVICE)
    bias = torch.randn(256, device=DEVICE)
    pw = be.prepare_weight(w, spec)
    x = torch.randn(4096, 512, device=DEVICE)

    def f(x):
        return torch.relu(be.linear(x, w, pw, spec, bias)) * 2.0

    eager = f(x)
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x), eager, rtol=0, atol=0)
    # CUDA graph capture and replay
    static_x = x.clone()
    f(static_x)  # warm up (compiles the kernel) outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = f(static_x)
    x2 = torch.randn_like(x)
    static_x.copy_(x2)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_y, f(x2), rtol=0, atol=0)



def test_bound_is_meaningful():
    """The named bound is far below single-pass TF32's error, so the tests can tell the methods apart."""
    assert gemm_bound("tf32x3", 256) < 1e-4
    assert gemm_bound("bf16x6", 4096) < 5e-3 and math.isfinite(gemm_bound("bf16x9", 1))


@interpret
def test_library_api_through_triton_backend_interpret():
    """tcemu.matmul / tcemu.linear (autograd) with backend="triton" reach these kernels and agree with FP64."""
    from tcemu.emulation.ops import linear, matmul

    gen = torch.Generator().manual_seed(10)
    a = torch.randn(2, 20, 17, generator=gen)
    b = torch.randn(17, 9, generator=gen)
    out = matmul(a, b, "bf16x6", backend="triton")
    assert out.shape == (2, 20, 9)
    assert_close_to_fp64(out[1], a[1], b, "bf16x6")
    x = torch.randn(30, 17, generator=gen, requires_grad=True)
    w = torch.randn(9, 17, generator=gen, requires_grad=True)
    bias = torch.randn(9, generator=gen, requires_grad=True)
    y = linear(x, w, bias, "tf32x3", backend="triton")
    assert_close_to_fp64(y.detach(), x.detach(), w.detach().T, "tf32x3", bias.detach())
    dy = torch.randn(30, 9, generator=gen)
    y.backward(dy)
    assert_close_to_fp64(x.grad, dy, w.detach(), "tf32x3")


@interpret
def test_outputs_can_be_modified_in_place_interpret():
    """Models add into a layer's output in place (CHGNet: ``new_atom_feas += atom_feas``); autograd forbids
    that on a view made inside an autograd Function, so the backend hands out the GEMM result itself."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    emu = EmulatedLinear.from_linear(copy.deepcopy(lin), "bf16x9", backend="triton")
    x = torch.randn(5, 8, requires_grad=True)

    def run(module):
        x.grad = None
        y = module(x)
        y += 1.0
        y.square().sum().backward()
        return y.detach(), x.grad.clone()

    y_ref, g_ref = run(lin)
    y, g = run(emu)
    assert torch.allclose(y, y_ref, atol=1e-5) and torch.allclose(g, g_ref, atol=1e-5)


@interpret
@pytest.mark.parametrize("precision", ["ieee", "tf32", "none"])  # "none" is torch's default: IEEE
def test_compiled_fallback_is_a_plain_gemm_only_in_ieee_mode_interpret(monkeypatch, precision):
    """Under torch.compile a fallback GEMM is a plain aten GEMM (Inductor fuses and schedules it) when FP32
    GEMMs are IEEE, and the ``tcemu::sgemm`` op (which forces IEEE) when TF32 is on; no weight split
    either way. The CUDA-only fallback decision is forced here so that the CPU interpreter runs the path."""
    import tcemu.emulation.gemm.triton_backend as gb

    monkeypatch.setattr(gb, "_use_fallback", lambda *a, **k: True)
    old = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = precision
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm.print_readable(print_output=False))
        return gm.forward

    try:
        torch.manual_seed(0)
        lin = torch.nn.Linear(8, 4)
        emu = EmulatedLinear.from_linear(copy.deepcopy(lin), "tf32x3", backend="triton")
        x = torch.randn(5, 8, requires_grad=True)

        def step(inp):
            y = emu(inp)
            return y.square().sum()

        out = torch.compile(step, backend=capture, fullgraph=True)(x)
        (g,) = torch.autograd.grad(out, x)
    finally:
        torch.backends.cuda.matmul.fp32_precision = old
    want = lin(x).square().sum()
    (g_want,) = torch.autograd.grad(want, x)
    assert torch.allclose(out, want, rtol=1e-5) and torch.allclose(g, g_want, rtol=1e-5, atol=1e-6)
    code = "\n".join(graphs)
    assert "split_t" not in code
    assert ("tcemu.sgemm" in code) == (precision == "tf32"), code[-2000:]


@interpret
def test_compiled_fallback_graph_has_fp32s_kernels_interpret(monkeypatch):
    """Where every GEMM falls back (small systems: PET S at 192 atoms), the compiled forward and backward
    graphs of an emulated model hold the FP32 model's GEMMs and pointwise ops, no split and no tcemu op: the
    same GPU work. Counted in AOTAutograd's graphs of a PET-like block (3-D input, bias, SiLU, a residual).
    The one difference allowed: F.linear on 3-D input is expand + bmm in FP32's graph, addmm on the
    flattened rows in the emulated one (one GEMM either way)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    import tcemu
    import tcemu.emulation.gemm.triton_backend as gb

    monkeypatch.setattr(gb, "_use_fallback", lambda *a, **k: True)
    free = {"aten.view.default", "aten._unsafe_view.default", "aten.t.default", "aten.transpose.int",
            "aten.expand.default", "aten.reshape.default", "aten.detach.default"}
    gemms = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default"}

    def counted(model, x):
        graphs = {"fw": collections.Counter(), "bw": collections.Counter()}

        def compiler(tag):
            def compile_graph(gm, _example):
                graphs[tag].update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
                return make_boxed_func(gm.forward)
            return compile_graph

        torch._dynamo.reset()
        backend = aot_autograd(fw_compiler=compiler("fw"), bw_compiler=compiler("bw"))
        xx = x.clone().requires_grad_(True)
        out = torch.compile(model, backend=backend, fullgraph=True)(xx).square().sum()
        (grad,) = torch.autograd.grad(out, xx)
        return graphs, out, grad

    torch.manual_seed(0)
    fp32 = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 16))
    for p in fp32.parameters():
        p.requires_grad_(False)  # an MD step differentiates by the positions only
    emulated = tcemu.emulate_(copy.deepcopy(fp32), "tf32x3", backend="triton", warn_unreachable=False)
    x = torch.randn(4, 7, 16)
    want, out_w, grad_w = counted(lambda t: fp32(t) + t, x)
    got, out_g, grad_g = counted(lambda t: emulated(t) + t, x)
    torch.testing.assert_close(out_g, out_w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_g, grad_w, rtol=1e-5, atol=1e-5)
    for tag in ("fw", "bw"):
        assert sum(got[tag][k] for k in gemms) == sum(want[tag][k] for k in gemms), (tag, got[tag], want[tag])
        work_w = {k: n for k, n in want[tag].items() if k not in free | gemms}
        work_g = {k: n for k, n in got[tag].items() if k not in free | gemms}
        assert work_g == work_w, (tag, work_g, work_w)
        assert not any("tcemu" in k for k in got[tag]), got[tag]


@interpret
def test_ops_pass_opcheck_interpret():
    """The three torch ops (schema, fake implementations, AOT dispatch) pass torch.library.opcheck."""
    import tcemu.emulation.gemm.triton_backend as gb

    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(12, 8, generator=gen), torch.randn(8, 5, generator=gen)
    bias = torch.randn(5, generator=gen)
    for method in ("tf32x3", "bf16x6"):
        pieces = gb.split_t(b, method)
        torch.library.opcheck(torch.ops.tcemu.split_t.default, (b, method))
        torch.library.opcheck(torch.ops.tcemu.emu_mm.default, (a, *gb._pieces_args(pieces), bias, method))
    torch.library.opcheck(torch.ops.tcemu.sgemm.default, (a, b, bias))


@interpret
def test_compiled_emulated_linear_matches_eager_interpret():
    """Under torch.compile (fullgraph) an emulated linear layer runs the same kernels through the torch ops:
    bit-identical output and input gradient to eager, which calls the kernels directly."""
    torch.manual_seed(0)
    emu = EmulatedLinear.from_linear(torch.nn.Linear(16, 8), "tf32x3", backend="triton")
    x = torch.randn(20, 16, requires_grad=True)
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm.print_readable(print_output=False))
        return gm.forward

    def step(inp):
        return torch.nn.functional.silu(emu(inp)).sum()

    torch._dynamo.reset()
    out_c = torch.compile(step, backend=capture, fullgraph=True)(x)
    (g_c,) = torch.autograd.grad(out_c, x)
    out_e = step(x)
    (g_e,) = torch.autograd.grad(out_e, x)
    assert "tcemu.emu_mm" in "\n".join(graphs)
    assert torch.equal(out_c, out_e) and torch.equal(g_c, g_e)


def test_backend_resolution_is_a_graph_constant(monkeypatch):
    """Resolving the backend for a CUDA device inside torch.compile, even the first time, neither breaks the
    graph (fullgraph=True raises on a break) nor differs from the eager resolution. A break here once cost
    every emulated layer a graph exit (8 graphs instead of 2 for PET, 1.9x the host time at 192 atoms)."""
    from tcemu.emulation import dispatch

    spec, dev = get_method("tf32x3"), torch.device("cuda", 0)
    monkeypatch.setattr(dispatch, "_RESOLVED_CUDA", {})
    monkeypatch.setattr(dispatch, "_INSTANCES", {})

    def f(x):
        be = dispatch.resolve_backend("auto", dev, spec)
        return x * (2.0 if be.name == "triton" else 3.0)

    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend="eager")(torch.ones(3))
    eager = dispatch.resolve_backend("auto", dev, spec)
    assert torch.equal(out, torch.full((3,), 2.0 if eager.name == "triton" else 3.0))
    assert dispatch._INSTANCES[eager.name] is eager


@interpret
def test_results_are_not_kept_alive_interpret():
    """Nothing in the backend holds on to a GEMM result (a cache there once kept every output alive)."""
    import gc
    import weakref

    torch.manual_seed(0)
    emu = EmulatedLinear.from_linear(torch.nn.Linear(8, 4), "tf32x3", backend="triton")
    x = torch.randn(5, 8, requires_grad=True)
    grads = []
    x.register_hook(lambda g: grads.append(weakref.ref(g)))  # the input gradient as the backend made it
    y = emu(x)
    y.sum().backward()
    refs = [weakref.ref(y), weakref.ref(y._base if y._base is not None else y), *grads]
    del y
    x.grad = None
    gc.collect()
    assert all(r() is None for r in refs)
