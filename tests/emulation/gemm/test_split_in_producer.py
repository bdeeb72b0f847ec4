"""A's pieces given to the GEMM (``emu_mm``'s ``a_pieces``) and, under torch.compile, written by the kernel that
produces A (``split_in_producer``): the same bits as the GEMM that splits A itself."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs the 'triton' extra")

from _gemm_cases import (  # noqa: E402 - the shared markers, device and checks
    DEVICE,
    METHODS,
    _bits,
    _special_matrix,
    assert_same_bits_and_specials,
    gpu,
    interpret,
)

import tcemu  # noqa: E402
from tcemu.emulation.gemm import (  # noqa: E402
    KernelConfig,
    emu_mm,
    split_rows_in_torch,
    split_t,
    split_t_reference,
)
from tcemu.emulation.linear import EmulatedLinear  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

#: a configuration that reads A's pieces from a split pass (so that a compiled linear layer takes them from A's
#: producer under the interpreter, whose own configuration splits A in the kernel)
PRESPLIT = "32x32x16w4s1m1p"


def _same_pieces(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> bool:
    return len(got) == len(want) and all(
        g.dtype == w.dtype and g.shape == w.shape and g.is_contiguous() and torch.equal(_bits(g), _bits(w))
        for g, w in zip(got, want))


@pytest.mark.parametrize("method", METHODS)
def test_split_rows_in_torch_is_the_split_bit_for_bit(method):
    """Every FP32 class (zeros, subnormals, near FLT_MAX, Inf, NaN): the pieces ``split_t(a.mT)`` makes, in the
    layout the kernels read, eagerly and compiled (the operations Inductor fuses into A's producer)."""
    gen = torch.Generator().manual_seed(1)
    a = _special_matrix(37, 24, gen) * torch.logspace(-20, 20, 24)
    want = split_t_reference(a.mT, method)
    assert _same_pieces(split_rows_in_torch(a, method), want)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: split_rows_in_torch(t, method), fullgraph=True)
    assert _same_pieces(compiled(a), want)


@interpret
@pytest.mark.parametrize("method", METHODS)
def test_given_pieces_give_the_same_bits_interpret(method):
    """A 2-D product with Inf and NaN, a batched one, with the interpreter's configuration (A split in the
    kernel: run in its ``p`` form) and a ``p`` configuration: given pieces (by the split kernel or by torch
    operations) give the bits of the call that splits A itself."""
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(70, 48, generator=gen)
    a[3, 5], a[11, 47], a[40, 0] = float("inf"), float("nan"), float("-inf")
    b = torch.randn(48, 40, generator=gen)
    bias = torch.randn(40, generator=gen)
    bt = split_t(b, method)
    for cfg in (None, KernelConfig.parse(PRESPLIT)):
        want = emu_mm(a, bt, method, bias, config=cfg, b=b.T)
        for pieces in (split_t(a.mT, method), split_rows_in_torch(a, method)):
            got = emu_mm(a, bt, method, bias, config=cfg, b=b.T, a_pieces=pieces)
            assert_same_bits_and_specials(got, want, f"{method} {cfg}")
    a3 = torch.randn(3, 20, 48, generator=gen)
    want = emu_mm(a3, bt, method, b=b.T)
    got = emu_mm(a3, bt, method, b=b.T, a_pieces=split_rows_in_torch(a3.reshape(-1, 48), method))
    assert torch.equal(got, want)


def test_given_pieces_are_checked():
    """Pieces that cannot be A's are refused with what the call needs."""
    a, bt = torch.randn(6, 8), split_t_reference(torch.randn(8, 5), "tf32x3")
    good = split_t_reference(a.mT, "tf32x3")
    bad = {"count": good[:1], "shape": tuple(p[:4] for p in good), "layout": tuple(p.mT.contiguous().mT for p in good),
           "dtype": tuple(p.to(torch.bfloat16) for p in good)}
    for what, pieces in bad.items():
        with pytest.raises(ValueError, match="a_pieces must be 2 contiguous torch.float32 tensors of shape"):
            emu_mm(a, bt, "tf32x3", a_pieces=pieces)


