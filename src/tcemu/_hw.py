"""The one module that asks the machine what it has (cached): GPU, capability, driver, versions."""

from __future__ import annotations

import functools
import platform
import subprocess
from dataclasses import asdict, dataclass

import torch

__all__ = ["DeviceInfo", "device_info", "triton_version", "versions"]


@dataclass(frozen=True)
class DeviceInfo:
    """What the emulation needs to know about one device."""

    name: str
    capability: tuple[int, int] | None  # CUDA compute capability, None on CPU
    driver: str | None

    @property
    def has_tf32_tensor_cores(self) -> bool:
        return self.capability is not None and self.capability >= (8, 0)

    @property
    def has_bf16_tensor_cores(self) -> bool:
        return self.capability is not None and self.capability >= (8, 0)

    @property
    def is_hopper(self) -> bool:
        return self.capability is not None and self.capability[0] == 9


@functools.cache
def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )
        return out.stdout.strip().splitlines()[0] or None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


@functools.cache
def device_info(device: str | int | None = None) -> DeviceInfo:
    """Name, compute capability and driver of a CUDA device (or of the CPU when there is none)."""
    if device == "cpu" or not torch.cuda.is_available():
        return DeviceInfo(name=platform.processor() or platform.machine() or "cpu", capability=None, driver=None)
    idx = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
    return DeviceInfo(
        name=torch.cuda.get_device_name(idx),
        capability=tuple(torch.cuda.get_device_capability(idx)),
        driver=_nvidia_driver(),
    )


@functools.cache
def triton_version() -> str | None:
    try:
        import triton  # noqa: PLC0415 - optional
    except ImportError:
        return None
    return getattr(triton, "__version__", "unknown")


@functools.cache
def versions() -> dict[str, str | None]:
    """Versions worth recording next to every measurement."""
    import numpy  # noqa: PLC0415

    from . import __version__  # noqa: PLC0415

    info = device_info()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version(),
        "numpy": numpy.__version__,
        "tcemu": __version__,
        "gpu": info.name if info.capability else None,
        "driver": info.driver,
    }


def as_dict(info: DeviceInfo) -> dict:
    return asdict(info)
