"""Random and adversarial operands for mixed-format and block-scaled models (tests, benchmarks).

:func:`make_mixed_operands` (from :mod:`tcemu.numerics.inputs`, where ``make_operands`` dispatches to it) draws
a in a's format and b in b's. :func:`make_scales` draws the scales of a block-scaled model; :func:`make_scaled_operands`
returns all five arrays, with c of ``cancel`` computed from the scaled values.

Scale kinds: ``normal`` (ue8m0 2^-4 .. 2^4, ue4m3 of N(0, 1)), ``wide`` (every finite scale: ue8m0 2^-127 ..
2^127, ue4m3 0 .. 448), ``tiny`` (the smallest scales), ``special`` (wide, with the extremes 2^-127, 2^127
and the NaN scales 0xFF / 0x7F injected), ``bits`` (uniform bytes, NaN included).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .formats_mx import scale_values
from .inputs import _cancel_c, make_mixed_operands
from .params import MMAParams

__all__ = ["make_mixed_operands", "make_scales", "make_scaled_operands"]


def make_scales(params: MMAParams, s: int, k: int, kind: str, rng: np.random.Generator):
    """(scale_a, scale_b), each (s, k / scale_block) uint8 bits of ``params.scale_format`` (module docstring)."""
    shape = (2, s, k // params.scale_block)
    e8 = params.scale_format == "ue8m0"
    if kind == "bits":
        out = rng.integers(0, 256, shape)
    elif kind == "normal":
        out = (rng.integers(123, 132, shape) if e8 else
               np.abs(rng.standard_normal(shape)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8).astype(np.int64))
    elif kind == "tiny":
        out = rng.integers(0, 12, shape)
    else:
        out = rng.integers(0, 255 if e8 else 0x7F, shape)
        if kind == "special":
            extremes = np.array([0, 254, 255] if e8 else [0, 1, 0x7E, 0x7F, 0xFF])
            mask = rng.random(shape) < 0.05
            out[mask] = rng.choice(extremes, int(mask.sum()))
    out = out.astype(np.uint8)
    return out[0], out[1]


def make_scaled_operands(params: MMAParams, s: int, k: int, kind: str, rng: np.random.Generator,
                         scale_kind: str | None = None):
    """(a_bits, b_bits, c_bits, scale_a, scale_b) for a block-scaled model; ``scale_kind`` defaults to ``kind``
    (``cancel`` and ``ties``: ``normal`` scales)."""
    a, b, c = make_mixed_operands(params, s, k, kind, rng)
    sk = scale_kind or {"cancel": "normal", "ties": "normal"}.get(kind, kind)
    sa, sb = make_scales(params, s, k, sk if sk in ("bits", "normal", "tiny", "special") else "wide", rng)
    if kind == "cancel":
        c = _cancel_c(params, a, b, scale_values(sa, params.scale_format), scale_values(sb, params.scale_format),
                      params.scale_block)
    return a, b, c, sa, sb
