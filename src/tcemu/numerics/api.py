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
from .params import MMAParams, widen_c
from .presets import get_preset
from .presets_blackwell import canon_input, parse_input

__all__ = ["mma", "infer_input_format"]

_DTYPE_FORMATS = {
    np.dtype(np.float16): "fp16",
    np.dtype(np.float64): "fp64",
    np.dtype(ml_dtypes.float8_e4m3fnuz): "e4m3fnuz",
    np.dtype(ml_dtypes.float8_e5m2fnuz): "e5m2fnuz",
    np.dtype(ml_dtypes.bfloat16): "bf16",
    np.dtype(ml_dtypes.float8_e4m3fn): "e4m3",
    np.dtype(ml_dtypes.float8_e5m2): "e5m2",
    np.dtype(ml_dtypes.float4_e2m1fn): "e2m1",
    np.dtype(ml_dtypes.float6_e2m3fn): "e2m3",
    np.dtype(ml_dtypes.float6_e3m2fn): "e3m2",
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
    """The input format key: ``input_format`` (e.g. ``"e4m3.e5m2"``, ``"e2m1:ue4m3x16"``), else a's and b's
    dtypes' (``"fp16"``, or ``"e4m3.e5m2"`` for a float8_e4m3fn a and a float8_e5m2 b)."""
    if input_format is not None:
        return canon_input(input_format)
    fa, fb = infer_input_format(a), _DTYPE_FORMATS.get(b.dtype)
    return fa if fb in (None, fa) else f"{fa}.{fb}"


def _check_operand_dtypes(a: np.ndarray, b: np.ndarray, fa: str, fb: str) -> None:
    """An operand whose dtype is a format must be of its input format (its values are not silently re-read)."""
    for name, x, fin in (("a", a, fa), ("b", b, fb)):
        f = _DTYPE_FORMATS.get(x.dtype)
        if f is not None and f != fin:
            raise ValueError(f"{name} has dtype {x.dtype} ({f}) but its input format is {fin}; pass {fin} arrays, "
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
    scale_a: np.ndarray | None = None,
    scale_b: np.ndarray | None = None,
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
        input_format: ``fp16``, ``bf16``, ``tf32``, ``e4m3``, ``e5m2``, ``e2m1``, ``e2m3``, ``e3m2``; a pair
            ``"e4m3.e5m2"`` (a, b); with a block scale ``"e2m1:ue4m3x16"``. Inferred from the dtypes if None.
            tf32 operands are float32 arrays; like the hardware, the model ignores their low 13 bits.
        output_format: ``fp32`` or ``fp16``; ``fp64`` for fp64 inputs (the default then); ``fp32.fp16`` (d.c):
            fp32 d with c taken as fp16 (V100/Turing ``mma.m8n8k4 .f32.f16.f16.f16``; c a float16 array).
        params: an explicit model (what-if); overrides the preset. Its formats must agree with the inputs.
        scale_a, scale_b: block-scaled kinds (``instruction="tcgen05.mxf8f6f4"``, ...): uint8 scale bits,
            (..., M, K / block) for a and (..., K / block, N) for b (:mod:`tcemu.numerics.formats_mx`).

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
            raise ValueError("pass arch= (v100, a100, ada, h100, h200, b200, sm120) or params=")
        params = get_preset(arch, instruction, fin, output_format)
    else:
        fa, fb = parse_input(fin)[:2]
        if (params.input_format, params.b_format) != (fa, fb):
            raise ValueError(f"params take {params.input_format} x {params.b_format} but the inputs are {fin}")
        want_c = {"fp16": "fp16", "fp64": "fp64"}.get(get_format(output_format.split(".")[0]).name, "fp32")
        if params.c_format != want_c:
            raise ValueError(f"params give {params.c_format} output but output_format={output_format!r}")
    _check_operand_dtypes(a, b, params.input_format, params.b_format)
    if a.ndim < 2 or b.ndim < 2 or c.ndim < 2:
        raise ValueError(f"need a (..., M, K), b (..., K, N), c (..., M, N); got {a.shape}, {b.shape}, {c.shape}")
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2 or c.shape[-2:] != (m, n):
        raise ValueError(f"shapes do not match: a {a.shape} (..., M, K), b {b.shape} (..., K, N), c {c.shape} (..., M, N)")
    if k % params.k_instr:
        raise ValueError(f"K={k} is not a multiple of the instruction's K={params.k_instr} ({params.label})")
    a_bits = to_bits(a, params.input_format)
    b_bits = to_bits(b, params.b_format)
    c_bits = to_bits(c, params.c_in_format)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    if k == 0:  # no instruction: D = C (converted exactly to d's format where c is given in fp16)
        return from_bits(np.broadcast_to(widen_c(c_bits, params)[0], batch + (m, n)).copy(), params.c_format)
    a_rows = np.broadcast_to(a_bits[..., :, None, :], batch + (m, n, k)).reshape(-1, k)
    b_cols = np.broadcast_to(np.swapaxes(b_bits, -1, -2)[..., None, :, :], batch + (m, n, k)).reshape(-1, k)
    c_flat = np.broadcast_to(c_bits, batch + (m, n)).reshape(-1)
    scales = _scale_rows(scale_a, scale_b, params, batch, m, n, k)
    d_bits = block_fma_bits(a_rows, b_cols, c_flat, params, *scales)
    out = from_bits(d_bits, params.c_format).reshape(batch + (m, n))
    return out


def _scale_rows(scale_a, scale_b, params: MMAParams, batch, m: int, n: int, k: int):
    """Scale bits per output row of ``block_fma_bits``: (rows, K / block) for a and for b, or (None, None)."""
    if params.scale_format is None:
        if scale_a is not None or scale_b is not None:
            raise ValueError(f"scale_a/scale_b given but {params.label or 'the model'} is not block-scaled; "
                             "pick a block-scaled instruction, e.g. tcgen05.mxf8f6f4")
        return None, None
    if scale_a is None or scale_b is None:
        raise ValueError(f"{params.label} is block-scaled: pass scale_a (..., M, K/{params.scale_block}) and scale_b "
                         f"(..., K/{params.scale_block}, N) as uint8 {params.scale_format} bits")
    sa, sb = np.asarray(scale_a), np.asarray(scale_b)
    nb = k // params.scale_block
    if sa.shape[-2:] != (m, nb) or sb.shape[-2:] != (nb, n):
        raise ValueError(f"scale_a must be (..., {m}, {nb}) and scale_b (..., {nb}, {n}); got {sa.shape}, {sb.shape}")
    rows_a = np.broadcast_to(sa[..., :, None, :], batch + (m, n, nb)).reshape(-1, nb)
    rows_b = np.broadcast_to(np.swapaxes(sb, -1, -2)[..., None, :, :], batch + (m, n, nb)).reshape(-1, nb)
    return rows_a.astype(np.uint8), rows_b.astype(np.uint8)
