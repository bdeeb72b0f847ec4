"""Launchers of the Gluon kernels (Hopper: ``_kernels/_emu_mm_wgmma.py``, ``_kernels/_emu_mm_wgmma_ws.py``),
their tunables, and offline compiles (no GPU) for the tests. :func:`~.launch.emu_mm` picks them; where one
cannot run or fails, the same configuration runs the Triton kernel (same bits)."""

from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import replace

import torch
import triton
from torch import Tensor

from ..._hw import interpreting, sm_count, tensor_core_generation
from ..methods import MethodSpec, get_method
from ._kernels import cdiv
from .configs import KernelConfig
from .direct import DirectKernel, TmaDesc
from .direct import constexprs as _constexprs

log = logging.getLogger("tcemu.emulation.gemm")


@functools.cache
def _num_sms(device: torch.device) -> int:
    """Programs of a persistent launch: one per SM (the configurations use most of an SM's shared memory)."""
    if device.type != "cuda":
        return 4  # the CPU interpreter: a few programs, each looping over several tiles
    return sm_count(device)


def _flags_arg(flags: Tensor | None, out3: Tensor, range_check: bool | None) -> tuple[Tensor, bool]:
    """(flags, RANGE_CHECK) of a launch: by default the check runs (as :func:`~.launch.emu_mm` launches the
    kernels), into fresh flags where none are given (a direct launch: only a fix-up would read them)."""
    check = True if range_check is None else range_check
    if flags is None:
        rows = out3.shape[0] * out3.shape[1]
        flags = torch.zeros(rows, dtype=torch.int8, device=out3.device) if check else out3
    return flags, bool(check)


def _gluon_kernels(module: str, what: str):
    """The Gluon kernels' module ``_kernels.<module>``, or None where this Triton lacks the Gluon API it uses
    (logged once: ``what`` is unavailable)."""
    try:
        return importlib.import_module(f"._kernels.{module}", __package__)
    except Exception as exc:  # noqa: BLE001 - an older/newer Triton without this Gluon API
        log.info("tcemu: the %s is unavailable (%s)", what, exc)
        return None


@functools.cache
def _wgmma_module():
    """The Gluon kernel's module, or None where this Triton has no Gluon for Hopper."""
    return _gluon_kernels("_emu_mm_wgmma", "Gluon wgmma kernel")


@functools.cache
def _wgmma_ws_module():
    """The warp-specialised Gluon kernel's module, or None where this Triton has no Gluon for Hopper."""
    return _gluon_kernels("_emu_mm_wgmma_ws", "warp-specialised Gluon wgmma kernel") if _wgmma_module() else None


@functools.cache
def _wgmma_rega_module():
    """The register-A Gluon kernel's module, or None where this Triton has no Gluon for Hopper."""
    return _gluon_kernels("_emu_mm_wgmma_rega", "register-A Gluon kernel") if _wgmma_module() else None


def _wgmma_eligible(spec: MethodSpec, device: torch.device, bt3: tuple[Tensor, ...], K: int) -> bool:
    """Whether the Gluon wgmma kernel can run this product (else the Triton kernel runs it, same bits)."""
    if device.type != "cuda" or interpreting() or spec.name == "bf16x9":
        return False
    if tensor_core_generation(device) != "hopper" or _wgmma_module() is None:
        return False
    elem = bt3[0].element_size()
    # TMA: one B for all batch entries, rows 16-byte aligned, K contiguous
    return (bt3[0].shape[0] == 1 and (K * elem) % 16 == 0
            and all(q[0].is_contiguous() and q.data_ptr() % 16 == 0 for q in bt3))


def _tma_rows(a3: Tensor) -> bool:
    """Whether FP32 ``a3`` (Z, M, K) can be read by TMA as (Z*M, K) rows: K contiguous, rows 16-byte aligned."""
    Z, M, _ = a3.shape
    return (a3.stride(2) == 1 and (a3.stride(1) * 4) % 16 == 0 and a3.data_ptr() % 16 == 0
            and (Z == 1 or a3.stride(0) == M * a3.stride(1)))


