"""FAST emulated GEMM launchers (Triton) and their REFERENCE twins, side by side.

* :func:`split_t` / :func:`split_t_reference`: FP32 ``b`` (R, C) -> pieces (C, R), contiguous (the
  K-major layout the GEMM kernel reads for its B operand); bit for bit :func:`~tcemu.emulation.split.split`.
* :func:`emu_mm` / :func:`emu_mm_reference`: ``a @ b + bias`` from ``a`` (Z, M, K) and the pieces of ``b``
  given transposed (``bt`` pieces (Zb, N, K), Zb in {1, Z}).

The launchers check, allocate, pick a configuration and launch; the kernels are in ``_kernels/``.

Configuration: a static table per method and shape bucket (measured on an H200, docs/kernels.md). With
``tcemu.emulation.gemm.AUTOTUNE = True`` (env ``TCEMU_GEMM_AUTOTUNE=1``) the first product of each
(method, M bucket, N, K) times the bucket's few candidates on the real operands, keeps only candidates
whose result agrees with the first one, and caches the fastest (compile time is user time: off by default).

Split: A is split on the integer bit patterns (exact on every device and under ``TRITON_INTERPRET=1``).
``TCEMU_HW_SPLIT=1`` opts in to BF16 pieces by the GPU's conversion instruction, used only where
:func:`hw_split_exact` finds the same bits (it did not compile under Triton 3.6; docs/kernels.md).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from dataclasses import dataclass, replace

import torch
import triton
from torch import Tensor

from ..methods import MethodSpec, get_method
from ..reference import mm_reference
from ..split import split
from ._kernels._emu_mm import _emu_mm_kernel
from ._kernels._split import FMT_BF16, FMT_TF32, _split_t_kernel

__all__ = [
    "KERNEL_METHODS", "KernelConfig", "pick_config", "config_candidates", "tuned_configs", "piece_dtype",
    "hw_split_exact", "split_t", "split_t_reference", "emu_mm", "emu_mm_compile", "emu_mm_reference",
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


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _check_kernel_method(spec: MethodSpec) -> None:
    if spec.name not in KERNEL_METHODS:
        raise ValueError(f"method {spec.name} has no Triton kernel (have: {', '.join(KERNEL_METHODS)})")


def _bits(t: Tensor) -> Tensor:
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)


# =====================================================================================================
# split: FAST
# =====================================================================================================


#: CUDA's limit on a grid's y and z dimensions: longer batches and split column counts run in slices
MAX_GRID_YZ = 65535


def split_t(b: Tensor, method: str | MethodSpec, *, hw: bool | None = None) -> tuple[Tensor, ...]:
    """Pieces of FP32 ``b`` (R, C), each returned transposed and contiguous, (C, R).

    ``split_t(w.T, m)`` gives an nn.Linear weight's pieces in its own (N, K) layout, and
    ``split_t(w, m)`` the pieces of ``w.T`` (K, N) for the input gradient ``dy @ w``.
    Pieces are float32 (TF32 values) or bfloat16 (:func:`piece_dtype`). ``hw``: split with the GPU's
    conversion instructions (default: where :func:`hw_split_exact`).
    """
    spec = get_method(method)
    _check_kernel_method(spec)
    if b.dtype != torch.float32 or b.dim() != 2:
        raise TypeError(f"split_t needs a 2-D float32 tensor, got {b.dtype} of shape {tuple(b.shape)}")
    R, C = b.shape
    pieces = tuple(torch.empty((C, R), dtype=piece_dtype(spec), device=b.device) for _ in range(spec.n_pieces))
    if b.numel() == 0:
        return pieces
    if hw is None:
        hw = hw_split_exact(b.device)
    p = pieces + (pieces[0],) * (3 - len(pieces))
    BR, BC = 64, 64
    step = MAX_GRID_YZ * BC  # columns per launch (grid y); each piece's rows c0:c1 are contiguous
    for c0 in range(0, C, step):
        c1 = min(C, c0 + step)
        q = tuple(t[c0:c1] for t in p)
        _split_t_kernel[(triton.cdiv(R, BR), triton.cdiv(c1 - c0, BC))](
            b[:, c0:c1], q[0], q[1], q[2], R, c1 - c0, b.stride(0), b.stride(1),
            FMT=_fmt(spec), NP=spec.n_pieces, SHIFT=spec.shift, BR=BR, BC=BC, HW=bool(hw), num_warps=4,
        )
    return pieces


def _hw_check_input() -> Tensor:
    """Every FP32 class the split must get right: random bit patterns (all exponents, subnormals,
    NaN payloads), ties of both roundings, the saturation and keep-nonzero edges."""
    gen = torch.Generator().manual_seed(12345)
    rnd = torch.randint(-(2**31), 2**31 - 1, (192, 256), generator=gen, dtype=torch.int64).to(torch.int32)
    edges = []
    for base in (0x3F800000, 0x00000000, 0x00800000, 0x7F7F0000, 0x7F7FE000, 0x00010000, 0x00002000, 0x33000000):
        for d in (0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x18000):
            edges += [base + d, base - d]
    e = torch.tensor([v for v in edges if 0 <= v <= 0x7FFFFFFF], dtype=torch.int64)
    e = torch.cat([e, e | 0x80000000]).to(torch.int64)
    e = torch.where(e >= 2**31, e - 2**32, e).to(torch.int32)
    flat = rnd.view(-1)
    flat[: e.numel()] = e
    x = rnd.view(torch.float32).clone()
    x.view(-1)[-4:] = torch.tensor([float("inf"), float("-inf"), float("nan"), torch.finfo(torch.float32).max])
    return x


@functools.cache
def _hw_split_exact(device: torch.device) -> bool:
    x = _hw_check_input().to(device)
    for method in ("bf16x6",):  # the hardware path exists for BF16 pieces (three pieces)
        try:
            got = split_t(x, method, hw=True)
        except Exception as exc:  # noqa: BLE001 - e.g. a Triton that cannot compile it: use the integer split
            log.warning("tcemu: the hardware-conversion split failed to run on %s (%s); using the integer split",
                        device, exc)
            return False
        want = split_t_reference(x, method)
        for g, w in zip(got, want):
            nan = torch.isnan(w.float())
            if not torch.equal(torch.isnan(g.float()), nan) or not torch.equal(_bits(g)[~nan], _bits(w)[~nan]):
                log.warning("tcemu: the hardware-conversion split differs from split() on %s; using the "
                            "integer split", device)
                return False
    return True


def hw_split_exact(device: torch.device | str) -> bool:
    """Whether the GPU's conversion instructions split exactly as :func:`~tcemu.emulation.split.split`.

    Opt-in (env ``TCEMU_HW_SPLIT=1``): the BF16 path did not compile under Triton 3.6 on the H200, so by
    default the integer split is used. When enabled, checked once per device on a matrix of random bit
    patterns and edge cases (NaN payloads aside) before any kernel uses it; False on the CPU interpreter
    and during CUDA graph capture before the first check.
    """
    device = torch.device(device)
    if device.type != "cuda" or _interpreting() or os.environ.get("TCEMU_HW_SPLIT", "0") != "1":
        return False
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if torch.cuda.is_current_stream_capturing() and _hw_split_exact.cache_info().currsize == 0:
        return False
    return _hw_split_exact(device)


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
# GEMM: configurations
# =====================================================================================================


@dataclass(frozen=True)
class KernelConfig:
    """Tiling of the GEMM kernel.

    Attributes:
        bm, bn, bk: tile of C and K-tile.
        num_warps, num_stages: Triton launch settings (warps per program, software-pipeline depth).
        mode: correction levels per K-tile (0), on running Tensor Core accumulators (1), or level 2
            running and level 1 per tile (4); see ``_kernels/_emu_mm.py``.
        group_m: programs grouped along M so that neighbouring programs share B tiles in L2.
        fast_split: DIAGNOSTIC, not the spec: a cheap truncating/hardware split, to measure the split's cost.
        presplit: split A into pieces in global memory first (one memory-bound pass), so that the GEMM
            loop reads both operands' pieces from shared memory and holds no split work.
        l0_first: in mode 1, issue the L0 tile's MMA before the running correction levels'.
        persistent: about one program per SM loops over the tiles of C, with the tile loop and the K
            loop flattened into one, so that the next tile's loads overlap this tile's epilogue. The
            flattened loop holds one more pipeline buffer: the 128x128 presplit tiles fit the H200's shared
            memory at 2 stages, not 3. Opt-in only: on the H200 it ran 0.63-1.05x the default kernels.
            With ``gw`` (``tgw``): the warp-specialised kernel's own tile loop, whose rings carry over from
            tile to tile (no extra buffer): TF32x3's default on the short-K edge products (1.04-1.10x ``gw``).
        wgmma: the Gluon kernel of ``_kernels/_emu_mm_wgmma.py`` (Hopper only; mode 1, same bits): TMA
            loads and explicit ``wgmma`` waits, so that the L0 tile's FP32 add overlaps the correction MMAs.
            With ``presplit`` it reads A's pieces; without, it reads FP32 A and its warps split each tile
            into shared memory (where A's rows suit TMA; else A is split beforehand). Where it cannot run
            (not sm_90, batched B, K not 16-byte aligned, bf16x9) the same configuration runs the Triton
            kernel.
        warp_specialized: with ``wgmma`` and without ``presplit`` (suffix ``gw``): the warp-specialised Gluon
            kernel of ``_kernels/_emu_mm_wgmma_ws.py`` (same bits): a loader warp brings A's FP32 tiles and B's
            pieces by TMA, splitter warps split A's tiles into shared memory, and the MMA warps (the ``wgmma``
            kernel's loop) run on the pieces while the next tile is split. Where A's rows do not suit TMA, A
            is split beforehand and the ``pg`` kernel runs. With ``presplit`` (``pgw``, ``ptgw``): no splitter, A
            split beforehand; a loader warp brings A's and B's pieces by TMA into one ring, and the MMA warps run
            on them (same bits as ``pg``); with ``persistent`` the loader runs on into the next tile while the MMA
            warps combine and store this one.
    """

    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int
    mode: int = 0
    group_m: int = 8
    fast_split: bool = False
    presplit: bool = False
    l0_first: bool = False
    persistent: bool = False
    wgmma: bool = False
    warp_specialized: bool = False

    def __post_init__(self) -> None:
        if self.warp_specialized and not self.wgmma:
            raise ValueError(f"kernel config {self}: 'w' (warp-specialised) is a variant of the Gluon wgmma kernel "
                             "and needs 'g' (e.g. 128x128x32w8s3m1gw)")

    def __str__(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk}w{self.num_warps}s{self.num_stages}m{self.mode}"
                + ("f" if self.fast_split else "") + ("p" if self.presplit else "")
                + ("o" if self.l0_first else "") + ("t" if self.persistent else "") + ("g" if self.wgmma else "")
                + ("w" if self.warp_specialized else ""))

    @classmethod
    def parse(cls, text: str) -> KernelConfig:
        """Inverse of ``str()``: ``"128x128x32w8s3m0"``; suffixes ``f`` fast (diagnostic) split,
        ``p`` A split beforehand, ``o`` L0 issued first, ``t`` persistent tile loop, ``g`` Gluon wgmma kernel,
        ``w`` (after ``g``) its warp-specialised variant. Raises ValueError otherwise."""
        import re  # noqa: PLC0415

        m = re.fullmatch(r"(\d+)x(\d+)x(\d+)w(\d+)s(\d+)m(\d+)(f?)(p?)(o?)(t?)(g?)(w?)", text.strip())
        if not m:
            raise ValueError(f"bad kernel config {text!r}; expected like 128x128x32w8s3m0 "
                             "(suffixes f, p, o, t, g, w)")
        g = m.groups()
        return cls(*map(int, g[:6]), fast_split=g[6] == "f", presplit=g[7] == "p", l0_first=g[8] == "o",
                   persistent=g[9] == "t", wgmma=g[10] == "g", warp_specialized=g[11] == "w")


_C = KernelConfig.parse
# Shape buckets -> candidate configurations, per method. The first of each bucket is used without
# autotuning: it is the fastest candidate on the bucket's shapes in the H200 runs of docs/kernels.md
# (benchmarks/results/h200/gemm/*.csv; every candidate's time is in all_shapes.log and the sweep logs).
#   "wide":   M >= 1024, N >= 640. A split beforehand ("p") wins: its memory pass costs M*K, and the
#             in-kernel split it saves costs M*K*N/BN ALU work interleaved with the MMAs. On Hopper the
#             Gluon kernel ("g", same bits) runs the presplit products with explicit wgmma waits (TF32x3
#             and BF16x3 +4-15 %; for BF16x6 it ties with the Triton kernel).
#   "mid":    M >= 1024, 384 <= N < 640: as "wide" (the Gluon kernel beat the in-kernel split at N = 512);
#             for TF32x3 the warp-specialised Gluon kernel ("gw": A split by splitter warps while the MMAs
#             run, no split pass) wins: 1.68x SGEMM at (K, N) = (512, 512) against 1.56-1.59x for "pg".
#   "narrow": M >= 1024, N < 384: the in-kernel split wins (few column tiles, so each A tile is split a few
#             times only): for TF32x3 the warp-specialised Gluon kernel, 1.16-1.25x the Triton kernel's
#             in-register split at N = 256 (benchmarks/results/h200/gemm_variants/gw_warp_specialized.csv);
#             for BF16x9 the Triton kernel. For BF16x3 and BF16x6 "gw" is bound by the split's ALU work
#             (0.45-0.9x "pg"), so it is not a candidate.
#   TF32x3 "mid" and "narrow", and "wide_shortk" (N <= 1024, K <= 256): the warp-specialised kernel made
#             persistent ("tgw": about one program per SM loops over the tiles, so that the loader and the
#             splitter run into the next tile while the MMA warps store this one): 1.04-1.10x "gw" and the best
#             of "gw"/"pg" on the seven PET-S edge products with N < 1024, 1.00-1.03x "pg" at N = 768 and
#             1024 (K = 256), two rounds (benchmarks/results/h200/gemm/sweep_persistent_ws_tgw.csv).
#   Session 11: A split beforehand, then the warp-specialised kernel without a splitter, persistent ("ptgw":
#             a loader warp brings A's and B's pieces by TMA and runs into the next tile while the MMA warps
#             store this one): BF16x6 1.09-1.53x SGEMM on five PET-S edge products and 1.98-2.02x at 8192^3
#             (default before: 0.93-1.28x and 1.77-1.79x), BF16x3 1.62-2.63x and 4.21-4.26x (1.40-2.41x,
#             3.87-4.00x), TF32x3 2.32-2.34x at 8192^3 (pg 2.15-2.19x); two rounds
#             (benchmarks/results/h200/gemm_variants/ptgw_presplit_warp_specialized.csv). First for BF16x3/x6
#             (large M) and TF32x3 "wide".
#   "small_longk" / "small": M < 1024 (node layers of small systems; usually the SGEMM fallback), K >= 2048 or
#             not. With few row tiles the grid is small and each program loops over all of K, so a split
#             pass spread over the whole GPU wins for long K (and for BF16x6/x9 at K = 1024 too).
# Where the Gluon kernel cannot run (not sm_90, batched B, K not 16-byte aligned) or fails, a "g"
# configuration runs the Triton kernel with the same tiles (A split beforehand or not, as it says).
_CANDIDATES: dict[str, dict[str, list[KernelConfig]]] = {
    "tf32x3": {"wide": [_C("128x128x32w8s3m1ptgw"), _C("128x128x32w8s3m1pg"), _C("128x128x32w8s3m1p"),
                        _C("128x128x32w8s3m1")],
               "wide_shortk": [_C("128x128x32w8s3m1tgw"), _C("128x128x32w8s3m1ptgw"), _C("128x128x32w8s3m1pg"),
                               _C("128x128x32w8s3m1gw")],
               "mid": [_C("128x128x32w8s3m1tgw"), _C("128x128x32w8s3m1gw"), _C("128x128x32w8s3m1ptgw")],
               "narrow": [_C("128x128x32w8s3m1tgw"), _C("128x128x32w8s3m1gw"), _C("128x128x32w8s3m1"),
                          _C("128x128x32w8s3m1ptgw")],
               "small_longk": [_C("128x64x32w8s4m1po"), _C("128x64x32w8s4m1")],
               "small": [_C("128x64x32w8s4m1"), _C("128x64x32w8s4m1po"), _C("64x128x32w4s3m0")]},
    # BF16x3 and BF16x6: A split beforehand, then the persistent warp-specialised kernel ("ptgw", session 11);
    # BF16x3's narrow products (N < 384: A's tiles split at most three times) the persistent warp-specialised
    # kernel with the checked split in its splitter warps ("tgw", session 12: 1.03-1.13x "ptgw" at N = 256 on
    # the H200, 0.80-0.92x at N = 512-1024; BF16x6 0.57-0.89x everywhere,
    # benchmarks/results/h200/gemm_variants/bf16_checked_split.csv)
    "bf16x3": {"wide": [_C("128x128x64w8s3m1ptgw"), _C("128x128x64w8s3m1pg"), _C("128x128x64w8s3m1p")],
               "mid": [_C("128x128x64w8s3m1ptgw"), _C("128x128x64w8s3m1pg"), _C("128x128x64w8s3m1p"),
                       _C("128x128x64w8s3m1tgw")],
               "narrow": [_C("128x128x64w8s3m1tgw"), _C("128x128x64w8s3m1ptgw"), _C("128x128x64w8s3m1pg"),
                          _C("128x128x64w8s3m1")],
               "small_longk": [_C("128x64x64w8s3m1po"), _C("128x64x64w8s3m1")],
               "small": [_C("128x64x64w8s3m1"), _C("128x64x64w8s3m1po"), _C("64x128x64w4s2m0")]},
    "bf16x6": {"wide": [_C("128x64x64w8s3m1ptgw"), _C("128x64x64w8s3m1po"), _C("128x64x64w8s3m1pg")],
               "mid": [_C("128x64x64w8s3m1ptgw"), _C("128x64x64w8s3m1po"), _C("128x64x64w8s3m1pg")],
               "narrow": [_C("128x64x64w8s3m1ptgw"), _C("128x64x64w8s3m1po"), _C("128x64x64w8s3m1pg")],
               "small_longk": [_C("128x64x64w8s3m1po"), _C("128x64x64w8s3m1")],
               "small": [_C("128x64x64w8s3m1po"), _C("128x64x64w8s3m1"), _C("64x128x64w4s2m0")]},
    "bf16x9": {"wide": [_C("128x64x64w8s3m0p"), _C("64x128x64w4s2m0")],
               "mid": [_C("64x128x64w4s2m0"), _C("128x64x64w8s3m0p")],
               "narrow": [_C("64x128x64w4s2m0"), _C("128x64x64w8s3m0p")],
               "small_longk": [_C("128x64x64w8s3m0p"), _C("128x64x64w8s3m0")],
               "small": [_C("128x64x64w8s3m0p"), _C("128x64x64w8s3m0"), _C("64x128x64w4s2m0")]},
}
for _table in _CANDIDATES.values():  # short-K wide products: the persistent kernel where it pays, else as "wide"
    _table.setdefault("wide_shortk", _table["wide"])
# Small tiles for the CPU interpreter (TRITON_INTERPRET=1), where tile size is only run time.
_INTERPRET_CONFIG = KernelConfig(32, 32, 16, 4, 1, 0, 4)
_TUNED: dict[tuple, KernelConfig] = {}


@functools.cache
def _num_sms(device: torch.device) -> int:
    """Programs of a persistent launch: one per SM (the configurations use most of an SM's shared memory)."""
    if device.type != "cuda":
        return 4  # the CPU interpreter: a few programs, each looping over several tiles
    return torch.cuda.get_device_properties(device).multi_processor_count


#: "wide_shortk": wide products (N >= 640) up to this N and K, where TF32x3's persistent warp-specialised kernel
#: ("tgw") beat the Gluon kernel on A split beforehand ("pg") on the H200: 1.00-1.03x at (K, N) = (256, 1024) and
#: 1.01-1.03x at (256, 768), two rounds (benchmarks/results/h200/gemm/sweep_persistent_ws_tgw.csv); at
#: 8192^3 "pg" stays ahead (1.15x: "tgw" splits A once per column tile, the split pass once)
WIDE_SHORTK_MAX_N = 1024
WIDE_SHORTK_MAX_K = 256


def _bucket(M: int, N: int, K: int) -> str:
    if M >= 1024:
        if N >= 640:
            return "wide_shortk" if N <= WIDE_SHORTK_MAX_N and K <= WIDE_SHORTK_MAX_K else "wide"
        return "mid" if N >= 384 else "narrow"
    return "small_longk" if K >= 2048 else "small"


def config_candidates(spec: MethodSpec, M: int, N: int | None = None, K: int | None = None) -> list[KernelConfig]:
    """The candidate configurations for a method and an (M, N, K) product (first: the static choice);
    with N or K None, those of every bucket this M can fall in."""
    if N is not None and K is not None:
        return list(_CANDIDATES[spec.name][_bucket(M, N, K)])
    buckets = ("wide", "wide_shortk", "mid", "narrow") if M >= 1024 else ("small_longk", "small")
    return list(dict.fromkeys(c for b in buckets for c in _CANDIDATES[spec.name][b]))


def pick_config(spec: MethodSpec, M: int, N: int, K: int) -> KernelConfig:
    """The configuration used without autotuning; ``TCEMU_GEMM_CONFIG=128x128x32w8s3m0`` overrides it."""
    override = os.environ.get("TCEMU_GEMM_CONFIG")
    if override:
        return KernelConfig.parse(override)
    if _interpreting():
        return _INTERPRET_CONFIG
    tuned = _TUNED.get(_tune_key(spec, M, N, K))
    return tuned if tuned is not None else config_candidates(spec, M, N, K)[0]


def tuned_configs() -> dict[tuple, str]:
    """What autotuning chose so far: (method, M bucket, N, K, bias) -> configuration."""
    return {k: str(v) for k, v in _TUNED.items()}


def _tune_key(spec: MethodSpec, M: int, N: int, K: int, has_bias: bool = False) -> tuple:
    return (spec.name, _bucket(M, N, K), N, K)


def _autotune_enabled() -> bool:
    pkg = sys.modules.get(__package__)
    return bool(getattr(pkg, "AUTOTUNE", False)) and not _interpreting() and not os.environ.get("TCEMU_GEMM_CONFIG")


def _autotune(spec: MethodSpec, key: tuple, launch, out: Tensor) -> KernelConfig:
    """Time the bucket's candidates on the real operands; keep those that agree with the first."""
    cands = list(_CANDIDATES[spec.name][key[1]])
    ref = None
    best, best_t = None, float("inf")
    for cfg in cands:
        try:
            launch(cfg)
            res = out.clone()
        except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory on a smaller GPU
            log.info("tcemu autotune: %s %s failed: %s", spec.name, cfg, exc)
            continue
        if ref is None:
            ref = res
        else:  # same products, another tiling: results agree to rounding
            fin = torch.isfinite(ref)
            scale = ref[fin].abs().max().clamp_min(1e-30) if fin.any() else torch.tensor(1.0, device=ref.device)
            if not (torch.equal(fin, torch.isfinite(res)) and ((res[fin] - ref[fin]).abs().max() <= 1e-4 * scale)):
                log.warning("tcemu autotune: %s %s disagrees with %s; skipped", spec.name, cfg, cands[0])
                continue
        t = triton.testing.do_bench(lambda cfg=cfg: launch(cfg), warmup=3, rep=15)
        log.info("tcemu autotune candidate: %s %s %s %.4f ms", spec.name, key, cfg, t)
        if t < best_t:
            best, best_t = cfg, t
    if best is None:
        raise RuntimeError(f"no kernel configuration ran for {spec.name} {key}")
    _TUNED[key] = best
    log.info("tcemu autotune: %s %s -> %s (%.3f ms)", spec.name, key, best, best_t)
    return best


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
) -> Tensor:
    """``a @ b + bias`` by emulation, with ``b`` given as transposed pieces.

    Args:
        a: float32 (M, K) or (Z, M, K), any strides; split inside the kernel.
        bt: the method's pieces of ``b`` transposed, each (N, K) or (Zb, N, K) with Zb in {1, Z},
            K contiguous (as returned by :func:`split_t`).
        method: tf32x3, bf16x3, bf16x6 or bf16x9.
        bias: float32 (N,) or None, added in FP32 after the product.
        out: optional float32 output of the result's shape (any strides).
        config: tiling; default :func:`pick_config` (or autotuning, when enabled).

    Returns:
        float32 (M, N) or (Z, M, N).
    """
    spec = get_method(method)
    _check_kernel_method(spec)
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
    if out is None:  # the result is its own tensor, not a view (autograd Functions return it)
        result = torch.empty((M, N) if squeeze else (Z, M, N), dtype=torch.float32, device=a.device)
    else:
        result = out
    out3 = result.unsqueeze(0) if result.dim() == 2 else result
    if out3.shape != (Z, M, N) or out3.dtype != torch.float32:
        raise ValueError(f"out must be float32 {(Z, M, N)}")
    if M == 0 or N == 0 or Z == 0:
        return result
    if K == 0:
        out3.zero_()
        if bias is not None:
            out3 += bias
        return result
    if Z > MAX_GRID_YZ:  # the batch is the grid's y dimension: run it in slices (entries are independent)
        for z0 in range(0, Z, MAX_GRID_YZ):
            zs = slice(z0, z0 + MAX_GRID_YZ)
            emu_mm(a3[zs], tuple(q[zs] if Zb == Z else q for q in bt3), spec, bias, out=out3[zs], config=config)
        return result

    p = bt3 + (bt3[0],) * (3 - len(bt3))
    sbz = 0 if Zb == 1 else p[0].stride(0)
    hw = hw_split_exact(a.device)

    def launch(cfg: KernelConfig) -> None:
        if cfg.wgmma:
            key = (spec.name, str(cfg))
            if key not in _WGMMA_FAILED and _wgmma_eligible(spec, a3.device, bt3, K):
                split_a = not cfg.presplit and _tma_rows(a3)
                if split_a:  # A's FP32 rows by TMA, split in the kernel
                    ap = (a3,)
                else:  # (also "gw": A split beforehand, then the "pg" kernel)
                    ap = split_t(a3.reshape(Z * M, K).mT, spec, hw=hw)
                try:
                    if split_a and cfg.warp_specialized:  # split by the kernel's own splitter warps
                        _launch_wgmma_ws(spec, cfg, a3, tuple(q[0] for q in bt3), bias, out3, M, N, K)
                    elif cfg.warp_specialized and cfg.presplit:  # A's pieces by a loader warp
                        _launch_wgmma_pieces_ws(spec, cfg, ap, tuple(q[0] for q in bt3), bias, out3, M, N, K)
                    else:
                        _launch_wgmma(spec, cfg, ap, tuple(q[0] for q in bt3), bias, out3, M, N, K, split_a)
                    return
                except Exception as exc:  # noqa: BLE001 - e.g. a Triton whose experimental Gluon API differs
                    _WGMMA_FAILED.add(key)
                    log.warning("tcemu: the Gluon wgmma kernel failed for %s %s (%s: %s); running the Triton "
                                "kernel instead (same bits)", spec.name, cfg, type(exc).__name__, str(exc)[:200])
            cfg = replace(cfg, wgmma=False, warp_specialized=False, mode=1, persistent=False)
        tiles = triton.cdiv(M, cfg.bm) * triton.cdiv(N, cfg.bn)
        grid = (min(tiles, max(1, _num_sms(a.device) // Z)) if cfg.persistent else tiles, Z)
        if cfg.presplit:  # A's pieces (Z*M, K), contiguous, by the split kernel (bit for bit split())
            ap = split_t(a3.reshape(Z * M, K).mT, spec, hw=hw)
            ap = ap + (ap[0],) * (3 - len(ap))
            a_args, a_strides = ap, (M * K, K, 1)
        else:
            a_args, a_strides = (a3, a3, a3), a3.stride()
        _emu_mm_kernel[grid](
            *a_args, p[0], p[1], p[2], bias if bias is not None else a3, out3, M, N, K,
            *a_strides, sbz, p[0].stride(1), p[0].stride(2), *out3.stride(),
            **_constexprs(spec, cfg, K, bias is not None, hw),
        )

    cfg = config
    if cfg is None:
        key = _tune_key(spec, M, N, K)
        if key not in _TUNED and _autotune_enabled() and not torch.cuda.is_current_stream_capturing():
            cfg = _autotune(spec, key, launch, out3)
        else:
            cfg = pick_config(spec, M, N, K)
    launch(cfg)
    return result


#: (method, configuration) pairs whose Gluon kernel failed to compile or launch: they run the Triton kernel
_WGMMA_FAILED: set[tuple[str, str]] = set()


@functools.cache
def _wgmma_module():
    """The Gluon kernel's module, or None where this Triton has no Gluon for Hopper."""
    try:
        from ._kernels import _emu_mm_wgmma  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001 - an older/newer Triton without this Gluon API
        log.info("tcemu: the Gluon wgmma kernel is unavailable (%s)", exc)
        return None
    return _emu_mm_wgmma


@functools.cache
def _wgmma_ws_module():
    """The warp-specialised Gluon kernel's module, or None where this Triton has no Gluon for Hopper."""
    if _wgmma_module() is None:
        return None
    try:
        from ._kernels import _emu_mm_wgmma_ws  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001 - an older/newer Triton without this Gluon API
        log.info("tcemu: the warp-specialised Gluon wgmma kernel is unavailable (%s)", exc)
        return None
    return _emu_mm_wgmma_ws


def _wgmma_eligible(spec: MethodSpec, device: torch.device, bt3: tuple[Tensor, ...], K: int) -> bool:
    """Whether the Gluon wgmma kernel can run this product (else the Triton kernel runs it, same bits)."""
    if device.type != "cuda" or _interpreting() or spec.name == "bf16x9":
        return False
    if torch.cuda.get_device_capability(device)[0] != 9 or _wgmma_module() is None:
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


def _piece_descriptors(pieces: tuple[Tensor, ...], rows: int, cols: int, bf16: bool) -> list:
    """TMA descriptors of 2-D pieces with [rows, cols] blocks, padded to three (the kernels take three
    descriptors; a method with fewer pieces repeats the first, which its kernel never reads)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: PLC0415

    layout = _smem_layout(rows, cols, bf16)
    d = [TensorDescriptor(q, list(q.shape), list(q.stride()), [rows, cols], layout) for q in pieces]
    return d + d[:1] * (3 - len(d))


def _fp32_rows_descriptor(a3: Tensor, rows: int, K: int, bm: int, bk: int):
    """TMA descriptor of FP32 A (Z, M, K) seen as (rows = Z*M, K), with [bm, bk] blocks (:func:`_tma_rows`)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: PLC0415

    return TensorDescriptor(a3, [rows, K], [a3.stride(1), 1], [bm, bk], _smem_layout(bm, bk, False))


#: the arguments after the descriptors, common to the Gluon kernels, with their types for offline compiles
_GLUON_TAIL_ARGS = [("bias_ptr", "*fp32"), ("c_ptr", "*fp32"), ("M", "i32"), ("N", "i32"), ("K", "i32"),
                    ("stride_cz", "i32"), ("stride_cm", "i32")]


def _desc_type(fmt: str, rows: int, cols: int) -> str:
    """Signature type of a TMA descriptor of ``fmt`` ("fp32" or "bf16") with [rows, cols] blocks."""
    return f"tensordesc<{fmt}[{rows}, {cols}],{_smem_layout(rows, cols, fmt == 'bf16')!r}>"


def _gluon_compile(kernel, descriptors: list[tuple[str, str]], constexprs: dict, arch: int):
    """Compile a Gluon GEMM kernel without a GPU for ``sm_<arch>``, with the signature of a launch on
    contiguous operands: the descriptors' (name, type), then :data:`_GLUON_TAIL_ARGS`, the pointers, N, K and
    the output's strides divisible by 16, the output's column stride 1."""
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.experimental.gluon._runtime import GluonASTSource  # noqa: PLC0415

    args = descriptors + _GLUON_TAIL_ARGS
    names = [n for n, _ in args]
    constexprs = dict(stride_cn=1, **constexprs)
    signature = dict(args) | dict.fromkeys(constexprs, "constexpr")
    divisible = ("bias_ptr", "c_ptr", "N", "K", "stride_cz", "stride_cm")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    src = GluonASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": constexprs["num_warps"]})


def _launch_wgmma(spec: MethodSpec, cfg: KernelConfig, ap: tuple[Tensor, ...], bp: tuple[Tensor, ...],
                  bias: Tensor | None, out3: Tensor, M: int, N: int, K: int, split_a: bool = False) -> None:
    """Launch the Gluon kernel on B's pieces (N, K), contiguous, and either A's pieces (Z*M, K), contiguous,
    or (``split_a``) FP32 A itself, (Z, M, K) with rows readable by TMA (:func:`_tma_rows`)."""
    bf16 = spec.piece_format == "bf16"
    Z = out3.shape[0]
    if split_a:  # FP32 tiles of A, all Z*M rows
        ad = [_fp32_rows_descriptor(ap[0], Z * M, K, cfg.bm, cfg.bk)] * 3
    else:
        ad = _piece_descriptors(ap, cfg.bm, cfg.bk, bf16)
    bd = _piece_descriptors(bp, cfg.bn, cfg.bk, bf16)
    grid = (triton.cdiv(M, cfg.bm) * triton.cdiv(N, cfg.bn), Z)
    _wgmma_module()._emu_mm_wgmma_kernel[grid](
        *ad, *bd, bias if bias is not None else out3, out3, M, N, K, *out3.stride(),
        NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=bias is not None, TF32=not bf16,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=cfg.num_stages, SPLIT_A=split_a,
        num_warps=cfg.num_warps,
    )


#: shared memory per block of the H100/H200 (227 KB): the warp-specialised kernel's rings are sized to it
_SMEM_PER_BLOCK = 232448
#: the warp-specialised kernel's splitter partition: warps, and registers per thread (setmaxnreg). With 4
#: splitter warps and the 1 loader warp (padded to two warpgroups) the 8 MMA warps get 256 - (24 + 72) / 2 =
#: 208 registers, the Gluon wgmma kernel's own count.
_WS_SPLIT_WARPS = 4
_WS_SPLIT_REGS = 72
#: vectors of 4 FP32 values each splitter thread splits per step (16 values in flight)
_WS_SPLIT_VECS = 4
#: TF32x3's checked split in the splitter (``_split_rows_tf32_fast``): 5 operations a value (plus 2 to 3 for
#: the range check) instead of about 17, and the exact split only on K-tiles with special or extreme values.
#: Same bits, but not faster on the H200 (0.87-1.08x the exact split, mostly slower; session 11,
#: ``benchmarks/results/h200/gemm_variants/tf32x3_checked_split.csv``): off by default. ``checked_split=2``
#: (DIAGNOSTIC ONLY, wrong results) skips the split, to time the kernel without it.
_WS_CHECKED_SPLIT = False
#: the checked split for BF16 pieces (``_split_rows_bf16_fast``): the hardware conversion, two values an
#: instruction, where every value of the K-tile is finite and neither saturates nor needs keep-nonzero; else
#: the exact split. Same bits.
_WS_CHECKED_SPLIT_BF16 = True


def _ws_checked(spec: MethodSpec, checked_split: bool | int | None) -> bool | int:
    """The warp-specialised kernel's CHECKED: the override, else the format's default."""
    if checked_split is not None:
        return checked_split
    return _WS_CHECKED_SPLIT_BF16 if spec.piece_format == "bf16" else _WS_CHECKED_SPLIT
#: the MMA warps as two consumer partitions of one warpgroup each (each releases the ring slots by its own
#: arrival) instead of one partition of two warpgroups (a partition-wide barrier before each arrival). Same
#: bits, not faster on the H200 (0.77-1.08x; session 11,
#: ``benchmarks/results/h200/gemm_variants/two_consumer_partitions.csv``): off by default.
_WS_TWO_CONSUMERS = False


def _ws_consumer_args(cfg: KernelConfig, two_consumers: bool | None) -> dict:
    """TWO_CONSUMERS and num_warps of the warp-specialised kernel: with two consumer partitions each is one
    warpgroup (the default partition's num_warps is 4), for the configuration's 8 MMA warps."""
    two = _WS_TWO_CONSUMERS if two_consumers is None else two_consumers
    if two and (cfg.num_warps != 8 or cfg.bm != 128):
        raise ValueError(f"two consumer partitions need 8 MMA warps and 128-row tiles, got {cfg}")
    return dict(TWO_CONSUMERS=bool(two), num_warps=4 if two else cfg.num_warps)


def _ws_stages(spec: MethodSpec, cfg: KernelConfig) -> tuple[int, int, int]:
    """Ring depths of the warp-specialised kernel for a configuration: (B pieces, A's FP32 tiles, A's pieces).

    B's ring has ``num_stages`` slots (as the ``pg`` kernel's) where it fits. A's pieces get three slots where
    shared memory allows: with two, the splitter can run only one K-tile ahead of the MMAs, and on the H200
    TF32x3 128x128x32 ran 1.11-1.20x faster with three
    (``benchmarks/results/h200/gemm_variants/gw_warp_specialized.csv``, ``gw:p3`` against ``gw``). A's FP32
    tiles get two slots (three were not faster), else one. E.g. TF32x3 128x128x32 s3: 3 x 32 KB (B) + 3 x 32
    KB (A's pieces) + 2 x 16 KB (A) = 224 KB; BF16x3 128x128x64 s3: 96 + 2 x 32 + 2 x 32 = 224 KB; BF16x6
    128x64x64 s3 -> B 2: 48 + 2 x 48 + 2 x 32 = 208 KB. Raises ValueError where no depth of at least (2, 1, 2)
    fits.
    """
    elem = 2 if spec.piece_format == "bf16" else 4
    npc = spec.n_pieces
    raw = cfg.bm * cfg.bk * 4
    a_pieces = npc * cfg.bm * cfg.bk * elem
    b_pieces = npc * cfg.bn * cfg.bk * elem
    barriers = 1024  # mbarriers and alignment, generously
    for stages in range(max(2, cfg.num_stages), 1, -1):
        for a_stages, p_stages in ((2, 3), (2, 2), (1, 2)):
            if stages * b_pieces + p_stages * a_pieces + a_stages * raw + barriers <= _SMEM_PER_BLOCK:
                return stages, a_stages, p_stages
    raise ValueError(f"{spec.name} {cfg}: the warp-specialised kernel's rings do not fit {_SMEM_PER_BLOCK} bytes "
                     "of shared memory")


def _launch_wgmma_ws(spec: MethodSpec, cfg: KernelConfig, a3: Tensor, bp: tuple[Tensor, ...],
                     bias: Tensor | None, out3: Tensor, M: int, N: int, K: int, *,
                     stages: tuple[int, int, int] | None = None, split_warps: int | None = None,
                     split_regs: int | None = None, split_vecs: int | None = None,
                     checked_split: bool | int | None = None, two_consumers: bool | None = None) -> None:
    """Launch the warp-specialised Gluon kernel on FP32 ``a3`` (Z, M, K), rows readable by TMA
    (:func:`_tma_rows`), and B's pieces (N, K), contiguous. ``stages`` (B, A, A's pieces; default
    :func:`_ws_stages`), ``split_warps``, ``split_regs``, ``split_vecs`` and ``checked_split`` (TF32x3: the
    checked split, or 2 for none at all, diagnostic) override the tunables (benchmarks)."""
    bf16 = spec.piece_format == "bf16"
    Z = out3.shape[0]
    st, a_st, p_st = stages or _ws_stages(spec, cfg)
    if min(st, p_st) < 2 or a_st < 1:
        raise ValueError(f"the warp-specialised kernel needs 2 or more B and piece slots, got {(st, a_st, p_st)}")
    ad = _fp32_rows_descriptor(a3, Z * M, K, cfg.bm, cfg.bk)
    bd = _piece_descriptors(bp, cfg.bn, cfg.bk, bf16)
    tiles = triton.cdiv(M, cfg.bm) * triton.cdiv(N, cfg.bn)
    # persistent ("t"): about one program per SM, each looping over tiles of C (the same kernel: with one
    # program per tile each loops once)
    grid = (min(tiles, max(1, _num_sms(a3.device) // Z)) if cfg.persistent else tiles, Z)
    _wgmma_ws_module()._emu_mm_wgmma_ws_kernel[grid](
        ad, *bd, bias if bias is not None else out3, out3, M, N, K, *out3.stride(),
        NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=bias is not None, TF32=not bf16,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=st, A_STAGES=a_st, P_STAGES=p_st,
        SPLIT_WARPS=split_warps or _WS_SPLIT_WARPS, SPLIT_REGS=split_regs or _WS_SPLIT_REGS,
        SPLIT_VECS=split_vecs or _WS_SPLIT_VECS,
        CHECKED=_ws_checked(spec, checked_split),
        **_ws_consumer_args(cfg, two_consumers),
    )


def _pieces_ws_stages(spec: MethodSpec, cfg: KernelConfig) -> int:
    """Ring depth of the ``pgw`` kernel: ``num_stages`` slots of A's and B's pieces where they fit, else fewer
    (at least 2; ValueError otherwise)."""
    elem = 2 if spec.piece_format == "bf16" else 4
    per_stage = spec.n_pieces * (cfg.bm + cfg.bn) * cfg.bk * elem
    for stages in range(max(2, cfg.num_stages), 1, -1):
        if stages * per_stage + 1024 <= _SMEM_PER_BLOCK:
            return stages
    raise ValueError(f"{spec.name} {cfg}: two stages of pieces do not fit {_SMEM_PER_BLOCK} bytes of shared memory")


def _launch_wgmma_pieces_ws(spec: MethodSpec, cfg: KernelConfig, ap: tuple[Tensor, ...], bp: tuple[Tensor, ...],
                            bias: Tensor | None, out3: Tensor, M: int, N: int, K: int) -> None:
    """Launch the warp-specialised Gluon kernel on A's pieces (Z*M, K) and B's pieces (N, K), contiguous
    (``pgw``; persistent with ``t``)."""
    bf16 = spec.piece_format == "bf16"
    Z = out3.shape[0]
    ad = _piece_descriptors(ap, cfg.bm, cfg.bk, bf16)
    bd = _piece_descriptors(bp, cfg.bn, cfg.bk, bf16)
    tiles = triton.cdiv(M, cfg.bm) * triton.cdiv(N, cfg.bn)
    grid = (min(tiles, max(1, _num_sms(out3.device) // Z)) if cfg.persistent else tiles, Z)
    _wgmma_ws_module()._emu_mm_wgmma_pieces_ws_kernel[grid](
        *ad, *bd, bias if bias is not None else out3, out3, M, N, K, *out3.stride(),
        NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=bias is not None,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=_pieces_ws_stages(spec, cfg),
        num_warps=cfg.num_warps,
    )


def _piece_desc_args(spec: MethodSpec, cfg: KernelConfig, fp32_a: bool = False) -> list[tuple[str, str]]:
    """(name, type) of the three A and three B descriptors of the ``g`` and ``pgw`` kernels (``fp32_a``: A's
    FP32 tiles, split in the kernel)."""
    piece = "bf16" if spec.piece_format == "bf16" else "fp32"
    a_ty = _desc_type("fp32" if fp32_a else piece, cfg.bm, cfg.bk)
    b_ty = _desc_type(piece, cfg.bn, cfg.bk)
    return [(f"a{i}_desc", a_ty) for i in range(3)] + [(f"b{i}_desc", b_ty) for i in range(3)]


def wgmma_pieces_ws_compile(method: str | MethodSpec, config: KernelConfig | str, *, has_bias: bool = False,
                            arch: int = 90):
    """Compile (without a GPU) the ``pgw`` kernel for ``sm_<arch>``, as :func:`wgmma_ws_compile`."""
    spec = get_method(method)
    cfg = KernelConfig.parse(config) if isinstance(config, str) else config
    constexprs = dict(NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, BM=cfg.bm, BN=cfg.bn, BK=cfg.bk,
                      GROUP_M=cfg.group_m, STAGES=_pieces_ws_stages(spec, cfg), num_warps=cfg.num_warps)
    return _gluon_compile(_wgmma_ws_module()._emu_mm_wgmma_pieces_ws_kernel, _piece_desc_args(spec, cfg),
                          constexprs, arch)


def wgmma_compile(method: str | MethodSpec, config: KernelConfig | str, *, has_bias: bool = False,
                  split_a: bool = False, arch: int = 90):
    """Compile (without a GPU) the Gluon kernel a ``g`` configuration launches, for ``sm_<arch>``.

    The signature is that of a launch on contiguous operands (the output's column stride 1). Returns
    Triton's compiled kernel (``.asm["ptx"]``, ``.asm["cubin"]``): tests read its ``wgmma`` waits from the PTX.
    """
    spec = get_method(method)
    cfg = KernelConfig.parse(config) if isinstance(config, str) else config
    constexprs = dict(NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, TF32=spec.piece_format != "bf16",
                      BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=cfg.num_stages,
                      SPLIT_A=split_a, num_warps=cfg.num_warps)
    return _gluon_compile(_wgmma_module()._emu_mm_wgmma_kernel, _piece_desc_args(spec, cfg, split_a), constexprs,
                          arch)


def wgmma_ws_compile(method: str | MethodSpec, config: KernelConfig | str, *, has_bias: bool = False, arch: int = 90,
                     stages: tuple[int, int, int] | None = None, split_warps: int | None = None,
                     split_regs: int | None = None, split_vecs: int | None = None,
                     checked_split: bool | int | None = None, two_consumers: bool | None = None):
    """Compile (without a GPU) the warp-specialised Gluon kernel a ``gw`` configuration launches, for
    ``sm_<arch>``, as :func:`wgmma_compile` (contiguous operands, the output's column stride 1; ``stages``,
    ``split_warps``, ``split_regs``, ``split_vecs`` as :func:`_launch_wgmma_ws`). Returns Triton's compiled kernel."""
    spec = get_method(method)
    cfg = KernelConfig.parse(config) if isinstance(config, str) else config
    bf16 = spec.piece_format == "bf16"
    st, a_st, p_st = stages or _ws_stages(spec, cfg)
    b_ty = _desc_type("bf16" if bf16 else "fp32", cfg.bn, cfg.bk)
    descriptors = [("a_desc", _desc_type("fp32", cfg.bm, cfg.bk))] + [(f"b{i}_desc", b_ty) for i in range(3)]
    constexprs = dict(NP=spec.n_pieces, SHIFT=spec.shift, HAS_BIAS=has_bias, TF32=not bf16,
                      BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, STAGES=st, A_STAGES=a_st, P_STAGES=p_st,
                      SPLIT_WARPS=split_warps or _WS_SPLIT_WARPS, SPLIT_REGS=split_regs or _WS_SPLIT_REGS,
                      SPLIT_VECS=split_vecs or _WS_SPLIT_VECS,
                      CHECKED=_ws_checked(spec, checked_split),
                      **_ws_consumer_args(cfg, two_consumers))
    return _gluon_compile(_wgmma_ws_module()._emu_mm_wgmma_ws_kernel, descriptors, constexprs, arch)


def _constexprs(spec: MethodSpec, cfg: KernelConfig, K: int, has_bias: bool, hw: bool) -> dict:
    mode = cfg.mode
    if spec.name == "bf16x9" or (mode == 4 and spec.n_pieces == 2):
        mode = 0 if spec.name == "bf16x9" else 1  # bf16x9 has the tile mode only; 4 means 1 for two pieces
    return dict(
        FMT=_fmt(spec), NP=spec.n_pieces, SHIFT=spec.shift, METHOD=KERNEL_METHODS[spec.name], MODE=mode,
        DOT_FMT=2 if (_fmt(spec) == FMT_BF16 and _interpreting()) else _fmt(spec),
        HAS_BIAS=has_bias, EVEN_K=K % cfg.bk == 0,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, HW_SPLIT=bool(hw) and spec.piece_format == "bf16" and not cfg.fast_split,
        FAST_SPLIT=cfg.fast_split, A_PRESPLIT=cfg.presplit, L0_FIRST=cfg.l0_first and mode == 1,
        PERSISTENT=cfg.persistent,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def emu_mm_compile(
    method: str | MethodSpec, M: int, N: int, K: int, *, has_bias: bool = False,
    config: KernelConfig | None = None, a_strides: tuple[int, int] | None = None, hw: bool = False,
):
    """Compile (without running) the kernel :func:`emu_mm` launches for a 2-D contiguous-output product.

    ``a_strides`` defaults to a contiguous (M, K) ``a``; the pieces are contiguous (N, K); ``hw`` as
    :func:`hw_split_exact` answers on the device. Returns Triton's compiled kernel (``.asm["ptx"]``);
    the on-disk cache then serves the real launch, so a pool of processes can compile in parallel.
    """
    spec = get_method(method)
    cfg = replace(config or pick_config(spec, M, N, K))
    if cfg.wgmma:  # the Gluon kernel compiles at its first launch; this is the Triton kernel it falls back to
        cfg = replace(cfg, wgmma=False, warp_specialized=False, mode=1, persistent=False)
    sa = a_strides or (K, 1)
    f32, pd = torch.float32, piece_dtype(spec)
    at = pd if cfg.presplit else f32
    if cfg.presplit:
        sa = (K, 1)
    return _emu_mm_kernel.warmup(
        at, at, at, pd, pd, pd, f32, f32, M, N, K,
        M * K, sa[0], sa[1], 0, K, 1, M * N, N, 1,
        grid=(1, 1), **_constexprs(spec, cfg, K, has_bias, hw),
    )


# =====================================================================================================
# GEMM: REFERENCE
# =====================================================================================================


def emu_mm_reference(a: Tensor, b: Tensor, method: str | MethodSpec, bias: Tensor | None = None) -> Tensor:
    """``a @ b + bias`` by the executable spec (:func:`~tcemu.emulation.reference.mm_reference`)."""
    out = mm_reference(a, b, method)
    return out if bias is None else out + bias
