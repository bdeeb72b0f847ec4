"""Emulated FP32 in TorchSim: emulate a ``ModelInterface`` in place, then run TorchSim's integrators and
optimizers on it as usual, batched.

    model = MetatomicModel(pet.export(), device="cuda")        # metatomic-torchsim (or MaceModel, ...)
    tcemu.torchsim.emulate_model(model, "tf32x3", attention=True)
    final = ts.integrate(system=[atoms_a, atoms_b], model=model, integrator=..., n_steps=..., ...)

A TorchSim model is a ``torch.nn.Module`` that holds the potential (``MetatomicModel._model``,
``MaceModel.model``, ...), so :func:`emulate_model` emulates all of it (:func:`tcemu.emulate_`, and with
``attention=True`` the attention blocks tcemu knows, PET's) and keeps the report as ``model.tcemu_report``.
The model must compute in float32 (``model.dtype``): TorchSim's own models often default to float64, where
there is nothing to emulate.

:func:`nve` and :func:`fire` give a velocity-Verlet NVE and a FIRE relaxation as ``(state, step)`` with the
API of the installed TorchSim (0.3: ``ts.integrators.nve(model, dt=, kT=)``; 0.5: ``nve_init`` / ``nve_update``;
0.6: ``nve_init`` / ``nve_step``, the seed on the state), for loops that time or log each step.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ._engine import FilterFn, emulate_models_, restore_models_

__all__ = ["emulate_model", "fire", "nve", "restore_model"]


def _check_model(model: Any) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"expected a TorchSim ModelInterface (a torch.nn.Module), got {type(model).__name__}")
    dtype = getattr(model, "dtype", None)
    if dtype is not None and dtype != torch.float32:
        raise ValueError(f"{type(model).__name__} computes in {dtype}; emulation replaces float32 products: "
                         "create it with dtype=torch.float32 (or a float32 model)")


def emulate_model(
    model: Any,
    method: str = "tf32x3",
    filter_fn: FilterFn | None = None,
    *,
    attention: bool = False,
    attention_filter: FilterFn | None = None,
    backend: str = "auto",
) -> Any:
    """Emulate a TorchSim model in place and return it (arguments as :func:`tcemu.ase.emulate_calculator`).

    Raises:
        TypeError: ``model`` is not a ``torch.nn.Module``.
        ValueError: it computes in float64, or holds only float64 modules.
    """
    _check_model(model)
    base, plus, extra = str(method).partition("+")
    if plus and extra != "attn":
        raise ValueError(f"unknown method suffix in {method!r}: only '+attn' (attention emulated too)")
    model.tcemu_report = emulate_models_([("model", model)], base, filter_fn=filter_fn,
                                         attention=attention or bool(plus), attention_filter=attention_filter,
                                         backend=backend)
    return model


def restore_model(model: Any) -> Any:
    """Undo :func:`emulate_model`."""
    restore_models_([("model", model)])
    model.__dict__.pop("tcemu_report", None)
    return model


def _tensor(value: float, model: Any) -> torch.Tensor:
    return torch.tensor(value, dtype=model.dtype, device=model.device)


def nve(model: Any, state: Any, *, dt_fs: float, temperature_K: float, seed: int | None = 0
        ) -> tuple[Any, Callable[[Any], Any]]:
    """(initial MD state, step function) of TorchSim's velocity-Verlet NVE for ``state`` (a SimState or what
    ``ts.initialize_state`` takes: ASE atoms, a list of them), momenta drawn at ``temperature_K``."""
    import torch_sim as ts
    from torch_sim import integrators
    from torch_sim.units import MetalUnits

    state = ts.initialize_state(state, model.device, model.dtype)
    dt = _tensor(dt_fs * 1e-3 * MetalUnits.time, model)  # MetalUnits.time: one picosecond in metal units
    kT = _tensor(temperature_K * MetalUnits.temperature, model)
    if hasattr(integrators, "nve_init"):  # TorchSim 0.5 and later (keywords: the argument order changed in 0.6)
        if "seed" in inspect.signature(integrators.nve_init).parameters:  # 0.5
            md = integrators.nve_init(state=state, model=model, kT=kT, seed=seed)
        else:  # 0.6: the state carries the seed of its random numbers
            state.rng = seed
            md = integrators.nve_init(state=state, model=model, kT=kT)
        nve_step = getattr(integrators, "nve_step", None) or integrators.nve_update
        return md, lambda s: nve_step(state=s, model=model, dt=dt)
    init_fn, update_fn = integrators.nve(model=model, dt=dt, kT=kT, seed=seed)  # TorchSim 0.3
    return init_fn(state), lambda s: update_fn(s, dt=dt)


def fire(model: Any, state: Any) -> tuple[Any, Callable[[Any], Any]]:
    """(initial FIRE state, step function) of TorchSim's FIRE (ASE flavour, positions only) for ``state``."""
    import torch_sim as ts
    from torch_sim import optimizers

    state = ts.initialize_state(state, model.device, model.dtype)
    if hasattr(optimizers, "fire_init"):  # TorchSim 0.5 and later
        opt = optimizers.fire_init(state=state, model=model)
        return opt, lambda s: optimizers.fire_step(state=s, model=model)
    init_fn, step_fn = optimizers.fire(model=model)  # TorchSim 0.3
    return init_fn(state), step_fn
