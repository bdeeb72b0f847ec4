"""Emulate the torch models an MD engine holds: the core shared by :mod:`tcemu.ase`, :mod:`tcemu.torchsim` and
:mod:`tcemu.autoload`.

:func:`emulate_models_` takes the ``nn.Module`` objects found in a calculator, a TorchSim model or a script,
emulates each in place with :func:`tcemu.emulate_` (and, with ``attention=True``, the attention products of
the attention blocks it knows, by :func:`tcemu.emulate_functional_`), and returns an :class:`EmulationReport`
that says what was emulated and what could not be reached: float64 models (nothing to emulate) and the layers
:func:`tcemu.unreachable_layers` lists (custom ops inside TorchScript graphs among them), plus the modules that
hold weights outside ``nn.Linear`` layers. TorchScript models (metatomic's exported ``.pt`` files, deployed MACE
or torchani models) are emulated by rewriting their graphs (:mod:`tcemu.emulation.script`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["EmulationReport", "Unreached", "default_attention_filter", "emulate_models_", "restore_models_"]

FilterFn = Callable[[nn.Module, str], bool]

#: modules whose float32 parameters are not operands of a matrix product (scales, shifts, look-up tables)
_NOT_PRODUCTS = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase, nn.Embedding, nn.EmbeddingBag,
                 *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()))


@dataclass(frozen=True)
class Unreached:
    """A module (or a whole model) whose products the emulation does not replace, and why."""

    where: str
    type_name: str
    reason: str


@dataclass(frozen=True)
class EmulationReport:
    """What :func:`emulate_models_` did.

    Attributes:
        method: the emulation method's name.
        attention: whether attention was asked for.
        models: where each emulated model was found (``"calc.model"``, ``"calc.models[0]"``).
        emulated_layers: ``EmulatedLinear`` layers in those models.
        attention_blocks: modules whose attention runs emulated.
        linear_weight_fraction: share of the models' float32 weights of matrix products (parameters of modules
            other than normalisations and embeddings) that emulated layers hold.
        unreached: modules or models the emulation does not reach, with the reason.
        other_weights: module types holding float32 weights outside ``nn.Linear`` layers, with counts (their
            products are emulated only where tcemu's functional emulation reaches them).
    """

    method: str
    attention: bool
    models: tuple[str, ...]
    emulated_layers: int
    attention_blocks: int
    linear_weight_fraction: float
    unreached: tuple[Unreached, ...] = ()
    other_weights: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """A few lines for a log or a terminal."""
        lines = [f"tcemu: {self.method}{'+attn' if self.attention else ''} in {', '.join(self.models) or 'no model'}: "
                 f"{self.emulated_layers} linear layers ({self.linear_weight_fraction:.0%} of the product weights), "
                 f"{self.attention_blocks} attention blocks"]
        lines += [f"  not emulated: {u.where} ({u.type_name}): {u.reason}" for u in self.unreached]
        if self.other_weights:
            kinds = ", ".join(f"{name} x{n}" for name, n in sorted(self.other_weights.items()))
            lines.append(f"  weights outside nn.Linear (emulated only where tcemu's functional emulation reaches "
                         f"their products): {kinds}")
        return "\n".join(lines)


def default_attention_filter() -> FilterFn | None:
    """The attention blocks tcemu knows in the models loaded in this process: PET's (metatrain), if loaded."""
    if "metatrain" not in sys.modules:  # a PET model cannot exist without it; importing it costs seconds
        return None
    from tcemu.mlip.models import is_pet_attention_block

    return is_pet_attention_block


def _float_dtypes(mod: nn.Module) -> set[torch.dtype]:
    return {p.dtype for p in mod.parameters() if p.is_floating_point()}


def _class_name(mod: nn.Module) -> str:
    """The module's class name; a TorchScript module's is its original class's."""
    return (getattr(mod, "original_name", None) or type(mod).__name__) if _is_script(mod) else type(mod).__name__


def _is_script(mod: nn.Module) -> bool:
    return isinstance(mod, torch.jit.ScriptModule)


def _weights_report(mod: nn.Module) -> tuple[int, int, dict[str, int]]:
    """(float32 parameter elements in EmulatedLinear layers, those in any module but normalisations and embeddings,
    the other holders by type)."""
    from tcemu import EmulatedLinear

    emulated = total = 0
    others: dict[str, int] = {}
    rewritten = _rewritten_modules(mod)
    not_products = {cls.__name__ for cls in _NOT_PRODUCTS}
    for sub in mod.modules():
        n = sum(p.numel() for p in sub.parameters(recurse=False) if p.dtype == torch.float32)
        if not n or isinstance(sub, _NOT_PRODUCTS) or (_is_script(sub) and _class_name(sub) in not_products):
            continue
        total += n
        if isinstance(sub, EmulatedLinear) or (id(sub) in rewritten and _class_name(sub) == "Linear"):
            emulated += n
        elif _is_script(sub) and _class_name(sub) != "Linear":
            key = f"TorchScript {_class_name(sub)}"
            others[key] = others.get(key, 0) + 1
        elif not isinstance(sub, nn.Linear) and not _is_script(sub):
            key = f"{type(sub).__module__.split('.')[0]}.{type(sub).__qualname__}"
            others[key] = others.get(key, 0) + 1
    return emulated, total, others


def _rewritten_modules(mod: nn.Module) -> set[int]:
    """Ids of the modules inside the TorchScript modules of ``mod`` whose graphs are rewritten."""
    from tcemu.emulation.script import is_emulated, script_roots

    return {id(sub) for _, root in script_roots(mod) if is_emulated(root) for sub in root.modules()}


def _emulated_layers(mod: nn.Module) -> int:
    """``EmulatedLinear`` layers, and ``nn.Linear`` layers of rewritten TorchScript graphs."""
    from tcemu import EmulatedLinear

    rewritten = _rewritten_modules(mod)
    return sum(isinstance(m, EmulatedLinear) or (id(m) in rewritten and _class_name(m) == "Linear")
               for m in mod.modules())


def _scripted_attention(mod: nn.Module) -> int:
    """Attention calls in the rewritten TorchScript graphs of ``mod``."""
    from tcemu.emulation.script import rewritten_ops, script_roots

    return sum(rewritten_ops(root).get("tcemu::scaled_dot_product_attention", 0) for _, root in script_roots(mod))


def outermost(found: Iterable[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """The modules of ``found`` that are not the same object as, or inside, another one of them (first name kept)."""
    found = list(found)
    inside: set[int] = set()
    for _, mod in found:
        if id(mod) not in inside:
            inside.update(id(m) for m in mod.modules() if m is not mod)
    seen: set[int] = set()
    out = []
    for where, mod in found:
        if id(mod) in inside or id(mod) in seen:
            continue
        seen.add(id(mod))
        out.append((where, mod))
    return out


def emulate_models_(
    found: Iterable[tuple[str, nn.Module]],
    method: str,
    *,
    filter_fn: FilterFn | None = None,
    attention: bool = False,
    attention_filter: FilterFn | None = None,
    backend: str = "auto",
) -> EmulationReport:
    """Emulate every model of ``found`` (``(where, module)`` pairs) in place; see the module docstring.

    Each model is first restored (:func:`tcemu.restore_`), so a second call switches the method cleanly.

    Raises:
        ValueError: ``method`` is not an emulation method, or no model has float32 parameters (a float64
            model computes in FP64: there is nothing to emulate).
    """
    import tcemu

    spec = tcemu.get_method(method)
    if spec.name == "fp32":
        raise ValueError("method 'fp32' is plain FP32, not an emulation; to undo emulation, call restore")
    models = outermost(found)
    unreached: list[Unreached] = []
    emulated: list[tuple[str, nn.Module]] = []
    for where, mod in models:
        if torch.float32 not in _float_dtypes(mod):
            dtypes = ", ".join(sorted(str(d).removeprefix("torch.") for d in _float_dtypes(mod))) or "none"
            unreached.append(Unreached(where, type(mod).__name__,
                                       f"no float32 parameters ({dtypes}): nothing to emulate"))
        else:
            emulated.append((where, mod))
    if not emulated:
        detail = "; ".join(f"{u.where}: {u.reason}" for u in unreached) or "no torch.nn.Module found"
        raise ValueError(f"tcemu: nothing to emulate ({detail}). Emulation replaces float32 products: build "
                         "the model in float32 (e.g. MACECalculator(..., default_dtype='float32'))")
    attention_filter = attention_filter or (default_attention_filter() if attention else None)
    layers = blocks = weights_emulated = weights_total = 0
    others: dict[str, int] = {}
    for where, mod in emulated:
        tcemu.restore_(mod)
        tcemu.emulate_(mod, spec, filter_fn=filter_fn, backend=backend, warn_unreachable=False)
        unreached += [Unreached(f"{where}.{u.fqn}" if u.fqn else where, u.type_name, u.reason)
                      for u in tcemu.unreachable_layers(mod)]
        if attention and attention_filter is not None:
            n = sum(1 for fqn, m in mod.named_modules() if attention_filter(m, fqn))
            if n:
                tcemu.emulate_functional_(mod, spec, attention_filter, attention=True, matmuls=False, backend=backend)
                blocks += n
        blocks += _scripted_attention(mod) if attention else 0  # emulate_ rewrote their attention calls
        layers += _emulated_layers(mod)
        e, t, o = _weights_report(mod)
        weights_emulated, weights_total = weights_emulated + e, weights_total + t
        for k, v in o.items():
            others[k] = others.get(k, 0) + v
    if attention and not blocks:
        warnings.warn(f"tcemu: attention=True, but {', '.join(w for w, _ in emulated)} has no attention block that "
                      "tcemu knows (PET's); pass attention_filter=(module, fqn) -> bool to choose them",
                      stacklevel=3)
    return EmulationReport(
        method=spec.name, attention=attention, models=tuple(w for w, _ in emulated), emulated_layers=layers,
        attention_blocks=blocks, linear_weight_fraction=weights_emulated / weights_total if weights_total else 0.0,
        unreached=tuple(unreached), other_weights=others)


def restore_models_(found: Iterable[tuple[str, nn.Module]]) -> None:
    """Undo :func:`emulate_models_` on every model of ``found``."""
    import tcemu

    for _, mod in outermost(found):
        tcemu.restore_(mod)