@functools.cache
def _smem_layout(rows: int, cols: int, bf16: bool):
    from triton.experimental.gluon import language as gl  # noqa: PLC0415

    return gl.NVMMASharedLayout.get_default_for([rows, cols], gl.bfloat16 if bf16 else gl.float32)


def _piece_descriptors(pieces: tuple[Tensor, ...], rows: int, cols: int, bf16: bool) -> list[TmaDesc]:
    """TMA descriptors of 2-D pieces with [rows, cols] blocks, padded to three (the kernels take three
    descriptors; a method with fewer pieces repeats the first, which its kernel never reads)."""
    layout = _smem_layout(rows, cols, bf16)
    block = (rows, cols)
    d = [TmaDesc(q, q.shape, q.stride(), block, layout) for q in pieces]
    return d + d[:1] * (3 - len(d))


def _fp32_rows_descriptor(a3: Tensor, rows: int, K: int, bm: int, bk: int) -> TmaDesc:
    """TMA descriptor of FP32 A (Z, M, K) seen as (rows = Z*M, K), with [bm, bk] blocks (:func:`_tma_rows`)."""
    return TmaDesc(a3, (rows, K), (a3.stride(1), 1), (bm, bk), _smem_layout(bm, bk, False))


@functools.cache
def _direct(kernel) -> DirectKernel:
    """The direct launcher of a Gluon kernel (one per kernel; its descriptors given as TmaDesc)."""
    return DirectKernel(kernel, descriptors=True)


#: the arguments after the descriptors, common to the Gluon kernels, with their types for offline compiles
_GLUON_TAIL_ARGS = [("bias_ptr", "*fp32"), ("c_ptr", "*fp32"), ("flag_ptr", "*i8"), ("M", "i32"), ("N", "i32"),
                    ("K", "i32"), ("stride_cz", "i32"), ("stride_cm", "i32")]


def _desc_type(fmt: str, rows: int, cols: int) -> str:
    """Signature type of a TMA descriptor of ``fmt`` ("fp32" or "bf16") with [rows, cols] blocks."""
    return f"tensordesc<{fmt}[{rows}, {cols}],{_smem_layout(rows, cols, fmt == 'bf16')!r}>"


def _gluon_compile(kernel, descriptors: list[tuple[str, str]], constexprs: dict, arch: int,
                   c_desc: tuple[str, str] | None = None):
    """Compile a Gluon GEMM kernel without a GPU for ``sm_<arch>``, with the signature of a launch on
    contiguous operands: the descriptors' (name, type), then :data:`_GLUON_TAIL_ARGS` (with ``c_desc``, the
    warp-specialised kernels' descriptor of C, after the flags), the pointers, N, K and the output's strides
    divisible by 16, the output's column stride 1."""
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.experimental.gluon._runtime import GluonASTSource  # noqa: PLC0415

    args = descriptors + _GLUON_TAIL_ARGS[:3] + ([c_desc] if c_desc else []) + _GLUON_TAIL_ARGS[3:]
    names = [n for n, _ in args]
    constexprs = dict(stride_cn=1, **constexprs)
    signature = dict(args) | dict.fromkeys(constexprs, "constexpr")
    divisible = ("bias_ptr", "c_ptr", "N", "K", "stride_cz", "stride_cm")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    src = GluonASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": constexprs["num_warps"]})