def _compiled_graphs_and_results(emu: EmulatedLinear, x: torch.Tensor):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm.print_readable(print_output=False))
        return gm.forward

    def step(inp):
        return torch.nn.functional.silu(emu(torch.nn.functional.gelu(inp))).sum()

    torch._dynamo.reset()
    xc = x.clone().requires_grad_(True)
    out = torch.compile(step, backend=capture, fullgraph=True)(xc)
    (grad,) = torch.autograd.grad(out, xc)
    xe = x.clone().requires_grad_(True)
    out_e = step(xe)
    (grad_e,) = torch.autograd.grad(out_e, xe)
    return "\n".join(graphs), (out, grad), (out_e, grad_e)


@interpret
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_compiled_linear_takes_a_pieces_from_the_graph_interpret(method):
    """With a kernel that reads A's pieces from a split pass, a compiled emulated linear layer traces the split
    as torch operations (no split op for A) and passes the pieces to ``tcemu::emu_mm_pieces`` in its forward,
    input-gradient and weight-gradient products: output and input gradient bit for bit eager's; with
    ``split_in_producer=False``, the plain op."""
    torch.manual_seed(0)
    emu = EmulatedLinear.from_linear(torch.nn.Linear(16, 8), method, backend="triton")
    x = torch.randn(20, 16)
    with tcemu.config(kernel_config=PRESPLIT):
        graph, compiled, eager = _compiled_graphs_and_results(emu, x)
        assert graph.count("tcemu.emu_mm_pieces") == 3 and "tcemu.emu_mm.default" not in graph
        assert "view(torch.int32)" in graph and "tcemu.split_t.default(" in graph  # W's split stays the op
        assert all(torch.equal(c, e) for c, e in zip(compiled, eager))
        with tcemu.config(split_in_producer=False):
            graph, compiled, _ = _compiled_graphs_and_results(emu, x)
        assert "tcemu.emu_mm_pieces" not in graph and "tcemu.emu_mm.default" in graph
        assert all(torch.equal(c, e) for c, e in zip(compiled, eager))
    graph, compiled, eager = _compiled_graphs_and_results(emu, x)  # the interpreter's own (in-kernel) split
    assert "tcemu.emu_mm_pieces" not in graph and all(torch.equal(c, e) for c, e in zip(compiled, eager))


@interpret
def test_emu_mm_pieces_passes_opcheck_interpret():
    """The op's schema, fake implementation and AOT dispatch (torch.library.opcheck)."""
    import tcemu.emulation.gemm.triton_backend as gb

    gen = torch.Generator().manual_seed(3)
    a, b, bias = torch.randn(12, 8, generator=gen), torch.randn(8, 5, generator=gen), torch.randn(5, generator=gen)
    for method in ("tf32x3", "bf16x6"):
        args = (a, list(split_rows_in_torch(a, method)), *gb._pieces_args(gb.split_t(b, method)), bias, method)
        torch.library.opcheck(torch.ops.tcemu.emu_mm_pieces.default, args)


@gpu
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6", "bf16x3"])
def test_compiled_linear_split_in_producer_same_bits_gpu(method):
    """On the GPU, where Inductor's Triton kernels write A's pieces from its producer (GELU forward, the SiLU
    backward for the input gradient) and the library's default kernels run (N = 1024: a kernel that reads A's
    pieces): the compiled step with ``split_in_producer`` gives the bits of the compiled step without it (the
    plain op, which splits A in a pass of its own), output and input gradient, Inf and NaN rows kept. (Against
    eager they may differ: Inductor's GELU and SiLU are not aten's to the bit.)"""
    torch.manual_seed(0)
    lin = torch.nn.Linear(512, 1024, device=DEVICE)
    for p in lin.parameters():
        p.requires_grad_(False)
    emu = EmulatedLinear.from_linear(lin, method, backend="triton")
    x = torch.randn(4096, 512, device=DEVICE)
    x[7, 3], x[100, 511] = float("inf"), float("nan")

    def step(inp):
        return torch.nn.functional.silu(emu(torch.nn.functional.gelu(inp))).square().sum(dim=1)

    def run(fn):
        xx = x.clone().requires_grad_(True)
        out = fn(xx)
        (grad,) = torch.autograd.grad(out, xx, torch.ones_like(out))
        return out, grad

    results = {}
    with tcemu.config(small_shape_fallback=False):
        for on in (True, False):
            with tcemu.config(split_in_producer=on):
                torch._dynamo.reset()
                results[on] = run(torch.compile(step, fullgraph=True))
    for c, e in zip(results[True], results[False]):
        nan = torch.isnan(e)
        assert nan.any() and torch.equal(torch.isnan(c), nan) and torch.equal(c[~nan], e[~nan]), method
