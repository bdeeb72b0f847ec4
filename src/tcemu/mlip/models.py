"""Potentials whose GEMMs tcemu can emulate: PET (random weights or a checkpoint), ANI-1x, CHGNet, any torch model.

A :class:`Potential` is a recipe that builds a fresh ``torch.nn.Module`` and wraps it in an ASE
calculator. :meth:`Potential.calculator` does this for one *method*:

- ``"fp64"``: the same weights in float64 (the reference; emulation never touches float64 models),
- ``"fp32"``: the plain float32 model (PyTorch's FP32 GEMMs),
- an emulation method (``"tf32"``, ``"tf32x3"``, ``"bf16x3"``, ``"bf16x6"``, ``"bf16x9"``): the float32
  model with every ``nn.Linear`` swapped by :func:`tcemu.emulate_` (forward and backward GEMMs);
- an emulation method with ``"+attn"`` (``"tf32x3+attn"``): also the attention products of the potential's
  attention blocks (``Potential.attention_filter``, PET's ``AttentionBlock``), by
  :func:`tcemu.emulate_functional_`: the configuration of the fastest MD step (``docs/md_step.md``).

Each call builds a new module from the same deterministic recipe, so the methods compare the
same weights side by side. The returned :class:`PotentialCalculator` checks its input first
(elements the model does not know, a periodic model without a cell) and raises a clear
:class:`ValueError`. Models run eagerly, or ``torch.compile``d (PET); never through TorchScript,
which cannot run the emulated layers.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "PET_SHAPES",
    "Potential",
    "PotentialCalculator",
    "ATTENTION_SUFFIX",
    "REFERENCE_METHODS",
    "ani1x",
    "apply_method",
    "build_pet",
    "chgnet",
    "from_calculator",
    "get_potential",
    "is_pet_attention_block",
    "load_pet_checkpoint",
    "pet",
    "pet_checkpoint",
    "POTENTIALS",
]

#: Methods that are not emulation methods: the float64 reference and plain float32.
REFERENCE_METHODS = ("fp64", "fp32")
#: Suffix of an emulation method that also emulates the potential's attention blocks.
ATTENTION_SUFFIX = "+attn"

# ---------------------------------------------------------------------------------------------
# Methods
# ---------------------------------------------------------------------------------------------


def check_method(method: str) -> str:
    """Return ``method`` lower-cased if it is ``fp64``, ``fp32``, a tcemu emulation method, or one with
    ``"+attn"``, else raise."""
    m = str(method).lower()
    base = m.removesuffix(ATTENTION_SUFFIX)
    if m in REFERENCE_METHODS:
        return m
    from tcemu.emulation.methods import METHODS

    if base in REFERENCE_METHODS:
        raise ValueError(f"{method!r}: '{ATTENTION_SUFFIX}' applies to emulation methods only")
    if base not in METHODS or "+" in base:
        raise ValueError(f"unknown method {method!r}; choose one of fp64, {', '.join(METHODS)}, "
                         f"or an emulation method with '{ATTENTION_SUFFIX}' (e.g. tf32x3{ATTENTION_SUFFIX})")
    return m


def apply_method(module: nn.Module, method: str, filter_fn: Callable | None = None,
                 attention_filter: Callable | None = None) -> nn.Module:
    """Put ``module`` (a float32 model) into ``method``: ``.double()`` for fp64, as is for fp32, else emulate.

    Emulation swaps every ``nn.Linear`` in place with :func:`tcemu.emulate_` (same parameters). With
    ``"+attn"`` the modules selected by ``attention_filter(module, fqn)`` also run their
    ``F.scaled_dot_product_attention`` emulated (:func:`tcemu.emulate_functional_`); a model without
    attention blocks (``attention_filter`` None) runs the plain method, with a warning.
    """
    m = check_method(method)
    if m == "fp64":
        return module.double()
    if m == "fp32":
        return module
    import tcemu

    base = m.removesuffix(ATTENTION_SUFFIX)
    module = tcemu.emulate_(module, base, filter_fn=filter_fn)  # a bare nn.Linear is returned swapped
    if m.endswith(ATTENTION_SUFFIX):
        if attention_filter is None:  # nothing more to emulate: the plain method, said once per call
            import warnings

            warnings.warn(f"{method!r}: this model has no attention blocks that tcemu.mlip knows of, so it runs "
                          f"as {base!r}", stacklevel=2)
        else:
            tcemu.emulate_functional_(module, base, attention_filter, attention=True, matmuls=False)
    return module


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

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes) -> None:
        super().calculate(atoms, properties, system_changes)
        self.potential.check_atoms(self.atoms)
        props = list(properties)
        if "stress" in props and not self.atoms.pbc.all():
            raise ValueError("stress needs a periodic system (pbc in all three directions)")
        if "forces" in props and "stress" not in props and self.atoms.pbc.all():
            props.append("stress")  # the same backward pass gives it; saves a second pass when asked next
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
    """

    name: str
    build_module: Callable[[], nn.Module]
    wrap: Callable[[nn.Module, str], Any]
    elements: frozenset[int] | None = None
    needs_cell: bool = False
    description: str = ""
    extra: dict = field(default_factory=dict, compare=False)
    attention_filter: Callable[[nn.Module, str], bool] | None = None

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
        mod = self.module(method, device, filter_fn)
        return PotentialCalculator(self.wrap(mod, device), mod, self, method)


