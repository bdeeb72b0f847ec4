"""Potentials whose products tcemu can emulate: PET (random weights or a checkpoint), and the registry of names.

ANI-1x, CHGNet, MACE and any ASE calculator factory are in :mod:`tcemu.mlip.calculators`.

A :class:`Potential` is a recipe that builds a fresh ``torch.nn.Module`` and wraps it in an ASE
calculator (or a factory that builds the calculator with its modules). :meth:`Potential.calculator` does this
for one *method*:

- ``"fp64"``: the same weights in float64 (the reference; emulation never touches float64 models),
- ``"fp32"``: the plain float32 model (PyTorch's FP32 GEMMs),
- an emulation method (``"tf32"``, ``"tf32x3"``, ``"bf16x3"``, ``"bf16x6"``, ``"bf16x9"``): the float32
  model emulated by :func:`tcemu.emulate_`: every ``nn.Linear`` swapped and every functional product (matmul,
  einsum, tensordot, attention, e3nn's generated code) routed through the emulation, forward and backward;
- an emulation method with ``"+attn"`` (``"tf32x3+attn"``): the same, with the potential's attention blocks
  (``Potential.attention_filter``, PET's ``AttentionBlock``) also scoped on their own by
  :func:`tcemu.emulate_functional_`, the configuration of the MD-step benchmark (``docs/md_step.md``).
  A compiled PET (``compile=True``, :func:`compile_pet_`) keeps the swapped layers and the attention blocks'
  scopes and drops the whole-model scope around its eager ``forward`` (its products outside those, about 0.1 %
  of the FLOPs, run in FP32).

Each call builds a new module from the same deterministic recipe, so the methods compare the
same weights side by side. The returned :class:`PotentialCalculator` checks its input first
(elements the model does not know, a periodic model without a cell) and raises a clear
:class:`ValueError`. Its first calculation runs inside :func:`tcemu.coverage`: ``calc.coverage`` says what share
of the float32 contraction FLOPs the method emulated (the harness gives no verdict below 99 %), and a float64
reference that computed float32 products is refused. Models run eagerly, or ``torch.compile``d (PET); the
harness does not load TorchScript exports (their dtype is fixed, so there is no FP64 twin to compare with;
:mod:`tcemu.ase` emulates them for a user's run).

The recipe (:class:`Potential`, :class:`PotentialCalculator`) is :mod:`tcemu.mlip.potential`, PET is
:mod:`tcemu.mlip.pet`; this module names them all (:func:`get_potential`) and keeps them importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ._torchani import import_torchani
from .calculators import (
    ANI_SPECIES,
    ani1x,
    build_ani1x,
    build_chgnet,
    chgnet,
    from_calculator,
    from_factory,
    load_factory,
    mace_potential,
)
from .distilled import get as get_distilled
from .methods import ATTENTION_SUFFIX, REFERENCE_METHODS, apply_method, check_method, emulation_config
from .pet import PET_SHAPES, PETShape, build_pet, is_pet_attention_block, load_pet_checkpoint, pet, pet_checkpoint
from .pet_compile import PET_COMPILE_SCOPE, compile_pet_
from .potential import Potential, PotentialCalculator, warnings_off

__all__ = [
    "ANI_SPECIES",
    "ATTENTION_SUFFIX",
    "PET_COMPILE_SCOPE",
    "PET_SHAPES",
    "POTENTIALS",
    "PETShape",
    "Potential",
    "PotentialCalculator",
    "REFERENCE_METHODS",
    "ani1x",
    "apply_method",
    "build_ani1x",
    "build_chgnet",
    "build_pet",
    "check_method",
    "chgnet",
    "compile_pet_",
    "emulation_config",
    "from_calculator",
    "get_potential",
    "import_torchani",
    "is_pet_attention_block",
    "load_pet_checkpoint",
    "pet",
    "pet_checkpoint",
    "warnings_off",
]

POTENTIALS: dict[str, Callable[[], Potential]] = {
    **{f"pet-{s}": (lambda s=s: pet(s)) for s in PET_SHAPES},
    "ani1x": ani1x,
    "chgnet": chgnet,
    "mace-random": mace_potential,
}


def get_potential(name: str, compile: bool = False) -> Potential:
    """A potential by name: ``pet-distilled`` (trained), ``pet-distilled-random``, ``pet-<shape>`` (random weights),
    ``ani1x``, ``chgnet``, ``mace-random``, a path to a PET checkpoint file, or ``module:factory`` (any ASE
    calculator: :func:`tcemu.mlip.calculators.from_factory`)."""
    key = name.lower()
    if key.startswith("pet-distilled"):  # the shipped trained PET and its random twin (tcemu.mlip.distilled)
        return get_distilled(key, compile=compile)
    if key.startswith("pet-") and key[4:] in PET_SHAPES:
        return pet(key[4:], compile=compile)
    if key in POTENTIALS:
        return POTENTIALS[key]()
    if ":" in name and not Path(name).exists():  # module:factory or file.py:factory
        return from_factory(load_factory(name), name=name.rpartition(":")[2])
    if key.endswith((".ckpt", ".ckpt.gz")) or "/" in name or Path(name).is_file():
        return pet_checkpoint(name, compile=compile)
    raise ValueError(f"unknown potential {name!r}; choose one of pet-distilled, pet-distilled-random, "
                     f"{', '.join(POTENTIALS)}, a PET .ckpt path, or give another model as --calculator module:factory")
