"""The operands of the range fix-up (``emu_mm``'s recomputation of the elements its kernels mark), as the fix-up
kernel forms them: FAST (:func:`range_scaled_operands`, by :mod:`tcemu.emulation.split`'s scaling) and its
REFERENCE (:func:`range_scaled_operands_reference`, exact rationals), side by side.

B is what the fix-up reads (``b_operand``): the FP32 b, or the value of its pieces (``split.recombine``, which
the kernel rebuilds as ``(p2 2^-s + p1) 2^-s + p0``; every product there is an exact power-of-two scaling, so
its FMA contraction changes nothing). Row i of A is scaled by 2^-k_i, column j of B by 2^-l_j, ``k = max(0,
e - T)`` with e the exponent of the largest finite magnitude (0 for zeros and subnormals) and T =
``MethodSpec.range_threshold(K)``; a scaled value is rounded once, a nonzero one kept nonzero (the smallest
subnormal of its sign), Inf and NaN unchanged. The twin splits the results and runs the fix-up's schedule on
them (``tcemu.numerics.emulated``).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["range_scaled_operands", "range_scaled_operands_reference"]


def range_scaled_operands(a: np.ndarray, b: np.ndarray, method, b_operand: str = "fp32"
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(A scaled (M, K), B scaled (K, N), k (M,), l (N,)) for float32 ``a`` (M, K), ``b`` (K, N); ``b_operand``
    ``fp32`` or ``recombined``."""
    import torch  # noqa: PLC0415

    from tcemu.emulation.methods import get_method  # noqa: PLC0415
    from tcemu.emulation.split import range_scale_exponents, recombine, scale_down, split  # noqa: PLC0415

    spec = get_method(method)
    threshold = spec.range_threshold(a.shape[1])
    at, bt = torch.from_numpy(np.ascontiguousarray(a)), torch.from_numpy(np.ascontiguousarray(b))
    if b_operand == "recombined":
        bt = recombine(split(bt, spec), spec)
    k = range_scale_exponents(at, -1, threshold)
    l = range_scale_exponents(bt, -2, threshold)  # noqa: E741
    return (scale_down(at, k).numpy(), scale_down(bt, l).numpy(), k.numpy().reshape(-1).astype(np.int64),
            l.numpy().reshape(-1).astype(np.int64))


def range_scaled_operands_reference(a: np.ndarray, b: np.ndarray, method, b_operand: str = "fp32"
                                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """REFERENCE of :func:`range_scaled_operands` (same signature): element by element in exact rationals (the
    recombined value rounded once)."""
    from fractions import Fraction  # noqa: PLC0415

    import torch  # noqa: PLC0415

    from tcemu.emulation.methods import get_method  # noqa: PLC0415
    from tcemu.emulation.split import split  # noqa: PLC0415

    from .oracle import round_fraction  # noqa: PLC0415
    from .rounding import Rounding  # noqa: PLC0415

    spec = get_method(method)
    threshold = spec.range_threshold(a.shape[1])
    if b_operand == "recombined":
        pieces = [p.numpy().astype(np.float64) for p in split(torch.from_numpy(np.ascontiguousarray(b)), spec)]
        bits = np.empty(b.shape, np.uint32)
        for idx in np.ndindex(b.shape):
            hi = pieces[0][idx]
            if not np.isfinite(hi) or hi == 0:  # Inf, NaN and signed zeros: the high piece
                bits[idx] = np.float32(hi).view(np.uint32)
            else:
                exact = sum(Fraction(float(p[idx])) * Fraction(2) ** (-i * spec.shift) for i, p in enumerate(pieces))
                bits[idx] = round_fraction(exact, "fp32", Rounding.RNE)
        b = bits.view(np.float32)

    def exponent(x: np.ndarray) -> int:
        finite = np.abs(x[np.isfinite(x)].astype(np.float64))
        largest = float(finite.max()) if finite.size else 0.0
        return max(0, math.frexp(largest)[1] - 1 - threshold) if largest >= 2.0**-126 else 0

    def scaled(x: np.ndarray, e: int) -> np.ndarray:
        out = np.empty(x.shape, np.float32)
        for i, v in enumerate(x.astype(np.float64).tolist()):
            if v == 0 or not math.isfinite(v):
                out[i] = v
                continue
            y = round_fraction(Fraction(v) / 2**e, "fp32", Rounding.RNE)
            tiny = 0x80000001 if v < 0 else 1
            out[i] = np.uint32(y if y & 0x7FFFFFFF else tiny).view(np.float32)
        return out

    k = np.array([exponent(row) for row in a], np.int64)
    l = np.array([exponent(col) for col in b.T], np.int64)  # noqa: E741
    a_s = np.stack([scaled(row, int(e)) for row, e in zip(a, k)]) if a.size else a.copy()
    b_s = np.stack([scaled(col, int(e)) for col, e in zip(b.T, l)], axis=1) if b.size else b.copy()
    return a_s, b_s, k, l
