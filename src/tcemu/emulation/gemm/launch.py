"""FAST emulated GEMM launchers (Triton) and their REFERENCE twins, side by side.

* :func:`split_t` / :func:`split_t_reference`: FP32 ``b`` (R, C) -> pieces (C, R), contiguous (the
  K-major layout the GEMM kernel reads for its B operand); bit for bit :func:`~tcemu.emulation.split.split`.
* :func:`emu_mm` / :func:`emu_mm_reference`: ``a @ b + bias`` from ``a`` (Z, M, K) and the pieces of ``b``
  given transposed (``bt`` pieces (Zb, N, K), Zb in {1, Z}).

The launchers check, allocate, pick a configuration and launch; the kernels are in ``_kernels/``.

Configuration: :mod:`.configs` (a static table per method and shape bucket, and autotuning).

Split: A is split on the integer bit patterns (exact on every device and under ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from ..._hw import interpreting
from ..configuration import get_config, setting
from ..methods import MethodSpec, get_method
from ..reference import mm_reference
from ..split import split
from ._gluon import (  # noqa: F401 - re-exported: tests and benchmarks reach them here
    _SMEM_PER_BLOCK,
    _WS_SPLIT_REGS,
    _WS_SPLIT_WARPS,
    _launch_wgmma,
    _launch_wgmma_pieces_ws,
    _launch_wgmma_rega,
    _launch_wgmma_ws,
    _num_sms,
    _tma_rows,
    _wgmma_eligible,
    _wgmma_module,
    _wgmma_ws_module,
    _ws_stages,
    wgmma_compile,
    wgmma_pieces_ws_compile,
    wgmma_ws_compile,
)
from ._kernels import cdiv
from ._kernels._emu_mm import _emu_mm_kernel
from ._kernels._split import FMT_BF16, FMT_TF32, _split_t_kernel
from ._offline import launch_compile
from .configs import (  # noqa: F401 - re-exported: tests and benchmarks read them here
    _TUNED,
    WIDE_SHORTK_MAX_K,
    WIDE_SHORTK_MAX_N,
    KernelConfig,
    _autotune,
    _autotune_enabled,
    _bucket,
    _tune_key,
    config_candidates,
    pick_config,
    tuned_configs,
)
from .direct import DirectKernel, constexprs
from .range_fixup import _range_fixup

__all__ = [
    "KERNEL_METHODS", "KernelConfig", "pick_config", "config_candidates", "tuned_configs", "piece_dtype",
    "split_t", "split_t_reference", "emu_mm", "emu_mm_compile", "emu_mm_reference",
    "wgmma_compile", "wgmma_ws_compile",
]

log = logging.getLogger("tcemu.emulation.gemm")

#: methods with a Triton kernel, and their kernel id
KERNEL_METHODS: dict[str, int] = {"tf32x3": 0, "bf16x3": 1, "bf16x6": 2, "bf16x9": 3}


def _fmt(spec: MethodSpec) -> int:
    return FMT_TF32 if spec.piece_format == "tf32" else FMT_BF16


def piece_dtype(spec: MethodSpec) -> torch.dtype:
    """Storage dtype of a piece: float32 holding a TF32 value, or bfloat16."""
    return torch.float32 if spec.piece_format == "tf32" else torch.bfloat16


def _kernel_spec(method: str | MethodSpec) -> MethodSpec:
    """The spec of ``method``, which must have a Triton kernel: what the public launchers check once, at their
    boundary (the backend, which resolved and checked the spec already, calls the private launchers)."""
    spec = get_method(method)
    if spec.name not in KERNEL_METHODS:
        raise ValueError(f"method {spec.name} has no Triton kernel (have: {', '.join(KERNEL_METHODS)})")
    return spec


def _bits(t: Tensor) -> Tensor:
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)


# =====================================================================================================
# split: FAST
# =====================================================================================================


#: CUDA's limit on a grid's y and z dimensions: longer batches and split column counts run in slices
MAX_GRID_YZ = 65535


def split_t(b: Tensor, method: str | MethodSpec) -> tuple[Tensor, ...]:
    """Pieces of FP32 ``b`` (R, C), each returned transposed and contiguous, (C, R).

    ``split_t(w.T, m)`` gives an nn.Linear weight's pieces in its own (N, K) layout, and
    ``split_t(w, m)`` the pieces of ``w.T`` (K, N) for the input gradient ``dy @ w``.
    Pieces are float32 (TF32 values) or bfloat16 (:func:`piece_dtype`).
    """
    return _split_t(b, _kernel_spec(method))


def _split_t(b: Tensor, spec: MethodSpec) -> tuple[Tensor, ...]:
    """:func:`split_t` for a kernel method's spec."""
    if b.dtype != torch.float32 or b.dim() != 2:
        raise TypeError(f"split_t needs a 2-D float32 tensor, got {b.dtype} of shape {tuple(b.shape)}")
    R, C = b.shape
    pieces = tuple(torch.empty((C, R), dtype=piece_dtype(spec), device=b.device) for _ in range(spec.n_pieces))
    if b.numel() == 0:
        return pieces
    p = pieces + (pieces[0],) * (3 - len(pieces))
    constexprs = _split_constexprs(spec)
    BR, BC = constexprs["BR"], constexprs["BC"]
    step = MAX_GRID_YZ * BC  # columns per launch (grid y); each piece's rows c0:c1 are contiguous
    if C <= step:
        _SPLIT_T((cdiv(R, BR), cdiv(C, BC)), (b, p[0], p[1], p[2], R, C, b.stride(0), b.stride(1)), constexprs)
        return pieces
    for c0 in range(0, C, step):
        c1 = min(C, c0 + step)
        q = tuple(t[c0:c1] for t in p)
        _SPLIT_T((cdiv(R, BR), cdiv(c1 - c0, BC)),
                 (b[:, c0:c1], q[0], q[1], q[2], R, c1 - c0, b.stride(0), b.stride(1)), constexprs)
    return pieces


