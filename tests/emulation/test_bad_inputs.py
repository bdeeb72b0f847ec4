"""Bad input gets a clear error or the correct result: dtypes, devices, shapes, strides, names."""

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
