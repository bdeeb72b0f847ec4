"""A potential as tcemu.mlip runs it: :class:`Potential`, the recipe of a float32 model and its ASE calculator, and
:class:`PotentialCalculator`, that calculator for one method, its input checked and its coverage measured.

The named potentials are in :mod:`tcemu.mlip.pet` (PET), :mod:`tcemu.mlip.calculators` (ANI-1x, CHGNet, MACE, any
calculator factory) and :mod:`tcemu.mlip.distilled` (the trained PET); :func:`tcemu.mlip.models.get_potential`
finds one by name.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch import nn

from .methods import apply_method, check_method

__all__ = ["Potential", "PotentialCalculator", "warnings_off"]

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


@contextlib.contextmanager
def warnings_off():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield

