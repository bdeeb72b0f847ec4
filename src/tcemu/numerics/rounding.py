"""Rounding modes and integer-only rounding of significands.

Every rounding in :mod:`tcemu.numerics` goes through :func:`shift_round`: a nonnegative integer
magnitude is divided by ``2**shift`` and rounded by looking at the discarded bits (the
remainder), never through a float cast, which could round twice.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

__all__ = ["Rounding", "shift_round", "bit_length"]


class Rounding(str, Enum):
    """Rounding of an exact value to a format's grid."""

    RNE = "rne"  # to nearest, ties to even (IEEE default)
    RNA = "rna"  # to nearest, ties away from zero
    RZ = "rz"  # toward zero (truncation of the magnitude)
    RU = "ru"  # toward +infinity
    RD = "rd"  # toward -infinity
    RO = "ro"  # round to odd (sticky into the last bit)

    def __str__(self) -> str:
        return self.value


_MAX_SHIFT = 62  # int64 magnitudes used here stay below 2**61, so ">> 62" is zero


def shift_round(mag: np.ndarray, shift: np.ndarray, negative: np.ndarray, mode: Rounding) -> np.ndarray:
    """Round ``mag / 2**shift`` to an integer with ``mode``; integers only.

    Args:
        mag: int64 magnitudes, ``0 <= mag < 2**61``.
        shift: int64 right shifts, ``>= 0`` (clipped at 62; larger shifts discard everything).
        negative: bool, the sign of the value (only RU/RD look at it).
        mode: the rounding mode.

    Returns:
        int64 rounded magnitudes.
    """
    shift = np.minimum(shift, _MAX_SHIFT)
    kept = mag >> shift
    if mode is Rounding.RZ:
        return kept
    rem = mag - (kept << shift)
    if mode in (Rounding.RNE, Rounding.RNA):
        half = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
        above = rem > half
        tie = (rem == half) & (shift > 0)
        if mode is Rounding.RNE:
            up = above | (tie & ((kept & 1) == 1))
        else:
            up = above | tie
        return kept + up
    inexact = rem != 0
    if mode is Rounding.RU:
        return kept + (inexact & ~negative)
    if mode is Rounding.RD:
        return kept + (inexact & negative)
    if mode is Rounding.RO:
        return kept | inexact
    raise ValueError(f"unknown rounding mode {mode!r}; valid: {[m.value for m in Rounding]}")


def bit_length(mag: np.ndarray) -> np.ndarray:
    """Vectorised ``int.bit_length`` for nonnegative int64 arrays below 2**53 (0 -> 0).

    Reads the exponent of the exact conversion to float64 (``frexp``): every integer below 2**53 is a
    float64, so nothing is rounded; this is a query, not arithmetic. Larger values are refused.
    """
    x = np.asarray(mag, dtype=np.int64)
    if x.size and int(x.max()) >= 1 << 53:
        raise ValueError("bit_length: magnitude >= 2**53")
    return np.frexp(x.astype(np.float64))[1].astype(np.int64)
