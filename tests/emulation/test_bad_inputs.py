"""Bad input gets a clear error or the correct result: dtypes, devices, shapes, strides, names."""

import os

import pytest
import torch

import tcemu
from tcemu.testing import normwise_bound, relative_errors


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_other_dtypes_are_refused_with_advice(dtype):
    a = torch.ones(4, 4, dtype=dtype)
    with pytest.raises(TypeError, match=r"float32 tensors only.*\.float\(\)"):
        tcemu.matmul(a, a)
    with pytest.raises(TypeError, match="float32"):
        tcemu.linear(torch.ones(2, 4), torch.ones(3, 4, dtype=dtype))


def test_mixed_dtypes_and_non_tensors_are_refused():
    with pytest.raises(TypeError):
        tcemu.matmul(torch.ones(2, 2), [[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(TypeError, match="float32"):
        tcemu.linear(torch.ones(2, 4), torch.ones(3, 4), torch.ones(3, dtype=torch.float64))


def test_shape_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"\(3, 4\) and \(5, 2\)"):
        tcemu.matmul(torch.ones(3, 4), torch.ones(5, 2))
    with pytest.raises(ValueError, match="do not broadcast"):
        tcemu.matmul(torch.ones(2, 3, 4), torch.ones(3, 4, 5))
    with pytest.raises(ValueError, match="features"):
        tcemu.linear(torch.ones(2, 5), torch.ones(3, 4))
    with pytest.raises(ValueError, match="bias"):
        tcemu.linear(torch.ones(2, 4), torch.ones(3, 4), torch.ones(4))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        tcemu.matmul(torch.tensor(1.0), torch.ones(3))


def test_unknown_method_and_backend_are_refused_with_choices():
    with pytest.raises(ValueError, match="tf32x3, bf16x3"):
        tcemu.matmul(torch.ones(2, 2), torch.ones(2, 2), "fp16x2")
    with pytest.raises(ValueError, match="auto, torch or triton"):
        tcemu.matmul(torch.ones(2, 2), torch.ones(2, 2), "tf32x3", backend="cutlass")


def test_triton_backend_on_cpu_says_why_not():
    with pytest.raises(RuntimeError, match="triton"):
        tcemu.matmul(torch.ones(2, 2), torch.ones(2, 2), "tf32x3", backend="triton")


def test_meta_and_sparse_tensors_are_refused():
    with pytest.raises(ValueError, match="cpu or cuda"):
        tcemu.matmul(torch.ones(2, 2, device="meta"), torch.ones(2, 2, device="meta"))
    with pytest.raises(ValueError, match="dense"):
        tcemu.matmul(torch.eye(3).to_sparse(), torch.ones(3, 3))


@pytest.mark.parametrize("name", ["tf32x3", "bf16x6"])
def test_non_contiguous_transposed_sliced_and_broadcast_strides_give_correct_results(name):
    g = torch.Generator().manual_seed(0)
    base_a = torch.randn(64, 200, generator=g)
    base_b = torch.randn(200, 130, generator=g)
    cases = [
        (base_a[:, ::2], base_b[:100, :40]),  # strided slices
        (base_a.t()[:50, :30].t().contiguous().t().t(), base_b[:50, :7]),
        (base_a[:7, :100], base_b.t()[:100, :13]),  # transposed view (column-major b)
        (torch.randn(1, 100, generator=g).expand(5, 100), base_b[:100, :9]),  # stride-0 rows
        (base_a[:3, :1].expand(3, 90), base_b[:90, :4]),  # stride-0 columns
    ]
    for a, b in cases:
        ref = a.double() @ b.double()
        out = tcemu.matmul(a, b, name)
        assert out.shape == ref.shape
        assert relative_errors(out, ref)[0] <= normwise_bound(name, a.shape[-1]) * 4
        assert not out.isnan().any()


# --------------------------------------------------------------------------- zero sizes: exactly torch's results

ZERO_MATMULS = [((0, 4), (4, 3)), ((5, 0), (0, 3)), ((5, 4), (4, 0)), ((0, 5, 4), (4, 3)), ((2, 0, 4), (2, 4, 3)),
                ((0,), (0, 3)), ((0,), (0,)), ((3, 2, 0), (0, 4)), ((0, 2, 3), (0, 3, 4)), ((4,), (4, 0))]
ZERO_LINEARS = [((5, 0), (3, 0), True), ((0, 4), (3, 4), True), ((5, 4), (0, 4), True), ((2, 0, 4), (3, 4), False),
                ((0,), (3, 0), True), ((2, 3, 0), (4, 0), True)]


def _grads(fn, *shapes):
    """fn's output and the gradients of its inputs (made from ``shapes``, None for an absent one)."""
    gen = torch.Generator().manual_seed(0)
    ts = [None if s is None else torch.randn(s, generator=gen).requires_grad_(True) for s in shapes]
    out = fn(*ts)
    out.backward(torch.ones_like(out))
    return [out.detach()] + [t.grad for t in ts if t is not None]


def _check_zero_sizes(backend):
    """An empty product is exact (nothing is rounded), so every method gives torch's values: empty results, or
    the bias alone for K = 0, and empty or zero gradients. Each once raised a reshape error."""
    for method in ("tf32x3", "bf16x6"):
        for sa, sb in ZERO_MATMULS:
            got = _grads(lambda a, b: tcemu.matmul(a, b, method, backend=backend), sa, sb)
            for g, w in zip(got, _grads(torch.matmul, sa, sb)):
                assert g.shape == w.shape and torch.equal(g, w), (sa, sb)
        for sx, sw, has_bias in ZERO_LINEARS:
            bias = (sw[0],) if has_bias else None
            got = _grads(lambda x, w, b: tcemu.linear(x, w, b, method, backend=backend), sx, sw, bias)
            for g, w in zip(got, _grads(torch.nn.functional.linear, sx, sw, bias)):
                assert g.shape == w.shape and torch.equal(g, w), (sx, sw)
    for n_in, n_out in ((0, 3), (4, 0), (0, 0)):
        layer = tcemu.EmulatedLinear(n_in, n_out, backend=backend)
        x = torch.randn(5, n_in)
        assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    with tcemu.emulation_mode("tf32x3", backend=backend):
        assert torch.equal(torch.randn(3, 0) @ torch.randn(0, 2), torch.zeros(3, 2))
        assert torch.equal(torch.nn.functional.linear(torch.randn(3, 0), torch.randn(2, 0), torch.ones(2)),
                           torch.ones(3, 2))


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
def test_zero_sizes_give_torchs_results():
    _check_zero_sizes("torch")


@pytest.mark.interpret
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs only under TRITON_INTERPRET=1")
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
def test_zero_sizes_give_torchs_results_triton_interpret():
    _check_zero_sizes("triton")


@pytest.mark.parametrize(("q_shape", "kv_shape", "dv"), [
    ((0, 2, 3, 4), (0, 2, 3, 4), 4), ((1, 0, 3, 4), (1, 0, 3, 4), 4), ((1, 2, 0, 4), (1, 2, 0, 4), 4),
    ((1, 2, 3, 4), (1, 2, 0, 4), 4), ((1, 2, 3, 0), (1, 2, 3, 0), 4), ((1, 2, 3, 4), (1, 2, 3, 4), 0)])
def test_attention_zero_sizes_give_torchs_results(q_shape, kv_shape, dv):
    """Batch, heads, queries, keys, head or value width of zero: torch's results and gradients. D = 0 once
    raised ZeroDivisionError (the default scale 1/sqrt(D)); torch's scores are then 0, its output the mean of V."""
    def run(fn):
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(q_shape, generator=gen, requires_grad=True)
        k = torch.randn(kv_shape, generator=gen, requires_grad=True)
        v = torch.randn(kv_shape[:-1] + (dv,), generator=gen, requires_grad=True)
        out = fn(q, k, v)
        out.backward(torch.ones_like(out))
        return out.detach(), q.grad, k.grad, v.grad

    want = run(torch.nn.functional.scaled_dot_product_attention)
    for backend in ("torch", "auto"):
        got = run(lambda q, k, v: tcemu.scaled_dot_product_attention(q, k, v, backend=backend))
        for g, w in zip(got, want):
            assert g.shape == w.shape
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
