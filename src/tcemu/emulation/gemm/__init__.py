"""Fast emulated FP32 GEMMs: Triton kernels for TF32x3, BF16x3, BF16x6 and BF16x9 (CUDA, sm80+; Hopper-tuned).

* :class:`TritonBackend`: the ``"triton"`` :class:`~tcemu.emulation.dispatch.GemmBackend` (torch ops under
  ``torch.compile``, so that it and CUDA graphs work; direct kernel calls in eager code);
* :func:`emu_mm` / :func:`emu_mm_reference`, :func:`split_t` / :func:`split_t_reference`: launchers and
  their references, side by side (``launch.py``; the Gluon launchers in ``_gluon.py``, the configurations in
  ``configs.py``); the ``@triton.jit`` code is private in ``_kernels/``;
* ``range_fixup.py``: the fix-up after every GEMM, which computes the rows the kernel flagged (a non-finite
  level or result) again with exact power-of-two scaling (docs/emulation.md, "The top of the range").

Settings (small-shape fallback and its threshold, autotuning, a forced kernel configuration) are fields of
:class:`tcemu.EmulationConfig`, changed with ``with tcemu.config(...)`` (docs/emulation.md, "Configuration").
"""

from __future__ import annotations

from .launch import (
    KERNEL_METHODS,
    KernelConfig,
    config_candidates,
    emu_mm,
    emu_mm_reference,
    pick_config,
    split_t,
    split_t_reference,
    tuned_configs,
)
from .triton_backend import PreparedWeight, TritonBackend, fallback_stats

__all__ = [
    "KERNEL_METHODS", "KernelConfig", "PreparedWeight", "TritonBackend", "config_candidates", "emu_mm", "emu_mm_reference", "fallback_stats",
    "pick_config", "split_t", "split_t_reference", "tuned_configs",
]

#: the module switches that became fields of :class:`tcemu.EmulationConfig`
_MOVED = {"SMALL_SHAPE_FALLBACK": "small_shape_fallback", "SMALL_SHAPE_MIN_FLOPS": "small_shape_min_flops",
          "AUTOTUNE": "autotune"}


def __getattr__(name: str):
    if name in _MOVED:
        raise AttributeError(f"tcemu.emulation.gemm.{name} is a field of tcemu.EmulationConfig: read "
                             f"tcemu.get_config().{_MOVED[name]}, change it with tcemu.config({_MOVED[name]}=...)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
