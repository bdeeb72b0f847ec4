"""Offline compiles of the Triton kernels for a GPU architecture (no GPU needed): CPU tests check that the
kernels the dispatcher launches compile for sm_90, and read their PTX and SASS."""

from __future__ import annotations

import triton


def triton_compile(kernel, args: list[tuple[str, str]], constexprs: dict, arch: int, num_warps: int,
                   num_stages: int | None = None, attrs: dict | None = None):
    """Compile a ``@triton.jit`` kernel for ``sm_<arch>`` with the given (name, type) arguments, e.g.
    ("a_ptr", "*fp32"), ("M", "i32"), constexpr values and Triton's argument attributes (e.g. divisibility).
    Returns Triton's compiled kernel (``.asm["ptx"]``)."""
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415

    signature = dict(args) | dict.fromkeys(constexprs, "constexpr")
    options = {"num_warps": num_warps} | ({"num_stages": num_stages} if num_stages is not None else {})
    src = ASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)


def launch_compile(kernel, values: list, constexprs: dict, arch: int, num_warps: int,
                   num_stages: int | None = None):
    """Compile a ``@triton.jit`` kernel for ``sm_<arch>`` as a launch with these positional argument ``values``
    compiles it: a torch dtype stands for a 16-byte aligned tensor of that dtype, an int for itself. Each value is
    specialised by Triton's own launch rule (pointer and integer divisibility by 16, an integer 1 as a constant),
    so the kernel is the one the launch gets. ``constexprs``: the remaining (keyword) arguments."""
    from triton._C.libtriton import native_specialize_impl  # noqa: PLC0415
    from triton.backends.compiler import BaseBackend, GPUTarget  # noqa: PLC0415
    from triton.compiler import make_backend  # noqa: PLC0415
    from triton.runtime.jit import MockTensor  # noqa: PLC0415

    names = kernel.arg_names[: len(values)]
    backend = make_backend(GPUTarget("cuda", arch, 32))
    args, attrs, consts = [], {}, dict(constexprs)
    for i, (name, value) in enumerate(zip(names, values)):
        ty, spec = native_specialize_impl(BaseBackend, MockTensor.wrap_dtype(value), False, True, True)
        if ty == "constexpr":
            consts[name] = spec
            continue
        args.append((name, ty))
        parsed = backend.parse_attr(spec) if isinstance(spec, str) else []
        if parsed:
            attrs[(i,)] = parsed
    return triton_compile(kernel, args, consts, arch, num_warps, num_stages, attrs=attrs)
