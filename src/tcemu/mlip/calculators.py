"""Potentials from other packages' ASE calculators: ANI-1x (torchani), CHGNet, MACE, and any calculator factory.

**The factory protocol** (``tcemu mlip sp|curve|nve|relax|report --calculator module:factory``,
:func:`from_factory`)::

    def factory(*, dtype: str = "float32", device: str = "cpu") -> ase.calculators.calculator.Calculator

- ``dtype``, ``"float32"`` or ``"float64"``: the precision the calculator builds its model and its inputs in
  (for MACE: ``MACECalculator(models=..., default_dtype=dtype)``). The harness asks for ``"float64"`` for the
  reference and ``"float32"`` for every other method. A factory without a ``dtype`` parameter gets its model
  converted with ``.double()`` for the reference; its calculator must then feed float64 inputs.
- ``device`` (optional): the torch device, passed when the factory takes it.
- The calculator keeps its torch modules where the harness finds them: ``calc.models`` (a list, as MACE's),
  ``calc.model`` or ``calc.module``, or the attribute named by ``module_attr``; each is emulated in place.
- Each call returns a new calculator with the same weights.

The FP64 reference is checked, not trusted: its run must compute no float32 products (measured by
:func:`tcemu.coverage`). A calculator that builds float32 inputs for its float64 copy is refused with the
reason (``ValueError``), never compared with.

:func:`mace_random` is such a factory (a randomly initialised MACE): ``--calculator tcemu.mlip.calculators:mace_random``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import importlib.util
import inspect
import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tcemu.mlip._torchani import import_torchani
from tcemu.mlip.potential import Potential, warnings_off

__all__ = ["ANI_SPECIES", "ani1x", "build_ani1x", "build_chgnet", "build_mace", "chgnet", "find_modules",
           "from_calculator", "from_factory", "load_factory", "mace_potential", "mace_random"]

# ---------------------------------------------------------------------------------------------
# ANI-1x (torchani 2.2.4, weights in the wheel)
# ---------------------------------------------------------------------------------------------

ANI_SPECIES = ("H", "C", "N", "O")


def build_ani1x() -> nn.Module:
    """The ANI-1x 8-model ensemble from the files inside the torchani 2.2.4 wheel (no download)."""
    torchani = import_torchani()
    from torchani import neurochem
    root = Path(torchani.__file__).parent / "resources" / "ani-1x_8x"
    consts = neurochem.Constants(str(root / "rHCNO-5.2R_16-3.5A_a4-8.params"))
    aev = torchani.AEVComputer(**consts)
    sae = neurochem.load_sae(str(root / "sae_linfit.dat"))
    ensemble = neurochem.load_model_ensemble(consts.species, str(root / "train"), 8)
    # networks in float32; the self-energy shifter keeps torchani's float64 (its index_put needs it on CUDA),
    # so the total energy is summed in float64 and only the network outputs carry the method's rounding
    return torchani.nn.Sequential(aev, ensemble, sae).eval()


def _wrap_ani(model: nn.Module, device: str):
    import_torchani()
    import torchani.ase

    return torchani.ase.Calculator(list(ANI_SPECIES), model)


def ani1x() -> Potential:
    """ANI-1x (torchani 2.2.4): H, C, N, O; energies in eV through torchani's ASE calculator."""
    from ase.data import atomic_numbers

    return Potential(
        name="ani1x",
        build_module=build_ani1x,
        wrap=_wrap_ani,
        elements=frozenset(atomic_numbers[s] for s in ANI_SPECIES),
        description="ANI-1x 8-model ensemble, torchani 2.2.4 (weights shipped in the wheel)",
    )


# ---------------------------------------------------------------------------------------------
# CHGNet (chgnet 0.4.2, weights in the wheel)
# ---------------------------------------------------------------------------------------------


def build_chgnet() -> nn.Module:
    """CHGNet 0.3.0 pretrained weights from the chgnet wheel (no download), float32, CPU."""
    with warnings_off(), contextlib.redirect_stdout(io.StringIO()):
        from chgnet.model import CHGNet

        return CHGNet.load(verbose=False, use_device="cpu").float().eval()


@contextlib.contextmanager
def _chgnet_dtype(dtype: torch.dtype):
    """CHGNet hard-codes float32 in its graph converter; switch the module constants for a float64 run."""
    import chgnet.graph.converter as conv
    import chgnet.model.model as mm

    old = conv.TORCH_DTYPE, mm.TORCH_DTYPE
    conv.TORCH_DTYPE = mm.TORCH_DTYPE = dtype
    try:
        yield
    finally:
        conv.TORCH_DTYPE, mm.TORCH_DTYPE = old