_SPLIT_T = DirectKernel(_split_t_kernel)


def _split_constexprs(spec: MethodSpec) -> dict:
    """The split kernel's constexprs and launch settings for ``spec`` (made once: kept unchanged)."""
    return constexprs(("split", spec.name), lambda: dict(FMT=_fmt(spec), NP=spec.n_pieces, SHIFT=spec.shift, BR=64,
                                                         BC=64, num_warps=4))


# =====================================================================================================
# split: REFERENCE
# =====================================================================================================


def split_t_reference(b: Tensor, method: str | MethodSpec) -> tuple[Tensor, ...]:
    """Same contract as :func:`split_t`, from :func:`~tcemu.emulation.split.split`."""
    spec = get_method(method)
    pieces = tuple(p.mT.contiguous() for p in split(b, spec))
    if spec.piece_format == "bf16":  # the high 16 bits (split() values are BF16-exact; NaN payloads kept)
        pieces = tuple((p.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16) for p in pieces)
    return pieces


# =====================================================================================================
# GEMM: FAST
# =====================================================================================================


def emu_mm(
    a: Tensor,
    bt: tuple[Tensor, ...],
    method: str | MethodSpec,
    bias: Tensor | None = None,
    *,
    out: Tensor | None = None,
    config: KernelConfig | None = None,
    b: Tensor | None = None,
) -> Tensor:
    """``a @ b + bias`` by emulation, with ``b`` given as transposed pieces.

    Every launch is followed by the range fix-up (:func:`~tcemu.emulation.gemm.range_fixup.range_fixup`): the
    rows where the kernel found a non-finite level or result are computed again with exact power-of-two
    scaling, so that no false overflow and no lost correction level remains (docs/emulation.md).

    Args:
        a: float32 (M, K) or (Z, M, K), any strides; split inside the kernel.
        bt: the method's pieces of ``b`` transposed, each (N, K) or (Zb, N, K) with Zb in {1, Z},
            K contiguous (as returned by :func:`split_t`).
        method: tf32x3, bf16x3, bf16x6 or bf16x9.
        bias: float32 (N,) or None, added in FP32 after the product.
        out: optional float32 output of the result's shape (any strides).
        config: tiling; default :func:`pick_config` (or autotuning, when enabled).
        b: FP32 ``b`` transposed, (N, K) or (Zb, N, K) as the pieces, any strides (e.g. an nn.Linear weight,
            or ``b.mT``): the operand of the range fix-up. Default: the value the pieces represent
            (exact for three BF16 pieces; for two, the part of ``b`` the method reads, within its bound).

    Returns:
        float32 (M, N) or (Z, M, N).
    """
    return _emu_mm(a, bt, _kernel_spec(method), bias, out=out, config=config, b=b)


