"""The Gluon (wgmma) kernels on Hopper: the same bits as the Triton kernel, their range check, their waits and
partitions in offline sm_90 compiles, and the fallback to the Triton kernel."""

from __future__ import annotations

import importlib
from dataclasses import replace

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs the 'triton' extra")

from _gemm_cases import (  # noqa: E402 - the shared markers, device, tolerances and checks
    DEVICE,
    HAS_CUDA,
    INTERPRET,
    _bits,
    assert_close_to_fp64,
    assert_same_bits_and_specials,
    gpu,
    interpret,
    special_value_products,
)

from _sass import triton_tool  # noqa: E402

from tcemu.emulation.gemm import (  # noqa: E402
    KernelConfig,
    config_candidates,
    emu_mm,
    split_t,
)
from tcemu.emulation.gemm.range_fixup import range_fixup  # noqa: E402
from tcemu.emulation.methods import get_method  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


# A split beforehand ("pg") and split by the kernel's warps ("g")
WGMMA_CONFIGS = {"tf32x3": ["128x128x32w8s3m1pg", "128x128x16w8s5m1pg", "128x128x32w8s3m1g"],
                 "bf16x3": ["128x128x64w8s3m1pg", "128x128x32w8s5m1pg", "128x128x64w8s2m1g"],
                 "bf16x6": ["128x64x64w8s3m1pg", "128x64x32w8s6m1pg", "128x64x64w8s2m1g"]}
SM90 = HAS_CUDA and not INTERPRET and torch.cuda.get_device_capability()[0] == 9


@gpu
@pytest.mark.skipif(not SM90, reason="the Gluon wgmma kernel is for sm_90 (Hopper)")
@pytest.mark.parametrize("method", list(WGMMA_CONFIGS))
def test_wgmma_kernel_same_bits_gpu(method):
    """The Gluon wgmma kernel runs the Triton kernel's products in its order: same bits, with ragged tiles,
    a batch, bias and Inf/NaN; where it cannot run (K not 16-byte aligned) the Triton kernel runs instead."""
    from tcemu.emulation.gemm.launch import _WGMMA_FAILED, _wgmma_eligible

    gen = torch.Generator().manual_seed(24)
    for K in (336, 333):
        a = torch.randn(2, 2900, K, generator=gen)
        a[1, 7, 9] = float("inf")
        a[0, 5, 2] = float("nan")
        a[0, 9, 11] = float("-inf")
        b = torch.randn(K, 1100, generator=gen)
        b[20, 6] = float("inf")
        a, b = a.to(DEVICE), b.to(DEVICE)
        bias = torch.randn(1100, generator=gen).to(DEVICE)
        pieces = split_t(b, method)
        bt3 = tuple(q.unsqueeze(0) for q in pieces)
        assert _wgmma_eligible(get_method(method), a.device, bt3, K) == (K == 336)
        for text in WGMMA_CONFIGS[method]:
            cfg = KernelConfig.parse(text)
            want = emu_mm(a, pieces, method, bias, config=replace(cfg, wgmma=False))
            got = emu_mm(a, pieces, method, bias, config=cfg)
            nan = torch.isnan(want)
            assert nan.any() and torch.isinf(want).any()
            assert torch.equal(torch.isnan(got), nan), f"{text} K={K}"
            assert torch.equal(got[~nan], want[~nan]), f"{text} K={K}"
            # rows and columns without the Inf/NaN inputs: within the method's bound of FP64
            assert_close_to_fp64(got[1, 1000:, 7:], a[1, 1000:], b[:, 7:], method, bias[7:])
    # A whose rows TMA cannot read (K-major storage): the in-kernel-split configuration splits A beforehand
    a = torch.randn(336, 2900, generator=gen).to(DEVICE).T
    b = torch.randn(336, 1100, generator=gen).to(DEVICE)
    pieces = split_t(b, method)
    cfg = KernelConfig.parse(WGMMA_CONFIGS[method][-1])
    want = emu_mm(a, pieces, method, config=replace(cfg, wgmma=False))
    assert torch.equal(emu_mm(a, pieces, method, config=cfg), want)
    assert not _WGMMA_FAILED, f"the Gluon kernel failed and the Triton kernel ran instead: {_WGMMA_FAILED}"


