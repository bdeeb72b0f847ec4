"""Emulated FP32 in any torch-based ASE calculator: one line in an existing script.

    calc = MetatomicCalculator(model, device="cuda")        # or torchani's, CHGNet's, MACE's, ...
    calc = tcemu.ase.emulate_calculator(calc, "tf32x3")     # the same calculator, its models emulated in place

:func:`emulate_calculator` looks for the ``torch.nn.Module`` objects the calculator holds: its attributes
(``calc.model``, CHGNet's and torchani's; ``calc.models[i]``, MACE's; ``calc._model``, metatomic's
``MetatomicCalculator``), the items of lists, tuples and dicts among them, and the calculators a calculator
wraps (tcemu's own ``PotentialCalculator``, ASE's ``SumCalculator``). Each model is emulated in place
(:func:`tcemu.emulate_`; with ``attention=True`` also the attention blocks tcemu knows, PET's, through
:func:`tcemu.emulate_functional_`), the calculator's cached results are dropped, and the report of what was
and was not reached is kept as ``calc.tcemu_report`` (:class:`tcemu._engine.EmulationReport`).

TorchScript models (metatomic's exported ``.pt`` files, ``MetatomicCalculator("model.pt")``; a MACE or torchani
model scripted for deployment) are emulated by rewriting their graphs (:mod:`tcemu.emulation.script`); custom
ops inside them are listed in the report. Not reachable: float64 models (MACE's default: build the calculator
with ``default_dtype="float32"``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch import nn

from ._engine import EmulationReport, FilterFn, emulate_models_, restore_models_

__all__ = ["emulate_calculator", "restore", "torch_models"]

#: how deep :func:`torch_models` looks inside containers and wrapped calculators
_MAX_DEPTH = 3


def _is_calculator(obj: Any) -> bool:
    try:
        from ase.calculators.calculator import BaseCalculator
    except ImportError:  # pragma: no cover - ase is what calls this module
        return False
    return isinstance(obj, BaseCalculator)


def _walk(obj: Any, where: str, depth: int, seen: set[int]) -> Iterator[tuple[str, nn.Module]]:
    if id(obj) in seen or depth > _MAX_DEPTH:
        return
    seen.add(id(obj))
    if isinstance(obj, nn.Module):
        yield where, obj
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            yield from _walk(item, f"{where}[{i}]", depth + 1, seen)
    elif isinstance(obj, dict):
        for key, item in obj.items():
            yield from _walk(item, f"{where}[{key!r}]", depth + 1, seen)
    elif _is_calculator(obj):
        for name, item in vars(obj).items():
            if name not in ("atoms", "results", "parameters"):
                yield from _walk(item, f"{where}.{name}", depth + 1, seen)


def torch_models(calc: Any) -> list[tuple[str, nn.Module]]:
    """``(where, module)`` for each ``torch.nn.Module`` the calculator holds (see the module docstring)."""
    if not _is_calculator(calc):
        raise TypeError(f"expected an ASE calculator, got {type(calc).__name__}; for a torch model call "
                        "tcemu.emulate_(model, method)")
    return list(_walk(calc, "calc", 0, set()))


def emulate_calculator(
    calc: Any,
    method: str = "tf32x3",
    filter_fn: FilterFn | None = None,
    *,
    attention: bool = False,
    attention_filter: FilterFn | None = None,
    backend: str = "auto",
    verbose: bool = False,
) -> Any:
    """Emulate the torch models of an ASE calculator in place and return the same calculator.

    Args:
        calc: an ASE calculator holding its model(s) as ``torch.nn.Module`` attributes.
        method: emulation method (``"tf32x3"``, ``"bf16x6"``, ...); ``"tf32x3+attn"`` means ``attention=True``.
        filter_fn: ``(module, fqn) -> bool``: only the ``nn.Linear`` layers it selects are emulated.
        attention: also emulate the attention products of the attention blocks tcemu knows (PET's).
        attention_filter: ``(module, fqn) -> bool`` choosing the attention blocks instead.
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.
        verbose: print the report's summary.

    Returns:
        ``calc``, with ``calc.tcemu_report`` (:class:`~tcemu._engine.EmulationReport`).

    Raises:
        TypeError: ``calc`` is not an ASE calculator.
        ValueError: it holds no float32 eager torch model (the message says why and what to do).
    """
    base, plus, extra = str(method).partition("+")
    if plus and extra != "attn":
        raise ValueError(f"unknown method suffix in {method!r}: only '+attn' (attention emulated too)")
    found = torch_models(calc)
    if not found:
        raise ValueError(f"{type(calc).__name__} holds no torch.nn.Module in its attributes, so tcemu cannot find its "
                         "model; emulate the model itself with tcemu.emulate_(model, method)")
    report = emulate_models_(found, base, filter_fn=filter_fn, attention=attention or bool(plus),
                             attention_filter=attention_filter, backend=backend)
    _drop_results(calc)
    calc.tcemu_report = report
    if verbose:
        print(report.summary())
    return calc


def restore(calc: Any) -> Any:
    """Undo :func:`emulate_calculator`: the calculator's models back to plain FP32 layers."""
    restore_models_(torch_models(calc))
    _drop_results(calc)
    calc.__dict__.pop("tcemu_report", None)
    return calc


def _drop_results(calc: Any) -> None:
    """Forget cached results, so that the next call computes with the emulated model (ASE caches per atoms)."""
    if hasattr(calc, "reset"):
        calc.reset()
    for item in vars(calc).values():  # a wrapped calculator caches too
        if _is_calculator(item) and hasattr(item, "reset"):
            item.reset()


def report(calc: Any) -> EmulationReport | None:
    """The report of the last :func:`emulate_calculator` on ``calc``, or None."""
    return getattr(calc, "tcemu_report", None)
