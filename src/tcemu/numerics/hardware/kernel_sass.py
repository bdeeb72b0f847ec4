"""What the emulated GEMM kernels compile to, without a GPU: the evidence behind the twin's schedule.

:func:`compile_gemm_kernel` compiles the kernel a configuration launches (the Triton kernel, or on sm_90 the
Gluon kernels) and :func:`compile_fixup_kernel` the range fix-up launched after every GEMM, for ``sm_<arch>``
with this machine's Triton, both through the launchers' own offline compiles (``emu_mm.emu_mm_compile``, the
Gluon compile functions, ``range_fixup.range_fixup_compile``: the signatures live there only).
:func:`kernel_evidence` and :func:`fixup_evidence` read from them what :mod:`tcemu.numerics.schedule` relies on:
the Tensor Core instruction in the PTX (``mma.sync ... m16n8k8``, ``wgmma ... m64nNk8``, ``tcgen05.mma
kind::tf32``), its K, and the FP32 opcodes in the SASS (``cuobjdump -sass``, shipped with Triton): FFMA
(contracted multiply-adds), FMUL, FADD, and the elements of C each thread holds, so that counts per element can
be compared with the schedule's steps.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter

__all__ = ["compile_gemm_kernel", "compile_fixup_kernel", "sass_text", "sass_opcode_counts", "kernel_evidence",
           "fixup_evidence", "ptx_instruction"]


def _emu_mm():
    import importlib  # noqa: PLC0415

    return importlib.import_module("tcemu.emulation.gemm.launch")


def compile_gemm_kernel(method, config, *, K: int = 256, arch: int = 90, has_bias: bool = False,
                        M: int = 4096, N: int = 4096):
    """Triton's compiled kernel (``.asm["ptx"]``, ``.asm["cubin"]``) for ``config`` on ``sm_<arch>``, by the
    launchers' own offline compiles (which alone know the kernels' signatures).

    Gluon configurations (``g``) compile their Gluon kernel on sm_90 (``emu_mm.wgmma_compile`` and its ws
    variants); elsewhere, and for BF16x9, the Triton kernel they fall back to (``emu_mm.emu_mm_compile``: the
    launch on contiguous 2-D operands of shape (M, K) x (K, N), specialised as that launch is).
    """
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    emu_mm = _emu_mm()
    spec = get_method(method)
    cfg = emu_mm.KernelConfig.parse(config) if isinstance(config, str) else config
    if cfg.wgmma and arch == 90 and spec.name != "bf16x9":
        if cfg.warp_specialized and cfg.presplit:
            return emu_mm.wgmma_pieces_ws_compile(spec, cfg, has_bias=has_bias)
        if cfg.warp_specialized:
            return emu_mm.wgmma_ws_compile(spec, cfg, has_bias=has_bias)
        return emu_mm.wgmma_compile(spec, cfg, has_bias=has_bias, split_a=not cfg.presplit)
    return emu_mm.emu_mm_compile(spec, M, N, K, has_bias=has_bias, config=cfg, arch=arch)


def compile_fixup_kernel(method, *, arch: int = 90, has_bias: bool = False, b_pieces: bool = False,
                         M: int = 4096, N: int = 4096, K: int = 256):
    """The range fix-up kernel launched after every GEMM, compiled for ``sm_<arch>`` by its launcher's own
    offline compile (``range_fixup.range_fixup_compile``); B as FP32 or (``b_pieces``) as the method's pieces."""
    from tcemu.emulation.gemm.range_fixup import range_fixup_compile  # noqa: PLC0415

    return range_fixup_compile(method, b_pieces=b_pieces, has_bias=has_bias, arch=arch, M=M, N=N, K=K)


def _cuobjdump() -> str | None:
    import triton  # noqa: PLC0415

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return tool if os.path.exists(tool) else None


