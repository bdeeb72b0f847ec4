"""The kernels do not specialise on the row counts that change with the data (an MD step's edge count, PET's
neighbour count): one compiled variant serves every M, so no kernel compiles in the middle of an MD run."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs the 'triton' extra")

from _gemm_cases import DEVICE, HAS_CUDA, INTERPRET, gpu  # noqa: E402

from tcemu.emulation.gemm import emu_mm, split_t  # noqa: E402


def _kernels():
    from tcemu.emulation.gemm._kernels import _attention, _emu_mm, _range_fixup, _split  # noqa: PLC0415

    found = [(_emu_mm._emu_mm_kernel, ("M",)), (_range_fixup._range_fixup_kernel, ("M", "T")),
             (_split._split_t_kernel, ("R", "C")), (_attention._attn_fwd_kernel, ("L",)),
             (_attention._attn_bwd_ds_kernel, ("L",)), (_attention._attn_bwd_dqdk_kernel, ("L",))]
    try:
        from tcemu.emulation.gemm._kernels import _emu_mm_wgmma, _emu_mm_wgmma_rega, _emu_mm_wgmma_ws  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - a Triton without Gluon for Hopper
        return found
    return found + [(k, ("M",)) for k in (_emu_mm_wgmma._emu_mm_wgmma_kernel, _emu_mm_wgmma_ws._emu_mm_wgmma_ws_kernel,
                                          _emu_mm_wgmma_ws._emu_mm_wgmma_pieces_ws_kernel,
                                          _emu_mm_wgmma_rega._emu_mm_wgmma_rega_kernel)]


@pytest.mark.skipif(INTERPRET, reason="the interpreter does not specialise")
def test_row_counts_are_not_specialised():
    """M (the GEMMs' and the fix-up's rows), the fix-up's flagged-row count, the split's sizes and the
    attention's sequence length are not specialised; N and K (the weights' sizes) still are."""
    for kernel, names in _kernels():
        params = {p.name: p for p in kernel.params}
        for name in names:
            assert params[name].do_not_specialize, f"{kernel}: {name} is specialised"
        for name in ("N", "K"):
            if name in params:
                assert not params[name].do_not_specialize, f"{kernel}: {name}"
    from tcemu.emulation.gemm._kernels import _attention  # noqa: PLC0415

    for kernel in (_attention._attn_fwd_kernel, _attention._attn_bwd_ds_kernel, _attention._attn_bwd_dqdk_kernel):
        params = {p.name: p for p in kernel.params}
        for name in _attention.L_SCALED_STRIDES:  # strides proportional to L: no divisibility, still == 1
            if name in params:
                assert params[name].do_not_specialize_on_alignment and not params[name].do_not_specialize, name
        assert not params["sqd"].do_not_specialize_on_alignment  # the head dimension's stride keeps it


@gpu
@pytest.mark.skipif(not HAS_CUDA or INTERPRET, reason="needs a CUDA device")
def test_one_kernel_variant_serves_every_row_count_gpu():
    """Row counts of every divisibility by 16 (an MD run's changing edge count) launch no new kernel variant
    after the first: Triton's post-compile hook counts none."""
    from triton import knobs

    compiled = []
    previous = knobs.runtime.jit_post_compile_hook
    knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiled.append(getattr(k.get("fn"), "name", "?"))
    try:
        gen = torch.Generator().manual_seed(33)
        b = torch.randn(256, 256, generator=gen).to(DEVICE)
        pieces = split_t(b, "tf32x3")
        for M in (5001, 5008):  # the first compiles (both kinds of M), then none
            emu_mm(torch.randn(M, 256, generator=gen).to(DEVICE), pieces, "tf32x3")
        torch.cuda.synchronize()
        before = list(compiled)
        for M in (6000, 6001, 6016, 6002, 6032):
            emu_mm(torch.randn(M, 256, generator=gen).to(DEVICE), pieces, "tf32x3")
        torch.cuda.synchronize()
        assert compiled == before, f"new variants for new row counts: {compiled[len(before):]}"
    finally:
        knobs.runtime.jit_post_compile_hook = previous


@gpu
@pytest.mark.skipif(not HAS_CUDA or INTERPRET, reason="needs a CUDA device")
def test_one_attention_variant_serves_every_sequence_length_gpu():
    """Sequence lengths L of every divisibility within one tile size (PET's neighbour count as an MD run goes
    on), with a shared (B, 1, L, L) mask, forward and backward: no new kernel variant after the first L."""
    from triton import knobs

    from tcemu.emulation.attention import scaled_dot_product_attention

    def step(L: int) -> None:
        gen = torch.Generator().manual_seed(L)
        q, k, v = (torch.randn(96, 8, L, 32, generator=gen).to(DEVICE).requires_grad_() for _ in range(3))
        mask = torch.zeros(96, 1, L, L, device=DEVICE)
        mask[:, :, :, L - 3:] = float("-inf")  # padding tokens, as PET masks them
        out = scaled_dot_product_attention(q, k, v, mask, method="tf32x3", backend="triton")
        out.sum().backward()

    compiled = []
    previous = knobs.runtime.jit_post_compile_hook
    knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiled.append(getattr(k.get("fn"), "name", "?"))
    try:
        step(37)  # the first compiles (three kernels)
        torch.cuda.synchronize()
        before = list(compiled)
        for L in (38, 40, 44, 48, 33, 64, 63):  # every divisibility by 2, 4, 8 and 16; one 64-long tile
            step(L)
        torch.cuda.synchronize()
        assert compiled == before, f"new variants for new sequence lengths: {compiled[len(before):]}"
    finally:
        knobs.runtime.jit_post_compile_hook = previous
