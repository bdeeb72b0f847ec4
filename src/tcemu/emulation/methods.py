"""The emulation methods: frozen, documented specs of how an FP32 product is built from Tensor Core pieces.

A method splits each FP32 operand ``a`` into ``n_pieces`` values of a narrower *piece format*
(TF32 or BF16), multiplies chosen pairs of pieces on the Tensor Core and recombines the
partial products in FP32. Every fast kernel and the pure-PyTorch reference implement exactly
this spec; the reference (:mod:`tcemu.emulation.reference`) is its executable definition.

Splitting (see :func:`tcemu.emulation.split.split`)::

    p0 = R(a)                              # the high piece, never zero for a nonzero finite a
    r1 = (a - p0) * 2**s                   # exact in FP32 (Sterbenz + power-of-two scaling)
    p1 = R(r1)
    r2 = (r1 - p1) * 2**s
    p2 = R(r2)                             # so  a ~= p0 + 2**-s p1 + 2**-2s p2

``R`` is round-to-nearest into the piece format (ties away from zero for TF32, as
``cvt.rna.tf32.f32``; ties to even for BF16, as ``cvt.rn.bf16.f32``), saturating to the
largest finite piece value instead of overflowing to Inf. The scaling by ``2**s`` keeps the
low pieces as large as the high piece, so they do not underflow for tiny ``a``, and the scaled
cross products live in the same exponent range as ``p0 * p0``.

Products: the pair ``(i, j)`` means ``A_i @ B_j``; it carries the scale ``2**-(s*(i+j))``,
its *level* is ``i + j``. Products of one level are accumulated together (on the Tensor
Core, from a zero accumulator, in the listed order: small first); levels are combined in FP32
from the smallest up::

    t = L_max;  t = t * 2**-s + L_(max-1);  ...;  C = t * 2**-s + L_0

Non-finite values in the correction levels (``L_1`` and up) are set to zero before they are
combined; ``L_0 = P0_A @ P0_B`` carries Inf and NaN exactly where an FP32 matmul has them,
because ``p0`` equals ``a`` for Inf/NaN and is never zero for a nonzero ``a``.

The top of the range: a high piece can round above its value, and a correction level sums up to
``n = max_level_products`` products, so a product whose FP32 result is finite can still overflow in some
level (false Inf, or a correction level lost to the zeroing above). Every element of C with a non-finite
level (or result) is therefore computed again, with its row of A scaled by ``2^-k_i`` and its column of B by
``2^-l_j`` (exact powers of two, :meth:`MethodSpec.range_threshold`), where no level can overflow, and
scaled back: ``C_ij = (C'_ij 2^k_i) 2^l_j``. Elements with Inf/NaN inputs are recomputed too and come out the
same.

Error model (relative to ``|A| @ |B|``, elementwise): ``split_residual`` bounds the
representation error of the kept products per product; FP32 accumulation adds about
``sqrt(K) * 2**-24`` for random data (``K * 2**-24`` worst case).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from enum import Enum

__all__ = ["Method", "MethodSpec", "METHODS", "get_method", "method_names"]


class Method(str, Enum):
    """Names of the built-in methods."""

    FP32 = "fp32"
    TF32 = "tf32"
    TF32X3 = "tf32x3"
    BF16X3 = "bf16x3"
    BF16X6 = "bf16x6"
    BF16X9 = "bf16x9"

    def __str__(self) -> str:  # so f"{Method.TF32X3}" is "tf32x3"
        return self.value


@dataclass(frozen=True)
class MethodSpec:
    """One emulation method, frozen.

    Attributes:
        name: the method's name, e.g. ``"tf32x3"``.
        piece_format: ``"fp32"`` (no split), ``"tf32"`` or ``"bf16"``.
        n_pieces: pieces per operand (1 to 3).
        products: the kept piece products ``(i, j)`` = ``A_i @ B_j``, in accumulation order
            (small first, the high product last).
        split_rounding: ``"rna"`` (TF32, ties away) or ``"rne"`` (BF16), each saturating.
        shift: ``s``, the power-of-two scaling of each residual (11 for TF32, 8 for BF16).
        split_residual: bound on the relative representation error of one product
            ``|a b - sum_kept a_i b_j 2^-s(i+j)| / |a b|`` (derivation in ``split_residual_derivation``).
        fp32_accurate: whether the method is at least as accurate as FP32 SGEMM on random data.
        summary: one line for tables.
        expected_error: normwise error vs FP64 on N(0, 1) inputs and its growth with K, as measured
            by ``tcemu accuracy`` with the PyTorch reference (256 x K x 256, K = 16 .. 16384, CPU).
        subnormal_abs_error: ``split_residual`` holds for normal inputs; a subnormal input (below
            2^-126) is represented with this absolute error instead, because the piece formats'
            subnormal grids (2^-136 TF32, 2^-133 BF16) are coarser than FP32's 2^-149. Zero for BF16x6/x9.
    """

    name: str
    piece_format: str
    n_pieces: int
    products: tuple[tuple[int, int], ...]
    split_rounding: str
    shift: int
    split_residual: float
    fp32_accurate: bool
    summary: str
    expected_error: str = ""
    subnormal_abs_error: float = 0.0
    split_residual_derivation: str = field(default="", repr=False, compare=False)
    #: (T, the largest K with that range threshold or more), T descending: :meth:`range_threshold`'s table
    threshold_steps: tuple[tuple[int, int], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.piece_format not in ("fp32", "tf32", "bf16"):
            raise ValueError(f"piece_format must be fp32, tf32 or bf16, got {self.piece_format!r}")
        if not 1 <= self.n_pieces <= 3:
            raise ValueError(f"n_pieces must be 1, 2 or 3, got {self.n_pieces}")
        for i, j in self.products:
            if not (0 <= i < self.n_pieces and 0 <= j < self.n_pieces):
                raise ValueError(f"product {(i, j)} uses a piece beyond n_pieces={self.n_pieces}")
        if len(set(self.products)) != len(self.products):
            raise ValueError(f"products repeat a pair: {self.products}")
        if self.products and self.products[-1] != (0, 0):
            raise ValueError("the high product (0, 0) must come last")
        if self.split_rounding not in ("rna", "rne", "none"):
            raise ValueError(f"split_rounding must be rna, rne or none, got {self.split_rounding!r}")
        if self.products:
            object.__setattr__(self, "threshold_steps", _threshold_steps(self.max_level_products, len(self.levels)))

    @property
    def n_products(self) -> int:
        """Number of Tensor Core products per output tile (the cost multiplier)."""
        return len(self.products)

    @functools.cached_property  # read on every emulated product's launch (the instance dict: frozen is fine)
    def levels(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Products grouped by level ``i + j``; ``levels[l]`` in accumulation order."""
        top = max(i + j for i, j in self.products)
        return tuple(tuple(p for p in self.products if sum(p) == lvl) for lvl in range(top + 1))

    @property
    def uses_tensor_cores(self) -> bool:
        return self.piece_format != "fp32"

    @functools.cached_property
    def max_level_products(self) -> int:
        """The most products summed in one level (3 for BF16x6/x9, 2 for TF32x3/BF16x3, 1 for one piece)."""
        return max(len(level) for level in self.levels)

    def range_threshold(self, k: int) -> int:
        """T of the range fix-up for contraction length ``k``: a row of A (column of B) whose largest finite
        magnitude has exponent ``e > T`` is scaled by ``2^-(e - T)``, so that all its finite values are below
        ``2^(T+1)``.

        Why no level can then overflow: a value ``x`` with ``2^e <= |x| < 2^(e+1)`` has pieces of at most
        ``2^(e+1)`` (the high piece may round up to it; each scaled residual is at most ``2^e``), so a piece
        product is at most ``2^(2T+2)``; a level sums ``n k`` of them (n = :attr:`max_level_products`), and
        FP32 rounding of its partial sums can grow that by ``(1 + u)^(n k + levels + 2)`` at most (the
        combined result, level sums scaled by ``2^-s``, is smaller). T is the largest integer with
        ``n k 2^(2T+2) (1 + u)^(n k + levels + 2) <= FLT_MAX``; at least 1 (that holds up to n k of about
        2^30), so that ``2^+-k`` stays a normal FP32 number."""
        # read off the steps of T(k), computed with the spec: under torch.compile(dynamic=True) k can be a symbolic
        # size and Python floats symbolic too, and comparisons of k trace (as guards) where logarithms do not
        k = max(k, 1)
        for threshold, k_max in self.threshold_steps:
            if k <= k_max:
                return threshold
        return 1

    def __str__(self) -> str:
        return self.name


