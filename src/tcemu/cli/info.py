"""Show versions, the GPU and its compute capability, and which methods and backends run here (and why not)."""

from __future__ import annotations

import argparse

from .args import device as _device


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default=None, type=_device,
                        help="cpu, cuda or cuda:N (default: cuda if present, else cpu)")


def run(args: argparse.Namespace) -> int:
    import torch  # noqa: PLC0415

    from .. import _hw  # noqa: PLC0415
    from ..emulation.dispatch import get_backend  # noqa: PLC0415
    from ..emulation.methods import METHODS  # noqa: PLC0415

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    v = _hw.versions()
    print("tcemu", v["tcemu"])
    for key in ("python", "torch", "cuda", "triton", "numpy"):
        print(f"  {key:<8} {v[key] or 'not installed'}")
    if device.type == "cuda":
        info = _hw.device_info(device.index if device.index is not None else 0)
        cc = ".".join(map(str, info.capability)) if info.capability else "?"
        print(f"  device   {device}: {info.name}, compute capability {cc}, driver {info.driver or 'unknown'}")
    else:
        gpu = "no CUDA device visible" if not torch.cuda.is_available() else "CUDA present, running on cpu"
        print(f"  device   cpu ({gpu}): the PyTorch reference backend emulates every method exactly")

    try:
        triton_be = get_backend("triton")
        triton_err = None
    except (RuntimeError, ImportError) as exc:
        triton_be, triton_err = None, str(exc)

    print()
    print(f"{'method':<8} {'products':>8}  {'torch (reference)':<20} {'triton (fast)':<60}")
    for name, spec in METHODS.items():
        ref = get_backend("torch").unavailable_reason(device, spec) or "yes"
        if not spec.uses_tensor_cores or name == "tf32":
            fast = "n/a (runs as cuBLAS " + ("SGEMM" if name == "fp32" else "TF32") + " on CUDA)"
        elif triton_be is None:
            fast = triton_err
        else:
            fast = triton_be.unavailable_reason(device, spec) or "yes"
        print(f"{name:<8} {spec.n_products:>8}  {ref:<20} {fast:<60}")
    print()
    for name, spec in METHODS.items():
        print(f"  {name:<8} {spec.summary}")
    return 0
