"""Fast emulated FP32 GEMMs: Triton kernels for TF32x3, BF16x3, BF16x6 and BF16x9 (CUDA, sm80+; Hopper-tuned).

* :class:`TritonBackend`: the ``"triton"`` :class:`~tcemu.emulation.backends.GemmBackend` (custom ops, so
  ``torch.compile`` and CUDA graphs work);
* :func:`emu_mm` / :func:`emu_mm_reference`, :func:`split_t` / :func:`split_t_reference`: launchers and
  their references, side by side (``emu_mm.py``); the ``@triton.jit`` code is private in ``_kernels/``.

Switches (read at call time):

* ``SMALL_SHAPE_FALLBACK`` (env ``TCEMU_SMALL_SHAPE_FALLBACK``, default on): GEMMs with 2 M N K below
  ``SMALL_SHAPE_MIN_FLOPS`` (env ``TCEMU_SMALL_SHAPE_MIN_FLOPS``) run as cuBLAS SGEMM (FP32 accuracy kept),
  counted in :func:`fallback_stats` and logged once per shape.
* ``TCEMU_GEMM_CONFIG=128x128x32w8s3m0`` (env): force one kernel configuration (experiments).
"""

from __future__ import annotations

import os as _os

from .backend import PreparedWeight, TritonBackend, fallback_stats
from .emu_mm import KERNEL_METHODS, KernelConfig, emu_mm, emu_mm_reference, pick_config, split_t, split_t_reference

SMALL_SHAPE_FALLBACK: bool = _os.environ.get("TCEMU_SMALL_SHAPE_FALLBACK", "1").strip().lower() not in (
    "0", "false", "no", "off", "")
SMALL_SHAPE_MIN_FLOPS: float = float(_os.environ.get("TCEMU_SMALL_SHAPE_MIN_FLOPS", "2e9"))

__all__ = [
    "KERNEL_METHODS", "KernelConfig", "PreparedWeight", "SMALL_SHAPE_FALLBACK", "SMALL_SHAPE_MIN_FLOPS",
    "TritonBackend", "emu_mm", "emu_mm_reference", "fallback_stats", "pick_config", "split_t",
    "split_t_reference",
]
