"""Interpreter-start hook of tcemu (run by ``tcemu-autoload.pth``): ``TCEMU_FP32_PRECISION`` for any script.

Standard library only, and nothing at all unless the variable is set to an emulation method: then it waits
for ``import torch`` (an import finder that steps aside after that one import) and installs
:func:`tcemu.autoload.install_from_environment`'s hook at the first call of any ``torch.nn.Module``, so a
process that never runs a model never imports tcemu. See :mod:`tcemu.autoload`.
"""

from __future__ import annotations

import os
import sys

ENV_VAR = "TCEMU_FP32_PRECISION"
OFF_VALUES = ("", "ieee", "fp32", "none", "off", "0")


def _handover(module, args):
    """The first forward pre-hook: import tcemu, install its hook in place of this one, run it once."""
    from tcemu import autoload

    _handover.handle.remove()
    autoload.install_from_environment()
    return autoload._pre_hook(module, args) if autoload.installed() else None


def _on_torch_imported() -> None:
    from torch.nn.modules.module import register_module_forward_pre_hook

    _handover.handle = register_module_forward_pre_hook(_handover)


class _TorchLoader:
    """torch's own loader, then :func:`_on_torch_imported` (the import protocol's two methods; the rest is
    torch's loader's). No importlib.abc base: importing it costs tens of milliseconds at interpreter start."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        _on_torch_imported()


class _TorchFinder:
    """A ``sys.meta_path`` finder: finds ``torch`` by the other finders, wraps its loader, and steps aside."""

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _TorchLoader(spec.loader)
                return spec
        return None


def activate() -> None:
    """Arm the hook if ``TCEMU_FP32_PRECISION`` names an emulation method (checked when tcemu loads)."""
    if os.environ.get(ENV_VAR, "").strip().lower() in OFF_VALUES:
        return
    if "torch" in sys.modules:
        _on_torch_imported()
    elif not any(isinstance(f, _TorchFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchFinder())
