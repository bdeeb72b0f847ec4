"""Public test helpers: named, derived tolerances and input generators for emulated GEMMs.

Two bounds, both relative to the FP64 product of the *same FP32 inputs*:

* :func:`elementwise_bound` is rigorous for any input: the classic deterministic bound
  ``|C - C64| <= (gamma_k + eps_split (1 + gamma_k)) |A| |B| + eta`` (Higham, *Accuracy and
  Stability of Numerical Algorithms*, 2nd ed., eq. 3.13), with ``k`` the number of FP32
  roundings on the way (K accumulations plus the level sums and the recombination),
  ``eps_split`` the method's :attr:`~tcemu.emulation.methods.MethodSpec.split_residual` and
  ``eta`` the absolute error that subnormal results may add.
* :func:`range_abs_bound` is the absolute term an element recomputed by the range fix-up may add (its operands
  scaled down by powers of two lose their subnormal bits); :func:`assert_within_elementwise_bound` includes it.
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
from .emulation.split import range_scale_exponents, scale_down

__all__ = [
    "U_FP32",
    "ETA_FP32",
    "gamma",
    "rounding_steps",
    "elementwise_bound",
    "normwise_bound",
    "range_abs_bound",
    "piece_magnitude",
    "relative_errors",
    "assert_within_elementwise_bound",
    "assert_fp32_faithful",
    "fp64_product",
    "nonfinite_class",
    "make_inputs",
    "DISTRIBUTIONS",
    "TOP_OF_RANGE_CASES",
    "extreme_operands",
]

U_FP32 = 2.0**-24
"""Unit roundoff of FP32 (round to nearest)."""

ETA_FP32 = 2.0**-150
"""Largest absolute error of one FP32 rounding in the subnormal range (half the smallest subnormal)."""

SUBNORMAL_FP32 = 2.0**-149
"""Smallest positive FP32 subnormal: the largest change of a value by the range fix-up's scaling."""


def _check_k(k: float) -> None:
    if not k >= 0:
        raise ValueError(f"tcemu.testing: K (the accumulation length, or a number of roundings) must be >= 0, "
                         f"got {k!r}: a bound for a negative count would be negative")


def gamma(k: int, u: float = U_FP32) -> float:
    """``gamma_k = k u / (1 - k u)``: the bound on ``k`` successive relative roundings."""
    _check_k(k)
    ku = k * u
    if ku >= 1:
        return math.inf
    return ku / (1 - ku)


def rounding_steps(method: str | MethodSpec, k: int) -> int:
    """FP32 roundings on the way to one output: K accumulations, the products within a level,
    and the scale-and-add that joins each level (the scaling by ``2^-s`` is exact)."""
    _check_k(k)
    spec = get_method(method)
    return k + spec.n_products + len(spec.levels)


def elementwise_bound(method: str | MethodSpec, k: int) -> float:
    """Rigorous relative bound: ``|C - C64| <= bound * (m(A) @ m(B)) + eta_bound(k)`` (m = |.|, a nonzero
    subnormal counted as 2^-125: :func:`piece_magnitude`), plus the split's subnormal term and, for rows the
    range fix-up computed, :func:`range_abs_bound` (all in :func:`assert_within_elementwise_bound`)."""
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


def _subnormal(x: Tensor, upto: float = 2.0**-126) -> Tensor:
    """1.0 where ``x`` is nonzero and below ``upto`` in magnitude, else 0.0 (float64)."""
    return ((x != 0) & (x.abs() < upto)).double()


#: the largest piece of a nonzero subnormal value: the piece formats' subnormal grids are coarser than FP32's
#: (2^-136 TF32, 2^-133 BF16) and a nonzero value keeps a nonzero high piece, so the scaled residual can reach
#: 2^s times a grid step, 2^-125; the FP32 roundings of the level sums act on products of that size
SUBNORMAL_PIECE = 2.0**-125