def _wrap_chgnet(model: nn.Module, device: str):
    with warnings_off(), contextlib.redirect_stdout(io.StringIO()):
        from chgnet.model.dynamics import CHGNetCalculator

        calc = CHGNetCalculator(model=model, use_device=device, on_isolated_atoms="ignore")
    float64 = next(model.parameters()).dtype == torch.float64
    if float64:
        _patch_chgnet_float64(model)
    inner_calculate = calc.calculate

    def calculate(atoms=None, properties=None, system_changes=None):
        # only what is asked: "e" runs no backward pass, "ef" no stress (CHGNet's default is "efsm")
        props = properties or ["energy", "forces", "stress"]
        task = (
            "e" + ("f" if "forces" in props or "stress" in props else "") + ("s" if "stress" in props else "")
        )
        with warnings_off(), _chgnet_dtype(torch.float64) if float64 else contextlib.nullcontext():
            return inner_calculate(atoms, props, system_changes, task=task)

    calc.calculate = calculate
    return calc


def _patch_chgnet_float64(model: nn.Module) -> None:
    """CHGNet's composition model casts its features with ``.float()``; cast them to float64 for its ``fc``."""
    fc = model.composition_model.fc
    fc_forward = fc.forward
    fc.forward = lambda x: fc_forward(x.to(torch.float64))


def chgnet() -> Potential:
    """CHGNet 0.3.0 (chgnet 0.4.2): elements 1 to 94, periodic (needs a cell); energies in eV."""
    return Potential(
        name="chgnet",
        build_module=build_chgnet,
        wrap=_wrap_chgnet,
        elements=frozenset(range(1, 95)),
        needs_cell=True,
        description="CHGNet 0.3.0 pretrained, chgnet 0.4.2 (weights shipped in the wheel)",
    )


# ---------------------------------------------------------------------------------------------
# Any ASE calculator whose model is a torch.nn.Module
# ---------------------------------------------------------------------------------------------

_MODULE_ATTRS = ("models", "model", "module")


def find_modules(calc: Any, module_attr: str | None = None) -> list[nn.Module]:
    """The torch modules an ASE calculator runs: ``calc.<module_attr>``, else ``calc.models`` (a list),
    ``calc.model`` or ``calc.module``."""
    for attr in (module_attr,) if module_attr else _MODULE_ATTRS:
        val = getattr(calc, attr, None)
        mods = list(val) if isinstance(val, (list, tuple, nn.ModuleList)) else [val]
        if val is not None and mods and all(isinstance(m, nn.Module) for m in mods):
            return mods
    where = f"calc.{module_attr}" if module_attr else " / ".join(f"calc.{a}" for a in _MODULE_ATTRS)
    raise TypeError(f"{type(calc).__name__}: no torch.nn.Module found in {where}; say where it keeps its model "
                    "(module_attr=...)")


