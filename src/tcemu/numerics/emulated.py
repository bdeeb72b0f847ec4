"""CPU twin of tcemu's emulated GEMMs, bit for bit: the kernel's arithmetic on the Tensor Core model.

:func:`emulated_matmul` computes ``a @ b (+ bias)`` the way the kernel that the dispatcher picks does:

1. the pieces of A and B from :func:`tcemu.emulation.split.split` (bit for bit what the kernels' split gives);
2. the kernel's schedule (:func:`tcemu.numerics.schedule.derive_schedule`): per K-tile, each piece product as
   a chain of instructions through the block-FMA model (:func:`tcemu.numerics.model.chain_kmajor_bits`), onto
   the register the kernel accumulates it in or from zero; the FP32 register operations in the kernel's order,
   rounded to nearest (NumPy float32 arithmetic, with subnormals); the fused multiply-adds that ptxas contracts
   as one rounding; NaN results as the GPU's canonical ``0x7FFFFFFF``;
3. K padded with zeros to whole K-tiles, as the kernels' masked loads and TMA zero fill do;
4. the range check and fix-up: the elements the kernel marks (its result before the bias, or a value a step sets
   to 0, not finite: :func:`tcemu.numerics.schedule.zeroes_nonfinite`) are computed again by the fix-up's
   schedule (``schedule.fixup``): A's rows and B's columns scaled by the exact powers of two of
   ``split.range_scale_exponents`` (B as FP32, or as the value of its pieces), split, multiplied and combined
   as the fix-up kernel does, scaled back, plus the bias.

Vectorised over output elements (chunks of :data:`CHUNK`), so a process pool reaches 10^7 outputs in minutes.
The FP32 pieces here are the reference (``split``); :func:`run_schedule` runs one schedule on piece indices for
callers that compute them once (the error tables), :func:`run_gemm` the GEMM with its fix-up.
"""

from __future__ import annotations

import math

import numpy as np

from .model import chain_kmajor_bits
from .range_scaling import range_scaled_operands, range_scaled_operands_reference
from .schedule import GemmSchedule, Step, derive_schedule, zeroes_nonfinite

__all__ = ["emulated_matmul", "emulated_matmul_bits", "emulated_matmul_reference", "piece_indices", "run_schedule",
           "run_gemm", "fp32_step", "CHUNK"]

#: output elements per vectorised pass: the (K-tile, CHUNK) operands of one instruction chain stay in cache
CHUNK = 4096
_CANONICAL_NAN = np.uint32(0x7FFFFFFF)