# The warp-specialised Gluon kernel ("gw": A split by the kernel's splitter warps) and its "pg" twin
WGMMA_WS_CONFIGS = {"tf32x3": ["128x128x32w8s3m1gw", "128x128x32w8s3m1tgw", "64x256x32w8s2m1tgw",
                               "128x128x32w8s3m1ptgw", "128x128x32w8s3m1tgwe", "128x128x32w8s3m1ptgwe"],
                    "bf16x3": ["128x128x64w8s3m1gw", "128x128x64w8s3m1ptgw", "128x128x64w8s3m1pgw",
                               "128x128x64w8s3m1tgwe", "128x128x64w8s3m1ptgwe"],
                    "bf16x6": ["128x64x64w8s3m1gw", "128x64x32w8s4m1gw", "128x64x64w8s3m1ptgw",
                               "128x64x64w8s3m1ptgwe"]}


@gpu
@pytest.mark.skipif(not SM90, reason="the Gluon wgmma kernel is for sm_90 (Hopper)")
@pytest.mark.parametrize("method", list(WGMMA_WS_CONFIGS))
def test_wgmma_ws_kernel_same_bits_gpu(method):
    """The warp-specialised kernel (A split in the kernel, by warps of their own), with one program per tile
    or persistent ("tgw": programs loop over tiles, several each where there are more tiles than SMs), gives
    the bits of the "pg" configuration (A split beforehand): batched, ragged tiles and K, bias, Inf/NaN in A
    and B; K-major A (not TMA-readable) runs the "pg" kernel. So does the variant without splitter on A split
    beforehand ("pgw", persistent "ptgw": a loader warp brings A's and B's pieces). With the TMA-store epilogue
    ("e") too: by TMA where C's rows allow (one batch entry, or whole tiles per entry; N a multiple of 4), else
    from the registers (a ragged batch, N = 129 or 131)."""
    from tcemu.emulation.gemm._gluon import _tma_store_ok
    from tcemu.emulation.gemm.launch import _WGMMA_FAILED

    gen = torch.Generator().manual_seed(26)
    shapes = ((2, 2900, 336, 1100), (1, 1000, 52, 300), (3, 333, 1000, 129), (1, 20000, 72, 260),
              (2, 1024, 64, 388), (1, 700, 64, 131))
    tile = KernelConfig.parse("128x128x32w8s3m1tgwe")
    tma_paths = [_tma_store_ok(torch.empty(Z, M, N, device=DEVICE), M, tile) for Z, M, _, N in shapes]
    assert tma_paths == [False, True, False, True, True, False]
    for (Z, M, K, N), a, b, bias in special_value_products(gen, shapes):
        pieces = split_t(b, method)
        for text in WGMMA_WS_CONFIGS[method]:
            cfg = KernelConfig.parse(text)
            want = emu_mm(a, pieces, method, bias,
                          config=replace(cfg, warp_specialized=False, tma_store=False, presplit=True))
            got = emu_mm(a, pieces, method, bias, config=cfg)
            assert_same_bits_and_specials(got, want, f"{text} {(Z, M, K, N)}")
            assert_close_to_fp64(got[Z - 1, 100:, 7:], a[Z - 1, 100:], b[:, 7:], method, bias[7:])
    a = torch.randn(336, 2900, generator=gen).to(DEVICE).T  # K-major: A split beforehand, then "pg"
    b = torch.randn(336, 1100, generator=gen).to(DEVICE)
    pieces = split_t(b, method)
    cfg = KernelConfig.parse(WGMMA_WS_CONFIGS[method][0])
    want = emu_mm(a, pieces, method, config=replace(cfg, warp_specialized=False, presplit=True))
    assert torch.equal(emu_mm(a, pieces, method, config=cfg), want)
    assert not _WGMMA_FAILED, f"the Gluon kernel failed and the Triton kernel ran instead: {_WGMMA_FAILED}"


def _f32(bits: int) -> float:
    return torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(torch.float32).item()


# values at the edges of TF32x3's split: special values, round-to-zero, saturation, and their neighbours
TF32_SPLIT_EXTREMES = {
    "inf_nan": [float("inf"), float("-inf"), float("nan")],
    "nan_low_payload": [_f32(0x7F800001), _f32(0xFF800FFF)],  # a rounding on the bits would make them Inf
    "tiny": [_f32(0x00000001), _f32(0x80000FFF)],  # round to 0: the high piece must stay nonzero
    "saturating": [_f32(0x7F7FF000), _f32(0xFF7FFFFF)],  # round past the largest TF32: saturate
    "boundary": [_f32(0x00001000), _f32(0x80001000), _f32(0x7F7FEFFF), _f32(0xFF7FEFFF), 0.0, -0.0],
}


