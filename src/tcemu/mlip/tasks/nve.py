"""Check 3, NVE: velocity Verlet at constant energy, and the drift and fluctuation of the total energy.

With exact forces, velocity Verlet conserves a shadow energy: the total energy fluctuates (as dt^2)
but does not drift. Forces that are not the gradient of one smooth energy (rounding noise that
changes from step to step) make it drift or random-walk. We fit ``E_tot(t)`` with a line: the slope
per atom is the drift (meV/atom/ps); the RMS residual per atom is the fluctuation (meV/atom).
All methods start from the same positions and seeded Maxwell-Boltzmann velocities.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from tcemu.mlip._common import coverage_of, coverage_rows, progress, row, system_name, with_reference

__all__ = ["NVEResult", "NVECheckResult", "run_nve", "nve_check", "fit_drift"]


def fit_drift(time_ps: np.ndarray, etot_eV: np.ndarray, n_atoms: int) -> tuple[float, float, float]:
    """Drift (meV/atom/ps, least-squares slope), fluctuation (meV/atom, RMS residual), max |E - E0| (meV/atom)."""
    t = np.asarray(time_ps, dtype=np.float64)
    e = 1e3 * np.asarray(etot_eV, dtype=np.float64) / n_atoms
    if t.size < 3:
        return math.nan, math.nan, math.nan
    slope, icpt = np.polyfit(t, e, 1)
    resid = e - (slope * t + icpt)
    return float(slope), float(np.sqrt(np.mean(resid**2))), float(np.max(np.abs(e - e[0])))


@dataclass(frozen=True)
class NVEResult:
    """One NVE trajectory: energies every ``interval`` steps, and their drift and fluctuation."""

    method: str
    n_atoms: int
    timestep_fs: float
    steps: int
    time_ps: tuple[float, ...]
    etot_eV: tuple[float, ...]
    epot_eV: tuple[float, ...]
    temperature_K: tuple[float, ...]
    drift_meV_per_atom_per_ps: float
    fluct_meV_per_atom: float
    max_dev_meV_per_atom: float
    wall_s: float
    finite: bool  # False if the run blew up (non-finite energy)

    def truncated(self, steps: int) -> NVEResult:
        """The same run cut to its first ``steps`` steps (records at or before that step), drift refitted.

        Runs that stopped at a wall-clock deadline have different lengths; cutting them to the shortest
        compares the methods over the same time.
        """
        if steps >= self.steps:
            return self
        t_end = steps * self.timestep_fs * 1e-3
        n = sum(1 for t in self.time_ps if t <= t_end + 1e-12)
        drift, fluct, maxdev = fit_drift(np.array(self.time_ps[:n]), np.array(self.etot_eV[:n]), self.n_atoms)
        return NVEResult(
            self.method,
            self.n_atoms,
            self.timestep_fs,
            steps,
            self.time_ps[:n],
            self.etot_eV[:n],
            self.epot_eV[:n],
            self.temperature_K[:n],
            drift,
            fluct,
            maxdev,
            self.wall_s * steps / max(self.steps, 1),
            self.finite,
        )


def run_nve(
    atoms,
    calc,
    timestep_fs: float = 0.5,
    steps: int = 1000,
    temperature_K: float = 300.0,
    seed: int = 0,
    interval: int = 10,
    method: str = "",
    show_progress: bool = True,
    deadline: float | None = None,
) -> NVEResult:
    """Velocity Verlet (ASE) from seeded Maxwell-Boltzmann velocities; no thermostat, no COM motion.

    Records the total energy every ``interval`` steps through ``dyn.attach``. ``deadline`` (a
    ``time.time()`` value) stops the run at the last recorded step before it: ``steps`` of the result is
    then the number of steps done (a multiple of ``interval``).
    """
    from ase import units
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution, Stationary, ZeroRotation
    from ase.md.verlet import VelocityVerlet

    a = atoms.copy()
    a.calc = calc
    MaxwellBoltzmannDistribution(a, temperature_K=temperature_K, rng=np.random.default_rng(seed))
    Stationary(a)
    if not a.pbc.any():
        ZeroRotation(a)
    dyn = VelocityVerlet(a, timestep=timestep_fs * units.fs)
    ts, et, ep, tk = [], [], [], []

    def record() -> None:
        e_pot = float(a.get_potential_energy())
        e_kin = float(a.get_kinetic_energy())
        ts.append(dyn.nsteps * timestep_fs * 1e-3)
        et.append(e_pot + e_kin)
        ep.append(e_pot)
        tk.append(float(a.get_temperature()))

    dyn.attach(record, interval=interval)
    t0 = time.perf_counter()
    finite = True
    done = steps
    for _ in progress(dyn.irun(steps), f"NVE {method}", show_progress, total=steps + 1):
        if not np.isfinite(a.get_potential_energy()):
            finite = False
            break
        if deadline is not None and dyn.nsteps % interval == 0 and time.time() >= deadline:
            done = dyn.nsteps
            break
    wall = time.perf_counter() - t0
    if done < steps:  # stopped at the deadline: keep the records up to the last step
        n = sum(1 for t in ts if t <= done * timestep_fs * 1e-3 + 1e-12)
        ts, et, ep, tk = ts[:n], et[:n], ep[:n], tk[:n]
        steps = done
    drift, fluct, maxdev = fit_drift(np.array(ts), np.array(et), len(a))
    return NVEResult(
        method,
        len(a),
        timestep_fs,
        steps,
        tuple(ts),
        tuple(et),
        tuple(ep),
        tuple(tk),
        drift,
        fluct,
        maxdev,
        wall,
        finite,
    )


@dataclass(frozen=True)
class NVECheckResult:
    """Check 3 on one potential and structure: one :class:`NVEResult` per method, and the share of the float32
    contraction FLOPs each method emulated (first step)."""

    potential: str
    system: str
    n_atoms: int
    runs: dict[str, NVEResult]
    coverage: dict[str, float] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        return [m for m in self.runs if m != "fp64"]

    def to_rows(self) -> list[dict]:
        base = dict(check="nve", potential=self.potential, system=self.system, n_atoms=self.n_atoms)
        rows = []
        for m, r in self.runs.items():
            for metric, unit, v in (
                ("drift", "meV/atom/ps", r.drift_meV_per_atom_per_ps),
                ("abs_drift", "meV/atom/ps", abs(r.drift_meV_per_atom_per_ps)),
                ("fluctuation", "meV/atom", r.fluct_meV_per_atom),
                ("max_dev", "meV/atom", r.max_dev_meV_per_atom),
                ("wall_time", "s", r.wall_s),
                ("timestep", "fs", r.timestep_fs),
                ("duration", "ps", r.steps * r.timestep_fs * 1e-3),
            ):
                rows.append(row(**base, method=m, metric=metric, unit=unit, value=v))
            for t, e, ep, tk in zip(r.time_ps, r.etot_eV, r.epot_eV, r.temperature_K):
                rows.append(
                    row(**base, method=m, metric="etot", unit="eV", value=e, x_name="time_ps", x_value=t)
                )
                rows.append(
                    row(**base, method=m, metric="epot", unit="eV", value=ep, x_name="time_ps", x_value=t)
                )
                rows.append(
                    row(
                        **base,
                        method=m,
                        metric="temperature",
                        unit="K",
                        value=tk,
                        x_name="time_ps",
                        x_value=t,
                    )
                )
        return rows + coverage_rows(base, self.coverage)


def nve_check(
    potential,
    atoms,
    methods: list[str] | tuple[str, ...] = ("tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"),
    picoseconds: float = 0.5,
    timestep_fs: float = 0.5,
    temperature_K: float = 300.0,
    seed: int = 0,
    interval: int = 10,
    device: str = "cpu",
    show_progress: bool = True,
) -> NVECheckResult:
    """Run check 3: the same NVE run (``picoseconds`` long) with FP64, FP32 and each method."""
    potential.check_atoms(atoms)
    steps = max(int(round(picoseconds * 1e3 / timestep_fs)), 3 * interval)
    runs = {}
    coverage: dict[str, float] = {}
    for m in with_reference(methods):
        calc = potential.calculator(m, device)
        runs[m] = run_nve(
            atoms,
            calc,
            timestep_fs,
            steps,
            temperature_K,
            seed,
            interval,
            f"{potential.name} {m}",
            show_progress,
        )
        coverage[m] = coverage_of(calc)
        del calc
    return NVECheckResult(potential.name, system_name(atoms), len(atoms), runs, coverage)
