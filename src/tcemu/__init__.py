"""tcemu: FP32 science on Tensor Cores without losing FP32 accuracy, and the proof down to the bit.

Three parts:

* :mod:`tcemu.emulation`: emulated FP32 products (``matmul``, ``linear``, ``einsum``, ``tensordot``,
  ``EmulatedLinear``, ``emulate_``) from TF32/BF16 Tensor Core pieces, with a PyTorch reference and Triton
  kernels, and a coverage meter (``coverage``);
* :mod:`tcemu.numerics`: a bit-accurate model of Tensor Core MMA arithmetic, with a hardware probe;
* :mod:`tcemu.mlip`: physics validation of emulated interatomic potentials.
"""

from .emulation import (
    METHODS,
    Coverage,
    EmulatedLinear,
    EmulationConfig,
    GemmConfig,
    Method,
    MethodSpec,
    config,
    coverage,
    einsum,
    emulate_,
    emulate_functional_,
    emulation_mode,
    get_config,
    get_method,
    linear,
    matmul,
    method_names,
    restore_,
    scaled_dot_product_attention,
    tensordot,
    unreachable_layers,
)

__version__ = "0.1.0"

__all__ = [
    "Coverage", "EmulatedLinear", "EmulationConfig", "GemmConfig", "METHODS", "Method", "MethodSpec", "config",
    "coverage", "einsum", "emulate_", "emulate_functional_", "emulation_mode", "get_config", "get_method", "linear",
    "matmul", "method_names", "restore_",
    "scaled_dot_product_attention", "tensordot", "unreachable_layers", "__version__",
]