def _as_f32(x) -> np.ndarray:
    """NumPy float32 of an array or a torch tensor (CPU copy)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"the twin takes float32 operands, got {x.dtype}")
    return x


def piece_indices(x, method) -> list[np.ndarray]:
    """The model's table indices of the pieces of FP32 ``x`` (any shape): split by
    :func:`tcemu.emulation.split.split`; TF32 pieces as the top 19 bits (uint32), BF16 as the top 16 (uint16)."""
    import torch  # noqa: PLC0415

    from tcemu.emulation.methods import get_method  # noqa: PLC0415
    from tcemu.emulation.split import split  # noqa: PLC0415

    spec = get_method(method)
    pieces = split(torch.from_numpy(np.ascontiguousarray(_as_f32(x))), spec)
    out = []
    for p in pieces:
        bits = p.numpy().view(np.uint32)
        out.append((bits >> 13).astype(np.uint32) if spec.piece_format == "tf32" else (bits >> 16).astype(np.uint16))
    return out


def _f(bits: np.ndarray) -> np.ndarray:
    return bits.view(np.float32)


def _bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bits, NaN as the canonical 0x7FFFFFFF (what the GPU's FP32 units return)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return np.where(np.isnan(x), _CANONICAL_NAN, b)


def _fz(bits: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(_f(bits)), bits, np.uint32(0))


def _fma64(x: np.ndarray, scale, y: np.ndarray) -> np.ndarray:
    """RN(x * scale + y) once, for float32 x, y and a power of two ``scale`` (float64, scalar or per element): x
    * scale is exact in float64, and rounding the float64 sum to float32 is then correct: where the float64 sum is
    inexact the smaller addend lies below 2^-28 of the larger, far from any float32 rounding boundary (ties and
    the overflow threshold included)."""
    return _bits((x.astype(np.float64) * scale + y.astype(np.float64)).astype(np.float32))


def fp32_step(step: Step, regs: dict[str, np.ndarray], shift: int, bias_bits: np.ndarray | None = None,
              exponents: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """One FP32 register step (every op but ``mma``) on bit arrays; returns the new ``dst`` bits.
    ``exponents``: (k_row, l_col) per output, for the fix-up's ``unscale_*`` steps."""
    s = step.srcs
    with np.errstate(all="ignore"):
        if step.op == "add":
            return _bits(_f(regs[s[0]]) + _f(regs[s[1]]))
        if step.op == "fz":
            return _fz(regs[s[0]])
        if step.op == "bias":
            return _bits(_f(regs[s[0]]) + _f(bias_bits))
        if step.op.startswith("unscale_"):
            x = _f(regs[s[0]])
            e = exponents[0] if step.op == "unscale_rows" else exponents[1]
            if step.op == "unscale_cols_bias" and step.fused:
                return _fma64(x, np.ldexp(1.0, e), _f(bias_bits))
            out = _bits(x * np.ldexp(np.float32(1), e).astype(np.float32))  # 2^e, e in [0, 126]: exact
            return _bits(_f(out) + _f(bias_bits)) if step.op == "unscale_cols_bias" else out
        x = _fz(regs[s[0]]) if step.zero_nonfinite and step.op == "scale_add" else regs[s[0]]
        scale = np.float32(2.0 ** -(step.levels * shift))
        if step.op == "scale":
            out = _bits(_f(x) * scale)
            return _fz(out) if step.zero_nonfinite else out
        if step.op == "scale_add":
            if step.fused:  # one rounding (FFMA)
                return _fma64(_f(x), float(scale), _f(regs[s[1]]))
            return _bits(_f(_bits(_f(x) * scale)) + _f(regs[s[1]]))
    raise ValueError(f"unknown step {step.op!r}")