def piece_magnitude(x: Tensor) -> Tensor:
    """|x| (float64; 0 for Inf/NaN), a nonzero subnormal counted as :data:`SUBNORMAL_PIECE`: what bounds the
    pieces of ``x``, so the magnitudes to which the FP32 roundings of an emulated product are relative."""
    x = x.double()
    mag = torch.where(torch.isfinite(x), x.abs(), torch.zeros_like(x))
    return torch.where((x != 0) & (mag < 2.0**-126), torch.full_like(mag, SUBNORMAL_PIECE), mag)


def range_abs_bound(method: str | MethodSpec, a: Tensor, b: Tensor, *, extra_rel: float = 0.0) -> Tensor:
    """Absolute error (float64, shape of ``a @ b``) that entry (i, j) may have beyond ``eps |A||B|`` when the
    range fix-up computed it.

    A recomputed element comes from ``A' = fl(2^-k_i A)`` and ``B' = fl(B 2^-l_j)``
    (:meth:`~tcemu.emulation.methods.MethodSpec.range_threshold`): a scaled value changes (rounding in the
    subnormal range, or the smallest subnormal kept for a nonzero) by at most ``2^-149``, and only where its row
    (column) is scaled and ``|A'| <= 2^-126``. On the scaled operands the method's bound holds
    (:func:`assert_within_elementwise_bound`), and the two scalings back are exact, so
    ``|C - AB| <= eps |A||B| + 2^(k_i + l_j) (eps X + eta + e_sub (1 + eps) S + 2^-149 (1 + eps) S_k +
    (1 + eps) K 2^-298)`` with ``X = m(A') m(B') - 2^-(k+l) |A||B|`` (m: :func:`piece_magnitude`), ``S`` the
    products with a subnormal scaled value, ``S_k`` those with a changed one, eta the subnormal rounding slack
    (:func:`eta_bound`) and e_sub the split's subnormal error. ``extra_rel`` as in
    :func:`assert_within_elementwise_bound`."""
    spec = get_method(method)
    k = a.shape[-1]
    threshold = spec.range_threshold(k)
    ka = range_scale_exponents(a, -1, threshold)
    lb = range_scale_exponents(b, -2, threshold)
    a_s, b_s = scale_down(a, ka), scale_down(b, lb)
    fin_a, fin_b = piece_magnitude(a_s), piece_magnitude(b_s)
    exact = (_finite_abs(a.double()) * torch.exp2(-ka.double())) @ (_finite_abs(b.double()) * torch.exp2(-lb.double()))
    excess = (fin_a @ fin_b - exact).clamp_min(0)
    abs_a, abs_b = _finite_abs(a_s.double()), _finite_abs(b_s.double())
    sub_a, sub_b = _subnormal(a_s.double(), 2.0**-126 * (1 + 2**-23)), _subnormal(b_s.double(), 2.0**-126 * (1 + 2**-23))
    s_all = sub_a @ abs_b + abs_a @ sub_b
    s_scaled = (sub_a * (ka > 0)) @ abs_b + abs_a @ (sub_b * (lb > 0))
    eps = elementwise_bound(spec, k) + extra_rel
    inner = eps * excess + eta_bound(spec, k) + spec.subnormal_abs_error * (1 + eps) * s_all
    inner = inner + SUBNORMAL_FP32 * (1 + eps) * s_scaled + (1 + eps) * k * 2.0**-298
    return inner * torch.exp2(ka.double() + lb.double())