# the values the BF16 checked split must hand to the exact split (round to nearest even; the fast path needs
# 0x8001 <= |bits| < 0x7F7F8000)
CHECKED_SPLIT_EXTREMES_BF16 = {
    "inf_nan": [float("inf"), float("-inf"), float("nan"), _f32(0x7F800001), _f32(0xFFC00123)],
    "tiny": [_f32(0x00000001), _f32(0x80008000), _f32(0x00008000)],  # round to 0: the high piece stays nonzero
    "saturating": [_f32(0x7F7F8000), _f32(0xFF7FFFFF)],  # round past the largest BF16 (a tie to Inf): saturate
    "boundary": [_f32(0x00008001), _f32(0x80007FFF), _f32(0x7F7F7FFF), _f32(0xFF7F7FFF), _f32(0x000FFFFF), 0.0,
                 -0.0],
}


def _check_ws_extremes(method, extremes, configs, seed):
    """The warp-specialised kernel (each of ``configs``) on A holding each kind of value of ``extremes`` among
    ordinary values of many magnitudes gives the bits of "pg" (A split beforehand, exactly); B holds Inf and 0,
    and Inf times a tiny A value stays Inf (NaN had the high piece been 0)."""
    em = importlib.import_module("tcemu.emulation.gemm.launch")
    spec, gen = get_method(method), torch.Generator().manual_seed(seed)
    M, K, N = 2900, 336, 300
    b = torch.randn(K, N, generator=gen)
    b[K // 2, 3] = float("inf")
    b[K // 3, 5] = 0.0
    b = b.to(DEVICE)
    bias = torch.randn(N, generator=gen).to(DEVICE)
    pieces = split_t(b, method)
    base = torch.randn(M, K, generator=gen) * torch.exp2(torch.randint(-20, 20, (M, K), generator=gen).float())
    pg = KernelConfig.parse(WGMMA_WS_CONFIGS[method][0].replace("gw", "pg"))
    for kind, values in extremes.items():
        a = base.clone()
        rows, cols = torch.randint(0, M, (30,), generator=gen), torch.randint(0, K, (30,), generator=gen)
        for i, (r, c) in enumerate(zip(rows, cols)):
            a[r, c] = values[i % len(values)]
        a[11, K // 2] = values[0]  # meets B's Inf
        a = a.to(DEVICE)
        want = emu_mm(a, pieces, method, bias, config=pg)
        for text in configs:
            out = torch.empty(1, M, N, device=DEVICE)
            flags = torch.zeros(M, dtype=torch.int8, device=DEVICE)
            em._launch_wgmma_ws(spec, KernelConfig.parse(text), a.unsqueeze(0), tuple(pieces), bias, out, M, N, K,
                                flags=flags, range_check=True)
            # the launch marks what its range check found; the fix-up after it computes those elements again
            range_fixup(a.unsqueeze(0), tuple(p.unsqueeze(0) for p in pieces), None, bias, out, flags, spec)
            got, nan = out[0], torch.isnan(want)
            assert torch.equal(torch.isnan(got), nan), f"{kind} {text}"
            assert torch.equal(_bits(got[~nan]), _bits(want[~nan])), f"{kind} {text}"
            if kind == "tiny":
                assert torch.isinf(got[11, 3])


@gpu
@pytest.mark.skipif(not SM90, reason="the Gluon wgmma kernel is for sm_90 (Hopper)")
def test_ws_split_extremes_gpu():
    """TF32x3's split in the splitter warps gives the bits of "pg" for every kind of value at the edges of the
    split's range."""
    _check_ws_extremes("tf32x3", TF32_SPLIT_EXTREMES, ("128x128x32w8s3m1tgw", "64x256x32w8s2m1tgw"), 31)


@gpu
@pytest.mark.skipif(not SM90, reason="the Gluon wgmma kernel is for sm_90 (Hopper)")
@pytest.mark.parametrize("method", ["bf16x3", "bf16x6"])
def test_ws_checked_split_extremes_bf16_gpu(method):
    """BF16x3's and BF16x6's checked split in the splitter warps (the hardware conversion, and the exact split
    only on K-tiles that need it) gives the bits of "pg" for every kind of value its range check must catch."""
    _check_ws_extremes(method, CHECKED_SPLIT_EXTREMES_BF16, [WGMMA_WS_CONFIGS[method][0].replace("gw", "tgw")], 37)


def _gluon_available() -> bool:
    try:
        from tcemu.emulation.gemm.launch import _wgmma_module

        return _wgmma_module() is not None
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(INTERPRET or not _gluon_available(), reason="needs Triton's Gluon (and no TRITON_INTERPRET)")
@pytest.mark.parametrize(("method", "config", "split_a", "later"), [
    ("tf32x3", "128x128x32w8s3m1pg", False, 2), ("bf16x3", "128x128x64w8s3m1pg", False, 2),
    ("bf16x6", "128x64x64w8s3m1pg", False, 5), ("tf32x3", "128x128x32w8s3m1g", True, 2),
])
def test_wgmma_kernel_waits_for_the_l0_tile_only(method, config, split_a, later):
    """Offline sm_90 compile of the Gluon kernel with this machine's Triton (no GPU needed). Its point is
    the wait structure: per K-tile one commit group per product term (the L0 tile, then the correction
    terms), one wait that leaves the correction groups outstanding (wgmma.wait_group LATER), and the
    running accumulators waited for only after the loop (wait_group 0)."""
    import re

    from tcemu.emulation.gemm.launch import wgmma_compile

    cfg = KernelConfig.parse(config)
    spec = get_method(method)
    ptx = wgmma_compile(method, cfg, split_a=split_a).asm["ptx"]
    k_steps = cfg.bk // (8 if spec.piece_format == "tf32" else 16)  # wgmma K is 8 (TF32) or 16 (BF16)
    groups = 1 + later  # the L0 tile and the correction products
    assert len(re.findall(r"wgmma\.mma_async", ptx)) == groups * k_steps
    assert len(re.findall(r"wgmma\.commit_group", ptx)) == groups
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx) == [str(later), "0"]


def _resource_usage(cubin: bytes) -> dict[str, int] | None:
    """REG/STACK/SHARED/LOCAL of a cubin by Triton's cuobjdump, or None where it is not there."""
    import re
    import subprocess
    import tempfile

    tool = triton_tool("cuobjdump")
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out)} or None


