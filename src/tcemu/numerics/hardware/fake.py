"""A stand-in for :class:`.runner.Runner` that computes with the model: tests the probe and validation on a CPU.

``ModelRunner(overrides)`` answers like the hardware would if the hardware were the H200 preset, optionally with
some fields replaced (``{"frac_bits": 24}``), so tests can check that the probe recovers what it is fed.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .cases import Case
from .validate import model_bits, model_params, rows_from_tiles

__all__ = ["ModelRunner"]


class ModelRunner:
    lbo, sbo = 128, 256

    def __init__(self, overrides: dict | None = None):
        self.overrides = overrides or {}
        self.device = {"gpu": "model (no GPU)", "driver": "", "cuda_runtime": ""}

    def params(self, case: Case):
        p = model_params(case)
        return replace(p, **self.overrides) if self.overrides else p

    def run(self, case: Case, a, b, c, *, scale_d: int = 1) -> np.ndarray:
        a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
        if a.ndim == 4:  # (T, S, M, K) -> (T, M, S*K)
            t, s, m, k = a.shape
            a = np.transpose(a, (0, 2, 1, 3)).reshape(t, m, s * k)
            b = b.reshape(t, s * k, b.shape[-1])
        if not scale_d:
            c = np.zeros_like(c)
        ar, bc, cf = rows_from_tiles(a, b, c)
        d = model_bits(case, ar, bc, cf, self.params(case))
        return d.reshape(c.shape).astype(c.dtype)

    def check_sass(self):
        return {}
