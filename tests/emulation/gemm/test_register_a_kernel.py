"""The register-A Gluon kernel ("gr": A's pieces formed in the wgmma operand registers): the bits of the "g"
kernel of the same tile on Hopper, its waits, registers and register-operand hazards in offline sm_90
compiles, its configuration suffix, and the Triton kernel in its place off Hopper."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs the 'triton' extra")

from _gemm_cases import (  # noqa: E402
    DEVICE,
    HAS_CUDA,
    INTERPRET,
    assert_close_to_fp64,
    assert_same_bits_and_specials,
    gpu,
    interpret,
    special_value_products,
)
from _sass import disassemble, loops, register_a_hazards  # noqa: E402

from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t  # noqa: E402
from tcemu.emulation.methods import get_method  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

#: tiles that compile without spills (offline sm_90, test below)
REGA_CONFIGS = {"tf32x3": ["128x64x32w8s4m1gr", "128x128x16w8s4m1gr", "64x128x16w4s4m1gr"],
                "bf16x3": ["128x128x32w8s4m1gr", "128x64x64w8s4m1gr"],
                "bf16x6": ["128x64x32w8s4m1gr"]}
SM90 = HAS_CUDA and not INTERPRET and torch.cuda.get_device_capability()[0] == 9


def _gluon_available() -> bool:
    try:
        from tcemu.emulation.gemm._gluon import _wgmma_rega_module

        return _wgmma_rega_module() is not None
    except Exception:  # noqa: BLE001
        return False


@gpu
@pytest.mark.skipif(not SM90, reason="the Gluon wgmma kernels are for sm_90 (Hopper)")
@pytest.mark.parametrize("method", list(REGA_CONFIGS))
def test_register_a_kernel_same_bits_gpu(method):
    """Batched, ragged tiles, an even and an odd number of K-tiles, bias, Inf/NaN in A and B: the bits of the
    Triton kernel of the same tile (which every Gluon kernel gives; the "g" kernel of some of these tiles does
    not fit shared memory); K-major A (not readable by TMA) runs the "pg" kernel."""
    from tcemu.emulation.gemm.launch import _WGMMA_FAILED

    gen = torch.Generator().manual_seed(31)
    shapes = ((2, 2900, 336, 1100), (1, 1000, 52, 300), (3, 333, 1024, 129), (1, 20000, 64, 260))
    for (Z, M, K, N), a, b, bias in special_value_products(gen, shapes):
        pieces = split_t(b, method)
        for text in REGA_CONFIGS[method]:
            cfg = KernelConfig.parse(text)
            want = emu_mm(a, pieces, method, bias, config=replace(cfg, register_a=False, wgmma=False))
            got = emu_mm(a, pieces, method, bias, config=cfg)
            assert_same_bits_and_specials(got, want, f"{text} {(Z, M, K, N)}")
            assert_close_to_fp64(got[Z - 1, 100:, 7:], a[Z - 1, 100:], b[:, 7:], method, bias[7:])
    a = torch.randn(336, 2900, generator=gen).to(DEVICE).T
    b = torch.randn(336, 1100, generator=gen).to(DEVICE)
    pieces = split_t(b, method)
    cfg = KernelConfig.parse(REGA_CONFIGS[method][0])
    assert torch.equal(emu_mm(a, pieces, method, config=cfg), emu_mm(a, pieces, method, config=replace(
        cfg, register_a=False, presplit=True)))
    failed = {key for key in _WGMMA_FAILED if key[1].endswith("gr")}
    assert not failed, f"the register-A kernel failed and the Triton kernel ran instead: {failed}"


@pytest.mark.skipif(INTERPRET or not _gluon_available(), reason="needs Triton's Gluon (and no TRITON_INTERPRET)")
@pytest.mark.parametrize(("method", "config"), [(m, c) for m, cs in REGA_CONFIGS.items() for c in cs])
def test_register_a_kernel_compiles_without_spills_or_register_hazards(method, config):
    """Offline sm_90 compile: the MMAs take A from registers; per K-tile one wait that leaves the correction
    MMAs outstanding (the K-tile pair and the odd tail: three), two after the loop; nothing spills; and in the
    SASS no instruction writes a register that a pending HGMMA still reads as its A operand (each K-tile's
    pieces are kept alive until the next K-tile's wait)."""
    from tcemu.emulation.gemm._gluon import wgmma_rega_compile

    cfg, spec = KernelConfig.parse(config), get_method(method)
    later = 5 if spec.n_pieces == 3 else 2
    ck = wgmma_rega_compile(method, cfg, has_bias=True)
    ptx = ck.asm["ptx"]
    k_steps = cfg.bk // (8 if spec.piece_format == "tf32" else 16)
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.[\w.]+ \{[^}]*\}, (\S)", ptx)
    assert len(mmas) == 3 * (1 + later) * k_steps and set(mmas) == {"{"}, "A must come from registers"
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx) == [str(later)] * 3 + ["0", "0"]
    assert "ld.local" not in ptx and "st.local" not in ptx
    sass = disassemble(ck.asm["cubin"])
    if sass is None:
        pytest.skip("Triton's nvdisasm is not installed")
    assert not any("STL" in line or "LDL" in line for line in sass), "spills"
    bodies = loops(sass)
    assert bodies
    for body in bodies:
        assert register_a_hazards(body) == []


