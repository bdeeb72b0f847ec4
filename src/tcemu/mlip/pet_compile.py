"""``torch.compile`` for PET in MD: dynamic shapes, so that a changing neighbour count does not recompile."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from ..emulation.scope import remove_scopes

__all__ = ["PET_COMPILE_SCOPE", "compile_pet_"]

#: PET's methods that ``compile=True`` compiles: the structure preprocessing, the features and the prediction
PET_COMPILE_SCOPE = ("preprocess", "calculate_features", "predict")


def compile_pet_(model: nn.Module, *, scope: Iterable[str] = PET_COMPILE_SCOPE, backend: str | Callable = "inductor",
                 mode: str | None = None, model_scope: bool = False) -> nn.Module:
    """``torch.compile`` PET's backend methods in ``scope`` in place, with dynamic shapes; returns ``model``.

    In MD the neighbour count changes at every step (the number of pairs, and the width of PET's padded
    neighbour layout): a static compile (``dynamic=False``) builds new graphs for every new count, and then
    falls back to eager code at Dynamo's recompile limit. With dynamic shapes one set of graphs serves every
    step and system size (the emulated GEMMs are torch ops with shape-generic fake implementations; a product
    crossing the small-shape fallback threshold adds one graph per side).

    An emulated PET keeps its swapped layers and the scopes of :func:`tcemu.emulate_functional_` (the attention
    blocks of ``"+attn"``, entered inside the graphs); the whole-model scope of :func:`tcemu.emulate_` is removed
    unless ``model_scope``. That scope wraps PET's eager ``forward``, around the compiled methods, and Dynamo
    leaves torch-function modes on while a compiled graph runs, so the mode's Python handler would see every
    torch call of the graphs' wrappers at every step (about 240 per step for PET tiny, Inductor on the CPU) and
    Dynamo checks more guards (``benchmarks/results/cpu/md_guards/``). What it adds over the layers and the
    attention is about 0.1 % of PET's float32 contraction FLOPs (the composition model's and the structure
    code's small products), which on CUDA run as cuBLAS SGEMM under the small-shape fallback either way.
    """
    if not model_scope:
        remove_scopes(model, origin="emulate_")
    b = model.backend
    kwargs = _inductor_kwargs(mode) if backend == "inductor" else {"mode": mode}
    for name in scope:
        setattr(b, name, torch.compile(getattr(b, name), dynamic=True, backend=backend, **kwargs))
    return model


#: Inductor options for PET: the memory-coalescing tiling analysis off. Under ``tcemu.emulate_``'s functional
#: scope, Inductor 2.11's analysis fails an assertion on PET's dynamic-shape graphs (``tiling_utils``:
#: ``get_pw_red_splits``); its own note says it does not yet apply to dynamic shapes.
INDUCTOR_OPTIONS = {"triton.coalesce_tiling_analysis": False}


def _inductor_kwargs(mode: str | None) -> dict:
    """``options`` for ``torch.compile``: ``mode``'s own options plus :data:`INDUCTOR_OPTIONS` (torch.compile
    takes either a mode or options, not both)."""
    from torch._inductor import list_mode_options

    options = dict(list_mode_options(mode)) if mode else {}
    return {"options": {**options, **INDUCTOR_OPTIONS}}
