"""The parameters of the block-FMA model of one Tensor Core instruction (docs/numerics.md, "The model").

:class:`MMAParams` is a frozen record: presets for real hardware come from
:func:`tcemu.numerics.presets.get_preset`; what-if models are made with
``dataclasses.replace(preset, frac_bits=26)`` or by building one directly.

The model, per instruction of ``k_instr`` products (instructions are chained in k order, each
result becoming the next ``c``)::

    d = c
    for each block of n_fma consecutive k:            # blocks chain through the output format
        E_max = max(product exponents, exponent of c)  # c == 0: drops out; E_max >= czero_floor
        T_i   = trunc_toward_zero(v_i / 2**(E_max - frac_bits))   # every addend, c included
        d     = round_output(sum(T_i) * 2**(E_max - frac_bits))   # one rounding, at the end

With ``interleave`` set (FP8 ``mma.sync`` on Hopper/Blackwell, emulated on the fp16 path), the
products are converted to fp16, split into groups by ``k mod period`` and accumulated group by
group from ``+0``; then ``c`` is added with one IEEE addition rounded with ``c_add_rounding``.

Mixed operands (``input_format_b``: b in another format than a, e.g. e4m3 x e5m2) change only the
decoding of b. Block-scaled operands (``scale_format``, ``scale_block``: each block of ``scale_block``
consecutive k of a and of b shares one scale) enter one of two ways (docs/numerics.md, "Block scaling"):
``scale_chunk = 0``: the two scales' exponents are added to each product's exponent before alignment
(ue8m0 scales are powers of two; MMA-Sim's ``kind::mxf8f6f4``); ``scale_chunk > 0``: the products of each
chunk of ``scale_chunk`` k are summed exactly, the chunk sum times the two scale significands is one addend
aligned at the sum of the scales' exponents (MMA-Sim's ``kind::mxf4nvf4``, F = 35).

``c_input_format`` (V100/Turing ``mma.m8n8k4 .f32.f16.f16.f16``: c in fp16, d in fp32): c is converted exactly
to d's format before the model (MMA-Sim: ``C.to(d_type)``); :func:`widen_c` does it at the entry points.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .formats import get_format
from .rounding import Rounding

__all__ = ["MMAParams", "widen_c"]

_INPUTS = ("fp16", "bf16", "tf32", "e4m3", "e5m2", "e2m1", "e2m3", "e3m2")
_SCALES = ("ue8m0", "ue4m3")
_OUTPUTS = ("fp32", "fp16", "e8m13")


@dataclass(frozen=True)
class MMAParams:
    """Block-FMA parameters of one (architecture, instruction, input format, output format).

    Field names follow docs/numerics.md ("What Tensor Cores do"): ``n_fma`` is N, ``frac_bits`` is F.
    """

    input_format: str  # a and b: fp16, bf16, tf32, e4m3, e5m2
    output_format: str  # each block's result (and d): fp32, fp16, or e8m13 (fp32 container, 13 fraction bits)
    k_instr: int  # K of one instruction; a longer K chains instructions
    n_fma: int  # N: products fused in one block (c enters the first block)
    frac_bits: int  # F: fraction bits each addend keeps after alignment to the block maximum exponent
    output_rounding: Rounding = Rounding.RZ  # rounding of each block result to output_format
    czero_floor: int | None = -126  # c == 0: E_max = max(E_max, czero_floor); None: no floor (disputed, T24-T25)
    c_exp_floor: int | None = -126  # exponent used to align c is max(true exponent of c, c_exp_floor) (T26)
    tf32_truncate: bool = True  # tf32 operands given as fp32 bits: low 13 bits ignored (else they must be 0)
    scheme: object = None  # None: the block FMA above; else another accumulation (model_fma, model_amd schemes)
    interleave: tuple[tuple[int, ...], ...] | None = None  # FP8 emulation: groups of k mod period, in order
    c_add_rounding: Rounding | None = None  # with interleave: c added last by an IEEE add with this rounding
    overflow: str = "inf"  # "inf": overflow gives Inf even under RZ (both models); "ieee": RZ stops at max finite
    underflow_sign: str = "positive"  # nonzero sum rounded to 0: "positive" (+0, measured on H200) or "keep" (IEEE)
    input_format_b: str | None = None  # b's format when it differs from a's (mixed e4m3 x e5m2, f8f6f4 pairs)
    scale_format: str | None = None  # block scaling: ue8m0 or ue4m3 scales for a and b (None: unscaled)
    scale_block: int = 0  # k per scale (32 MX, 16 NVFP4); each of a and b has K / scale_block scales per row
    scale_chunk: int = 0  # 0: scale exponents join each product's exponent; > 0: exact chunk sums scaled (nvf4)
    zero_factor_exp: int | None = None  # None: zero products/chunks take no part in E_max; else at this exponent
    c_input_format: str | None = None  # c's format where not d's: "fp16" with fp32 d, converted exactly first
    label: str = ""  # e.g. "h100 mma.sync m16n8k16 fp16->fp32"
    sources: str = field(default="", compare=False)  # citations for the values

    def __post_init__(self) -> None:
        if self.scheme is not None:
            self.scheme.check(self)  # its own formats (fp64, fp32, AMD fp8) and fields
        elif self.input_format not in _INPUTS:
            raise ValueError(f"input_format {self.input_format!r} not one of {_INPUTS}")
        elif self.output_format not in _OUTPUTS:
            raise ValueError(f"output_format {self.output_format!r} not one of {_OUTPUTS}")
        if self.n_fma < 1 or self.k_instr < 1 or self.k_instr % self.n_fma and self.interleave is None:
            raise ValueError(f"need 1 <= n_fma dividing k_instr, got n_fma={self.n_fma}, k_instr={self.k_instr}")
        if self.scheme is None and self.input_format_b not in (None,) + _INPUTS:  # a scheme checks its own
            raise ValueError(f"input_format_b {self.input_format_b!r} not one of {_INPUTS}")
        if self.input_format_b == self.input_format:
            object.__setattr__(self, "input_format_b", None)
        f_max = 40 if self.scale_chunk else 29  # int32 aligned addends; chunk sums run in int64
        if not 0 <= self.frac_bits <= f_max:
            raise ValueError(f"frac_bits must be in [0, {f_max}], got {self.frac_bits}")
        self._check_scaling()
        if self.c_input_format == self.c_format:
            object.__setattr__(self, "c_input_format", None)
        if self.c_input_format is not None and ((self.c_input_format, self.output_format) != ("fp16", "fp32")
                                                or self.scheme is not None or self.interleave is not None):
            raise ValueError(f"c_input_format: only fp16 c with fp32 d (mma .f32.f16.f16.f16) is modelled, "
                             f"got {self.c_input_format!r} with {self.output_format}")
        if not isinstance(self.output_rounding, Rounding):
            object.__setattr__(self, "output_rounding", Rounding(self.output_rounding))
        if self.c_add_rounding is not None and not isinstance(self.c_add_rounding, Rounding):
            object.__setattr__(self, "c_add_rounding", Rounding(self.c_add_rounding))
        if self.overflow not in ("inf", "ieee"):
            raise ValueError(f"overflow must be 'inf' or 'ieee', got {self.overflow!r}")
        if self.underflow_sign not in ("positive", "keep"):
            raise ValueError(f"underflow_sign must be 'positive' or 'keep', got {self.underflow_sign!r}")
        if self.interleave is not None:
            if self.input_format not in ("e4m3", "e5m2") or self.b_format not in ("e4m3", "e5m2"):
                raise ValueError("interleave (emulated FP8 mma.sync) needs an e4m3 or e5m2 input format")
            residues = sorted(r for g in self.interleave for r in g)
            if residues != list(range(len(residues))) or self.k_instr % len(residues):
                raise ValueError(f"interleave groups must partition range(period), got {self.interleave}")
            if self.c_add_rounding is None:
                object.__setattr__(self, "c_add_rounding", Rounding.RNE)

    def _check_scaling(self) -> None:
        if (self.scale_format is None) != (self.scale_block == 0):
            raise ValueError("block scaling needs both scale_format (ue8m0, ue4m3) and scale_block (> 0)")
        if self.scale_format is None:
            if self.scale_chunk:
                raise ValueError("scale_chunk needs block scaling (scale_format, scale_block)")
            return
        if self.scale_format not in _SCALES:
            raise ValueError(f"scale_format {self.scale_format!r} not one of {_SCALES}")
        if self.k_instr % self.scale_block or self.interleave is not None:
            raise ValueError(f"scale_block {self.scale_block} must divide k_instr {self.k_instr} (no interleave)")
        if not self.scale_chunk and self.scale_format != "ue8m0":
            raise ValueError("scales that join the product exponents (scale_chunk = 0) must be powers of two: ue8m0")
        if self.scale_chunk:
            if self.scale_block % self.scale_chunk or self.n_fma % self.scale_chunk:
                raise ValueError(f"scale_chunk {self.scale_chunk} must divide scale_block and n_fma")
            if (self.input_format, self.b_format) != ("e2m1", "e2m1"):
                raise ValueError("scale_chunk (exact chunk sums) is modelled for e2m1 x e2m1 only")

    @property
    def b_format(self) -> str:
        """Format of b: ``input_format_b``, or a's format."""
        return self.input_format_b or self.input_format

    @property
    def c_format(self) -> str:
        """Format of c and d as the caller sees them: fp16 for fp16 output, else fp32."""
        return self.output_format if self.output_format in ("fp16", "fp64") else "fp32"

    @property
    def c_in_format(self) -> str:
        """Format of c as the caller gives it: ``c_input_format``, else :attr:`c_format`."""
        return self.c_input_format or self.c_format

    @property
    def product_format(self) -> str:
        """Format the products are formed in: fp16 for emulated FP8, else the input format."""
        return "fp16" if self.interleave is not None else self.input_format

    @property
    def period(self) -> int:
        """Length of the interleave pattern (4 for the FP8 emulation), 0 without one."""
        return sum(len(g) for g in self.interleave) if self.interleave else 0

    def describe(self) -> str:
        """One line: what this model does."""
        if self.scheme is not None:
            return f"{self.label}: {self.scheme.describe(self)}"
        fin = get_format(self.input_format).name
        if self.input_format_b is not None:
            fin += f" x {self.input_format_b}"
        czero = "none" if self.czero_floor is None else str(self.czero_floor)
        cexp = "none" if self.c_exp_floor is None else str(self.c_exp_floor)
        s = (
            f"{self.label or fin}: K={self.k_instr}, N={self.n_fma}, F={self.frac_bits}, "
            f"out {self.output_format} {self.output_rounding.value.upper()}, c=0 floor {czero}, "
            f"c exponent floor {cexp}, overflow {self.overflow}, underflow to zero {self.underflow_sign}"
        )
        if self.scale_format is not None:
            how = (f"chunks of {self.scale_chunk} summed exactly, then scaled" if self.scale_chunk
                   else "scale exponents added to each product's")
            s += f", {self.scale_format} scale per {self.scale_block} k ({how})"
        if self.zero_factor_exp is not None:
            s += f", zero factors at exponent {self.zero_factor_exp}"
        if self.c_input_format is not None:
            s += f", c given as {self.c_input_format} (converted exactly to {self.c_format} first)"
        if self.interleave is not None:
            s += f", fp16-path groups {self.interleave} then c added with {self.c_add_rounding.value.upper()}"
        return s


def widen_c(c_bits, params: MMAParams):
    """``(c_bits, params)`` with c in d's format: a c given in ``params.c_input_format`` (fp16 bits with fp32
    output) converted exactly to fp32 bits, and ``params`` without the field; unchanged otherwise."""
    if params.c_input_format is None:
        return c_bits, params
    c32 = np.asarray(c_bits).astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    return c32, replace(params, c_input_format=None)