def load_factory(spec: str) -> Callable[..., Any]:
    """``"package.module:factory"`` or ``"path/to/file.py:factory"`` -> the factory."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"--calculator {spec!r}: expected module:factory (e.g. tcemu.mlip.calculators:mace_random) "
                         "or path/to/file.py:factory")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise FileNotFoundError(f"--calculator {spec!r}: no file {target}")
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ValueError(f"--calculator {spec!r}: cannot import {target} ({exc})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"--calculator {spec!r}: {target} has no callable {attr!r}")
    return factory


def _accepts(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def from_factory(
    factory: Callable[..., Any],
    name: str | None = None,
    elements: Iterable[int] | None = None,
    needs_cell: bool = False,
    module_attr: str | None = None,
) -> Potential:
    """A :class:`~tcemu.mlip.models.Potential` from a calculator factory (the protocol in the module docstring)."""
    takes_dtype, takes_device = _accepts(factory, "dtype"), _accepts(factory, "device")

    def build(dtype: str, device: str):
        kw = ({"dtype": dtype} if takes_dtype else {}) | ({"device": device} if takes_device else {})
        calc = factory(**kw)
        return calc, find_modules(calc, module_attr), takes_dtype

    label = name or getattr(factory, "__name__", "calculator")
    return Potential(
        name=label,
        build_module=lambda: build("float32", "cpu")[1][0],
        wrap=None,
        elements=frozenset(elements) if elements is not None else None,
        needs_cell=needs_cell,
        description=f"{label} (ASE calculator factory" + (", dtype=" if takes_dtype else ", no dtype argument")
        + ")",
        build_calculator=build,
    )


def from_calculator(
    name: str,
    make_calculator: Callable[[], Any],
    module_attr: str = "model",
    elements: Iterable[int] | None = None,
    needs_cell: bool = False,
) -> Potential:
    """A :class:`~tcemu.mlip.models.Potential` from any ASE calculator that keeps its ``nn.Module`` in
    ``calc.<module_attr>``: :func:`from_factory` with a factory that takes no ``dtype`` (the model is converted
    with ``.double()`` for the reference, and the reference checked)."""
    return from_factory(lambda: make_calculator(), name, elements, needs_cell, module_attr)


# ---------------------------------------------------------------------------------------------
# MACE (mace-torch), random weights: a factory of the protocol
# ---------------------------------------------------------------------------------------------


def build_mace(channels: int = 16, max_ell: int = 2, num_interactions: int = 2, correlation: int = 3,
               elements: tuple[int, ...] = (1, 8), r_max: float = 5.0, seed: int = 0,
               for_compile: bool = False) -> nn.Module:
    """A MACE (mace-torch) with random weights, seeded, float32: hidden irreps ``{channels}x0e + {channels}x1o``,
    spherical harmonics to ``max_ell``, residual interaction blocks, e3nn's default TorchScript code. Built once
    per argument set (TorchScript takes seconds); each call returns a copy.

    ``for_compile``: built the way mace-torch prepares a model for ``torch.compile``
    (``mace.tools.compile.prepare``: e3nn's code generation off, its registered blocks traced by ``torch.fx``),
    with ``autograd.grad`` kept out of Dynamo's graphs (``allow_autograd=False``: with it traced into the graph, as
    ``prepare`` does by default, the compiled model's forces came out zero with torch 2.11 and 2.13); the same
    weights for the same seed. Call it with ``training=False``: with the forces' graph kept (``training=True``),
    Inductor's compiled backward refuses the second differentiation (donated buffers)."""
    return copy.deepcopy(_mace_base(channels, max_ell, num_interactions, correlation, tuple(elements), r_max, seed,
                                    for_compile))


@functools.lru_cache(maxsize=4)
def _mace_base(channels: int, max_ell: int, num_interactions: int, correlation: int, elements: tuple[int, ...],
               r_max: float, seed: int, for_compile: bool = False) -> nn.Module:
    import mace  # noqa: F401  (sets up torch.load for e3nn 0.4's constants)
    from mace.tools.compile import prepare

    build = functools.partial(_new_mace, channels, max_ell, num_interactions, correlation, elements, r_max, seed)
    return (prepare(build, allow_autograd=False) if for_compile else build)()


def _new_mace(channels: int, max_ell: int, num_interactions: int, correlation: int, elements: tuple[int, ...],
              r_max: float, seed: int) -> nn.Module:
    import numpy as np
    from e3nn import o3
    from mace.modules import MACE, RealAgnosticResidualInteractionBlock

    with torch.random.fork_rng(devices=[]), warnings_off():
        torch.manual_seed(seed)
        model = MACE(
            r_max=r_max, num_bessel=8, num_polynomial_cutoff=5, max_ell=max_ell,
            interaction_cls=RealAgnosticResidualInteractionBlock,
            interaction_cls_first=RealAgnosticResidualInteractionBlock,
            num_interactions=num_interactions, num_elements=len(elements),
            hidden_irreps=o3.Irreps(f"{channels}x0e + {channels}x1o"), MLP_irreps=o3.Irreps("16x0e"),
            atomic_energies=np.zeros(len(elements)), avg_num_neighbors=10.0, atomic_numbers=list(elements),
            correlation=correlation, gate=torch.nn.functional.silu,
        )
    return model.float().eval()


def mace_random(
    *,
    dtype: str = "float32",
    device: str = "cpu",
    channels: int = 16,
    max_ell: int = 2,
    num_interactions: int = 2,
    correlation: int = 3,
    elements: tuple[int, ...] = (1, 8),
    r_max: float = 5.0,
    seed: int = 0,
):
    """A MACE with random weights (seeded; e3nn's default TorchScript code, as a user's model has) in mace-torch's
    ASE calculator: the factory protocol of this module. ``channels`` sets ``hidden_irreps`` to
    ``{channels}x0e + {channels}x1o``."""
    with warnings_off():
        from mace.calculators import MACECalculator

    model = build_mace(channels, max_ell, num_interactions, correlation, tuple(elements), r_max, seed)
    with warnings_off(), contextlib.redirect_stderr(io.StringIO()):
        return MACECalculator(models=model, device=device, default_dtype=dtype)


def mace_potential(**kwargs) -> Potential:
    """:func:`mace_random` as a potential (elements H and O unless ``elements`` says otherwise)."""
    elements = kwargs.get("elements", (1, 8))
    return from_factory(functools.partial(mace_random, **kwargs), name=f"mace-random-{kwargs.get('channels', 16)}",
                        elements=elements)
