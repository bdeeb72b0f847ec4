"""tcemu's private Triton and Gluon kernels, and what their host-side launchers share."""


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host-side grid sizes. ``triton.cdiv`` is a constexpr function: called from Python it costs
    microseconds (argument unwrapping), which every emulated product's launch paid several times."""
    return -(-a // b)
