"""``torch.compile`` for PET in MD: dynamic shapes, so that a changing neighbour count does not recompile."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

__all__ = ["PET_COMPILE_SCOPE", "compile_pet_"]

#: PET's methods that ``compile=True`` compiles: the structure preprocessing, the features and the prediction
PET_COMPILE_SCOPE = ("preprocess", "calculate_features", "predict")


def compile_pet_(model: nn.Module, *, scope: Iterable[str] = PET_COMPILE_SCOPE, backend: str | Callable = "inductor",
                 mode: str | None = None) -> nn.Module:
    """``torch.compile`` PET's backend methods in ``scope`` in place, with dynamic shapes; returns ``model``.

    In MD the neighbour count changes at every step (the number of pairs, and the width of PET's padded
    neighbour layout): a static compile (``dynamic=False``) builds new graphs for every new count, and then
    falls back to eager code at Dynamo's recompile limit. With dynamic shapes one set of graphs serves every
    step and system size (the emulated GEMMs are torch ops with shape-generic fake implementations; a product
    crossing the small-shape fallback threshold adds one graph per side).
    """
    b = model.backend
    for name in scope:
        setattr(b, name, torch.compile(getattr(b, name), dynamic=True, backend=backend, mode=mode))
    return model