def fp64_product(a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """``a @ b (+ bias)`` in float64 on the CPU, with IEEE semantics for every Inf and NaN: an explicit sum of
    products (in row chunks), so that no BLAS shortcut skips a zero times Inf."""
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    k, n = a64.shape[-1], b64.shape[-1]
    step = max(1, 2**22 // max(1, k * n))
    parts = [(a64[..., i:i + step, :].unsqueeze(-1) * b64.unsqueeze(-3)).sum(-2)
             for i in range(0, a64.shape[-2], step)]
    out = torch.cat(parts, dim=-2) if parts else a64 @ b64
    return out if bias is None else out + bias.detach().double().cpu()


def _finite_abs(x: Tensor) -> Tensor:
    return torch.where(torch.isfinite(x), x.abs(), torch.zeros_like(x))


def assert_within_elementwise_bound(c: Tensor, a: Tensor, b: Tensor, method: str | MethodSpec, *,
                                    bias: Tensor | None = None, extra_rel: float = 0.0) -> None:
    """Check ``c`` (an emulated ``a @ b``, plus ``bias`` if given) against the rigorous bound (with
    :func:`range_abs_bound`); report the worst entry. ``extra_rel``: a further error relative to ``|A||B|``
    that a caller's arithmetic adds (e.g. the Tensor Core's truncation in a GPU kernel).

    Entries where the FP64 product is not finite are not compared (see :func:`assert_fp32_faithful`).
    """
    a, b, c = a.detach().cpu(), b.detach().cpu(), c.detach().cpu()
    a64, b64 = a.double(), b.double()
    c64 = fp64_product(a64, b64, bias)
    fin_a, fin_b = _finite_abs(a64), _finite_abs(b64)
    k = a.shape[-1]
    rel = elementwise_bound(method, k if bias is None else k + 1) + extra_rel
    # the plain algorithm: relative to the pieces' magnitudes; subnormal inputs are split with an absolute, not
    # relative, error (MethodSpec docs)
    plain = rel * (piece_magnitude(a) @ piece_magnitude(b)) + eta_bound(method, k)
    e_sub = get_method(method).subnormal_abs_error
    if e_sub:
        plain = plain + e_sub * (_subnormal(a64) @ fin_b + fin_a @ _subnormal(b64)) * (1 + rel)
    # an element the range fix-up computed (either may be the case: the larger)
    tol = torch.maximum(plain, rel * (fin_a @ fin_b) + range_abs_bound(method, a, b, extra_rel=extra_rel))
    if bias is not None:
        tol = tol + rel * bias.detach().double().cpu().abs()
    err = (c.double() - c64).abs()
    # Results beyond the FP32 range must overflow, as they do in an FP32 matmul; the borderline is free.
    fmax = torch.finfo(torch.float32).max
    overflow = c64.abs() > fmax * (1 + rel)
    if overflow.any():
        bad = overflow & ~(torch.isinf(c) & (torch.sign(c.double()) == torch.sign(c64)))
        if bad.any():
            idx = int(torch.nonzero(bad.flatten())[0])
            raise AssertionError(f"{get_method(method).name}: C64 {c64.flatten()[idx].item():.6e} overflows FP32 "
                                 f"but C is {c.flatten()[idx].item()} (flat index {idx})")
    # (there: finite, or Inf of the product's sign; never NaN)
    free = (c64.abs() >= fmax * (1 - rel)) & (torch.isfinite(c) | (torch.sign(c.double()) == torch.sign(c64)))
    err = torch.where(free, torch.zeros_like(err), err)
    excess = torch.where(torch.isfinite(c64), err - tol, torch.zeros_like(err))
    excess = torch.where(torch.isnan(excess), torch.full_like(excess, math.inf), excess)  # C NaN, C64 finite
    if (excess > 0).any():
        idx = int(torch.argmax(excess.flatten()))
        raise AssertionError(
            f"{get_method(method).name}: |C - C64| exceeds elementwise_bound(k={k}) = "
            f"{elementwise_bound(method, k):.3e} (+ {extra_rel:.3g}) * |A||B| at flat index {idx}: "
            f"err {err.flatten()[idx].item():.3e} > tol {tol.flatten()[idx].item():.3e} "
            f"(C {c.flatten()[idx].item():.9e}, C64 {c64.flatten()[idx].item():.9e})"
        )


def nonfinite_class(x: Tensor) -> Tensor:
    """Per entry: 0 finite, 1 +Inf, 2 -Inf, 3 NaN."""
    return torch.where(torch.isnan(x), 3, torch.where(x == math.inf, 1, torch.where(x == -math.inf, 2, 0)))


def assert_fp32_faithful(c: Tensor, a: Tensor, b: Tensor, method: str | MethodSpec, *,
                         bias: Tensor | None = None, extra_rel: float = 0.0) -> None:
    """The contract of an emulated ``a @ b (+ bias)``: Inf and NaN exactly where the exact product (FP64) has
    them, position by position; elsewhere :func:`assert_within_elementwise_bound` (finite where the FP64
    product rounds to a finite FP32 value, +-Inf of its sign where it rounds beyond the range)."""
    c = c.detach().cpu()
    c64 = fp64_product(a, b, bias)
    want, got = nonfinite_class(c64), nonfinite_class(c)
    special = want != 0
    if not torch.equal(got[special], want[special]):
        idx = int(torch.nonzero(((got != want) & special).flatten())[0])
        raise AssertionError(f"{get_method(method).name}: at flat index {idx} C is {c.flatten()[idx].item()} "
                             f"where the exact product is {c64.flatten()[idx].item()}")
    assert_within_elementwise_bound(c, a, b, method, bias=bias, extra_rel=extra_rel)


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


_X = 1.8446743e19  # about 2^64: X * X is just below FLT_MAX
TOP_OF_RANGE_CASES: tuple[tuple[list, list, str, float], ...] = (
    ([[_X]], [[_X]], "tf32x3", 3.4028233e38),
    ([[1.7e38, 1.7e38]], [[1.0], [1.0]], "bf16x6", 3.4e38),
    ([[_X, 3.4e38]], [[_X], [-3.4e38]], "tf32x3", -math.inf),
    ([[_X, math.inf]], [[_X], [-math.inf]], "bf16x9", -math.inf),
    ([[9.88536599770615e18]], [[1.8599303511086727e19]], "tf32x3", 1.8386091e38),
)
"""Products at the top of the range, (a, b, a method, the FP32 result): high pieces that round up past FLT_MAX
(an Inf, or a NaN where it meets an opposite Inf) and a correction level that overflows while the result does
not (1.84e38: the level is lost to the zeroing of non-finite levels unless the row is computed again)."""


def extreme_operands(max_m: int = 4, max_k: int = 6, max_n: int = 4):
    """A hypothesis strategy (needs the ``dev`` extra) of float32 ``(a, b)`` whose products lie anywhere from the
    subnormal range to past FLT_MAX, most near the top, with Inf, NaN, signed zeros and subnormals mixed in."""
    from hypothesis import strategies as st  # noqa: PLC0415

    fmax = torch.finfo(torch.float32).max
    specials = [math.inf, -math.inf, math.nan, 0.0, -0.0, fmax, -fmax, 2.0**-149, -(2.0**-149), 2.0**-126, 3.4e38,
                -1e-40]

    @st.composite
    def operands(draw):
        m, k, n = draw(st.integers(1, max_m)), draw(st.integers(1, max_k)), draw(st.integers(1, max_n))
        top = draw(st.sampled_from([127, 126, 125, 124, 120, 100, 0, -120, -150]))  # a typical product's exponent
        ea = draw(st.integers(max(-126, top - 127), min(127, top + 126)))

        def value(center: int) -> float:
            kind = draw(st.integers(0, 11))
            if kind <= 6:  # near the row's or column's scale
                e = min(127, max(-149, center + draw(st.integers(-4, 0))))
                frac = draw(st.floats(1.0, 2.0, width=32, exclude_max=True))
                return (-1.0 if draw(st.booleans()) else 1.0) * frac * 2.0**e
            if kind <= 8:
                return draw(st.sampled_from(specials))
            if kind == 9:
                return 0.0
            return draw(st.floats(width=32))  # anything, hypothesis's own edge cases included

        rows = [[value(ea + draw(st.integers(-6, 0))) for _ in range(k)] for _ in range(m)]
        cols = [[value(top - ea) for _ in range(n)] for _ in range(k)]
        return torch.tensor(rows, dtype=torch.float32), torch.tensor(cols, dtype=torch.float32)

    return operands()
