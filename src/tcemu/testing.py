"""Public test helpers: named, derived tolerances and input generators for emulated GEMMs.

Two bounds, both relative to the FP64 product of the *same FP32 inputs*:

* :func:`elementwise_bound` is rigorous for any input: the classic deterministic bound
  ``|C - C64| <= (gamma_k + eps_split (1 + gamma_k)) |A| |B| + eta`` (Higham, *Accuracy and
  Stability of Numerical Algorithms*, 2nd ed., eq. 3.13), with ``k`` the number of FP32
  roundings on the way (K accumulations plus the level sums and the recombination),
  ``eps_split`` the method's :attr:`~tcemu.emulation.methods.MethodSpec.split_residual` and
  ``eta`` the absolute error that subnormal results may add.
* :func:`normwise_bound` is the error model for random inputs with zero-mean entries
  (normal, signed): each product's split error is independent, so relative to ``||C||`` it does
  not grow with K, while FP32 accumulation grows like ``sqrt(K) u`` (Higham & Mary, SIAM J. Sci.
  Comput. 41(5), 2019, probabilistic analysis). ``eps_split`` is a worst case per product (its RMS
  is about 3x smaller), which is the safety margin.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .emulation.methods import MethodSpec, get_method

__all__ = [
    "U_FP32",
    "ETA_FP32",
    "gamma",
    "rounding_steps",
    "elementwise_bound",
    "normwise_bound",
    "relative_errors",
    "assert_within_elementwise_bound",
    "make_inputs",
    "DISTRIBUTIONS",
]

U_FP32 = 2.0**-24
"""Unit roundoff of FP32 (round to nearest)."""

ETA_FP32 = 2.0**-150
"""Largest absolute error of one FP32 rounding in the subnormal range (half the smallest subnormal)."""


def gamma(k: int, u: float = U_FP32) -> float:
    """``gamma_k = k u / (1 - k u)``: the bound on ``k`` successive relative roundings."""
    ku = k * u
    if ku >= 1:
        return math.inf
    return ku / (1 - ku)


def rounding_steps(method: str | MethodSpec, k: int) -> int:
    """FP32 roundings on the way to one output: K accumulations, the products within a level,
    and the scale-and-add that joins each level (the scaling by ``2^-s`` is exact)."""
    spec = get_method(method)
    return k + spec.n_products + len(spec.levels)


def elementwise_bound(method: str | MethodSpec, k: int) -> float:
    """Rigorous relative bound: ``|C - C64| <= bound * (|A| @ |B|) + eta_bound(k)``."""
    spec = get_method(method)
    g = gamma(rounding_steps(spec, k))
    return g + spec.split_residual * (1 + g)


def eta_bound(method: str | MethodSpec, k: int) -> float:
    """Absolute slack for results and partial sums in the subnormal range."""
    return 2 * rounding_steps(method, k) * ETA_FP32


def normwise_bound(method: str | MethodSpec, k: int) -> float:
    """Error model for random zero-mean inputs: ``||C - C64||_F / ||C64||_F <= eps_split + sqrt(k) u``."""
    spec = get_method(method)
    return spec.split_residual + math.sqrt(rounding_steps(spec, k)) * U_FP32


def relative_errors(c: Tensor, c64: Tensor) -> tuple[float, float]:
    """(normwise ``||C - C64||_F / ||C64||_F``, max ``|C - C64| / max|C64|``) over finite entries."""
    c = c.double()
    diff = c - c64
    norm = c64.norm().item()
    peak = c64.abs().max().item()
    return diff.norm().item() / (norm or 1.0), diff.abs().max().item() / (peak or 1.0)


def assert_within_elementwise_bound(c: Tensor, a: Tensor, b: Tensor, method: str | MethodSpec) -> None:
    """Check ``c`` (an emulated ``a @ b``) against the rigorous bound; report the worst entry.

    Entries where the FP64 product is not finite are not compared (see the special-value tests).
    """
    a64, b64 = a.double(), b.double()
    c64 = a64 @ b64
    scale = a64.abs() @ b64.abs()
    k = a.shape[-1]
    tol = elementwise_bound(method, k) * scale + eta_bound(method, k)
    e_sub = get_method(method).subnormal_abs_error
    if e_sub:  # subnormal inputs are split with an absolute, not relative, error (MethodSpec docs)
        sub_a = ((a64 != 0) & (a64.abs() < 2.0**-126)).double()
        sub_b = ((b64 != 0) & (b64.abs() < 2.0**-126)).double()
        tol = tol + e_sub * (sub_a @ b64.abs() + a64.abs() @ sub_b) * (1 + elementwise_bound(method, k))
    err = (c.double() - c64).abs()
    # Results beyond the FP32 range must overflow, as they do in an FP32 matmul; the borderline is free.
    rel = elementwise_bound(method, k)
    fmax = torch.finfo(torch.float32).max
    overflow = c64.abs() > fmax * (1 + rel)
    if overflow.any():
        bad = overflow & ~(torch.isinf(c) & (torch.sign(c.double()) == torch.sign(c64)))
        if bad.any():
            idx = int(torch.nonzero(bad.flatten())[0])
            raise AssertionError(f"{get_method(method).name}: C64 {c64.flatten()[idx].item():.6e} overflows FP32 "
                                 f"but C is {c.flatten()[idx].item()}")
    err = torch.where(c64.abs() >= fmax * (1 - rel), torch.zeros_like(err), err)
    excess = err - tol
    if (excess > 0).any():
        idx = int(torch.argmax(excess.flatten()))
        raise AssertionError(
            f"{get_method(method).name}: |C - C64| exceeds elementwise_bound(k={k}) = "
            f"{elementwise_bound(method, k):.3e} * |A||B| at flat index {idx}: "
            f"err {err.flatten()[idx].item():.3e} > tol {tol.flatten()[idx].item():.3e} "
            f"(C {c.flatten()[idx].item():.9e}, C64 {c64.flatten()[idx].item():.9e})"
        )


DISTRIBUTIONS = ("normal", "uniform", "wide", "tiny", "huge")


def make_inputs(
    m: int, k: int, n: int, distribution: str = "normal", *, seed: int = 0, device: str | torch.device = "cpu"
) -> tuple[Tensor, Tensor]:
    """Random float32 ``a`` (m, k) and ``b`` (k, n) from a named distribution.

    * ``normal``: N(0, 1). * ``uniform``: U[0, 1) (no cancellation).
    * ``wide``: signed, log-uniform magnitudes over 2^-20..2^20 (wide exponent spread within a row).
    * ``tiny``: N(0, 1) * 2^-120 for ``a`` (its low pieces would underflow without scaling).
    * ``huge``: N(0, 1) * 2^100 for ``a`` and 2^-110 for ``b`` (pieces near the top of the range).
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(r: int, c: int) -> Tensor:
        return torch.randn(r, c, generator=gen, dtype=torch.float64)

    if distribution == "normal":
        a, b = normal(m, k), normal(k, n)
    elif distribution == "uniform":
        a, b = torch.rand(m, k, generator=gen, dtype=torch.float64), torch.rand(k, n, generator=gen, dtype=torch.float64)
    elif distribution == "wide":
        def wide(r: int, c: int) -> Tensor:
            mag = torch.exp2(torch.rand(r, c, generator=gen, dtype=torch.float64) * 40 - 20)
            return torch.where(torch.rand(r, c, generator=gen) < 0.5, -mag, mag)
        a, b = wide(m, k), wide(k, n)
    elif distribution == "tiny":
        a, b = normal(m, k) * 2.0**-120, normal(k, n)
    elif distribution == "huge":
        a, b = normal(m, k) * 2.0**100, normal(k, n) * 2.0**-110
    else:
        raise ValueError(f"unknown distribution {distribution!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    return a.float().to(device), b.float().to(device)
