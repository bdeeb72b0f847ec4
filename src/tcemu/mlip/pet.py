"""PET (metatrain): models with random weights of the named shapes, and checkpoints, as potentials."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .pet_compile import compile_pet_
from .potential import Potential, warnings_off

__all__ = ["PET_SHAPES", "PETShape", "build_pet", "is_pet_attention_block", "load_pet_checkpoint", "pet",
           "pet_checkpoint"]

# ---------------------------------------------------------------------------------------------
# PET (metatrain)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PETShape:
    """Size hypers of a PET model (docs/mlip.md, "Methods and models"): d_ff = 2 d_pet, d_head = d_pet."""

    d_node: int
    d_pet: int
    num_gnn_layers: int
    num_attention_layers: int
    cutoff_A: float
    num_neighbors_adaptive: int

    def hypers(self) -> dict:
        return {
            "d_node": self.d_node,
            "d_pet": self.d_pet,
            "d_feedforward": 2 * self.d_pet,
            "d_head": self.d_pet,
            "num_gnn_layers": self.num_gnn_layers,
            "num_attention_layers": self.num_attention_layers,
            "cutoff": self.cutoff_A,
            "num_neighbors_adaptive": self.num_neighbors_adaptive,
        }


#: PET-MAD / PET-OMat size budgets (upet docs, v1.6 adaptive neighbours), plus "tiny" for CI tests.
PET_SHAPES: dict[str, PETShape] = {
    "tiny": PETShape(64, 32, 1, 1, 5.0, 8),
    "xs": PETShape(512, 128, 2, 1, 7.5, 16),
    "s": PETShape(1024, 256, 3, 1, 8.0, 24),
    "s-nn32": PETShape(1024, 256, 3, 1, 8.0, 32),
    "m": PETShape(1536, 384, 3, 2, 8.5, 32),
    "l": PETShape(2048, 512, 4, 2, 9.0, 32),
}


def build_pet(
    shape: str | PETShape = "xs", seed: int = 0, atomic_types: Iterable[int] | None = None
) -> nn.Module:
    """A metatrain PET with random weights (deterministic in ``seed``), energy target in eV, float32, eval mode.

    Args:
        shape: a key of :data:`PET_SHAPES` or a :class:`PETShape`.
        seed: ``torch.manual_seed`` for the weights (the global RNG state is restored afterwards).
        atomic_types: atomic numbers the model accepts (default 1 to 102).
    """
    from metatrain.pet import PET
    from metatrain.utils.architectures import get_default_hypers
    from metatrain.utils.data import DatasetInfo
    from metatrain.utils.data.target_info import get_energy_target_info

    spec = PET_SHAPES[shape.lower()] if isinstance(shape, str) else shape
    hypers = get_default_hypers("pet")["model"]
    hypers.update(spec.hypers())
    info = DatasetInfo(
        length_unit="Angstrom",
        atomic_types=sorted(atomic_types) if atomic_types is not None else list(range(1, 103)),
        targets={"energy": get_energy_target_info("energy", {"quantity": "energy", "unit": "eV"})},
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = PET(hypers, info)
    return model.float().eval()


def load_pet_checkpoint(path: str | Path) -> nn.Module:
    """Load a PET(-MAD, UPET) checkpoint from a local ``.ckpt`` (or ``.ckpt.gz``) file, float32, eval mode.

    This is the path of a user who downloaded a checkpoint: no network, no TorchScript.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"PET checkpoint {str(path)!r} not found; download one (e.g. pet-mad-s-v1.6.0.ckpt from "
            "huggingface.co/lab-cosmo/upet) and pass its local path"
        )
    import metatomic.torch  # noqa: F401  (TorchScript classes in the pickle)
    from metatrain.utils.io import load_model

    if path.suffix == ".gz":
        import gzip
        import tempfile

        with gzip.open(path, "rb") as f, tempfile.NamedTemporaryFile(suffix=".ckpt", delete=False) as tmp:
            tmp.write(f.read())
        try:
            model = _load_metatrain(load_model, path, tmp.name)
        finally:
            Path(tmp.name).unlink(missing_ok=True)
    else:
        model = _load_metatrain(load_model, path, str(path))
    if isinstance(model, torch.jit.ScriptModule):
        raise ValueError(
            f"{path} holds a TorchScript export; the validation harness needs the checkpoint (.ckpt), whose "
            "weights it also runs in float64; to run the export emulated, use "
            "tcemu.ase.emulate_calculator(MetatomicCalculator(path), method)"
        )
    return model.float().eval()


def _load_metatrain(load_model: Callable, path: Path, file: str) -> nn.Module:
    """metatrain's ``load_model``, with one clear line for a file that is not a metatrain checkpoint."""
    try:
        return load_model(file)
    except KeyError as exc:
        raise ValueError(f"{path} is not a metatrain (PET) checkpoint (no {exc} in it); for another model give "
                         "--calculator module:factory (tcemu.mlip.calculators)") from None


def _wrap_pet(compile: bool) -> Callable[[nn.Module, str], Any]:
    def wrap(model: nn.Module, device: str):
        from metatomic_ase import MetatomicCalculator

        if compile:
            compile_pet_(model)
        with warnings_off():
            return MetatomicCalculator(model.export(), device=device, do_gradients_with_energy=False)

    return wrap


def is_pet_attention_block(module: nn.Module, fqn: str = "") -> bool:
    """PET's attention blocks (metatrain's ``AttentionBlock``: ``F.scaled_dot_product_attention`` inside)."""
    from metatrain.pet.modules.transformer import AttentionBlock

    return isinstance(module, AttentionBlock)


def _pet_types(model: nn.Module) -> frozenset[int]:
    return frozenset(int(t) for t in model.atomic_types)


def pet(shape: str = "xs", seed: int = 0, compile: bool = False) -> Potential:
    """Random-weight PET of a named shape (see :data:`PET_SHAPES`), seeded; elements 1 to 102."""
    if shape.lower() not in PET_SHAPES:
        raise ValueError(f"unknown PET shape {shape!r}; choose one of {', '.join(PET_SHAPES)}")
    return Potential(
        name=f"pet-{shape.lower()}" + ("-compiled" if compile else ""),
        build_module=lambda: build_pet(shape, seed),
        wrap=_wrap_pet(compile),
        elements=frozenset(range(1, 103)),
        description=f"PET {shape.upper()} shape, random weights (seed {seed}), metatrain",
        extra={"shape": shape, "seed": seed, "wrap_compiled": _wrap_pet(True)},
        attention_filter=is_pet_attention_block,
    )


def pet_checkpoint(path: str | Path, compile: bool = False) -> Potential:
    """PET from a local checkpoint file (PET-MAD, UPET, or one trained with metatrain)."""
    model = load_pet_checkpoint(path)  # fail early on a missing file
    return Potential(
        name=f"pet-ckpt:{Path(path).name}",
        build_module=lambda: load_pet_checkpoint(path),
        wrap=_wrap_pet(compile),
        elements=_pet_types(model),
        description=f"PET checkpoint {Path(path).name}",
        extra={"wrap_compiled": _wrap_pet(True)},
        attention_filter=is_pet_attention_block,
    )
