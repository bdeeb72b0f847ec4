"""Fast emulated FP32 GEMMs: Triton kernels for TF32x3, BF16x3, BF16x6 and BF16x9 (CUDA, sm80+; Hopper-tuned).

* :class:`TritonBackend`: the ``"triton"`` :class:`~tcemu.emulation.backends.GemmBackend` (torch ops under
  ``torch.compile``, so that it and CUDA graphs work; direct kernel calls in eager code);
* :func:`emu_mm` / :func:`emu_mm_reference`, :func:`split_t` / :func:`split_t_reference`: launchers and
  their references, side by side (``emu_mm.py``); the ``@triton.jit`` code is private in ``_kernels/``.

Switches (read at call time):

* ``SMALL_SHAPE_FALLBACK`` (env ``TCEMU_SMALL_SHAPE_FALLBACK``, default on): GEMMs with 2 M N K below
  ``SMALL_SHAPE_MIN_FLOPS`` (env ``TCEMU_SMALL_SHAPE_MIN_FLOPS``) run as cuBLAS SGEMM (FP32 accuracy kept),
  counted in :func:`fallback_stats` and logged once per shape.
* ``AUTOTUNE`` (env ``TCEMU_GEMM_AUTOTUNE=1``, default off): time a few candidate configurations per
  (method, M bucket, N, K) at the first product and keep the fastest that agrees with the first
  (:func:`tuned_configs`); off, a static table measured on an H200 is used.
* ``TCEMU_GEMM_CONFIG=128x128x32w8s3m0`` (env): force one kernel configuration (experiments).
* ``TCEMU_HW_SPLIT=1`` (env, opt-in): BF16 pieces by the GPU's conversion instruction where
  :func:`hw_split_exact` finds split()'s bits (did not compile under Triton 3.6; off by default).
"""

from __future__ import annotations

import os as _os

from .backend import PreparedWeight, TritonBackend, fallback_stats
from .emu_mm import (
    KERNEL_METHODS,
    KernelConfig,
    config_candidates,
    emu_mm,
    emu_mm_reference,
    hw_split_exact,
    pick_config,
    split_t,
    split_t_reference,
    tuned_configs,
)

SMALL_SHAPE_FALLBACK: bool = _os.environ.get("TCEMU_SMALL_SHAPE_FALLBACK", "1").strip().lower() not in (
    "0", "false", "no", "off", "")
# 6 GFLOP: on the H200, PET's layer shapes at 4.03 GFLOP ran 0.37-1.59x SGEMM emulated (TF32x3; BF16x6
# 0.77-0.85x), and from 6.04 GFLOP up TF32x3, BF16x3 and BF16x6 ran faster than SGEMM on GPU time in every
# measured case (benchmarks/results/h200/gemm/small_shape_threshold.csv). At 4 GFLOP the 192-atom PET step,
# compiled, ran 0.70x FP32's (docs/md_step.md).
SMALL_SHAPE_MIN_FLOPS: float = float(_os.environ.get("TCEMU_SMALL_SHAPE_MIN_FLOPS", "6e9"))
AUTOTUNE: bool = _os.environ.get("TCEMU_GEMM_AUTOTUNE", "0").strip().lower() in ("1", "true", "yes", "on")

__all__ = [
    "AUTOTUNE", "KERNEL_METHODS", "KernelConfig", "PreparedWeight", "SMALL_SHAPE_FALLBACK", "SMALL_SHAPE_MIN_FLOPS",
    "TritonBackend", "config_candidates", "emu_mm", "emu_mm_reference", "fallback_stats", "hw_split_exact",
    "pick_config", "split_t", "split_t_reference", "tuned_configs",
]