@pytest.mark.skipif(INTERPRET or not _gluon_available(), reason="needs Triton's Gluon (and no TRITON_INTERPRET)")
@pytest.mark.parametrize(("method", "config", "later"), [
    ("tf32x3", "128x128x32w8s3m1gw", 2), ("bf16x3", "128x128x64w8s3m1gw", 2), ("bf16x6", "128x64x64w8s3m1gw", 5),
])
def test_wgmma_ws_kernel_waits_and_partitions(method, config, later):
    """Offline sm_90 compile of the warp-specialised Gluon kernel. The MMA partition keeps the wgmma kernel's
    wait structure (one commit group per product term, wait_group LATER in the loop, 0 after it); the
    partitions get their registers by setmaxnreg (loader 24, splitter _WS_SPLIT_REGS, the MMA warps what is
    left: 256 - (24 + splitter) / 2 with 16 warps in all); nothing spills; the rings fit 227 KB."""
    import re

    from tcemu.emulation.gemm.launch import _SMEM_PER_BLOCK, _WS_SPLIT_REGS, _WS_SPLIT_WARPS, wgmma_ws_compile

    cfg = KernelConfig.parse(config)
    spec = get_method(method)
    ck = wgmma_ws_compile(method, cfg, has_bias=True)
    ptx = ck.asm["ptx"]
    k_steps = cfg.bk // (8 if spec.piece_format == "tf32" else 16)
    groups = 1 + later
    assert len(re.findall(r"wgmma\.mma_async", ptx)) == groups * k_steps
    assert len(re.findall(r"wgmma\.commit_group", ptx)) == groups
    # (the PTX places the tile loop's final wait before or after the K loop's: compare as a multiset)
    assert sorted(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)) == sorted([str(later), "0"])
    regs = set(re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx))
    assert _WS_SPLIT_WARPS == 4  # the MMA warps' share below assumes 8 + 1 + 4 (+ 3 padding) warps
    mma_regs = (256 - (24 + _WS_SPLIT_REGS) // 2) // 8 * 8
    assert {"24", str(_WS_SPLIT_REGS), str(mma_regs)} <= regs, regs
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert ck.metadata.shared <= _SMEM_PER_BLOCK
    usage = _resource_usage(ck.asm["cubin"])
    if usage is not None:  # ptxas's spills: local memory, stack
        assert usage.get("LOCAL", 0) == 0 and usage.get("STACK", 0) == 0, usage


@pytest.mark.skipif(INTERPRET or not _gluon_available(), reason="needs Triton's Gluon (and no TRITON_INTERPRET)")
@pytest.mark.parametrize(("method", "config", "later"), [
    ("tf32x3", "128x128x32w8s3m1ptgw", 2), ("bf16x3", "128x128x64w8s3m1ptgw", 2),
    ("bf16x6", "128x64x64w8s3m1ptgw", 5),
])
def test_wgmma_pieces_ws_kernel_compiles(method, config, later):
    """Offline sm_90 compile of the warp-specialised kernel on A split beforehand ("ptgw"): the MMA partition's
    waits as the "pg" kernel's, the loader warp at 24 registers, the MMA warps 240, nothing spills, the ring
    fits 227 KB."""
    import re

    from tcemu.emulation.gemm.launch import _SMEM_PER_BLOCK, wgmma_pieces_ws_compile

    cfg, spec = KernelConfig.parse(config), get_method(method)
    ck = wgmma_pieces_ws_compile(method, cfg, has_bias=True)
    ptx = ck.asm["ptx"]
    k_steps = cfg.bk // (8 if spec.piece_format == "tf32" else 16)
    assert len(re.findall(r"wgmma\.mma_async", ptx)) == (1 + later) * k_steps
    assert sorted(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)) == sorted([str(later), "0"])
    assert {"24", "240"} <= set(re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx))
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert ck.metadata.shared <= _SMEM_PER_BLOCK
    usage = _resource_usage(ck.asm["cubin"])
    if usage is not None:
        assert usage.get("LOCAL", 0) == 0 and usage.get("STACK", 0) == 0, usage