def _launch_wgmma(spec: MethodSpec, cfg: KernelConfig, ap: tuple[Tensor, ...], bp: tuple[Tensor, ...],
                  bias: Tensor | None, out3: Tensor, M: int, N: int, K: int, split_a: bool = False, *,
                  flags: Tensor | None = None, range_check: bool | None = None) -> None:
    """Launch the Gluon kernel on B's pieces (N, K), contiguous, and either A's pieces (Z*M, K), contiguous,
    or (``split_a``) FP32 A itself, (Z, M, K) with rows readable by TMA (:func:`_tma_rows`)."""
    bf16 = spec.piece_format == "bf16"
    Z = out3.shape[0]
    if split_a:  # FP32 tiles of A, all Z*M rows
        ad = [_fp32_rows_descriptor(ap[0], Z * M, K, cfg.bm, cfg.bk)] * 3
    else:
        ad = _piece_descriptors(ap, cfg.bm, cfg.bk, bf16)
    bd = _piece_descriptors(bp, cfg.bn, cfg.bk, bf16)
    grid = (cdiv(M, cfg.bm) * cdiv(N, cfg.bn), Z)
    flags, check = _flags_arg(flags, out3, range_check)
    has_bias = bias is not None
    constexprs = _constexprs(("g", spec.name, cfg, has_bias, split_a, check), lambda: dict(
        NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, TF32=not bf16,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=cfg.num_stages, SPLIT_A=split_a,
        RANGE_CHECK=check, num_warps=cfg.num_warps))
    _direct(_wgmma_module()._emu_mm_wgmma_kernel)(
        grid, (*ad, *bd, bias if has_bias else out3, out3, flags, M, N, K, *out3.stride()), constexprs)


#: shared memory per block of the H100/H200 (227 KB): the warp-specialised kernel's rings are sized to it
_SMEM_PER_BLOCK = 232448
#: the warp-specialised kernel's splitter partition: warps, and registers per thread (setmaxnreg). With 4
#: splitter warps and the 1 loader warp (padded to two warpgroups) the 8 MMA warps get 256 - (24 + 72) / 2 =
#: 208 registers, the Gluon wgmma kernel's own count.
_WS_SPLIT_WARPS = 4
_WS_SPLIT_REGS = 72
#: vectors of 4 FP32 values each splitter thread splits per step (16 values in flight)
_WS_SPLIT_VECS = 4


def _ws_stages(spec: MethodSpec, cfg: KernelConfig) -> tuple[int, int, int]:
    """Ring depths of the warp-specialised kernel for a configuration: (B pieces, A's FP32 tiles, A's pieces).

    B's ring has ``num_stages`` slots (as the ``pg`` kernel's) where it fits. A's pieces get three slots where
    shared memory allows: with two, the splitter can run only one K-tile ahead of the MMAs, and on the H200
    TF32x3 128x128x32 ran 1.11-1.20x faster with three
    (``benchmarks/results/h200/gemm_variants/gw_warp_specialized.csv``, ``gw:p3`` against ``gw``). A's FP32
    tiles get two slots (three were not faster), else one. E.g. TF32x3 128x128x32 s3: 3 x 32 KB (B) + 3 x 32
    KB (A's pieces) + 2 x 16 KB (A) = 224 KB; BF16x3 128x128x64 s3: 96 + 2 x 32 + 2 x 32 = 224 KB; BF16x6
    128x64x64 s3 -> B 2: 48 + 2 x 48 + 2 x 32 = 208 KB. Raises ValueError where no depth of at least (2, 1, 2)
    fits. With ``e`` (TMA-store epilogue) the staging tile of C comes off the budget first.
    """
    elem = 2 if spec.piece_format == "bf16" else 4
    npc = spec.n_pieces
    raw = cfg.bm * cfg.bk * 4
    smem = _SMEM_PER_BLOCK - _c_staging_bytes(cfg)
    a_pieces = npc * cfg.bm * cfg.bk * elem
    b_pieces = npc * cfg.bn * cfg.bk * elem
    barriers = 1024  # mbarriers and alignment, generously
    for stages in range(max(2, cfg.num_stages), 1, -1):
        for a_stages, p_stages in ((2, 3), (2, 2), (1, 2)):
            if stages * b_pieces + p_stages * a_pieces + a_stages * raw + barriers <= smem:
                return stages, a_stages, p_stages
    raise ValueError(f"{spec.name} {cfg}: the warp-specialised kernel's rings do not fit {_SMEM_PER_BLOCK} bytes "
                     "of shared memory")