_U = 2.0**-24


def _range_threshold(n: int, levels: int, k: int) -> int:
    """:meth:`MethodSpec.range_threshold` for ``n`` products per level, ``levels`` levels, contraction ``k``."""
    steps = n * k + levels + 2
    log2_max = 127 + math.log2(2 - 2.0**-23)  # FLT_MAX = (2 - 2^-23) 2^127
    room = log2_max - math.log2(n) - math.log2(k) - steps * math.log2(1 + _U) - 2
    return max(1, math.floor(room / 2 - 1e-9))  # (the margin guards the float evaluation of the logs)


@functools.cache
def _threshold_steps(n: int, levels: int) -> tuple[tuple[int, int], ...]:
    """(T, the largest k whose threshold is T or more), T descending from T(1) to 2: T(k) does not grow with k."""
    steps, lo = [], 1
    for threshold in range(_range_threshold(n, levels, 1), 1, -1):
        hi = _K_ABOVE_EVERY_STEP
        while lo < hi:  # the largest k with T(k) >= threshold, at least the previous step's (T(k) does not grow)
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if _range_threshold(n, levels, mid) >= threshold else (lo, mid - 1)
        steps.append((threshold, lo))
    return tuple(steps)


#: T(2^32) = 1 for every level size: the (1 + u)^(n k) growth alone exceeds FLT_MAX's room there
_K_ABOVE_EVERY_STEP = 2**32