@pytest.mark.skipif(INTERPRET or not _gluon_available(), reason="needs Triton's Gluon (and no TRITON_INTERPRET)")
@pytest.mark.parametrize(("method", "config"), [
    ("tf32x3", "128x128x32w8s3m1ptgwe"), ("tf32x3", "128x128x32w8s3m1tgwe"), ("bf16x3", "128x128x64w8s3m1ptgwe"),
    ("bf16x3", "128x128x64w8s3m1tgwe"), ("bf16x6", "128x64x64w8s3m1ptgwe"),
])
def test_tma_store_epilogue_compiles(method, config):
    """Offline sm_90 compile of the warp-specialised kernels with the TMA-store epilogue ("e"): C leaves by bulk
    tensor stores of the staging tile's parts (no masked st.global of C: only the range check's row flags
    remain), each preceded by a wait for the previous store's reads of the staging tile and a partition barrier;
    the last store is waited for; the rings and the staging tile fit 227 KB; nothing spills."""
    import re

    from tcemu.emulation.gemm._gluon import _C_STAGING_PARTS
    from tcemu.emulation.gemm.launch import _SMEM_PER_BLOCK, wgmma_pieces_ws_compile, wgmma_ws_compile

    cfg = KernelConfig.parse(config)
    compile_ = wgmma_pieces_ws_compile if cfg.presplit else wgmma_ws_compile
    ck, plain = compile_(method, cfg, has_bias=True), compile_(method, replace(cfg, tma_store=False), has_bias=True)
    ptx, plain_ptx = ck.asm["ptx"], plain.asm["ptx"]
    parts = _C_STAGING_PARTS
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.bulk_group", ptx)) == parts
    assert not re.search(r"cp\.async\.bulk\.tensor\.2d\.global\.shared", plain_ptx)
    # before each part refills the staging tile, and once after the last tile
    assert len(re.findall(r"cp\.async\.bulk\.wait_group\.read\s+0", ptx)) == parts + 1
    # the plain epilogue stores C's tile (BM x BN over 256 threads, 2 values a store) and the row flags
    stores, plain_stores = (len(re.findall(r"\bst\.global", p)) for p in (ptx, plain_ptx))
    assert plain_stores - stores == cfg.bm * cfg.bn // 256 // 2, (stores, plain_stores)
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert ck.metadata.shared <= _SMEM_PER_BLOCK
    usage = _resource_usage(ck.asm["cubin"])
    if usage is not None:
        assert usage.get("LOCAL", 0) == 0 and usage.get("STACK", 0) == 0, usage


