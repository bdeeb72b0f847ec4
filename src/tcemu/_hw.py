"""The one module that asks the machine what it has (cached): GPU, capability, SM count, shared memory, Tensor
Core generation, Triton's interpreter mode, driver, versions."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from dataclasses import asdict, dataclass

import torch

__all__ = ["DeviceInfo", "capability", "device_info", "gpu_name", "interpreting", "shared_memory_per_block", "sm_count",
           "tensor_core_generation", "triton_version", "versions"]

#: TRITON_INTERPRET values that turn Triton's interpreter on, as Triton reads them (any case)
_INTERPRET_ON = ("1", "true", "on")


def interpreting() -> bool:
    """Whether Triton kernels run in its CPU interpreter (``TRITON_INTERPRET``), read at each call: Triton
    reads it at each launch, and tests switch it."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in _INTERPRET_ON


def _cuda_index(device: torch.device | str | int | None) -> int | None:
    """The CUDA device index of ``device`` (None: not a CUDA device, or CUDA unavailable)."""
    if isinstance(device, int):
        return device if torch.cuda.is_available() else None
    dev = torch.device("cuda" if device is None else device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.current_device() if dev.index is None else dev.index


_PROPERTIES: dict[int, object] = {}  # device index -> its properties, read once


def _properties(index: int):
    """``torch.cuda.get_device_properties(index)``, read once per device. A plain dict rather than
    ``functools.cache``: the attention's dispatch calls this under ``torch.compile``, and Dynamo warns on
    (and sees through) ``lru_cache`` wrappers."""
    props = _PROPERTIES.get(index)
    if props is None:
        props = _PROPERTIES[index] = torch.cuda.get_device_properties(index)
    return props


def capability(device: torch.device | str | int | None = None) -> tuple[int, int] | None:
    """The CUDA compute capability of ``device`` (default: the current CUDA device); None off CUDA."""
    index = _cuda_index(device)
    if index is None:
        return None
    props = _properties(index)
    return (props.major, props.minor)


def sm_count(device: torch.device | str | int | None = None) -> int | None:
    """Streaming multiprocessors of a CUDA ``device``; None off CUDA."""
    index = _cuda_index(device)
    return None if index is None else _properties(index).multi_processor_count


def gpu_name(device: torch.device | str | int | None = None) -> str | None:
    """``torch.cuda.get_device_name`` of a CUDA ``device`` (e.g. ``"NVIDIA H100 80GB HBM3"``), read once; None off
    CUDA."""
    index = _cuda_index(device)
    return None if index is None else _properties(index).name


def shared_memory_per_block(device: torch.device | str | int | None = None) -> int | None:
    """Shared memory one block may use on a CUDA ``device`` (the opt-in maximum where the GPU has one); None off
    CUDA."""
    index = _cuda_index(device)
    if index is None:
        return None
    props = _properties(index)
    return getattr(props, "shared_memory_per_block_optin", None) or props.shared_memory_per_block


#: Tensor Core generation by compute capability major (sm_80..sm_89: Ampere and Ada, the same mma.sync
#: instructions; sm_90: Hopper's wgmma; sm_100 and up: Blackwell's tcgen05)
_GENERATIONS = {8: "ampere", 9: "hopper", 10: "blackwell", 11: "blackwell", 12: "blackwell"}


def tensor_core_generation(device: torch.device | str | int | None = None) -> str | None:
    """``"ampere"`` (sm_8x: TF32 and BF16 mma.sync), ``"hopper"`` (sm_90: wgmma), ``"blackwell"`` (sm_100 and
    up), or None: no CUDA device, or one without TF32/BF16 Tensor Cores (before sm_80)."""
    cap = capability(device)
    return None if cap is None else _GENERATIONS.get(cap[0], "blackwell" if cap[0] > 12 else None)


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
        capability=capability(idx),
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