def sass_text(cubin: bytes) -> str | None:
    """``cuobjdump -sass`` of a cubin (Triton's own cuobjdump), or None where it is not there."""
    tool = _cuobjdump()
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, timeout=120).stdout


def sass_opcode_counts(sass: str) -> Counter:
    """Opcode (with modifiers, e.g. ``HMMA.1688.F32.TF32``) -> count, predicated ones included."""
    return Counter(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_x]+)*)",
                              sass, re.M))


_PTX_MMA = re.compile(r"\b(wgmma\.mma_async\.sync\.aligned\.m64n\d+k(\d+)\.f32\.(?:tf32|bf16)\.(?:tf32|bf16)"
                      r"|mma\.sync\.aligned\.m16n8k(\d+)\.row\.col\.f32\.(?:tf32|bf16)\.(?:tf32|bf16)\.f32"
                      r"|tcgen05\.mma\.cta_group::\d\.kind::(tf32|f16))")


def ptx_instruction(ptx: str) -> tuple[str, int]:
    """(instruction, K per instruction) of the Tensor Core MMAs in a kernel's PTX; one kind is expected."""
    found = {m.group(1) for m in _PTX_MMA.finditer(ptx)}
    if len(found) != 1:
        raise ValueError(f"expected one kind of Tensor Core MMA in the PTX, found {sorted(found)}")
    text = found.pop()
    if text.startswith("wgmma"):
        return "wgmma", int(re.search(r"k(\d+)\.", text).group(1))
    if text.startswith("mma.sync"):
        return "mma.sync", int(re.search(r"m16n8k(\d+)", text).group(1))
    return "tcgen05", 8 if text.endswith("tf32") else 16  # kind::tf32: K = 8; kind::f16: K = 16 (32 bytes)


def _evidence(ck, elements_per_thread: int) -> dict:
    instruction, k_instr = ptx_instruction(ck.asm["ptx"])
    out = {"instruction": instruction, "k_instr": k_instr, "elements_per_thread": elements_per_thread}
    sass = sass_text(ck.asm["cubin"])
    if sass is not None:
        counts = sass_opcode_counts(sass)
        for op in ("FFMA", "FMUL", "FADD"):  # sm_100 pairs them (FFMA2: two elements an instruction)
            out[op] = counts.get(op, 0) + 2 * counts.get(op + "2", 0)
    return out


def kernel_evidence(method, config, *, K: int = 256, arch: int = 90, has_bias: bool = False) -> dict:
    """The compiled kernel's instruction, its K, and its FP32 SASS opcode counts per element of C per thread."""
    emu_mm = _emu_mm()
    cfg = emu_mm.KernelConfig.parse(config) if isinstance(config, str) else config
    ck = compile_gemm_kernel(method, cfg, K=K, arch=arch, has_bias=has_bias)
    return {"method": str(method), "config": str(cfg), "arch": f"sm_{arch}",
            **_evidence(ck, cfg.bm * cfg.bn // (32 * cfg.num_warps))}


def fixup_evidence(method, *, arch: int = 90, has_bias: bool = False, b_pieces: bool = False) -> dict:
    """The same for the range fix-up kernel (its tile, ``_kernels._range_fixup.FIX_BM`` x ``FIX_BN``, over
    ``FIX_WARPS`` warps), with the tile sizes the counts are per (``bm``, ``bn``, ``bk``, ``threads``)."""
    from tcemu.emulation.gemm._kernels import _range_fixup as fix  # noqa: PLC0415

    ck = compile_fixup_kernel(method, arch=arch, has_bias=has_bias, b_pieces=b_pieces)
    threads = 32 * fix.FIX_WARPS
    return {"method": str(method), "kernel": "fixup", "arch": f"sm_{arch}", "bm": fix.FIX_BM, "bn": fix.FIX_BN,
            "bk": fix.FIX_BK, "threads": threads, **_evidence(ck, fix.FIX_BM * fix.FIX_BN // threads)}