def test_tma_store_epilogue_takes_its_tile_from_the_rings(monkeypatch):
    """With "e" the staging tile of C (half the tile's columns: 32 KB at 128 x 128; the whole tile: 64 KB) comes
    off the rings' budget, still within 227 KB; and C's rows suit TMA only with whole tiles per batch entry and
    16-byte aligned rows."""
    from tcemu.emulation.gemm import _gluon
    from tcemu.emulation.gemm._gluon import _c_staging_bytes, _pieces_ws_stages, _tma_store_ok, _ws_stages

    tf32x3, bf16x6 = get_method("tf32x3"), get_method("bf16x6")
    tgw, ptgw = KernelConfig.parse("128x128x32w8s3m1tgw"), KernelConfig.parse("128x128x32w8s3m1ptgw")
    b6 = KernelConfig.parse("128x64x64w8s3m1ptgw")
    assert _ws_stages(tf32x3, tgw) == (3, 2, 3)
    assert _pieces_ws_stages(tf32x3, ptgw) == 3 and _pieces_ws_stages(bf16x6, b6) == 3
    for parts, staging, tgw_rings, ptgw_ring, b6_ring in ((2, 32768, (3, 2, 2), 3, 2), (1, 65536, (2, 2, 2), 2, 2)):
        monkeypatch.setattr(_gluon, "_C_STAGING_PARTS", parts)
        assert _c_staging_bytes(replace(tgw, tma_store=True)) == staging and _c_staging_bytes(tgw) == 0
        assert _ws_stages(tf32x3, replace(tgw, tma_store=True)) == tgw_rings
        assert _pieces_ws_stages(tf32x3, replace(ptgw, tma_store=True)) == ptgw_ring
        assert _pieces_ws_stages(bf16x6, replace(b6, tma_store=True)) == b6_ring
    e = replace(tgw, tma_store=True)
    assert _tma_store_ok(torch.empty(1, 1000, 300), 1000, e)
    assert _tma_store_ok(torch.empty(2, 1024, 300), 1024, e)
    assert not _tma_store_ok(torch.empty(2, 1000, 300), 1000, e)  # a ragged tile would spill into entry 1
    assert not _tma_store_ok(torch.empty(1, 1000, 301), 1000, e)  # rows not 16-byte aligned
    assert not _tma_store_ok(torch.empty(1, 300, 1000).mT, 1000, e)  # N not contiguous


def test_tf32x3_short_k_products_take_the_persistent_warp_specialised_kernel():
    """The static table: TF32x3's edge-layer products (N < 640, and N <= 1024 with K <= 256) and BF16x3's
    narrow ones (N < 384) run the persistent warp-specialised kernel with its splitter; wide products with long
    K (8192^3) split A beforehand."""
    from tcemu.emulation.gemm.launch import WIDE_SHORTK_MAX_K, WIDE_SHORTK_MAX_N, _bucket

    spec = get_method("tf32x3")
    for M, K, N in ((604800, 256, 256), (604800, 512, 512), (604800, 256, 1024), (604800, 256, 768)):
        cfg = config_candidates(spec, M, N, K)[0]
        assert cfg.persistent and cfg.warp_specialized and not cfg.presplit, (M, K, N, str(cfg))
    assert _bucket(604800, WIDE_SHORTK_MAX_N + 1, 256) == "wide"
    assert _bucket(604800, 1024, WIDE_SHORTK_MAX_K * 2) == "wide"
    assert config_candidates(spec, 8192, 8192, 8192)[0].presplit  # A split once, not once per column tile
    bf16x3 = get_method("bf16x3")  # narrow products: A's tiles split in the kernel (checked split)
    for M, K, N in ((604800, 256, 256), (604800, 1024, 256), (17280, 768, 256)):
        cfg = config_candidates(bf16x3, M, N, K)[0]
        assert cfg.persistent and cfg.warp_specialized and not cfg.presplit, (M, K, N, str(cfg))
    for M, K, N in ((604800, 256, 1024), (604800, 512, 512), (8192, 8192, 8192)):
        assert config_candidates(bf16x3, M, N, K)[0].presplit, (M, K, N)
    for method in ("bf16x3", "bf16x6", "bf16x9"):  # the other methods: "wide_shortk" is "wide"
        assert config_candidates(get_method(method), 604800, 1024, 256) == config_candidates(get_method(method),
                                                                                             8192, 8192, 8192)