#: the TMA-store epilogue's staging tile: C's (bm, bn) tile in this many column parts, stored in turn through one
#: buffer (2: half the shared memory, so deeper rings, at the cost of a wait for the first half's store to read
#: the buffer)
_C_STAGING_PARTS = 2


def _c_staging_cols(cfg: KernelConfig) -> int:
    """Columns of the TMA-store epilogue's staging tile (``e``)."""
    return cfg.bn // _C_STAGING_PARTS if cfg.bn >= 64 else cfg.bn


def _c_staging_bytes(cfg: KernelConfig) -> int:
    """Shared memory of the TMA-store epilogue's staging tile of C (``e``): (bm, :func:`_c_staging_cols`) FP32."""
    return cfg.bm * _c_staging_cols(cfg) * 4 if cfg.tma_store else 0


def _tma_store_ok(out3: Tensor, M: int, cfg: KernelConfig) -> bool:
    """Whether TMA can store C ``out3`` (Z, M, N) as (Z*M, N) rows: the rows A's TMA loads need
    (:func:`_tma_rows`), and in a batch whole tiles per entry (TMA clips only at the last row, so a ragged tile
    would spill into the next entry)."""
    return _tma_rows(out3) and (out3.shape[0] == 1 or M % cfg.bm == 0)


def _c_descriptor(cfg: KernelConfig, out3: Tensor, M: int, N: int, placeholder):
    """(TMA_STORE, c_desc) of a warp-specialised launch: C's descriptor, (Z*M, N) rows in blocks of the staging
    tile (:func:`_c_staging_cols`), where ``cfg`` asks for the TMA-store epilogue and C suits it; else False and
    ``placeholder`` (never read)."""
    if not (cfg.tma_store and _tma_store_ok(out3, M, cfg)):
        return False, placeholder
    Z = out3.shape[0]
    cols = _c_staging_cols(cfg)
    desc = TmaDesc(out3, (Z * M, N), (out3.stride(1), 1), (cfg.bm, cols), _smem_layout(cfg.bm, cols, False))
    return True, desc


