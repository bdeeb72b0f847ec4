"""Shared constants, markers and checks of the GEMM kernel tests (tests/emulation/gemm/test_*.py)."""


from __future__ import annotations

import os

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs the 'triton' extra")

from tcemu.emulation.gemm import (  # noqa: E402
    KERNEL_METHODS,
)
from tcemu.emulation.methods import get_method  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
HAS_CUDA = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)



interpret = pytest.mark.interpret  # skipped outside TRITON_INTERPRET=1 (tests/conftest.py)


gpu = pytest.mark.gpu  # skipped without a CUDA device of sm80+ or under TRITON_INTERPRET=1 (tests/conftest.py)

DEVICE = "cuda" if (HAS_CUDA and not INTERPRET) else "cpu"
METHODS = list(KERNEL_METHODS)

# ---------------------------------------------------------------------------------------------------
# Named tolerance (STYLE principle 4)
# ---------------------------------------------------------------------------------------------------
U_FP32 = 2.0**-24  # unit roundoff of the FP32 accumulator
TC_TILE_TRUNCATION = 2.0**-22  # per K-tile: the Tensor Core truncates (RZ) its C input and output, a few ulps


def gemm_bound(method: str, k: int, safety: float = 4.0) -> float:
    """Bound on |C - C64| / (|A| @ |B|) elementwise.

    Split residual of the kept products (methods.py derives it), plus FP32 accumulation of k terms
    (k u worst case), plus Tensor Core truncation, at most a few ulps per K-tile (docs/numerics.md):
    generous, worst-case terms times a safety factor.
    """
    return safety * (k * U_FP32 + get_method(method).split_residual + TC_TILE_TRUNCATION)


def assert_close_to_fp64(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, method: str,
                         bias: torch.Tensor | None = None) -> None:
    a64, b64 = a.double(), b.double()
    ref = a64 @ b64
    scale = a64.abs() @ b64.abs()
    if bias is not None:
        ref = ref + bias.double()
        scale = scale + bias.double().abs()
    k = a.shape[-1]
    tol = gemm_bound(method, k)
    rel = (out.double() - ref).abs() / scale.clamp_min(1e-300)
    worst = rel.max().item()
    if not worst <= tol:
        idx = torch.unravel_index(rel.argmax(), rel.shape)
        raise AssertionError(
            f"{method}: max |C - C64| / (|A|@|B|) = {worst:.3g} > gemm_bound({method}, k={k}) = {tol:.3g} "
            f"at {tuple(int(i) for i in idx)}: got {out[idx].item()!r}, want {ref[idx].item()!r}"
        )


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)


def _special_matrix(r: int, c: int, gen: torch.Generator) -> torch.Tensor:
    """N(0,1) with a sprinkling of every awkward FP32 class: ±0, subnormals, tiny, huge, near FLT_MAX, Inf, NaN."""
    x = torch.randn(r, c, generator=gen)
    fmax = torch.finfo(torch.float32).max
    vals = [0.0, -0.0, 1e-45, -3e-42, 1.5e-38, 2.0**-130, 3.3e38, -fmax, fmax, float("inf"), float("-inf"),
            float("nan"), 1.0 + 2.0**-11, 1.0 + 2.0**-8, 1.0 + 2.0**-9, 65504.0, 2.0**-120]
    flat = x.view(-1)
    idx = torch.randperm(flat.numel(), generator=gen)[: len(vals)]
    flat[idx] = torch.tensor(vals)
    return x




def special_value_products(gen: torch.Generator, shapes):
    """Per (Z, M, K, N): ((Z, M, K, N), a (Z, M, K), b (K, N), bias (N,)) on DEVICE, N(0, 1) with Inf, NaN and
    -Inf in A (the last batch entry, the first, the last K column) and an Inf in B: the Gluon kernels' cases."""
    for Z, M, K, N in shapes:
        a = torch.randn(Z, M, K, generator=gen)
        a[Z - 1, 7, 9] = float("inf")
        a[0, 5, 2] = float("nan")
        a[0, 9, K - 1] = float("-inf")
        b = torch.randn(K, N, generator=gen)
        b[K // 2, 6] = float("inf")
        yield (Z, M, K, N), a.to(DEVICE), b.to(DEVICE), torch.randn(N, generator=gen).to(DEVICE)


def assert_same_bits_and_specials(got: torch.Tensor, want: torch.Tensor, label: str) -> None:
    """``got`` has ``want``'s NaN positions and bits elsewhere, and ``want`` holds both NaN and Inf."""
    nan = torch.isnan(want)
    assert nan.any() and torch.isinf(want).any()
    assert torch.equal(torch.isnan(got), nan), label
    assert torch.equal(got[~nan], want[~nan]), label
