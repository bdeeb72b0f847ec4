"""Part 1: FP32 emulation for PyTorch (methods, reference and fast GEMMs, autograd, module swap)."""

from .attention import scaled_dot_product_attention
from .configuration import EmulationConfig, config, get_config
from .contractions import einsum, tensordot
from .linear import EmulatedLinear
from .meter import Coverage, coverage
from .methods import METHODS, Method, MethodSpec, get_method, method_names
from .mode import emulation_mode
from .ops import GemmConfig, linear, matmul
from .split import split
from .swap import emulate_, emulate_functional_, restore_, unreachable_layers

__all__ = [
    "Coverage", "EmulatedLinear", "EmulationConfig", "GemmConfig", "METHODS", "Method", "MethodSpec", "config",
    "coverage", "einsum", "emulate_", "emulate_functional_", "emulation_mode", "get_config", "get_method", "linear",
    "matmul", "method_names", "restore_",
    "scaled_dot_product_attention", "split", "tensordot", "unreachable_layers",
]