def _launch_wgmma_ws(spec: MethodSpec, cfg: KernelConfig, a3: Tensor, bp: tuple[Tensor, ...],
                     bias: Tensor | None, out3: Tensor, M: int, N: int, K: int, *,
                     stages: tuple[int, int, int] | None = None, split_warps: int | None = None,
                     split_regs: int | None = None, split_vecs: int | None = None,
                     flags: Tensor | None = None, range_check: bool | None = None) -> None:
    """Launch the warp-specialised Gluon kernel on FP32 ``a3`` (Z, M, K), rows readable by TMA
    (:func:`_tma_rows`), and B's pieces (N, K), contiguous. ``stages`` (B, A, A's pieces; default
    :func:`_ws_stages`), ``split_warps``, ``split_regs`` and ``split_vecs`` override the tunables (benchmarks);
    ``flags`` and ``range_check`` as :func:`_flags_arg`."""
    bf16 = spec.piece_format == "bf16"
    Z = out3.shape[0]
    bd = _piece_descriptors(bp, cfg.bn, cfg.bk, bf16)
    tma_store, cd = _c_descriptor(cfg, out3, M, N, bd[0])
    ad = _fp32_rows_descriptor(a3, Z * M, K, cfg.bm, cfg.bk)
    tiles = cdiv(M, cfg.bm) * cdiv(N, cfg.bn)
    # persistent ("t"): about one program per SM, each looping over tiles of C (the same kernel: with one
    # program per tile each loops once)
    grid = (min(tiles, max(1, _num_sms(a3.device) // Z)) if cfg.persistent else tiles, Z)
    flags, check = _flags_arg(flags, out3, range_check)
    has_bias = bias is not None

    def make() -> dict:
        st, a_st, p_st = stages or _ws_stages(spec, replace(cfg, tma_store=tma_store))
        if min(st, p_st) < 2 or a_st < 1:
            raise ValueError(f"the warp-specialised kernel needs 2 or more B and piece slots, got {(st, a_st, p_st)}")
        return dict(
            NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, TF32=not bf16,
            BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=st, A_STAGES=a_st, P_STAGES=p_st,
            SPLIT_WARPS=split_warps or _WS_SPLIT_WARPS, SPLIT_REGS=split_regs or _WS_SPLIT_REGS,
            SPLIT_VECS=split_vecs or _WS_SPLIT_VECS, RANGE_CHECK=check, TMA_STORE=tma_store, num_warps=cfg.num_warps)

    key = ("gw", spec.name, cfg, has_bias, check, tma_store, stages, split_warps, split_regs, split_vecs)
    _direct(_wgmma_ws_module()._emu_mm_wgmma_ws_kernel)(
        grid, (ad, *bd, bias if has_bias else out3, out3, flags, cd, M, N, K, *out3.stride()),
        _constexprs(key, make))


def _pieces_ws_stages(spec: MethodSpec, cfg: KernelConfig) -> int:
    """Ring depth of the ``pgw`` kernel: ``num_stages`` slots of A's and B's pieces where they fit, else fewer
    (at least 2; ValueError otherwise); with ``e`` after the staging tile of C."""
    elem = 2 if spec.piece_format == "bf16" else 4
    per_stage = spec.n_pieces * (cfg.bm + cfg.bn) * cfg.bk * elem
    for stages in range(max(2, cfg.num_stages), 1, -1):
        if stages * per_stage + 1024 <= _SMEM_PER_BLOCK - _c_staging_bytes(cfg):
            return stages
    raise ValueError(f"{spec.name} {cfg}: two stages of pieces do not fit {_SMEM_PER_BLOCK} bytes of shared memory")


def _launch_wgmma_pieces_ws(spec: MethodSpec, cfg: KernelConfig, ap: tuple[Tensor, ...], bp: tuple[Tensor, ...],
                            bias: Tensor | None, out3: Tensor, M: int, N: int, K: int, *,
                            flags: Tensor | None = None, range_check: bool | None = None) -> None:
    """Launch the warp-specialised Gluon kernel on A's pieces (Z*M, K) and B's pieces (N, K), contiguous
    (``pgw``; persistent with ``t``)."""
    bf16 = spec.piece_format == "bf16"
    Z = out3.shape[0]
    ad = _piece_descriptors(ap, cfg.bm, cfg.bk, bf16)
    bd = _piece_descriptors(bp, cfg.bn, cfg.bk, bf16)
    tma_store, cd = _c_descriptor(cfg, out3, M, N, bd[0])
    tiles = cdiv(M, cfg.bm) * cdiv(N, cfg.bn)
    grid = (min(tiles, max(1, _num_sms(out3.device) // Z)) if cfg.persistent else tiles, Z)
    flags, check = _flags_arg(flags, out3, range_check)
    has_bias = bias is not None
    constexprs = _constexprs(("pgw", spec.name, cfg, has_bias, check, tma_store), lambda: dict(
        NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m,
        STAGES=_pieces_ws_stages(spec, replace(cfg, tma_store=tma_store)), RANGE_CHECK=check,
        TMA_STORE=tma_store, num_warps=cfg.num_warps))
    _direct(_wgmma_ws_module()._emu_mm_wgmma_pieces_ws_kernel)(
        grid, (*ad, *bd, bias if has_bias else out3, out3, flags, cd, M, N, K, *out3.stride()), constexprs)


def _piece_desc_args(spec: MethodSpec, cfg: KernelConfig, fp32_a: bool = False) -> list[tuple[str, str]]:
    """(name, type) of the three A and three B descriptors of the ``g`` and ``pgw`` kernels (``fp32_a``: A's
    FP32 tiles, split in the kernel)."""
    piece = "bf16" if spec.piece_format == "bf16" else "fp32"
    a_ty = _desc_type("fp32" if fp32_a else piece, cfg.bm, cfg.bk)
    b_ty = _desc_type(piece, cfg.bn, cfg.bk)
    return [(f"a{i}_desc", a_ty) for i in range(3)] + [(f"b{i}_desc", b_ty) for i in range(3)]


def _fp32_a_desc_args(spec: MethodSpec, cfg: KernelConfig) -> list[tuple[str, str]]:
    """(name, type) of the descriptors of the kernels on FP32 A (``gw``, ``gr``): A's FP32 tiles and B's three
    pieces."""
    b_ty = _desc_type("bf16" if spec.piece_format == "bf16" else "fp32", cfg.bn, cfg.bk)
    return [("a_desc", _desc_type("fp32", cfg.bm, cfg.bk))] + [(f"b{i}_desc", b_ty) for i in range(3)]


def _c_desc_arg(spec: MethodSpec, cfg: KernelConfig) -> tuple[str, str]:
    """(name, type) of the warp-specialised kernels' C descriptor: FP32 (bm, bn) blocks with ``e``, else the
    placeholder a launch passes (B's first descriptor)."""
    if cfg.tma_store:
        return "c_desc", _desc_type("fp32", cfg.bm, _c_staging_cols(cfg))
    return "c_desc", _desc_type("bf16" if spec.piece_format == "bf16" else "fp32", cfg.bn, cfg.bk)


def wgmma_pieces_ws_compile(method: str | MethodSpec, config: KernelConfig | str, *, has_bias: bool = False,
                            arch: int = 90, range_check: bool = True):
    """Compile (without a GPU) the ``pgw`` kernel for ``sm_<arch>``, as :func:`wgmma_ws_compile`."""
    spec = get_method(method)
    cfg = KernelConfig.parse(config) if isinstance(config, str) else config
    constexprs = dict(NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, BM=cfg.bm, BN=cfg.bn, BK=cfg.bk,
                      GROUP_M=cfg.group_m, STAGES=_pieces_ws_stages(spec, cfg), RANGE_CHECK=range_check,
                      TMA_STORE=cfg.tma_store, num_warps=cfg.num_warps)
    return _gluon_compile(_wgmma_ws_module()._emu_mm_wgmma_pieces_ws_kernel, _piece_desc_args(spec, cfg),
                          constexprs, arch, c_desc=_c_desc_arg(spec, cfg))


def wgmma_compile(method: str | MethodSpec, config: KernelConfig | str, *, has_bias: bool = False,
                  split_a: bool = False, arch: int = 90, range_check: bool = True):
    """Compile (without a GPU) the Gluon kernel a ``g`` configuration launches, for ``sm_<arch>``.

    The signature is that of a launch on contiguous operands (the output's column stride 1). Returns
    Triton's compiled kernel (``.asm["ptx"]``, ``.asm["cubin"]``): tests read its ``wgmma`` waits from the PTX.
    ``range_check=False``: the kernel without the range check (the diagnostic ``range_fixup=False`` configuration).
    """
    spec = get_method(method)
    cfg = KernelConfig.parse(config) if isinstance(config, str) else config
    constexprs = dict(NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, TF32=spec.piece_format != "bf16",
                      BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=cfg.num_stages,
                      SPLIT_A=split_a, RANGE_CHECK=range_check, num_warps=cfg.num_warps)
    return _gluon_compile(_wgmma_module()._emu_mm_wgmma_kernel, _piece_desc_args(spec, cfg, split_a), constexprs,
                          arch)


def wgmma_ws_compile(method: str | MethodSpec, config: KernelConfig | str, *, has_bias: bool = False, arch: int = 90,
                     stages: tuple[int, int, int] | None = None, split_warps: int | None = None,
                     split_regs: int | None = None, split_vecs: int | None = None, range_check: bool = True):
    """Compile (without a GPU) the warp-specialised Gluon kernel a ``gw`` configuration launches, for
    ``sm_<arch>``, as :func:`wgmma_compile` (contiguous operands, the output's column stride 1; ``stages``,
    ``split_warps``, ``split_regs``, ``split_vecs`` as :func:`_launch_wgmma_ws`). Returns Triton's compiled kernel."""
    spec = get_method(method)
    cfg = KernelConfig.parse(config) if isinstance(config, str) else config
    bf16 = spec.piece_format == "bf16"
    st, a_st, p_st = stages or _ws_stages(spec, cfg)
    constexprs = dict(NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, TF32=not bf16,
                      BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=st, A_STAGES=a_st, P_STAGES=p_st,
                      SPLIT_WARPS=split_warps or _WS_SPLIT_WARPS, SPLIT_REGS=split_regs or _WS_SPLIT_REGS,
                      SPLIT_VECS=split_vecs or _WS_SPLIT_VECS, RANGE_CHECK=range_check,
                      TMA_STORE=cfg.tma_store, num_warps=cfg.num_warps)
    return _gluon_compile(_wgmma_ws_module()._emu_mm_wgmma_ws_kernel, _fp32_a_desc_args(spec, cfg), constexprs,
                          arch, c_desc=_c_desc_arg(spec, cfg))


def _launch_wgmma_rega(spec: MethodSpec, cfg: KernelConfig, a3: Tensor, bp: tuple[Tensor, ...],
                       bias: Tensor | None, out3: Tensor, M: int, N: int, K: int, *,
                       flags: Tensor | None = None, range_check: bool | None = None) -> None:
    """Launch the register-A Gluon kernel (``_kernels/_emu_mm_wgmma_rega.py``) on FP32 ``a3`` (Z, M, K), rows
    readable by TMA (:func:`_tma_rows`), and B's pieces (N, K), contiguous; ``flags`` and ``range_check`` as
    :func:`_flags_arg`. Same bits as the ``g`` kernel of the same tile."""
    bf16 = spec.piece_format == "bf16"
    Z = out3.shape[0]
    ad = _fp32_rows_descriptor(a3, Z * M, K, cfg.bm, cfg.bk)
    bd = _piece_descriptors(bp, cfg.bn, cfg.bk, bf16)
    grid = (cdiv(M, cfg.bm) * cdiv(N, cfg.bn), Z)
    flags, check = _flags_arg(flags, out3, range_check)
    has_bias = bias is not None
    constexprs = _constexprs(("gr", spec.name, cfg, has_bias, check), lambda: dict(
        NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, TF32=not bf16,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=cfg.num_stages, RANGE_CHECK=check,
        num_warps=cfg.num_warps))
    _direct(_wgmma_rega_module()._emu_mm_wgmma_rega_kernel)(
        grid, (ad, *bd, bias if has_bias else out3, out3, flags, M, N, K, *out3.stride()), constexprs)


def wgmma_rega_compile(method: str | MethodSpec, config: KernelConfig | str, *, has_bias: bool = False,
                       arch: int = 90, range_check: bool = True):
    """Compile (without a GPU) the register-A Gluon kernel for ``sm_<arch>``, as :func:`wgmma_compile`."""
    spec = get_method(method)
    cfg = KernelConfig.parse(config) if isinstance(config, str) else config
    constexprs = dict(NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, TF32=spec.piece_format != "bf16",
                      BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=cfg.num_stages,
                      RANGE_CHECK=range_check, num_warps=cfg.num_warps)
    return _gluon_compile(_wgmma_rega_module()._emu_mm_wgmma_rega_kernel, _fp32_a_desc_args(spec, cfg), constexprs,
                          arch)
