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
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ._torchani import import_torchani
from .methods import ATTENTION_SUFFIX, REFERENCE_METHODS, apply_method, check_method, emulation_config
from .pet_compile import PET_COMPILE_SCOPE, compile_pet_

__all__ = [
    "PET_SHAPES",
    "Potential",
    "PotentialCalculator",
    "ATTENTION_SUFFIX",
    "emulation_config",
    "REFERENCE_METHODS",
    "ani1x",
    "apply_method",
    "build_pet",
    "chgnet",
    "compile_pet_",
    "from_calculator",
    "get_potential",
    "import_torchani",
    "is_pet_attention_block",
    "load_pet_checkpoint",
    "pet",
    "pet_checkpoint",
    "PET_COMPILE_SCOPE",
    "POTENTIALS",
]

# ---------------------------------------------------------------------------------------------
# The calculator wrapper: input checks, then the model's own ASE calculator
# ---------------------------------------------------------------------------------------------

try:  # ASE is in the mlip extra; keep this module importable without it for --help
    from ase.calculators.calculator import Calculator, all_changes
except ImportError:  # pragma: no cover
    Calculator = object  # type: ignore[assignment,misc]
    all_changes = []  # type: ignore[assignment]


def _symbols(numbers: Iterable[int]) -> str:
    from ase.data import chemical_symbols

    return ", ".join(chemical_symbols[z] for z in sorted(set(int(z) for z in numbers)))


class PotentialCalculator(Calculator):
    """An ASE calculator around a potential's own calculator, for one method.

    Attributes:
        inner: the model's own ASE calculator (MetatomicCalculator, torchani's, CHGNet's, ...).
        module: the ``torch.nn.Module`` it runs (emulated in place for emulation methods).
        potential: the :class:`Potential` it came from.
        method: ``"fp64"``, ``"fp32"`` or an emulation method.
    """

    implemented_properties = ["energy", "free_energy", "forces", "stress"]

    def __init__(self, inner: Any, module: nn.Module, potential: Potential, method: str) -> None:
        super().__init__()
        self.inner = inner
        self.module = module
        self.potential = potential
        self.method = method
        self.coverage = None  # tcemu.Coverage of the first calculation

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes) -> None:
        super().calculate(atoms, properties, system_changes)
        self.potential.check_atoms(self.atoms)
        props = list(properties)
        if "stress" in props and not self.atoms.pbc.all():
            raise ValueError("stress needs a periodic system (pbc in all three directions)")
        if "forces" in props and "stress" not in props and self.atoms.pbc.all():
            props.append("stress")  # the same backward pass gives it; saves a second pass when asked next
        if self.coverage is None:
            self._first_calculation(props)
        else:
            self.inner.reset()  # results of an earlier structure must not survive (CHGNet's calculator merges them)
            self.inner.calculate(self.atoms.copy(), props, all_changes)
        self.results = {
            k: self.inner.results[k] for k in self.inner.results if k in self.implemented_properties
        }
        self.results["energy"] = float(np.asarray(self.results["energy"]).reshape(()))
        self.results.setdefault("free_energy", self.results["energy"])
        if "forces" in self.results:
            self.results["forces"] = np.asarray(self.results["forces"], dtype=np.float64).reshape(-1, 3)
        if "stress" in self.results:
            s = np.asarray(self.results["stress"], dtype=np.float64)
            if s.shape == (3, 3):
                s = s[[0, 1, 2, 1, 0, 0], [0, 1, 2, 2, 2, 1]]
            self.results["stress"] = s

    def _first_calculation(self, props: list[str]) -> None:
        """The calculation, measured by tcemu.coverage; the FP64 reference must compute no float32 products."""
        import tcemu

        name = self.potential.name
        try:
            with tcemu.coverage(self.module) as cov:
                self.inner.calculate(self.atoms.copy(), props, all_changes)
        except RuntimeError as exc:
            if self.method == "fp64" and "dtype" in str(exc).lower():
                raise ValueError(f"{name}: its float64 copy cannot run ({exc}): the calculator builds float32 "
                                 "inputs itself, so there is no FP64 reference; give a calculator factory with a "
                                 "dtype argument (tcemu.mlip.calculators)") from exc
            raise
        if self.method == "fp64" and cov.flops() > 0:
            worst = max((r for r in cov.rows if r.kind in ("fp32", "emulated", "fallback")), key=lambda r: r.flops)
            raise ValueError(f"{name}: its float64 copy computed {cov.flops():.3g} FLOPs of float32 products (e.g. "
                             f"{worst.op} in {worst.module or 'the calculator'}): the calculator casts to float32, so "
                             "it is no FP64 reference; give a calculator factory with a dtype argument "
                             "(tcemu.mlip.calculators)")
        self.coverage = cov