def _emu_mm(a: Tensor, bt: tuple[Tensor, ...], spec: MethodSpec, bias: Tensor | None = None, *,
            out: Tensor | None = None, config: KernelConfig | None = None, b: Tensor | None = None) -> Tensor:
    """:func:`emu_mm` for a kernel method's spec: the launches of this call's signature (its plan, made and checked
    once per signature by :func:`_plan`) on this call's tensors. A signature is what the launches depend on besides
    the data: the operands' dtypes, shapes, strides, devices and 16-byte alignment, and the settings read."""
    c = get_config()
    key = (spec.name, a.dtype, a.shape, a.stride(), a.device, a.data_ptr() & 15,
           tuple((p.dtype, p.shape, p.stride(), p.data_ptr() & 15) for p in bt),
           None if bias is None else (bias.dtype, bias.shape, bias.stride()),
           None if b is None else (b.dtype, b.shape, b.stride()),
           None if out is None else (out.dtype, out.shape, out.stride()),
           config, c.range_fixup, c.kernel_config, c.autotune, len(_TUNED), len(_WGMMA_FAILED), interpreting())
    plan = _PLANS.get(key)
    if plan is None:
        plan, keep = _plan(a, bt, spec, bias, out, config, b)
        if keep:
            if len(_PLANS) >= PLAN_CACHE_SIZE:
                try:
                    del _PLANS[next(iter(_PLANS))]  # the oldest
                except (RuntimeError, StopIteration, KeyError):  # another thread changed the cache meanwhile
                    pass
            _PLANS[key] = plan
    return plan(a, bt, bias, b, out)


#: the plans of recent call signatures of :func:`_emu_mm` (oldest first), at most PLAN_CACHE_SIZE of them
_PLANS: dict[tuple, Callable] = {}
PLAN_CACHE_SIZE = 4096


