"""The GEMM kernels' configurations: :class:`KernelConfig`, the static table per method and shape bucket
(measured on an H200, docs/kernels.md), and autotuning.

With ``tcemu.config(autotune=True)`` (env ``TCEMU_GEMM_AUTOTUNE=1``) the first product of each
(method, M bucket, N, K) times the bucket's few candidates on the real operands, keeps only candidates
whose result agrees with the first one, and caches the fastest (compile time is user time: off by default).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import triton
from torch import Tensor

from ..._hw import interpreting
from ..configuration import setting
from ..methods import MethodSpec

__all__ = ["KernelConfig", "config_candidates", "pick_config", "tuned_configs"]

log = logging.getLogger("tcemu.emulation.gemm")


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
        register_a: with ``wgmma`` (suffix ``gr``): the register-A Gluon kernel of
            ``_kernels/_emu_mm_wgmma_rega.py`` (same bits as ``g``): A's FP32 tiles by TMA, split in the
            ``wgmma`` A-operand registers and fed to the MMAs from there (no piece of A in memory). Where A's rows
            do not suit TMA, A is split beforehand and the ``pg`` kernel runs.
        tma_store: with ``w`` (suffix ``e``): the warp-specialised kernels' epilogue stages each tile of C in
            shared memory and stores it by an asynchronous TMA store, so that the MMA warps start the next tile
            while it is written (same bits). The staging tile takes shared memory from the rings. Where C's
            rows do not suit TMA (a batch whose M is not a multiple of ``bm``, rows not 16-byte aligned) the
            tile is stored from the registers.
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
    register_a: bool = False
    tma_store: bool = False

    def __post_init__(self) -> None:
        if self.register_a and not (self.wgmma and not self.warp_specialized and not self.presplit):
            raise ValueError(f"kernel config {self}: 'r' (register-A) is a variant of the Gluon wgmma kernel on FP32 "
                             "A and needs 'g' without 'p' or 'w' (e.g. 128x64x32w8s4m1gr)")
        if self.tma_store and not self.warp_specialized:
            raise ValueError(f"kernel config {self}: 'e' (TMA-store epilogue) is a variant of the warp-specialised "
                             "Gluon kernels and needs 'gw' (e.g. 128x128x32w8s3m1ptgwe)")
        if self.warp_specialized and not self.wgmma:
            raise ValueError(f"kernel config {self}: 'w' (warp-specialised) is a variant of the Gluon wgmma kernel "
                             "and needs 'g' (e.g. 128x128x32w8s3m1gw)")

    def __str__(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk}w{self.num_warps}s{self.num_stages}m{self.mode}"
                + ("f" if self.fast_split else "") + ("p" if self.presplit else "")
                + ("o" if self.l0_first else "") + ("t" if self.persistent else "") + ("g" if self.wgmma else "")
                + ("w" if self.warp_specialized else "") + ("r" if self.register_a else "")
                + ("e" if self.tma_store else ""))

    @classmethod
    def parse(cls, text: str) -> KernelConfig:
        """Inverse of ``str()``: ``"128x128x32w8s3m0"``; suffixes ``f`` fast (diagnostic) split,
        ``p`` A split beforehand, ``o`` L0 issued first, ``t`` persistent tile loop, ``g`` Gluon wgmma kernel,
        ``w`` (after ``g``) its warp-specialised variant, ``r`` (after ``g``) its register-A variant, ``e`` (after
        ``w``) the TMA-store epilogue. Raises ValueError otherwise."""
        import re  # noqa: PLC0415

        m = re.fullmatch(r"(\d+)x(\d+)x(\d+)w(\d+)s(\d+)m(\d+)(f?)(p?)(o?)(t?)(g?)(w?)(r?)(e?)", text.strip())
        if not m:
            raise ValueError(f"bad kernel config {text!r}; expected like 128x128x32w8s3m0 "
                             "(suffixes f, p, o, t, g, w, r, e)")
        g = m.groups()
        return cls(*map(int, g[:6]), fast_split=g[6] == "f", presplit=g[7] == "p", l0_first=g[8] == "o",
                   persistent=g[9] == "t", wgmma=g[10] == "g", warp_specialized=g[11] == "w", register_a=g[12] == "r",
                   tma_store=g[13] == "e")


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
#   "ptgw":   A split beforehand, then the warp-specialised kernel without a splitter, persistent (a
#             loader warp brings A's and B's pieces by TMA and runs into the next tile while the MMA warps
#             store this one): BF16x6 1.09-1.53x SGEMM on five PET-S edge products and 1.98-2.02x at 8192^3
#             ("pg": 0.93-1.28x and 1.77-1.79x), BF16x3 1.62-2.63x and 4.21-4.26x (1.40-2.41x,
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
    # BF16x3 and BF16x6: A split beforehand, then the persistent warp-specialised kernel ("ptgw");
    # BF16x3's narrow products (N < 384: A's tiles split at most three times) the persistent warp-specialised
    # kernel with the checked split in its splitter warps ("tgw": 1.03-1.13x "ptgw" at N = 256 on
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
    """The configuration used without autotuning; the configuration's ``kernel_config`` (env
    ``TCEMU_GEMM_CONFIG=128x128x32w8s3m0``) overrides it."""
    override = setting("kernel_config")
    if override:
        return KernelConfig.parse(override)
    if interpreting():
        return _INTERPRET_CONFIG
    tuned = _TUNED.get(_tune_key(spec, M, N, K))
    return tuned if tuned is not None else config_candidates(spec, M, N, K)[0]


def tuned_configs() -> dict[tuple, str]:
    """What autotuning chose so far: (method, M bucket, N, K, bias) -> configuration."""
    return {k: str(v) for k, v in _TUNED.items()}


def _tune_key(spec: MethodSpec, M: int, N: int, K: int, has_bias: bool = False) -> tuple:
    return (spec.name, _bucket(M, N, K), N, K)


def _autotune_enabled() -> bool:
    return bool(setting("autotune")) and not interpreting() and setting("kernel_config") is None


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
