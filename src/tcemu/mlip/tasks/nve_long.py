"""Long NVE runs (tens of ps): velocity Verlet in torch on the model's device, checkpointed so that a run
stopped by a time limit resumes where it stopped.

:func:`~tcemu.mlip.tasks.nve.run_nve` drives ASE's ``VelocityVerlet``, which copies positions and forces
between NumPy and the device at every step and runs ASE's calculator machinery around the model: fine for a ps,
slow for 60,000 steps of a host-bound model. Here positions and momenta stay float64 tensors on the device;
the forces come from a *force function* ``positions -> (energy, forces)``:

- :func:`metatomic_forces` (PET and every metatomic model): the model of a
  :class:`~tcemu.mlip.models.PotentialCalculator` called directly on a ``metatomic.torch.System``, with the
  calculator's own neighbour lists (vesin with a Verlet skin, or nvalchemiops on CUDA), forces by autograd;
- :func:`calculator_forces` (any potential, e.g. ANI-1x): the ASE calculator, one NumPy round trip a step.

The integrator is ASE's velocity Verlet (half kick, drift, force, half kick) from seeded Maxwell-Boltzmann
momenta with the centre of mass at rest, as :func:`~tcemu.mlip.tasks.nve.run_nve` starts: the same seed gives
every method the same start. Every ``checkpoint_every`` steps (and at the deadline) ``DIR/checkpoint.pt`` is
replaced atomically: positions, momenta, the forces at those positions, the step, the energy series and the
wall time; ``DIR/energies.csv`` is rewritten beside it. :func:`run_long_nve` on a directory with a checkpoint
continues from it, bit for bit as if it had not stopped where the backend is deterministic (the CPU).
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from tcemu.mlip._common import maxwell_boltzmann_momenta

__all__ = ["ForceFn", "LongNVEConfig", "LongNVESeries", "calculator_forces", "load_series", "metatomic_forces",
           "run_long_nve"]

#: ``positions (N, 3) float64 -> (potential energy (0-d tensor, eV), forces (N, 3) float64, eV/A)``
ForceFn = Callable[[Tensor], tuple[Tensor, Tensor]]
CHECKPOINT = "checkpoint.pt"
ENERGIES = "energies.csv"


@dataclass(frozen=True)
class LongNVEConfig:
    """One long NVE run: ``steps`` of ``timestep_fs``, energies every ``interval`` steps, a checkpoint every
    ``checkpoint_every`` steps (a multiple of ``interval``), Maxwell-Boltzmann start at ``temperature_K`` from
    ``seed``."""

    timestep_fs: float = 0.5
    steps: int = 60_000
    interval: int = 10
    checkpoint_every: int = 2_000
    temperature_K: float = 300.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.interval < 1 or self.checkpoint_every % self.interval:
            raise ValueError(f"tcemu: checkpoint_every ({self.checkpoint_every}) must be a multiple of interval "
                             f"({self.interval}) >= 1")
        if not (self.timestep_fs > 0 and self.steps >= 0):
            raise ValueError(f"tcemu: need timestep_fs > 0 and steps >= 0, got {self.timestep_fs}, {self.steps}")


@dataclass(frozen=True)
class LongNVESeries:
    """What a run directory holds: the energy series recorded so far and how far the run got."""

    steps_done: int
    steps_target: int
    timestep_fs: float
    n_atoms: int
    step: np.ndarray
    time_ps: np.ndarray
    etot_eV: np.ndarray
    epot_eV: np.ndarray
    temperature_K: np.ndarray
    wall_s: float  # stepping time over every call (start-up and compilation excluded)
    finite: bool

    @property
    def done(self) -> bool:
        return self.steps_done >= self.steps_target or not self.finite

    @property
    def s_per_step(self) -> float:
        return self.wall_s / self.steps_done if self.steps_done else math.nan


def calculator_forces(calc, atoms, device: str = "cpu") -> ForceFn:
    """A force function through an ASE calculator (any potential): positions copied to ``atoms`` each call."""
    a = atoms.copy()
    a.calc = calc

    def forces(positions: Tensor) -> tuple[Tensor, Tensor]:
        a.positions = positions.detach().cpu().numpy()
        f = torch.as_tensor(a.get_forces(), dtype=torch.float64, device=device)
        return torch.tensor(float(a.get_potential_energy()), dtype=torch.float64, device=device), f

    return forces


def metatomic_forces(calc, atoms) -> ForceFn:
    """A force function that calls a metatomic model (PET) directly: ``calc`` is a
    :class:`~tcemu.mlip.models.PotentialCalculator` whose ``inner`` is a ``MetatomicCalculator``.

    The calculator computes once through ASE first (so that its coverage of the method is measured), then its
    model, neighbour-list calculator, dtype and device are used without ASE: one ``System`` per step, forces by
    autograd, nothing copied to the host.
    """
    from metatomic.torch import ModelEvaluationOptions, System

    inner = getattr(calc, "inner", None)
    needed = ("_model", "_nl_calculators", "_dtype", "_device", "_energy_key")
    if inner is None or not all(hasattr(inner, k) for k in needed):
        raise TypeError(f"tcemu: metatomic_forces needs a PotentialCalculator around metatomic_ase's "
                        f"MetatomicCalculator (a PET); got {type(inner).__name__}: use calculator_forces")
    a = atoms.copy()
    a.calc = calc
    a.get_forces()  # the first calculation, measured by tcemu.coverage
    dtype, device = inner._dtype, inner._device
    outputs = inner._ase_properties_to_metatensor_outputs(["energy"], calculate_forces=False,
                                                          calculate_stress=False, calculate_stresses=False)
    options = ModelEvaluationOptions(length_unit="angstrom", outputs=outputs, selected_atoms=None)
    types = torch.as_tensor(a.numbers, dtype=torch.int32, device=device)
    pbc = torch.as_tensor(a.pbc, dtype=torch.bool, device=device)
    cell = torch.zeros((3, 3), dtype=dtype, device=device)
    cell[pbc] = torch.as_tensor(a.cell[a.pbc], dtype=dtype, device=device)
    key = inner._energy_key

    def forces(positions: Tensor) -> tuple[Tensor, Tensor]:
        pos = positions.detach().to(device=device, dtype=dtype).requires_grad_(True)
        system = inner._nl_calculators.compute(systems=[System(types, pos, cell, pbc)])[0]
        energy = inner._model([system], options, check_consistency=False)[key].block().values.reshape(())
        (grad,) = torch.autograd.grad(energy, pos)
        return energy.detach().to(torch.float64), (-grad).to(torch.float64)

    return forces


def _initial_momenta(atoms, temperature_K: float, seed: int) -> np.ndarray:
    """The start of :func:`~tcemu.mlip.tasks.nve.run_nve`: seeded Maxwell-Boltzmann, centre of mass at rest
    (and no rotation without a cell)."""
    from ase.md.velocitydistribution import Stationary, ZeroRotation

    a = atoms.copy()
    maxwell_boltzmann_momenta(a, temperature_K, np.random.default_rng(seed))
    Stationary(a)
    if not a.pbc.any():
        ZeroRotation(a)
    return a.get_momenta()


def _save(directory: Path, state: dict) -> None:
    """Replace the checkpoint and the energy CSV atomically (write aside, then rename)."""
    tmp = directory / (CHECKPOINT + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, directory / CHECKPOINT)
    tmp_csv = directory / (ENERGIES + ".tmp")
    with tmp_csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "time_ps", "etot_eV", "epot_eV", "temperature_K"])
        dt_ps = state["config"]["timestep_fs"] * 1e-3
        for s, et, ep, tk in zip(state["rec_step"], state["rec_etot"], state["rec_epot"], state["rec_temp"]):
            w.writerow([s, repr(s * dt_ps), repr(et), repr(ep), repr(tk)])
    os.replace(tmp_csv, directory / ENERGIES)


def load_series(directory: str | Path) -> LongNVESeries:
    """The energy series of a run directory (from its checkpoint)."""
    state = torch.load(Path(directory) / CHECKPOINT, weights_only=False)
    cfg = state["config"]
    step = np.asarray(state["rec_step"], dtype=np.int64)
    return LongNVESeries(int(state["step"]), int(cfg["steps"]), float(cfg["timestep_fs"]),
                         int(state["positions"].shape[0]), step, step * cfg["timestep_fs"] * 1e-3,
                         np.asarray(state["rec_etot"]), np.asarray(state["rec_epot"]),
                         np.asarray(state["rec_temp"]), float(state["wall_s"]), bool(state["finite"]))


def run_long_nve(atoms, force_fn: ForceFn, config: LongNVEConfig, directory: str | Path, *, device: str = "cpu",
                 deadline: float | None = None, meta: dict | None = None) -> LongNVESeries:
    """Velocity Verlet of ``atoms`` with ``force_fn`` to ``config.steps``, checkpointed in ``directory``.

    A checkpoint there is continued (its configuration must match ``config``); ``deadline`` (a ``time.time()``
    value) stops the run at the next energy record after it, with a checkpoint. ``meta`` (method, potential,
    ...) is stored in the checkpoint. A non-finite energy stops the run (``finite`` False).
    """
    from ase import units

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CHECKPOINT
    cfg = asdict(config)
    n = len(atoms)
    masses = torch.as_tensor(atoms.get_masses(), dtype=torch.float64, device=device).reshape(n, 1)
    if path.is_file():
        state = torch.load(path, weights_only=False)
        if {k: v for k, v in state["config"].items() if k != "steps"} != {k: v for k, v in cfg.items()
                                                                            if k != "steps"}:
            raise ValueError(f"tcemu: {path} was made with {state['config']}, not {cfg}; use another directory")
        state["config"] = cfg  # the target length may grow between calls
        pos = state["positions"].to(device)
        mom = state["momenta"].to(device)
        forces = state["forces"].to(device)
    else:
        pos = torch.as_tensor(atoms.get_positions(), dtype=torch.float64, device=device)
        mom = torch.as_tensor(_initial_momenta(atoms, config.temperature_K, config.seed), dtype=torch.float64,
                              device=device)
        epot, forces = force_fn(pos)
        state = {"config": cfg, "meta": dict(meta or {}), "step": 0, "wall_s": 0.0, "finite": True,
                 "rec_step": [], "rec_etot": [], "rec_epot": [], "rec_temp": []}
        _record(state, 0, epot, mom, masses)
    dt = config.timestep_fs * units.fs
    step = int(state["step"])
    t0 = time.perf_counter()
    wall0 = float(state["wall_s"])
    finite = bool(state["finite"])
    while finite and step < config.steps:
        mom = mom + 0.5 * dt * forces
        pos = pos + dt * mom / masses
        epot, forces = force_fn(pos)
        mom = mom + 0.5 * dt * forces
        step += 1
        if step % config.interval == 0:
            finite = _record(state, step, epot, mom, masses)
            stop = deadline is not None and time.time() >= deadline
            if step % config.checkpoint_every == 0 or stop or not finite or step == config.steps:
                state.update(positions=pos.cpu(), momenta=mom.cpu(), forces=forces.cpu(), step=step,
                             finite=finite, wall_s=wall0 + time.perf_counter() - t0)
                _save(directory, state)
            if stop:
                break
    if "positions" not in state or state["step"] != step:  # nothing stepped (already done) or steps % interval
        state.update(positions=pos.cpu(), momenta=mom.cpu(), forces=forces.cpu(), step=step, finite=finite,
                     wall_s=wall0 + time.perf_counter() - t0)
        _save(directory, state)
    return load_series(directory)


def _record(state: dict, step: int, epot: Tensor, mom: Tensor, masses: Tensor) -> bool:
    from ase import units

    ekin = float(0.5 * (mom * mom / masses).sum())
    e_pot = float(epot)
    state["rec_step"].append(step)
    state["rec_epot"].append(e_pot)
    state["rec_etot"].append(e_pot + ekin)
    state["rec_temp"].append(2 * ekin / (3 * mom.shape[0] * units.kB))
    return math.isfinite(e_pot + ekin)