def _plan(a: Tensor, bt: tuple[Tensor, ...], spec: MethodSpec, bias: Tensor | None, out: Tensor | None,
          config: KernelConfig | None, b: Tensor | None) -> tuple[Callable, bool]:
    """Check the operands of an :func:`_emu_mm` call and return (what runs a call of this signature, whether to
    keep it for the next ones: not while autotuning is pending)."""
    if len(bt) != spec.n_pieces:
        raise ValueError(f"{spec.name} needs {spec.n_pieces} pieces of b, got {len(bt)}")
    if a.dtype != torch.float32:
        raise TypeError(f"a must be float32, got {a.dtype}")
    squeeze = a.dim() == 2
    a3 = a.unsqueeze(0) if squeeze else a
    bt3 = tuple(p.unsqueeze(0) if p.dim() == 2 else p for p in bt)
    if a3.dim() != 3 or any(p.dim() != 3 for p in bt3):
        raise ValueError("a must be (M, K) or (Z, M, K) and the pieces (N, K) or (Zb, N, K)")
    Z, M, K = a3.shape
    Zb, N, Kb = bt3[0].shape
    if Kb != K or Zb not in (1, Z):
        raise ValueError(f"shape mismatch: a {tuple(a.shape)} and pieces {tuple(bt[0].shape)}")
    want = piece_dtype(spec)
    for p in bt3:
        if p.shape != bt3[0].shape or p.dtype != want or p.stride() != bt3[0].stride():
            raise ValueError(f"pieces must share shape and strides and be {want}")
    if bias is not None and (bias.shape != (N,) or bias.dtype != torch.float32):
        raise ValueError(f"bias must be float32 of shape ({N},), got {bias.dtype} {tuple(bias.shape)}")
    b3 = b.unsqueeze(0) if b is not None and b.dim() == 2 else b
    if b3 is not None and (b3.dtype != torch.float32 or b3.shape != bt3[0].shape):
        raise ValueError(f"b must be float32 of the pieces' shape {tuple(bt3[0].shape)}, got {b.dtype} "
                         f"{tuple(b.shape)}")
    out_shape = (M, N) if squeeze else (Z, M, N)
    if out is not None and (out.shape != out_shape or out.dtype != torch.float32):
        raise ValueError(f"out must be float32 {(Z, M, N)}")
    pieces_2d, b_2d = bt[0].dim() == 2, b is not None and b.dim() == 2
    out_2d = squeeze if out is None else out.dim() == 2

    def operands(a, bt, b, out):
        """The call's tensors as (Z, M, K), (Zb, N, K) and (Z, M, N), and its result."""
        result = torch.empty(out_shape, dtype=torch.float32, device=a.device) if out is None else out
        return (a.unsqueeze(0) if squeeze else a, tuple(p.unsqueeze(0) for p in bt) if pieces_2d else bt,
                b.unsqueeze(0) if b_2d else b, result.unsqueeze(0) if out_2d else result, result)

    if M == 0 or N == 0 or Z == 0 or K == 0:
        def run_empty(a, bt, bias, b, out):
            *_, out3, result = operands(a, bt, b, out)
            if M and N and Z:  # K == 0: the bias alone
                out3.zero_()
                if bias is not None:
                    out3 += bias
            return result
        return run_empty, True
    if Z > MAX_GRID_YZ:  # the batch is the grid's y dimension: run it in slices (entries are independent)
        def run_slices(a, bt, bias, b, out):
            a3, bt3, b3, out3, result = operands(a, bt, b, out)
            for z0 in range(0, Z, MAX_GRID_YZ):
                zs = slice(z0, z0 + MAX_GRID_YZ)
                _emu_mm(a3[zs], tuple(q[zs] if Zb == Z else q for q in bt3), spec, bias, out=out3[zs], config=config,
                        b=(b3[zs] if Zb == Z else b3) if b3 is not None else None)
            return result
        return run_slices, True

    check = bool(setting("range_fixup"))
    keep = True
    cfg = config
    if cfg is None:
        key = _tune_key(spec, M, N, K)
        if key not in _TUNED and _autotune_enabled():
            keep = False
            if not torch.cuda.is_current_stream_capturing():
                out3 = torch.empty((Z, M, N), dtype=torch.float32, device=a.device)  # the candidates' results

                def gemm_and_fixup(cfg: KernelConfig) -> None:
                    flags = torch.zeros(Z * M, dtype=torch.int8, device=a.device) if check else out3
                    _gemm_plan(spec, cfg, a3, bt3, bias is not None, N, check)(a3, bt3, bias, out3, flags)
                    if check:
                        _range_fixup(a3, bt3, b3, bias, out3, flags, spec)

                cfg = _autotune(spec, key, gemm_and_fixup, out3)
        if cfg is None:
            cfg = pick_config(spec, M, N, K)
    gemm = _gemm_plan(spec, cfg, a3, bt3, bias is not None, N, check)
    rows = Z * M

    def run(a, bt, bias, b, out):
        a3, bt3, b3, out3, result = operands(a, bt, b, out)
        flags = torch.zeros(rows, dtype=torch.int8, device=a.device) if check else out3  # (unused then)
        gemm(a3, bt3, bias, out3, flags)
        if check:  # the rows the GEMM flagged, computed again (emu_mm's docstring)
            _range_fixup(a3, bt3, b3, bias, out3, flags, spec)
        return result
    return run, keep