def run_schedule(
    schedule: GemmSchedule,
    a_idx: list[np.ndarray],
    b_idx: list[np.ndarray],
    rows: np.ndarray,
    cols: np.ndarray,
    bias_bits: np.ndarray | None = None,
    *,
    exponents: tuple[np.ndarray, np.ndarray] | None = None,
    marked: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Output bits (uint32, one per (rows[s], cols[s])) of the schedule alone (no fix-up).

    ``a_idx[i]`` (K', M) and ``b_idx[j]`` (K', N): k-major piece indices (:func:`piece_indices` of A.T and B),
    K' a multiple of the K-tile (zero-padded). ``bias_bits``: (N,) uint32 or None. ``exponents``: (k (M,),
    l (N,)) of a range-scaled schedule (the fix-up). ``marked``: also return the elements the kernel's range
    check marks (bool, one per output; all False without a range check).
    """
    kp = a_idx[0].shape[0]
    if kp % schedule.bk or b_idx[0].shape[0] != kp:
        raise ValueError(f"the pieces' K ({kp}, {b_idx[0].shape[0]}) must be equal and a multiple of "
                         f"the K-tile {schedule.bk}")
    if schedule.range_scaled and exponents is None:
        raise ValueError("a range-scaled schedule (the fix-up) needs the scaling exponents of its rows and columns")
    rows = np.asarray(rows, np.int64)
    cols = np.asarray(cols, np.int64)
    out = np.empty(rows.size, np.uint32)
    bad_out = np.zeros(rows.size, bool)
    check = schedule.range_check
    bk, params = schedule.bk, schedule.params
    for s0 in range(0, rows.size, CHUNK):
        r, c = rows[s0:s0 + CHUNK], cols[s0:s0 + CHUNK]
        zero = np.zeros(r.size, np.uint32)
        regs = {name: zero for name in schedule.registers}
        bad = np.zeros(r.size, bool)
        bias = None if bias_bits is None else np.asarray(bias_bits, np.uint32)[c]
        exps = None if exponents is None else (np.asarray(exponents[0])[r], np.asarray(exponents[1])[c])
        for k0 in range(0, kp, bk):
            a_tile: dict[int, np.ndarray] = {}
            b_tile: dict[int, np.ndarray] = {}
            for st in schedule.tile:
                if st.op != "mma":
                    if check and zeroes_nonfinite(st):
                        bad |= ~np.isfinite(_f(regs[st.srcs[0]]))
                    regs[st.dst] = fp32_step(st, regs, schedule.shift, bias)
                    continue
                i, j = st.product
                if i not in a_tile:
                    a_tile[i] = a_idx[i][k0:k0 + bk][:, r]
                if j not in b_tile:
                    b_tile[j] = b_idx[j][k0:k0 + bk][:, c]
                acc = regs[st.srcs[0]] if st.srcs else zero
                regs[st.dst] = chain_kmajor_bits(a_tile[i], b_tile[j], acc, params)
        for st in schedule.epilogue:
            if check and st.op == "bias":  # the result is checked before the bias
                bad |= ~np.isfinite(_f(regs["acc"]))
            if check and zeroes_nonfinite(st):
                bad |= ~np.isfinite(_f(regs[st.srcs[0]]))
            regs[st.dst] = fp32_step(st, regs, schedule.shift, bias, exps)
        if check and not schedule.has_bias:
            bad |= ~np.isfinite(_f(regs["acc"]))
        out[s0:s0 + r.size] = regs["acc"]
        bad_out[s0:s0 + r.size] = bad
    return (out, bad_out) if marked else out


def _fixup_operands(schedule: GemmSchedule, a: np.ndarray, b: np.ndarray):
    """(A's piece indices, B's, k, l) of the fix-up for FP32 ``a`` (R, K), ``b`` (K, C): scaled as the fix-up
    kernel does (:func:`~tcemu.numerics.range_scaling.range_scaled_operands`), split, k-major, zero-padded to the
    fix-up's K-tile."""
    a_s, b_s, k, l = range_scaled_operands(a, b, schedule.method, schedule.b_operand)  # noqa: E741
    kp = max(1, -(-a.shape[1] // schedule.bk)) * schedule.bk
    a_idx = _padded_kmajor([p.T for p in piece_indices(a_s, schedule.method)], kp)
    return a_idx, _padded_kmajor(piece_indices(b_s, schedule.method), kp), k, l


def run_gemm(schedule: GemmSchedule, a: np.ndarray, b: np.ndarray, bias_bits: np.ndarray | None = None,
             *, a_idx: list[np.ndarray] | None = None, b_idx: list[np.ndarray] | None = None,
             rows: np.ndarray | None = None, cols: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(bits (M, N) uint32, fixed (M, N) bool) of the whole GEMM: the kernel's schedule, then its fix-up's on
    the elements the kernel marked (``fixed``). ``a`` (M, K), ``b`` (K, N) float32; ``a_idx``, ``b_idx``: their
    k-major padded piece indices where the caller has them; ``rows``, ``cols``: only the outputs (rows[s],
    cols[s]), returned flat."""
    (M, K), N = a.shape, b.shape[1]
    kp = max(1, -(-K // schedule.bk)) * schedule.bk
    if a_idx is None:
        a_idx = _padded_kmajor([p.T for p in piece_indices(a, schedule.method)], kp)
    if b_idx is None:
        b_idx = _padded_kmajor(piece_indices(b, schedule.method), kp)
    grid = rows is None
    if grid:
        rows, cols = np.divmod(np.arange(M * N), N)
    bits, fixed = run_schedule(schedule, a_idx, b_idx, rows, cols, bias_bits, marked=True)
    if schedule.fixup is not None and fixed.any():
        where = np.nonzero(fixed)[0]
        ur, ri = np.unique(rows[where], return_inverse=True)
        uc, ci = np.unique(cols[where], return_inverse=True)
        fa, fb, k, l = _fixup_operands(schedule.fixup, a[ur], b[:, uc])  # noqa: E741
        bits[where] = run_schedule(schedule.fixup, fa, fb, ri, ci,
                                   None if bias_bits is None else np.asarray(bias_bits, np.uint32)[uc],
                                   exponents=(k, l))
    return (bits.reshape(M, N), fixed.reshape(M, N)) if grid else (bits, fixed)


def _padded_kmajor(idx: list[np.ndarray], kp: int) -> list[np.ndarray]:
    """(K, X) piece indices zero-padded to (kp, X), contiguous."""
    return [np.ascontiguousarray(np.pad(p, ((0, kp - p.shape[0]), (0, 0)))) for p in idx]


def emulated_matmul_bits(
    a,
    b,
    method,
    *,
    arch: str = "h200",
    instruction: str | None = None,
    config=None,
    schedule: GemmSchedule | None = None,
    bias=None,
    variant: str = "measured",
    range_fixup: bool = True,
    fixup_b: str = "fp32",
) -> np.ndarray:
    """:func:`emulated_matmul`'s result as uint32 bits (M, N)."""
    a = _as_f32(a)
    b = _as_f32(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need a (M, K) and b (K, N) float32, got {a.shape} and {b.shape}")
    (M, K), N = a.shape, b.shape[1]
    bias_bits = None
    if bias is not None:
        bias = _as_f32(bias)
        if bias.shape != (N,):
            raise ValueError(f"bias must be float32 of shape ({N},), got {bias.shape}")
        bias_bits = bias.view(np.uint32)
    if schedule is None:
        schedule = derive_schedule(method, config, arch=arch, instruction=instruction, M=M, N=N, K=K,
                                   has_bias=bias is not None, variant=variant, range_fixup=range_fixup,
                                   fixup_b=fixup_b)
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    if get_method(method).name != schedule.method:
        raise ValueError(f"the schedule is for {schedule.method}, not {get_method(method).name}")
    if (bias is not None) != schedule.has_bias:
        raise ValueError("a bias needs a schedule with its bias step (derive_schedule(..., has_bias=True)), "
                         "and a schedule with one needs the bias")
    if M == 0 or N == 0:
        return np.zeros((M, N), np.uint32)
    return run_gemm(schedule, a, b, bias_bits)[0]


def emulated_matmul(
    a,
    b,
    method,
    *,
    arch: str = "h200",
    instruction: str | None = None,
    config=None,
    schedule: GemmSchedule | None = None,
    bias=None,
    variant: str = "measured",
    range_fixup: bool = True,
    fixup_b: str = "fp32",
) -> np.ndarray:
    """``a @ b (+ bias)`` as tcemu's emulated GEMM kernel computes it on ``arch``, bit for bit.

    Args:
        a: float32 (M, K), NumPy or torch (CPU or CUDA: copied to the host).
        b: float32 (K, N).
        method: tf32x3, bf16x3, bf16x6 or bf16x9.
        arch: the Tensor Core generation: a100, ada, h100, h200 (default) or b200.
        instruction: the preset's instruction; None: what the compiler emits on ``arch``
            (:data:`tcemu.numerics.schedule.KERNEL_INSTRUCTION`).
        config: the kernel configuration (KernelConfig or its string); None: the dispatcher's choice
            (``pick_config``) for this shape.
        schedule: an explicit schedule (:func:`tcemu.numerics.schedule.derive_schedule`), instead of arch,
            instruction and config.
        bias: float32 (N,), added after the combine as the kernels do.
        variant: the presets' variant for the disputed floors (``measured``, ``mmasim``, ``toolbox``).
        range_fixup: the kernels' range check and fix-up (False: neither, the diagnostic
            ``tcemu.config(range_fixup=False)``: false overflows and lost levels near FLT_MAX stay).
        fixup_b: what the fix-up reads as B: ``fp32`` (the FP32 b, as tcemu's matmul and linear layers pass it
            to ``emu_mm``) or ``recombined`` (``emu_mm`` without ``b``: the value of b's pieces).

    Returns:
        float32 (M, N).
    """
    return emulated_matmul_bits(a, b, method, arch=arch, instruction=instruction, config=config,
                                schedule=schedule, bias=bias, variant=variant, range_fixup=range_fixup,
                                fixup_b=fixup_b).view(np.float32)


# =====================================================================================================
# REFERENCE: the same schedule, one output at a time, in exact rational arithmetic
# =====================================================================================================


def _ref_scale(x: int, power: int) -> int:
    """x * 2^-power (any integer power) rounded to nearest even, on fp32 bits, exactly (signed zeros kept, NaN
    canonical, an overflow Inf)."""
    from fractions import Fraction  # noqa: PLC0415

    from .oracle import round_fraction, value_of  # noqa: PLC0415

    v = value_of(x, "fp32")
    if v != v:
        return int(_CANONICAL_NAN)
    if v == 0 or v in (float("inf"), float("-inf")):
        return x
    return round_fraction(Fraction(v) * Fraction(2) ** -power, "fp32", _rne())


def _ref_fma_pow2(x: int, power: int, y: int) -> int:
    """x * 2^-power + y rounded once (FFMA), on fp32 bits, exactly; IEEE zero signs, canonical NaN."""
    from fractions import Fraction  # noqa: PLC0415

    from .oracle import _fp_add, round_fraction, value_of  # noqa: PLC0415

    vx, vy = value_of(x, "fp32"), value_of(y, "fp32")
    if vx != vx or vy != vy or abs(vx) == float("inf") or abs(vy) == float("inf"):
        return _fp_add(_ref_scale(x, power), y, "fp32", _rne(), "inf")  # Inf and NaN: no rounding involved
    total = Fraction(vx) * Fraction(2) ** -power + Fraction(vy)
    if total == 0:  # -0 only from -0 * 2^-p + -0; an exact cancellation is +0
        return 0x80000000 if math.copysign(1, vx) < 0 and math.copysign(1, vy) < 0 else 0
    return round_fraction(total, "fp32", _rne())  # a nonzero value rounded to zero keeps its sign


def _rne():
    from .rounding import Rounding  # noqa: PLC0415

    return Rounding.RNE


def _ref_step(step: Step, regs: dict[str, int], shift: int, bias_bits: int | None,
              exponents: tuple[int, int] | None = None) -> int:
    from .oracle import _fp_add, value_of  # noqa: PLC0415

    def fz(b: int) -> int:
        v = value_of(b, "fp32")
        return b if v == v and abs(v) != float("inf") else 0

    s = step.srcs
    if step.op == "add":
        return _fp_add(regs[s[0]], regs[s[1]], "fp32", _rne(), "inf")
    if step.op == "bias":
        return _fp_add(regs[s[0]], bias_bits, "fp32", _rne(), "inf")
    if step.op == "fz":
        return fz(regs[s[0]])
    if step.op == "unscale_rows":
        return _ref_scale(regs[s[0]], -exponents[0])
    if step.op == "unscale_cols":
        return _ref_scale(regs[s[0]], -exponents[1])
    if step.op == "unscale_cols_bias":
        if step.fused:
            return _ref_fma_pow2(regs[s[0]], -exponents[1], bias_bits)
        return _fp_add(_ref_scale(regs[s[0]], -exponents[1]), bias_bits, "fp32", _rne(), "inf")
    power = step.levels * shift
    if step.op == "scale":
        out = _ref_scale(regs[s[0]], power)
        return fz(out) if step.zero_nonfinite else out
    if step.op == "scale_add":
        x = fz(regs[s[0]]) if step.zero_nonfinite else regs[s[0]]
        if step.fused:
            return _ref_fma_pow2(x, power, regs[s[1]])
        return _fp_add(_ref_scale(x, power), regs[s[1]], "fp32", _rne(), "inf")
    raise ValueError(f"unknown step {step.op!r}")


def _ref_containers(a: np.ndarray, b: np.ndarray, method, kp: int, tf32: bool) -> tuple[list, list]:
    """Container bits of the pieces of a (M, K) and b (K, N) (tf32: the fp32 container of the 19 bits),
    zero-padded along K to ``kp``."""
    K = a.shape[1]
    a_c = [np.pad((p.astype(np.uint32) << 13) if tf32 else p, ((0, 0), (0, kp - K))) for p in piece_indices(a, method)]
    b_c = [np.pad((p.astype(np.uint32) << 13) if tf32 else p, ((0, kp - K), (0, 0))) for p in piece_indices(b, method)]
    return a_c, b_c


def _ref_output(schedule: GemmSchedule, a_c, b_c, r: int, c: int, bias_bits: int | None,
                exponents: tuple[int, int] | None = None) -> tuple[int, bool]:
    """(bits, marked) of output (r, c) of one schedule, exactly (the range check's rule as the fast path's)."""
    from .oracle import oracle_dot, value_of  # noqa: PLC0415

    def nonfinite(bits: int) -> bool:
        v = value_of(bits, "fp32")
        return v != v or abs(v) == float("inf")

    regs = {name: 0 for name in schedule.registers}
    check, bad = schedule.range_check, False
    for k0 in range(0, a_c[0].shape[1], schedule.bk):
        ks = slice(k0, k0 + schedule.bk)
        for st in schedule.tile:
            if st.op == "mma":
                i, j = st.product
                cin = regs[st.srcs[0]] if st.srcs else 0
                regs[st.dst] = oracle_dot(a_c[i][r, ks].tolist(), b_c[j][ks, c].tolist(), cin, schedule.params)
            else:
                bad |= check and zeroes_nonfinite(st) and nonfinite(regs[st.srcs[0]])
                regs[st.dst] = _ref_step(st, regs, schedule.shift, bias_bits)
    for st in schedule.epilogue:
        bad |= check and st.op == "bias" and nonfinite(regs["acc"])
        bad |= check and zeroes_nonfinite(st) and nonfinite(regs[st.srcs[0]])
        regs[st.dst] = _ref_step(st, regs, schedule.shift, bias_bits, exponents)
    bad |= check and not schedule.has_bias and nonfinite(regs["acc"])
    return regs["acc"], bool(bad)


def emulated_matmul_reference(
    a,
    b,
    method,
    *,
    arch: str = "h200",
    instruction: str | None = None,
    config=None,
    schedule: GemmSchedule | None = None,
    bias=None,
    variant: str = "measured",
    range_fixup: bool = True,
    fixup_b: str = "fp32",
) -> np.ndarray:
    """REFERENCE of :func:`emulated_matmul` (same signature): each output alone, each instruction chain by the
    exact rational oracle (:func:`tcemu.numerics.oracle.oracle_dot`), each FP32 step rounded from its exact
    rational value, a marked output again by the fix-up's schedule on the scaled operands. Slow (small matrices
    only); tests compare the fast twin with it bit for bit."""
    a = _as_f32(a)
    b = _as_f32(b)
    (M, K), N = a.shape, b.shape[1]
    if schedule is None:
        schedule = derive_schedule(method, config, arch=arch, instruction=instruction, M=M, N=N, K=K,
                                   has_bias=bias is not None, variant=variant, range_fixup=range_fixup,
                                   fixup_b=fixup_b)
    bias_bits = None if bias is None else _as_f32(bias).view(np.uint32)
    kp = max(1, -(-K // schedule.bk)) * schedule.bk
    a_c, b_c = _ref_containers(a, b, method, kp, schedule.piece_format == "tf32")
    fix = schedule.fixup
    out = np.empty((M, N), np.uint32)
    scaled = None
    for r in range(M):
        for c in range(N):
            bb = None if bias_bits is None else int(bias_bits[c])
            out[r, c], bad = _ref_output(schedule, a_c, b_c, r, c, bb)
            if bad and fix is not None:
                if scaled is None:
                    scaled = _ref_fixup_operands(fix, a, b)
                fa_c, fb_c, k, l = scaled  # noqa: E741
                out[r, c] = _ref_output(fix, fa_c, fb_c, r, c, bb, (int(k[r]), int(l[c])))[0]
    return out.view(np.float32)


def _ref_fixup_operands(fix: GemmSchedule, a: np.ndarray, b: np.ndarray):
    """The fix-up's operands, exactly (:func:`~tcemu.numerics.range_scaling.range_scaled_operands_reference`), as
    container bits zero-padded to its K-tile, with k and l."""
    a_s, b_s, k, l = range_scaled_operands_reference(a, b, fix.method, fix.b_operand)  # noqa: E741
    kp = max(1, -(-a.shape[1] // fix.bk)) * fix.bk
    a_c, b_c = _ref_containers(a_s, b_s, fix.method, kp, fix.piece_format == "tf32")
    return a_c, b_c, k, l
