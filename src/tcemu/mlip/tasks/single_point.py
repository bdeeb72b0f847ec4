"""Check 1, single point: energy, force and stress errors of each method against FP64 and FP32.

Every method evaluates the same structure with the same weights. The errors are set beside FP32's
own *noise floor*: the difference between two FP32 evaluations that differ only in the order of
their floating-point accumulations. Two ways to get the second evaluation:

- ``"permute"`` (default, any model): the atoms in a different (seeded) order, results mapped back;
  every neighbour sum and every GEMM row changes its order, the maths does not.
- ``"compile"`` (PET): the model under ``torch.compile`` (Inductor fuses and reorders reductions).

A method's error as a multiple of that floor says how far it is from "FP32 as good as FP32 is".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from tcemu.mlip._common import coverage_of, coverage_rows, progress, row, system_name, with_reference

__all__ = ["Evaluation", "SinglePointError", "SinglePointResult", "evaluate", "single_point", "FLOOR_KINDS"]

FLOOR_KINDS = ("permute", "compile")


@dataclass(frozen=True)
class Evaluation:
    """Energy, forces and stress of one structure with one calculator (ASE units)."""

    energy_eV: float
    forces_eV_per_A: np.ndarray = field(repr=False)  # (n_atoms, 3)
    stress_eV_per_A3: np.ndarray | None = field(repr=False)  # Voigt (6,), or None when not periodic
    time_s: float


def evaluate(calc, atoms, stress: bool | None = None, order: np.ndarray | None = None) -> Evaluation:
    """Evaluate ``atoms`` with ``calc``; ``order`` (a permutation) evaluates the reordered atoms, mapped back."""
    stress = bool(atoms.pbc.all()) if stress is None else stress
    a = atoms.copy() if order is None else atoms[order]
    a.calc = calc
    t0 = time.perf_counter()
    f = np.array(a.get_forces(), dtype=np.float64)  # forces first: one forward + backward gives all three
    e = float(a.get_potential_energy())
    s = np.array(a.get_stress(voigt=True), dtype=np.float64) if stress else None
    dt = time.perf_counter() - t0
    if order is not None:
        back = np.empty_like(f)
        back[order] = f
        f = back
    return Evaluation(e, f, s, dt)


@dataclass(frozen=True)
class SinglePointError:
    """Differences between the results of ``method`` and ``reference`` on one structure.

    Force errors are per-atom vector norms |F_i - F_i^ref|; stress errors are over the 6 Voigt components.
    """

    method: str
    reference: str
    energy_abs_err_eV: float
    energy_abs_err_meV_per_atom: float
    force_mean_err_eV_per_A: float
    force_max_err_eV_per_A: float
    stress_mean_err_eV_per_A3: float  # nan when the structure is not periodic
    stress_max_err_eV_per_A3: float

    METRICS = (
        ("energy_abs_err", "eV", "energy_abs_err_eV"),
        ("energy_abs_err_per_atom", "meV/atom", "energy_abs_err_meV_per_atom"),
        ("force_mean_err", "eV/A", "force_mean_err_eV_per_A"),
        ("force_max_err", "eV/A", "force_max_err_eV_per_A"),
        ("stress_mean_err", "eV/A^3", "stress_mean_err_eV_per_A3"),
        ("stress_max_err", "eV/A^3", "stress_max_err_eV_per_A3"),
    )

    @classmethod
    def between(cls, method: str, reference: str, a: Evaluation, b: Evaluation) -> SinglePointError:
        n = len(a.forces_eV_per_A)
        de = abs(a.energy_eV - b.energy_eV)
        df = np.linalg.norm(a.forces_eV_per_A - b.forces_eV_per_A, axis=1)
        if a.stress_eV_per_A3 is not None and b.stress_eV_per_A3 is not None:
            ds = np.abs(a.stress_eV_per_A3 - b.stress_eV_per_A3)
            s_mean, s_max = float(ds.mean()), float(ds.max())
        else:
            s_mean = s_max = math.nan
        return cls(method, reference, de, 1e3 * de / n, float(df.mean()), float(df.max()), s_mean, s_max)

    def get(self, metric: str) -> float:
        for name, _, attr in self.METRICS:
            if name == metric:
                return getattr(self, attr)
        raise KeyError(metric)


@dataclass(frozen=True)
class SinglePointResult:
    """Check 1 on one potential and structure.

    Attributes:
        potential, system, n_atoms: what was evaluated.
        floor_kind: how FP32's noise floor was made (``"permute"`` or ``"compile"``).
        floor: FP32 (reordered or compiled) against FP32: the noise floor.
        errors: every method against ``"fp64"`` and against ``"fp32"`` (FP32 itself only against FP64).
        energies_eV: each method's energy.
        times_s: wall time of each method's evaluation (energy, forces, stress; measured by tcemu.coverage).
        coverage: share of the float32 contraction FLOPs each method emulated (NaN: none, as in FP64).
    """

    potential: str
    system: str
    n_atoms: int
    floor_kind: str
    floor: SinglePointError
    errors: tuple[SinglePointError, ...]
    energies_eV: dict[str, float]
    times_s: dict[str, float]
    coverage: dict[str, float] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        return [m for m in self.energies_eV if m != "fp64"]

    def error(self, method: str, reference: str = "fp64") -> SinglePointError:
        for e in self.errors:
            if e.method == method and e.reference == reference:
                return e
        raise KeyError((method, reference))

    def floor_multiple(self, method: str, metric: str = "force_mean_err", reference: str = "fp64") -> float:
        """``method``'s error against ``reference`` divided by the FP32 noise floor of the same metric."""
        f = self.floor.get(metric)
        e = self.error(method, reference).get(metric)
        if math.isnan(e) or math.isnan(f):
            return math.nan
        return e / f if f > 0 else (math.inf if e > 0 else 1.0)

    def to_rows(self) -> list[dict]:
        base = dict(check="single_point", potential=self.potential, system=self.system, n_atoms=self.n_atoms)
        rows = []
        for err in (self.floor, *self.errors):
            for metric, unit, attr in SinglePointError.METRICS:
                value = getattr(err, attr)
                if math.isnan(value):
                    continue
                rows.append(
                    row(
                        **base,
                        method=err.method,
                        reference=err.reference,
                        metric=metric,
                        unit=unit,
                        value=value,
                    )
                )
                if err is not self.floor:
                    rows.append(
                        row(
                            **base,
                            method=err.method,
                            reference=err.reference,
                            metric=metric + "_floor_multiple",
                            unit="x floor",
                            value=self.floor_multiple(err.method, metric, err.reference),
                        )
                    )
        for m, t in self.times_s.items():
            rows.append(row(**base, method=m, metric="eval_time", unit="s", value=t))
        for m, e in self.energies_eV.items():
            rows.append(row(**base, method=m, metric="energy", unit="eV", value=e))
        return rows + coverage_rows(base, self.coverage)


