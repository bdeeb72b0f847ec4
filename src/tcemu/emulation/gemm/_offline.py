"""Offline compiles of the Triton kernels for a GPU architecture (no GPU needed): CPU tests check that the
kernels the dispatcher launches compile for sm_90, and read their PTX."""

from __future__ import annotations

import triton


def triton_compile(kernel, args: list[tuple[str, str]], constexprs: dict, arch: int, num_warps: int,
                   num_stages: int | None = None):
    """Compile a ``@triton.jit`` kernel for ``sm_<arch>`` with the given (name, type) arguments, e.g.
    ("a_ptr", "*fp32"), ("M", "i32"), and constexpr values. Returns Triton's compiled kernel (``.asm["ptx"]``)."""
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415

    signature = dict(args) | dict.fromkeys(constexprs, "constexpr")
    options = {"num_warps": num_warps} | ({"num_stages": num_stages} if num_stages is not None else {})
    src = ASTSource(kernel, signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