METHODS: dict[str, MethodSpec] = {
    "fp32": MethodSpec(
        name="fp32",
        piece_format="fp32",
        n_pieces=1,
        products=((0, 0),),
        split_rounding="none",
        shift=0,
        split_residual=0.0,
        fp32_accurate=True,
        summary="plain FP32 (SIMT SGEMM on CUDA, TF32 disabled): the baseline",
        expected_error="7e-8 (K=16) to 4e-7 (K=16384): FP32 accumulation, growing about like sqrt(K) u",
        split_residual_derivation="no split: products are exact in the FP32 FMA",
    ),
    "tf32": MethodSpec(
        name="tf32",
        piece_format="tf32",
        n_pieces=1,
        products=((0, 0),),
        split_rounding="rna",
        shift=11,
        split_residual=2 * 2.0**-11 + 2.0**-22,
        fp32_accurate=False,
        summary="single-pass TF32 (10-bit fractions): fast, about 3e-4 relative error",
        expected_error="2.9e-4 at every K: the TF32 rounding of the inputs dominates; flat in K",
        subnormal_abs_error=2.0**-137,
        split_residual_derivation=(
            "|a - p0| <= 2^-11 |a| (round to nearest, 11 significant bits), same for b; "
            "|ab - p0a p0b| <= (2 * 2^-11 + 2^-22) |ab|"
        ),
    ),
    "tf32x3": MethodSpec(
        name="tf32x3",
        piece_format="tf32",
        n_pieces=2,
        products=((1, 0), (0, 1), (0, 0)),
        split_rounding="rna",
        shift=11,
        split_residual=3 * 2.0**-22 + 2.0**-44,
        fp32_accurate=True,
        summary="TF32x3 (Ootomo-Yokota / CUTLASS 3xTF32): hi+lo TF32 pieces, lo*lo dropped",
        expected_error="1e-7 (K=16) to 4e-7 (K=16384): the same as FP32; accumulation dominates, the split (<= 2^-22) does not",
        subnormal_abs_error=2.0**-148,
        split_residual_derivation=(
            "a = p0 + 2^-11 p1 + r with |r| <= 2^-11 |a - p0| <= 2^-22 |a|; dropped p1a p1b 2^-22 <= 2^-22 |ab|; "
            "residuals r_a b + a r_b <= 2 * 2^-22 |ab| (+ r_a r_b)"
        ),
    ),
    "bf16x3": MethodSpec(
        name="bf16x3",
        piece_format="bf16",
        n_pieces=2,
        products=((1, 0), (0, 1), (0, 0)),
        split_rounding="rne",
        shift=8,
        split_residual=3 * 2.0**-16 + 2.0**-32,
        fp32_accurate=False,
        summary="BF16x3 (Henry et al.): hi+mid BF16 pieces, near-FP32 (about 16 bits)",
        expected_error="4.4e-6 at every K: the dropped mid*mid product (about 2^-16) dominates; flat in K",
        subnormal_abs_error=2.0**-142,
        split_residual_derivation=(
            "a = p0 + 2^-8 p1 + r with |r| <= 2^-16 |a|; dropped p1a p1b 2^-16 <= 2^-16 |ab|; residuals 2 * 2^-16"
        ),
    ),
    "bf16x6": MethodSpec(
        name="bf16x6",
        piece_format="bf16",
        n_pieces=3,
        products=((1, 1), (2, 0), (0, 2), (1, 0), (0, 1), (0, 0)),
        split_rounding="rne",
        shift=8,
        split_residual=6 * 2.0**-24 + 2.0**-32,
        fp32_accurate=True,
        summary="BF16x6 (Henry et al.): hi+mid+lo BF16 pieces, products of level <= 2",
        expected_error="4e-8 (K=16) to 1.7e-7 (K=16384): about half of FP32's error",
        split_residual_derivation=(
            "a = p0 + 2^-8 p1 + 2^-16 p2 + r with |r| <= 2^-24 |a|; dropped (1,2),(2,1) <= 2 * 2^-24 |ab| "
            "and (2,2) <= 2^-32 |ab|; residuals 2 * 2^-24 (the pieces may exceed |a| by up to one of their "
            "half-ulps, folded into the factor 6)"
        ),
    ),
    "bf16x9": MethodSpec(
        name="bf16x9",
        piece_format="bf16",
        n_pieces=3,
        products=((2, 2), (2, 1), (1, 2), (1, 1), (2, 0), (0, 2), (1, 0), (0, 1), (0, 0)),
        split_rounding="rne",
        shift=8,
        split_residual=3 * 2.0**-24,
        fp32_accurate=True,
        summary="BF16x9: hi+mid+lo BF16 pieces, all nine products",
        expected_error="the same as BF16x6 to two digits (the three extra products are below FP32's resolution)",
        split_residual_derivation="a = p0 + 2^-8 p1 + 2^-16 p2 + r with |r| <= 2^-24 |a|; nothing dropped",
    ),
}


def method_names() -> list[str]:
    """Names of the built-in methods, cheapest-to-most-accurate order of the table."""
    return list(METHODS)


def get_method(method: str | Method | MethodSpec) -> MethodSpec:
    """Resolve a method given by name, :class:`Method` or spec."""
    if isinstance(method, MethodSpec):
        return method
    key = method.value if isinstance(method, Method) else method
    if not isinstance(key, str):
        raise TypeError(f"method must be a name, a Method or a MethodSpec, got {type(method).__name__}")
    try:
        return METHODS[key.lower()]
    except KeyError:
        raise ValueError(f"unknown method {key!r}; choose one of {', '.join(METHODS)}") from None