def test_kernel_config_warp_specialized_suffix():
    """'w' follows 'g' in the configuration string (round trip) and needs 'g'; with 'p' (A split
    beforehand) it is the splitter-less variant ("pgw", persistent "ptgw")."""
    for text in ("128x128x32w8s3m1gw", "128x64x64w8s3m1ogw", "128x128x64w8s2m1tgw"):
        cfg = KernelConfig.parse(text)
        assert cfg.warp_specialized and cfg.wgmma and not cfg.presplit
        assert str(cfg) == text and KernelConfig.parse(str(cfg)) == cfg
    for text in ("128x64x64w8s3m1pgw", "128x64x64w8s3m1ptgw"):
        cfg = KernelConfig.parse(text)
        assert cfg.warp_specialized and cfg.wgmma and cfg.presplit and cfg.persistent == ("t" in text)
        assert str(cfg) == text
    assert not KernelConfig.parse("128x128x32w8s3m1pg").warp_specialized
    for text in ("128x128x32w8s3m1tgwe", "128x128x32w8s3m1ptgwe"):
        cfg = KernelConfig.parse(text)
        assert cfg.tma_store and cfg.warp_specialized and str(cfg) == text
    with pytest.raises(ValueError, match="needs 'gw'"):
        KernelConfig.parse("128x128x32w8s3m1pge")
    for bad in ("128x128x32w8s3m1w", "128x128x32w8s3m1wg", "128x128x32w8s3m1pwg", "128x128x32w8s3m1ptgew"):
        with pytest.raises(ValueError):
            KernelConfig.parse(bad)
    with pytest.raises(ValueError, match="needs 'g'"):
        KernelConfig(128, 128, 32, 8, 3, 1, warp_specialized=True)


@interpret
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_wgmma_ws_config_runs_triton_kernel_off_hopper_interpret(method):
    """Off Hopper (here the interpreter) a "gw" configuration runs the Triton kernel: the same bits."""
    gen = torch.Generator().manual_seed(27)
    a = torch.randn(2, 37, 45, generator=gen)
    a[1, 3, 5] = float("inf")
    b = torch.randn(45, 29, generator=gen)
    bias = torch.randn(29, generator=gen)
    pieces = split_t(b, method)
    base = KernelConfig(32, 32, 16, 4, 1, 1, 4)
    want = emu_mm(a, pieces, method, bias, config=base)
    got = emu_mm(a, pieces, method, bias, config=replace(base, wgmma=True, warp_specialized=True))
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(got[~torch.isnan(want)], want[~torch.isnan(want)])


@interpret
def test_wgmma_failure_falls_back_to_triton_interpret(monkeypatch, caplog):
    """A Gluon kernel that fails (e.g. another Triton's experimental API) is reported once and the same
    configuration runs the Triton kernel: the result is still the method's, bit for bit."""
    emu_mm_module = importlib.import_module("tcemu.emulation.gemm.launch")
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("no such Gluon builtin")

    monkeypatch.setattr(emu_mm_module, "_wgmma_eligible", lambda *a: True)
    monkeypatch.setattr(emu_mm_module, "_launch_wgmma", broken)
    monkeypatch.setattr(emu_mm_module, "_WGMMA_FAILED", set())
    gen = torch.Generator().manual_seed(25)
    a = torch.randn(37, 45, generator=gen)
    b = torch.randn(45, 29, generator=gen)
    pieces = split_t(b, "tf32x3")
    base = KernelConfig(32, 32, 16, 4, 1, 1, 4, presplit=True)
    want = emu_mm(a, pieces, "tf32x3", config=base)
    with caplog.at_level("WARNING", logger="tcemu.emulation.gemm"):
        for _ in range(2):
            assert torch.equal(emu_mm(a, pieces, "tf32x3", config=replace(base, wgmma=True)), want)
    assert len(calls) == 1  # not retried
    assert "Gluon wgmma kernel failed" in caplog.text
