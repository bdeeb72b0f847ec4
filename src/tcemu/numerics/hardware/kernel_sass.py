"""What the emulated GEMM kernels compile to, without a GPU: the evidence behind the twin's schedule.

:func:`compile_gemm_kernel` compiles the kernel a configuration launches (the Triton kernel, or on sm_90 the
Gluon kernels, through ``emu_mm``'s own offline-compile functions) for ``sm_<arch>`` with this machine's Triton;
:func:`kernel_evidence` reads from it what :mod:`tcemu.numerics.schedule` relies on: the Tensor Core
instruction in the PTX (``mma.sync ... m16n8k8``, ``wgmma ... m64nNk8``, ``tcgen05.mma kind::tf32``), its K,
and the FP32 opcodes in the SASS (``cuobjdump -sass``, shipped with Triton): FFMA (contracted multiply-adds),
FMUL, FADD, and the elements of C each thread holds, so that counts per element can be compared with the
schedule's steps.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter

__all__ = ["compile_gemm_kernel", "sass_text", "sass_opcode_counts", "kernel_evidence", "ptx_instruction"]

_PTR_ARGS = ("a_ptr", "a1_ptr", "a2_ptr", "b0_ptr", "b1_ptr", "b2_ptr", "bias_ptr", "c_ptr", "flag_ptr")
_INT_ARGS = ("M", "N", "K", "stride_az", "stride_am", "stride_ak", "stride_bz", "stride_bn", "stride_bk",
             "stride_cz", "stride_cm", "stride_cn")


def _emu_mm():
    import importlib  # noqa: PLC0415

    return importlib.import_module("tcemu.emulation.gemm.launch")


def compile_gemm_kernel(method, config, *, K: int = 256, arch: int = 90, has_bias: bool = False):
    """Triton's compiled kernel (``.asm["ptx"]``, ``.asm["cubin"]``) for ``config`` on ``sm_<arch>``.

    Gluon configurations (``g``) compile their Gluon kernel on sm_90 (``emu_mm.wgmma_compile`` and its ws
    variants); elsewhere, and for BF16x9, the Triton kernel they fall back to (mode 1). The Triton kernel is
    compiled with the signature of a launch on contiguous 2-D operands (column strides 1, B unbatched).
    """
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415

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
    if cfg.wgmma:
        from dataclasses import replace  # noqa: PLC0415

        cfg = replace(cfg, wgmma=False, warp_specialized=False, mode=1, persistent=False)
    from tcemu.emulation.gemm._kernels._emu_mm import _emu_mm_kernel  # noqa: PLC0415

    ce = emu_mm._constexprs(spec, cfg, K, has_bias)
    options = {"num_warps": ce.pop("num_warps"), "num_stages": ce.pop("num_stages")}
    piece = "fp32" if spec.piece_format == "tf32" else "bf16"
    a_ty = piece if cfg.presplit else "fp32"
    names = list(_PTR_ARGS) + list(_INT_ARGS)
    types = [f"*{a_ty}"] * 3 + [f"*{piece}"] * 3 + ["*fp32"] * 2 + ["*i8"] + ["i32"] * len(_INT_ARGS)
    constexprs = dict(ce, stride_ak=1, stride_bk=1, stride_cn=1, stride_bz=0)
    signature = dict(zip(names, types)) | dict.fromkeys(constexprs, "constexpr")
    divisible = list(_PTR_ARGS) + ["M", "N", "stride_cm", "stride_az", "stride_cz"]
    if K % 16 == 0:
        divisible += ["K", "stride_am", "stride_bn"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    src = ASTSource(_emu_mm_kernel, signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)


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


def kernel_evidence(method, config, *, K: int = 256, arch: int = 90, has_bias: bool = False) -> dict:
    """The compiled kernel's instruction, its K, and its FP32 SASS opcode counts per element of C per thread."""
    emu_mm = _emu_mm()
    cfg = emu_mm.KernelConfig.parse(config) if isinstance(config, str) else config
    ck = compile_gemm_kernel(method, cfg, K=K, arch=arch, has_bias=has_bias)
    instruction, k_instr = ptx_instruction(ck.asm["ptx"])
    out = {"method": str(method), "config": str(cfg), "arch": f"sm_{arch}", "instruction": instruction,
           "k_instr": k_instr, "elements_per_thread": cfg.bm * cfg.bn // (32 * cfg.num_warps)}
    sass = sass_text(ck.asm["cubin"])
    if sass is not None:
        counts = sass_opcode_counts(sass)
        for op in ("FFMA", "FMUL", "FADD"):  # sm_100 pairs them (FFMA2: two elements an instruction)
            out[op] = counts.get(op, 0) + 2 * counts.get(op + "2", 0)
    return out