def single_point(
    potential,
    atoms,
    methods: list[str] | tuple[str, ...] = ("tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"),
    floor: str = "permute",
    device: str = "cpu",
    seed: int = 0,
    show_progress: bool = True,
) -> SinglePointResult:
    """Run check 1: evaluate ``atoms`` with FP64, FP32, FP32 reordered (the floor) and each method.

    Args:
        potential: a :class:`~tcemu.mlip.models.Potential`.
        atoms: the structure (periodic structures also get stress errors).
        methods: emulation methods to compare (FP64 and FP32 always run).
        floor: ``"permute"`` or ``"compile"`` (see the module docstring).
        device: torch device of the models.
        seed: seed of the atom permutation.
    """
    if floor not in FLOOR_KINDS:
        raise ValueError(f"unknown floor {floor!r}; choose one of {', '.join(FLOOR_KINDS)}")
    potential.check_atoms(atoms)
    all_methods = with_reference(methods)
    evals: dict[str, Evaluation] = {}
    coverage: dict[str, float] = {}
    for m in progress(all_methods + ["floor"], f"single point {potential.name}", show_progress):
        if m == "floor":
            if floor == "permute":
                calc = potential.calculator("fp32", device)
                order = np.random.default_rng(seed).permutation(len(atoms))
                evals[m] = evaluate(calc, atoms, order=order)
            else:
                wrap_compiled = potential.extra.get("wrap_compiled")
                if wrap_compiled is None:
                    raise ValueError(
                        f"floor='compile' needs a PET potential; {potential.name} has no compiled form"
                    )
                calc = replace(potential, wrap=wrap_compiled).calculator("fp32", device)
                evaluate(calc, atoms)  # the first call compiles
                evals[m] = evaluate(calc, atoms)
            continue
        calc = potential.calculator(m, device)
        evals[m] = evaluate(calc, atoms)
        coverage[m] = coverage_of(calc)
        del calc
    errors = [SinglePointError.between("fp32", "fp64", evals["fp32"], evals["fp64"])]
    for m in all_methods[2:]:
        errors.append(SinglePointError.between(m, "fp64", evals[m], evals["fp64"]))
        errors.append(SinglePointError.between(m, "fp32", evals[m], evals["fp32"]))
    floor_err = SinglePointError.between(f"fp32-{floor}", "fp32", evals["floor"], evals["fp32"])
    return SinglePointResult(
        potential=potential.name,
        system=system_name(atoms),
        n_atoms=len(atoms),
        floor_kind=floor,
        floor=floor_err,
        errors=tuple(errors),
        energies_eV={m: evals[m].energy_eV for m in all_methods},
        times_s={m: evals[m].time_s for m in all_methods},
        coverage=coverage,
    )