def _gemm_plan(spec: MethodSpec, cfg: KernelConfig, a3: Tensor, bt3: tuple[Tensor, ...], has_bias: bool, N: int,
               check: bool) -> Callable:
    """The GEMM launch of ``cfg`` for operands of the signature of ``a3`` and ``bt3`` (N columns), as a function of
    a call's (a3, bt3, bias, out3, flags): the Gluon wgmma kernel where it runs the product, else the Triton kernel
    (same bits). A Gluon kernel that fails is recorded, and the Triton kernel runs that call and the next ones."""
    Z, M, K = a3.shape
    if cfg.wgmma:
        failed = (spec.name, str(cfg))
        if failed not in _WGMMA_FAILED and _wgmma_eligible(spec, a3.device, bt3, K):
            split_a = not cfg.presplit and _tma_rows(a3)
            fp32_a = split_a and (cfg.register_a or cfg.warp_specialized)  # the launcher takes FP32 A itself
            if fp32_a and cfg.register_a:  # split in the MMA warps' A-operand registers
                launcher = _launch_wgmma_rega
            elif fp32_a:  # split by the kernel's own splitter warps
                launcher = _launch_wgmma_ws
            elif cfg.warp_specialized and cfg.presplit:  # A's pieces by a loader warp
                launcher = _launch_wgmma_pieces_ws
            else:  # A's FP32 rows by TMA, split in the kernel, or (also "gw" without TMA rows) A's pieces
                launcher = functools.partial(_launch_wgmma, split_a=split_a)
            fallback: list[Callable] = []

            def wgmma(a3, bt3, bias, out3, flags):
                if fp32_a:
                    ap = a3
                else:  # pieces split beforehand, or the one FP32 operand of the "g" kernel
                    ap = (a3,) if split_a else _split_t(a3.reshape(Z * M, K).mT, spec)
                try:
                    launcher(spec, cfg, ap, tuple(q[0] for q in bt3), bias, out3, M, N, K, flags=flags,
                             range_check=check)
                except Exception as exc:  # noqa: BLE001 - e.g. a Triton whose experimental Gluon API differs
                    _WGMMA_FAILED.add(failed)
                    log.warning("tcemu: the Gluon wgmma kernel failed for %s %s (%s: %s); running the Triton "
                                "kernel instead (same bits)", spec.name, cfg, type(exc).__name__, str(exc)[:200])
                    if not fallback:
                        fallback.append(_gemm_plan(spec, cfg, a3, bt3, has_bias, N, check))
                    fallback[0](a3, bt3, bias, out3, flags)
            return wgmma
        cfg = replace(cfg, wgmma=False, warp_specialized=False, tma_store=False, register_a=False, mode=1,
                      persistent=False)
    tiles = cdiv(M, cfg.bm) * cdiv(N, cfg.bn)
    grid = (min(tiles, max(1, _num_sms(a3.device) // Z)) if cfg.persistent else tiles, Z)
    sbz = 0 if bt3[0].shape[0] == 1 else bt3[0].stride(0)
    pad = 3 - len(bt3)
    constexprs = _constexprs(spec, cfg, K, has_bias, range_check=check)
    presplit = cfg.presplit

    def triton_gemm(a3, bt3, bias, out3, flags):
        p = bt3 + (bt3[0],) * pad
        if presplit:  # A's pieces (Z*M, K), contiguous, by the split kernel (bit for bit split())
            ap = _split_t(a3.reshape(Z * M, K).mT, spec)
            ap = ap + (ap[0],) * (3 - len(ap))
            a_args, a_strides = ap, (M * K, K, 1)
        else:
            a_args, a_strides = (a3, a3, a3), a3.stride()
        _EMU_MM(grid, (*a_args, p[0], p[1], p[2], bias if bias is not None else a3, out3, flags, M, N, K,
                       *a_strides, sbz, p[0].stride(1), p[0].stride(2), *out3.stride()), constexprs)
    return triton_gemm


_EMU_MM = DirectKernel(_emu_mm_kernel)

#: (method, configuration) pairs whose Gluon kernel failed to compile or launch: they run the Triton kernel
_WGMMA_FAILED: set[tuple[str, str]] = set()

def _constexprs(spec: MethodSpec, cfg: KernelConfig, K: int, has_bias: bool, *, range_check: bool = True) -> dict:
    """The GEMM kernel's constexprs and launch settings (made once per combination: every launch reads them; not
    to be modified)."""
    key = ("emu_mm", spec.name, cfg, K % cfg.bk == 0, has_bias, range_check, interpreting())
    return constexprs(key, lambda: _make_constexprs(spec, cfg, K, has_bias, range_check))


def _make_constexprs(spec: MethodSpec, cfg: KernelConfig, K: int, has_bias: bool, range_check: bool) -> dict:
    mode = cfg.mode
    if spec.name == "bf16x9" or (mode == 4 and spec.n_pieces == 2):
        mode = 0 if spec.name == "bf16x9" else 1  # bf16x9 has the tile mode only; 4 means 1 for two pieces
    return dict(
        FMT=_fmt(spec), NP=spec.n_pieces, SHIFT=spec.shift, METHOD=KERNEL_METHODS[spec.name], MODE=mode,
        DOT_FMT=2 if (_fmt(spec) == FMT_BF16 and interpreting()) else _fmt(spec),
        HAS_BIAS=has_bias, EVEN_K=K % cfg.bk == 0,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, FAST_SPLIT=cfg.fast_split, A_PRESPLIT=cfg.presplit, L0_FIRST=cfg.l0_first and mode == 1,
        PERSISTENT=cfg.persistent, RANGE_CHECK=range_check,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def emu_mm_compile(
    method: str | MethodSpec, M: int, N: int, K: int, *, has_bias: bool = False,
    config: KernelConfig | None = None, a_strides: tuple[int, int] | None = None,
    arch: int | None = None, range_check: bool = True,
):
    """Compile (without running) the kernel :func:`emu_mm` launches for a 2-D contiguous-output product.

    ``a_strides`` defaults to a contiguous (M, K) ``a``; the pieces are contiguous (N, K). Returns Triton's
    compiled kernel (``.asm["ptx"]``);
    the on-disk cache then serves the real launch, so a pool of processes can compile in parallel.
    ``arch`` (e.g. 90): compile for ``sm_<arch>`` without a GPU (not cached for a launch); ``range_check=False``:
    the kernel without the range check (the diagnostic ``range_fixup=False`` of :class:`~tcemu.emulation.configuration.EmulationConfig`).
    """
    spec = get_method(method)
    cfg = replace(config or pick_config(spec, M, N, K))
    if cfg.wgmma:  # the Gluon kernel compiles at its first launch; this is the Triton kernel it falls back to
        cfg = replace(cfg, wgmma=False, warp_specialized=False, tma_store=False, register_a=False, mode=1,
                      persistent=False)
    sa = (K, 1) if cfg.presplit or a_strides is None else a_strides
    f32, pd = torch.float32, piece_dtype(spec)
    at = pd if cfg.presplit else f32
    # the launch's arguments (emu_mm's launch on 2-D operands): pointers by their dtype, then sizes and strides
    values = [at, at, at, pd, pd, pd, f32, f32, torch.int8, M, N, K,
              M * K, sa[0], sa[1], 0, K, 1, M * N, N, 1]
    constexprs = dict(_constexprs(spec, cfg, K, has_bias, range_check=range_check))
    if arch is not None:  # specialised as the launch is (divisibility, strides of 1), for sm_<arch>
        warps, stages = constexprs.pop("num_warps"), constexprs.pop("num_stages")
        return launch_compile(_emu_mm_kernel, values, constexprs, arch, warps, stages)
    return _emu_mm_kernel.warmup(*values, grid=(1, 1), **constexprs)


# =====================================================================================================
# GEMM: REFERENCE
# =====================================================================================================


def emu_mm_reference(a: Tensor, b: Tensor, method: str | MethodSpec, bias: Tensor | None = None) -> Tensor:
    """``a @ b + bias`` by the executable spec (:func:`~tcemu.emulation.reference.mm_reference`, whose flagged
    rows are computed again as the range fix-up does)."""
    out = mm_reference(a, b, method)
    return out if bias is None else out + bias