# ---------------------------------------------------------------------------------------------
# Potential: a recipe for a module plus how to wrap it
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Potential:
    """A named potential: how to build its float32 module, and how to wrap a module as an ASE calculator.

    Attributes:
        name: short name used in tables and CSV files (``"pet-xs"``, ``"ani1x"``, ``"chgnet"``).
        build_module: returns a fresh float32 ``nn.Module`` with the same weights on every call.
        wrap: ``wrap(module, device) -> ASE calculator`` running that module (in its dtype).
        elements: atomic numbers the model knows (``None``: any).
        needs_cell: the model needs a periodic cell (e.g. CHGNet builds a crystal graph).
        description: one line for reports.
        compile: whether ``wrap`` should ``torch.compile`` the model (PET only).
        attention_filter: ``(module, fqn) -> bool`` selecting the attention blocks that ``"+attn"`` methods
            emulate (``None``: the model has none).
        build_calculator: instead of ``build_module`` and ``wrap``: ``(dtype, device) -> (calculator, modules,
            dtype_honoured)``, a new calculator in ``"float32"`` or ``"float64"`` and the torch modules it runs
            (:func:`tcemu.mlip.calculators.from_factory`).
    """

    name: str
    build_module: Callable[[], nn.Module]
    wrap: Callable[[nn.Module, str], Any] | None
    elements: frozenset[int] | None = None
    needs_cell: bool = False
    description: str = ""
    extra: dict = field(default_factory=dict, compare=False)
    attention_filter: Callable[[nn.Module, str], bool] | None = None
    build_calculator: Callable[[str, str], tuple[Any, list[nn.Module], bool]] | None = None

    def check_atoms(self, atoms) -> None:
        """Raise ``ValueError`` for elements the model does not know, or a missing cell when it needs one."""
        if self.elements is not None:
            unknown = set(int(z) for z in atoms.numbers) - set(self.elements)
            if unknown:
                raise ValueError(
                    f"{self.name} does not know element(s) {_symbols(unknown)}; it knows {_symbols(self.elements)}"
                )
        if self.needs_cell:
            if not atoms.pbc.all() or atoms.cell.rank < 3 or abs(atoms.cell.volume) < 1e-9:
                raise ValueError(
                    f"{self.name} is a periodic model and needs a full 3-D cell with pbc=True "
                    f"(got pbc={atoms.pbc.tolist()}, cell volume {abs(atoms.cell.volume):.3g} A^3); "
                    "put the system in a box with vacuum, e.g. atoms.center(vacuum=10); atoms.pbc = True"
                )

    def module(
        self, method: str = "fp32", device: str = "cpu", filter_fn: Callable | None = None
    ) -> nn.Module:
        """A fresh module in ``method`` on ``device`` (a deep copy of the FP32 module, built once and cached).

        For ``fp32`` and the emulation methods the module is used as built (some keep float64 buffers, such as
        ANI-1x's self energies); ``fp64`` converts all of it.
        """
        cache = self.extra.setdefault("_cache", {})
        if "base" not in cache:
            base = self.build_module().eval()
            try:
                copy.deepcopy(base)
                cache["base"] = base
            except Exception:  # noqa: BLE001 - a model that cannot be deep-copied is rebuilt each time
                cache["base"] = None
        mod = copy.deepcopy(cache["base"]) if cache["base"] is not None else self.build_module()
        mod = mod.to(device).eval()
        for p in mod.parameters():
            p.requires_grad_(False)
        return apply_method(mod, method, filter_fn, self.attention_filter)

    def calculator(self, method: str = "fp32", device: str = "cpu", filter_fn: Callable | None = None):
        """An ASE calculator running this potential's model in ``method`` (see the module docstring)."""
        method = check_method(method)
        if self.build_calculator is not None:
            calc, mods, honoured = self.build_calculator("float64" if method == "fp64" else "float32", device)
            for mod in mods:
                mod.eval()
                for p in mod.parameters():
                    p.requires_grad_(False)
                if method == "fp64" and honoured:
                    continue  # built in float64 by the factory
                if apply_method(mod, method, filter_fn, self.attention_filter) is not mod:
                    raise TypeError(f"{self.name}: its calculator's model is a bare {type(mod).__name__}; wrap it "
                                    "in a module so that it can be emulated in place")
            return PotentialCalculator(calc, mods[0], self, method)
        mod = self.module(method, device, filter_fn)
        return PotentialCalculator(self.wrap(mod, device), mod, self, method)


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


@contextlib.contextmanager
def warnings_off():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


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


# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------

def _calculators():
    from tcemu.mlip import calculators

    return calculators


POTENTIALS: dict[str, Callable[[], Potential]] = {
    **{f"pet-{s}": (lambda s=s: pet(s)) for s in PET_SHAPES},
    "ani1x": lambda: _calculators().ani1x(),
    "chgnet": lambda: _calculators().chgnet(),
    "mace-random": lambda: _calculators().mace_potential(),
}

_MOVED = ("ANI_SPECIES", "ani1x", "build_ani1x", "build_chgnet", "chgnet", "from_calculator")


def __getattr__(name: str):
    if name in _MOVED:  # kept importable from here: these live in tcemu.mlip.calculators
        return getattr(_calculators(), name)
    raise AttributeError(f"module 'tcemu.mlip.models' has no attribute {name!r}")


def get_potential(name: str, compile: bool = False) -> Potential:
    """A potential by name: ``pet-distilled`` (trained), ``pet-distilled-random``, ``pet-<shape>`` (random weights),
    ``ani1x``, ``chgnet``, ``mace-random``, a path to a PET checkpoint file, or ``module:factory`` (any ASE
    calculator: :func:`tcemu.mlip.calculators.from_factory`)."""
    key = name.lower()
    if key.startswith("pet-distilled"):  # the shipped trained PET and its random twin (tcemu.mlip.distilled)
        return importlib.import_module("tcemu.mlip.distilled").get(key, compile=compile)
    if key.startswith("pet-") and key[4:] in PET_SHAPES:
        return pet(key[4:], compile=compile)
    if key in POTENTIALS:
        return POTENTIALS[key]()
    if ":" in name and not Path(name).exists():  # module:factory or file.py:factory
        calcs = _calculators()
        return calcs.from_factory(calcs.load_factory(name), name=name.rpartition(":")[2])
    if key.endswith((".ckpt", ".ckpt.gz")) or "/" in name or Path(name).is_file():
        return pet_checkpoint(name, compile=compile)
    raise ValueError(f"unknown potential {name!r}; choose one of pet-distilled, pet-distilled-random, "
                     f"{', '.join(POTENTIALS)}, a PET .ckpt path, or give another model as --calculator module:factory")
