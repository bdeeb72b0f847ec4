"""``tcemu.numerics``: a bit-accurate, fast model of NVIDIA Tensor Core MMA arithmetic (V100 to B200, sm_120).

Public API:

- :func:`mma` ``(a, b, c, *, arch, instruction="mma.sync", input_format=None, output_format="fp32",
  params=None, scale_a=None, scale_b=None)``: D = A @ B + C with the hardware's exact result bits (mixed
  formats such as ``"e4m3.e5m2"``; block-scaled kinds such as ``instruction="tcgen05.mxf4nvf4"`` with
  ``input_format="e2m1:ue4m3x16"`` and scale bits).
- :class:`MMAParams`: the frozen block-FMA parameters (N, F, output format and rounding, c = 0 floor,
  c exponent floor, tf32 truncation, FP8 emulation groups, overflow rule); what-if models via
  ``dataclasses.replace``.
- :func:`get_preset` ``(arch, instruction, input_format, output_format, variant="mmasim") -> MMAParams``.
- :func:`block_fma_bits` ``(a_bits (S, K), b_bits (S, K), c_bits (S,), params) -> (S,) bits``: the fast
  vectorised model on raw bits.
- :func:`add_round_bits`: an IEEE addition rounded once, on bits.
- :mod:`~tcemu.numerics.formats`: exact decode/encode of fp32, fp16, bf16, tf32, e4m3, e5m2, e8m13, e2m1, e2m3,
  e3m2; :mod:`~tcemu.numerics.formats_mx`: the ue8m0/ue4m3 block scales and block-scaled operands.
- :mod:`~tcemu.numerics.oracle`: the exact rational reference model (slow, for tests).
- :func:`explain` ``(a_bits, b_bits, c_bits, params) -> str``: one dot product step by step
  (also ``tcemu numerics explain``).
- :func:`~tcemu.numerics.public_data.load_cases`: the bundled public hardware data.
- :func:`emulated_matmul` ``(a, b, method, *, arch="h200", instruction=None, config=None, schedule=None,
  bias=None)``: the CPU twin of tcemu's emulated GEMMs, bit for bit; :func:`derive_schedule` gives the kernel's
  schedule it follows (from the dispatcher's configuration).

The model and the disputed points are described in docs/numerics.md.
"""

from .api import infer_input_format, mma
from .emulated import emulated_matmul, emulated_matmul_reference
from .explain import explain
from .formats import FORMATS, FloatFormat, decode, encode, from_bits, get_format, to_bits
from .model import add_round_bits, block_fma_bits
from . import model_blockscale  # noqa: F401  (registers block_fma_bits's block-scaled path)
from .params import MMAParams
from .presets import ARCHS, INSTRUCTIONS, get_preset, list_presets
from .rounding import Rounding
from .schedule import GemmSchedule, derive_schedule

__all__ = [
    "mma",
    "explain",
    "MMAParams",
    "get_preset",
    "list_presets",
    "block_fma_bits",
    "add_round_bits",
    "Rounding",
    "FloatFormat",
    "FORMATS",
    "get_format",
    "decode",
    "encode",
    "to_bits",
    "from_bits",
    "infer_input_format",
    "ARCHS",
    "INSTRUCTIONS",
    "emulated_matmul",
    "emulated_matmul_reference",
    "derive_schedule",
    "GemmSchedule",
]