# ---------------------------------------------------------------------------------------------
# PET (metatrain)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PETShape:
    """Size hypers of a PET model (MLIP.md §3). d_feedforward = 2 d_pet and d_head = d_pet."""

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


def _ensure_hostlist() -> None:
    """metatrain imports ``hostlist`` (python-hostlist) for SLURM only; register a stub if it is absent."""
    try:
        import hostlist  # noqa: F401
    except ImportError:
        sys.modules["hostlist"] = types.ModuleType("hostlist")


def build_pet(
    shape: str | PETShape = "xs", seed: int = 0, atomic_types: Iterable[int] | None = None
) -> nn.Module:
    """A metatrain PET with random weights (deterministic in ``seed``), energy target in eV, float32, eval mode.

    Args:
        shape: a key of :data:`PET_SHAPES` or a :class:`PETShape`.
        seed: ``torch.manual_seed`` for the weights (the global RNG state is restored afterwards).
        atomic_types: atomic numbers the model accepts (default 1 to 102).
    """
    _ensure_hostlist()
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
    _ensure_hostlist()
    import metatomic.torch  # noqa: F401  (TorchScript classes in the pickle)
    from metatrain.utils.io import load_model

    if path.suffix == ".gz":
        import gzip
        import tempfile

        with gzip.open(path, "rb") as f, tempfile.NamedTemporaryFile(suffix=".ckpt", delete=False) as tmp:
            tmp.write(f.read())
        try:
            model = load_model(tmp.name)
        finally:
            Path(tmp.name).unlink(missing_ok=True)
    else:
        model = load_model(str(path))
    if isinstance(model, torch.jit.ScriptModule):
        raise ValueError(
            f"{path} holds a TorchScript export; tcemu needs the checkpoint (.ckpt) to emulate it"
        )
    return model.float().eval()


def _wrap_pet(compile: bool) -> Callable[[nn.Module, str], Any]:
    def wrap(model: nn.Module, device: str):
        from metatomic_ase import MetatomicCalculator

        if compile:
            backend = model.backend
            for name in ("calculate_features", "predict"):
                setattr(backend, name, torch.compile(getattr(backend, name), dynamic=False))
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
# ANI-1x (torchani 2.2.4, weights in the wheel)
# ---------------------------------------------------------------------------------------------

ANI_SPECIES = ("H", "C", "N", "O")


def build_ani1x() -> nn.Module:
    """The ANI-1x 8-model ensemble from the files inside the torchani 2.2.4 wheel (no download)."""
    with warnings_off():
        import torchani
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


def from_calculator(
    name: str,
    make_calculator: Callable[[], Any],
    module_attr: str = "model",
    elements: Iterable[int] | None = None,
    needs_cell: bool = False,
) -> Potential:
    """A :class:`Potential` from any ASE calculator that keeps its ``nn.Module`` in ``calc.<module_attr>``.

    ``make_calculator()`` must return a new calculator (with the same weights) on each call. For
    ``fp64`` the module is converted with ``.double()``; the calculator must then feed it float64
    inputs (many read the dtype from the parameters, as torchani's does).
    """

    def build() -> nn.Module:
        calc = make_calculator()
        mod = getattr(calc, module_attr)
        if not isinstance(mod, nn.Module):
            raise TypeError(
                f"{type(calc).__name__}.{module_attr} is {type(mod).__name__}, not a torch.nn.Module"
            )
        return mod.float()

    def wrap(mod: nn.Module, device: str):
        calc = make_calculator()
        setattr(calc, module_attr, mod)
        if hasattr(calc, "dtype"):
            calc.dtype = next(mod.parameters()).dtype
        if hasattr(calc, "device"):
            calc.device = next(mod.parameters()).device
        return calc

    return Potential(
        name=name,
        build_module=build,
        wrap=wrap,
        elements=frozenset(elements) if elements is not None else None,
        needs_cell=needs_cell,
        description=f"{name} (ASE calculator {module_attr!r} module)",
    )


# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------

POTENTIALS: dict[str, Callable[[], Potential]] = {
    **{f"pet-{s}": (lambda s=s: pet(s)) for s in PET_SHAPES},
    "ani1x": ani1x,
    "chgnet": chgnet,
}


def get_potential(name: str, compile: bool = False) -> Potential:
    """A potential by name: ``pet-distilled`` (trained), ``pet-distilled-random``, ``pet-<shape>`` (random weights),
    ``ani1x``, ``chgnet``, or a path to a PET checkpoint file."""
    key = name.lower()
    if key.startswith("pet-distilled"):  # the shipped trained PET and its random twin (tcemu.mlip.distilled)
        return importlib.import_module("tcemu.mlip.distilled").get(key, compile=compile)
    if key.startswith("pet-") and key[4:] in PET_SHAPES:
        return pet(key[4:], compile=compile)
    if key in POTENTIALS:
        return POTENTIALS[key]()
    if key.endswith((".ckpt", ".ckpt.gz")) or "/" in name:
        return pet_checkpoint(name, compile=compile)
    raise ValueError(f"unknown potential {name!r}; choose one of pet-distilled, pet-distilled-random, "
                     f"{', '.join(POTENTIALS)} or a PET .ckpt path")
