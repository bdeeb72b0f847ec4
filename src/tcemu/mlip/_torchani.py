"""torchani 2.2.4 without a setuptools pin."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import types
import warnings

__all__ = ["import_torchani"]


def import_torchani() -> types.ModuleType:
    """``import torchani`` (2.2.4), also where setuptools 82 removed ``pkg_resources``.

    torchani's ``__init__`` reads its own version with ``pkg_resources.get_distribution``, and nothing else of
    it. Without ``pkg_resources``, its import gets a module with those two names answered by
    ``importlib.metadata``, for the import only (removed afterwards), so no setuptools pin is needed.
    """
    if "torchani" in sys.modules:
        return sys.modules["torchani"]
    missing = "pkg_resources" in sys.modules and sys.modules["pkg_resources"] is None
    if not missing and importlib.util.find_spec("pkg_resources") is not None:
        with warnings.catch_warnings():  # pkg_resources warns that it is deprecated
            warnings.simplefilter("ignore")
            import torchani
        return torchani
    had, previous = "pkg_resources" in sys.modules, sys.modules.get("pkg_resources")
    shim = types.ModuleType("pkg_resources", "importlib.metadata answers for torchani's import (tcemu)")
    shim.DistributionNotFound = importlib.metadata.PackageNotFoundError
    shim.get_distribution = lambda name: types.SimpleNamespace(version=importlib.metadata.version(name))
    sys.modules["pkg_resources"] = shim
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torchani
    finally:
        if sys.modules.get("pkg_resources") is shim:  # as it was: absent, or blocked (None)
            if had:
                sys.modules["pkg_resources"] = previous
            else:
                del sys.modules["pkg_resources"]
    return torchani