def test_register_a_hazard_check_finds_a_reused_operand():
    """The SASS check itself: a piece register rewritten while the HGMMA group that reads it is pending is
    found; after the wait that retires the group it is not."""
    body = [".L_x_1:", "WARPGROUP.ARRIVE ;", "HGMMA.64x64x8.F32.TF32 R24, R168, gdesc[UR4], RZ, !UPT, gsb0 ;",
            "WARPGROUP.ARRIVE ;", "HGMMA.64x64x8.F32.TF32 R88, R152, gdesc[UR8], R88, gsb0 ;",
            "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;", "LOP3.LUT R169, R40, 0x80000000, R37, 0xf8, !PT ;",
            "FADD R153, R1, R2 ;", "@P1 BRA `(.L_x_1) ;"]
    assert register_a_hazards(body, passes=1) == ["FADD R153, R1, R2 ;"]
    assert loops(body) == [body]


def test_kernel_config_register_a_suffix():
    """'r' follows 'g' (round trip); it needs 'g' on FP32 A: not with 'p' or 'w'."""
    for text in ("128x64x32w8s4m1gr", "128x128x16w8s4m1ogr"):
        cfg = KernelConfig.parse(text)
        assert cfg.register_a and cfg.wgmma and str(cfg) == text
    assert not KernelConfig.parse("128x64x32w8s4m1g").register_a
    for bad in ("128x64x32w8s4m1r", "128x64x32w8s4m1pgr", "128x64x32w8s4m1gwr", "128x64x32w8s4m1rg"):
        with pytest.raises(ValueError):
            KernelConfig.parse(bad)


@interpret
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_register_a_config_runs_triton_kernel_off_hopper_interpret(method):
    """Off Hopper (here the interpreter) a "gr" configuration runs the Triton kernel: the same bits."""
    gen = torch.Generator().manual_seed(32)
    a = torch.randn(2, 37, 45, generator=gen)
    a[1, 3, 5] = float("inf")
    b = torch.randn(45, 29, generator=gen)
    bias = torch.randn(29, generator=gen)
    pieces = split_t(b, method)
    base = KernelConfig(32, 32, 16, 4, 1, 1, 4)
    want = emu_mm(a, pieces, method, bias, config=base)
    got = emu_mm(a, pieces, method, bias, config=replace(base, wgmma=True, register_a=True))
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(got[~torch.isnan(want)], want[~torch.isnan(want)])
