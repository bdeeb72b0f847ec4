"""``mma``: what a Tensor Core instruction returns for given matrices, bit for bit.

Example::

    import numpy as np
    from tcemu.numerics import mma
    a = np.ones((16, 16), np.float16); b = np.ones((16, 8), np.float16); c = np.zeros((16, 8), np.float32)
    d = mma(a, b, c, arch="h100")                     # float32, exact hardware bits
    d = mma(a, b, c, arch="h100", params=my_params)   # a what-if model instead of the preset
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .formats import from_bits, get_format, to_bits
from .model import block_fma_bits
from .params import MMAParams
from .presets import get_preset

__all__ = ["mma", "infer_input_format"]

_DTYPE_FORMATS = {
    np.dtype(np.float16): "fp16",
    np.dtype(np.float64): "fp64",
    np.dtype(ml_dtypes.float8_e4m3fnuz): "e4m3fnuz",
    np.dtype(ml_dtypes.float8_e5m2fnuz): "e5m2fnuz",
    np.dtype(ml_dtypes.bfloat16): "bf16",
    np.dtype(ml_dtypes.float8_e4m3fn): "e4m3",
    np.dtype(ml_dtypes.float8_e5m2): "e5m2",
}


def infer_input_format(x: np.ndarray) -> str:
    """The input format implied by an array's dtype (float16, bfloat16, float8_e4m3fn, float8_e5m2)."""
    dt = np.asarray(x).dtype
    if dt not in _DTYPE_FORMATS:
        raise ValueError(
            f"cannot infer the input format from dtype {dt}; pass input_format= one of "
            "fp16, bf16, tf32, e4m3, e5m2 (required for tf32), or use dtypes "
            "float16, bfloat16, float8_e4m3fn, float8_e5m2"
        )
    return _DTYPE_FORMATS[dt]


def _input_format(a: np.ndarray, b: np.ndarray, input_format: str | None) -> str:
    """The one input format of both operands: ``input_format``, else a's dtype's. Operands whose dtypes are
    formats (float16, bfloat16, float8) must be of one format; float32 arrays are values."""
    fa, fb = _DTYPE_FORMATS.get(a.dtype), _DTYPE_FORMATS.get(b.dtype)
    if fa is not None and fb is not None and fa != fb:
        raise ValueError(f"a is {fa} ({a.dtype}) but b is {fb} ({b.dtype}): an MMA takes one input format for "
                         "both operands (mixed formats are not modelled); convert one of them")
    return get_format(input_format).name if input_format is not None else infer_input_format(a)


def _check_operand_dtypes(a: np.ndarray, b: np.ndarray, fin: str) -> None:
    """An operand whose dtype is a format must be of the input format (its values are not silently re-read)."""
    for name, x in (("a", a), ("b", b)):
        f = _DTYPE_FORMATS.get(x.dtype)
        if f is not None and f != fin:
            raise ValueError(f"{name} has dtype {x.dtype} ({f}) but the input format is {fin}; pass {fin} arrays, "
                             "or float32 values with input_format=")


def mma(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    *,
    arch: str | None = None,
    instruction: str = "mma.sync",
    input_format: str | None = None,
    output_format: str | None = None,
    params: MMAParams | None = None,
) -> np.ndarray:
    """D = A @ B + C as the Tensor Core computes it, bit for bit.

    Args:
        a: (..., M, K) in the input format's dtype, or float32 values with ``input_format``.
        b: (..., K, N), same format as a.
        c: (..., M, N) float32 (float16 for fp16 output); other float dtypes are accepted when the
            values are exactly representable.
        arch: ``v100``, ``a100``, ``ada``, ``h100``, ``h200`` or ``b200`` (may be omitted with ``params``).
        instruction: ``mma.sync``, ``wgmma`` (Hopper), ``tcgen05`` (Blackwell), or ``wmma`` (CUDA's WMMA API,
            optionally with its shape, e.g. ``wmma.m16n16k8``): the mma.sync instructions the compiler lowers it
            to on ``arch`` (e.g. a tf32 m16n16k8 WMMA is two chained m16n8k4 per output, not one m16n8k8).
        input_format: ``fp16``, ``bf16``, ``tf32``, ``e4m3``, ``e5m2``; inferred from the dtype if None.
            tf32 operands are float32 arrays; like the hardware, the model ignores their low 13 bits.
        output_format: ``fp32`` or ``fp16``; ``fp64`` for fp64 inputs (the default then).
        params: an explicit model (what-if); overrides the preset. Its formats must agree with the inputs.

    K must be a multiple of the instruction's K; instructions are chained in increasing k, each
    result becoming the next c (K = 0: no instruction, D = C). Batch dimensions broadcast.

    Returns:
        (..., M, N) float32 (float16 for fp16 output) with the exact result bits.

    Raises:
        ValueError: unrepresentable inputs, unknown combinations, operands of two formats or wrong shapes.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    c = np.asarray(c)
    fin = _input_format(a, b, input_format)
    if output_format is None:  # fp32, or fp64 for fp64 inputs (DMMA, v_mfma_f64)
        output_format = "fp64" if fin == "fp64" else "fp32"
    if params is None:
        if arch is None:
            raise ValueError("pass arch= (v100, a100, ada, h100, h200, b200) or params=")
        params = get_preset(arch, instruction, fin, output_format)
    else:
        if params.input_format != fin:
            raise ValueError(f"params.input_format is {params.input_format} but the inputs are {fin}")
        want_c = {"fp16": "fp16", "fp64": "fp64"}.get(get_format(output_format).name, "fp32")
        if params.c_format != want_c:
            raise ValueError(f"params give {params.c_format} output but output_format={output_format!r}")
    _check_operand_dtypes(a, b, fin)
    if a.ndim < 2 or b.ndim < 2 or c.ndim < 2:
        raise ValueError(f"need a (..., M, K), b (..., K, N), c (..., M, N); got {a.shape}, {b.shape}, {c.shape}")
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2 or c.shape[-2:] != (m, n):
        raise ValueError(f"shapes do not match: a {a.shape} (..., M, K), b {b.shape} (..., K, N), c {c.shape} (..., M, N)")
    if k % params.k_instr:
        raise ValueError(f"K={k} is not a multiple of the instruction's K={params.k_instr} ({params.label})")
    a_bits = to_bits(a, fin)
    b_bits = to_bits(b, fin)
    c_bits = to_bits(c, params.c_format)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    if k == 0:
        return from_bits(np.broadcast_to(c_bits, batch + (m, n)).copy(), params.c_format)
    a_rows = np.broadcast_to(a_bits[..., :, None, :], batch + (m, n, k)).reshape(-1, k)
    b_cols = np.broadcast_to(np.swapaxes(b_bits, -1, -2)[..., None, :, :], batch + (m, n, k)).reshape(-1, k)
    c_flat = np.broadcast_to(c_bits, batch + (m, n)).reshape(-1)
    d_bits = block_fma_bits(a_rows, b_cols, c_flat, params)
    out = from_bits(d_bits, params.c_format).reshape(batch + (m, n))
    return out
