"""Check 4, relaxation: FIRE2 to a tight force threshold, steps to converge and the lowest fmax reached.

A tight threshold (1e-3 eV/Angstrom by default) asks the forces to be accurate to well below it
near the minimum: force noise from a low-precision GEMM keeps fmax above the threshold, and the
optimiser stalls or wanders until the step limit. The optimiser is our PyTorch FIRE2 with the
ALCHEMI update and defaults (:mod:`tcemu.mlip.fire2`), or ASE's ``FIRE2``. Each method relaxes
the same start ``repeats`` times; on a deterministic backend (the CPU) the repeats agree exactly,
on a GPU they show the run-to-run spread of atomics-based reductions.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from tcemu.mlip._common import coverage_of, coverage_rows, progress, row, system_name, with_reference

__all__ = ["OPTIMIZERS", "RelaxResult", "RelaxCheckResult", "rattled", "relax", "relax_check"]

#: Optimiser names: ``"fire2"`` (ours, ALCHEMI semantics), ``"alchemi-fire2"`` (ALCHEMI's own kernel,
#: nvalchemiops) or ``"ase-fire2"`` (ase.optimize.FIRE2).
OPTIMIZERS = ("fire2", "alchemi-fire2", "ase-fire2")


def _make_optimizer(name: str, atoms):
    if name == "fire2":
        from tcemu.mlip.fire2 import FIRE2

        return FIRE2(atoms, logfile=None)
    if name == "alchemi-fire2":
        from tcemu.mlip.fire2 import AlchemiFIRE2

        return AlchemiFIRE2(atoms, logfile=None)
    if name == "ase-fire2":
        from ase.optimize import FIRE2 as AseFIRE2

        return AseFIRE2(atoms, logfile=None)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


@dataclass(frozen=True)
class RelaxResult:
    """One relaxation: whether and when it converged, and the fmax after every step."""

    method: str
    optimizer: str
    fmax_target_eV_per_A: float
    max_steps: int
    steps: int  # force evaluations taken (== max_steps when not converged)
    converged: bool
    fmax_min_eV_per_A: float
    fmax_final_eV_per_A: float
    energy_final_eV: float
    fmax_trace_eV_per_A: tuple[float, ...]
    wall_s: float
    interrupted: bool = False  # stopped at a wall-clock deadline before converging or reaching max_steps

    @property
    def s_per_step(self) -> float:
        """Wall time per optimiser step (force evaluation and update)."""
        return self.wall_s / self.steps if self.steps else math.nan

    def with_limit(self, max_steps: int) -> RelaxResult:
        """The result this run would have given with a lower step limit: the same trajectory (the limit only
        stops it), read off ``fmax_trace`` (its entry ``k`` is fmax after ``k`` steps)."""
        if max_steps >= self.max_steps:
            return self
        trace = self.fmax_trace_eV_per_A[: max_steps + 1]
        hit = next((k for k, f in enumerate(trace) if f < self.fmax_target_eV_per_A), None)
        steps = hit if hit is not None else min(max_steps, len(trace) - 1)
        kept = trace[: steps + 1]
        return replace(self, max_steps=max_steps, steps=steps, converged=hit is not None,
                       fmax_min_eV_per_A=float(min(kept)), fmax_final_eV_per_A=kept[-1],
                       energy_final_eV=math.nan if steps != self.steps else self.energy_final_eV,
                       fmax_trace_eV_per_A=kept, wall_s=self.wall_s * steps / max(self.steps, 1),
                       interrupted=self.interrupted and hit is None and len(trace) - 1 < max_steps)


def relax(
    atoms,
    calc,
    optimizer: str = "fire2",
    fmax: float = 1e-3,
    max_steps: int = 500,
    method: str = "",
    show_progress: bool = True,
    deadline: float | None = None,
) -> RelaxResult:
    """Relax a copy of ``atoms`` with ``calc``; fmax is the largest per-atom force norm (eV/Angstrom).

    ``deadline`` (a ``time.time()`` value) stops an unfinished run; its result says ``interrupted``.
    """
    a = atoms.copy()
    a.calc = calc
    opt = _make_optimizer(optimizer, a)
    trace: list[float] = []

    def record() -> None:
        trace.append(float(np.linalg.norm(a.get_forces(), axis=1).max()))

    opt.attach(record, interval=1)
    t0 = time.perf_counter()
    converged = False
    interrupted = False
    bar = progress(
        opt.irun(fmax=fmax, steps=max_steps), f"relax {method}", show_progress, total=max_steps + 1
    )
    for converged in bar:
        if trace and not math.isfinite(trace[-1]):
            converged = False
            break
        if deadline is not None and not converged and time.time() >= deadline:
            interrupted = opt.get_number_of_steps() < max_steps
            break
    wall = time.perf_counter() - t0
    return RelaxResult(
        method=method,
        optimizer=optimizer,
        fmax_target_eV_per_A=fmax,
        max_steps=max_steps,
        steps=int(opt.get_number_of_steps()),
        converged=bool(converged),
        fmax_min_eV_per_A=float(min(trace)) if trace else math.nan,
        fmax_final_eV_per_A=trace[-1] if trace else math.nan,
        energy_final_eV=float(a.get_potential_energy()),
        fmax_trace_eV_per_A=tuple(trace),
        wall_s=wall,
        interrupted=interrupted,
    )


@dataclass(frozen=True)
class RelaxCheckResult:
    """Check 4 on one potential and structure: ``repeats`` relaxations per method, and the share of the float32
    contraction FLOPs each method emulated (first step)."""

    potential: str
    system: str
    n_atoms: int
    runs: dict[str, tuple[RelaxResult, ...]]
    coverage: dict[str, float] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        return [m for m in self.runs if m != "fp64"]

    def all_converged(self, method: str) -> bool:
        return all(r.converged for r in self.runs[method])

    def steps_median(self, method: str) -> float:
        return float(np.median([r.steps for r in self.runs[method]]))

    def fmax_min_eV_per_A(self, method: str) -> float:
        return float(min(r.fmax_min_eV_per_A for r in self.runs[method]))

    def to_rows(self) -> list[dict]:
        base = dict(check="relax", potential=self.potential, system=self.system, n_atoms=self.n_atoms)
        rows = []
        for m, rs in self.runs.items():
            for i, r in enumerate(rs):
                for metric, unit, v in (
                    ("steps", "steps", r.steps),
                    ("converged", "bool", int(r.converged)),
                    ("fmax_min", "eV/A", r.fmax_min_eV_per_A),
                    ("fmax_final", "eV/A", r.fmax_final_eV_per_A),
                    ("energy_final", "eV", r.energy_final_eV),
                    ("wall_time", "s", r.wall_s),
                    ("s_per_step", "s", r.s_per_step),
                    ("interrupted", "bool", int(r.interrupted)),
                ):
                    rows.append(
                        row(
                            **base,
                            method=m,
                            metric=metric,
                            unit=unit,
                            value=v,
                            repeat=i,
                            reference=r.optimizer,
                        )
                    )
                for k, f in enumerate(r.fmax_trace_eV_per_A):
                    rows.append(
                        row(
                            **base,
                            method=m,
                            metric="fmax",
                            unit="eV/A",
                            value=f,
                            x_name="step",
                            x_value=k,
                            repeat=i,
                        )
                    )
        return rows + coverage_rows(base, self.coverage)


def rattled(atoms, stdev_A: float, seed: int):
    """A copy of ``atoms`` with every position moved by a normal deviate of ``stdev_A`` (ASE's ``rattle``)."""
    a = atoms.copy()
    if stdev_A > 0:
        a.rattle(stdev=stdev_A, seed=seed)
    return a


def relax_check(
    potential,
    atoms,
    methods: list[str] | tuple[str, ...] = ("tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"),
    repeats: int = 3,
    optimizer: str = "fire2",
    fmax: float = 1e-3,
    max_steps: int = 500,
    device: str = "cpu",
    include_fp64: bool = False,
    show_progress: bool = True,
    rattle_A: float = 0.0,
) -> RelaxCheckResult:
    """Run check 4: ``repeats`` relaxations of ``atoms`` with FP32 and each method (and FP64 if asked).

    ``rattle_A`` > 0: repeat ``i`` starts from ``atoms`` rattled by that standard deviation (Angstrom) with seed
    ``i`` (ASE's ``rattle``), the same starts for every method; 0: every repeat starts from ``atoms``.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    potential.check_atoms(atoms)
    starts = [rattled(atoms, rattle_A, i) for i in range(repeats)]
    ms = with_reference(methods)
    if not include_fp64:
        ms.remove("fp64")
    runs = {}
    coverage: dict[str, float] = {}
    for m in ms:
        calc = potential.calculator(m, device)
        runs[m] = tuple(
            relax(start, calc, optimizer, fmax, max_steps, f"{potential.name} {m} #{i}", show_progress)
            for i, start in enumerate(starts)
        )
        coverage[m] = coverage_of(calc)
        del calc
    return RelaxCheckResult(potential.name, system_name(atoms), len(atoms), runs, coverage)
