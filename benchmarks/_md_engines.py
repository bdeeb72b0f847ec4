"""The MD engines of ``benchmarks/md_run.py``, as runs that advance a given number of steps at a time, so that
several configurations can take turns on one process (``--interleave``) and see the same host speed.

A run is built (calculator or model, initial momenta), warmed up (its first force evaluation compiles), then
advanced in blocks; it keeps the wall clock of every timed step, the energies logged every ``log_every`` steps,
and the Dynamo graphs and Triton kernel variants first compiled while its own steps ran.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def graphs_compiled() -> int:
    """Dynamo graphs compiled so far in this process."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


_TRITON_VARIANTS = [0]  # Triton (and Gluon) kernel variants first launched in this process, once counted
TRITON_VARIANT_NAMES: list[str] = []  # their kernels' names, in launch order
TRITON_VARIANT_SIGNATURES: list[str] = []  # their specialisations (argument types and divisibility), in order


def count_triton_variants() -> bool:
    """Count every Triton kernel variant compiled or loaded from Triton's cache on its first launch in this
    process (``triton.knobs.runtime.jit_post_compile_hook``, chained to a hook already set): a kernel
    specialised anew, e.g. for a row count's divisibility first seen, shows here. False where Triton lacks it."""
    try:
        from triton import knobs
    except ImportError:
        return False
    previous = knobs.runtime.jit_post_compile_hook
    if getattr(previous, "counts_triton_variants", False):  # installed by an earlier run of this process
        return True

    def hook(*args, **kwargs):
        _TRITON_VARIANTS[0] += 1
        TRITON_VARIANT_NAMES.append(getattr(kwargs.get("fn"), "name", "?"))
        TRITON_VARIANT_SIGNATURES.append(str(kwargs.get("repr", "?")))
        return previous(*args, **kwargs) if previous else None

    hook.counts_triton_variants = True
    knobs.runtime.jit_post_compile_hook = hook
    return True


def compile_counts() -> tuple[int, int]:
    return graphs_compiled(), _TRITON_VARIANTS[0]  # (Dynamo graphs, Triton kernel variants) so far


@contextlib.contextmanager
def timed(obj, name: str, device: torch.device, into: list[float]):
    """Replace ``obj.name`` by a wrapper that records its wall time (CUDA synchronised) into ``into``."""
    inner = getattr(obj, name)

    def wrapper(*args, **kwargs):
        sync(device)
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        sync(device)
        into.append(time.perf_counter() - t0)
        return out

    setattr(obj, name, wrapper)
    try:
        yield
    finally:
        setattr(obj, name, inner)


class MDRun:
    """One engine on one model and system: ``warm_up()``, then ``advance(n)`` as often as needed."""

    def __init__(self, device: torch.device, log_every: int):
        self.device = device
        self.log_every = log_every
        self.step_s: list[float] = []  # wall clock of every timed step
        self.log: list[tuple[int, float, float]] = []  # (step, potential, kinetic energy in eV)
        self.graphs_timed = 0
        self.variants_timed: list[str] = []  # Triton kernels first launched during the timed steps
        self.signatures_timed: list[str] = []  # and their specialisations

    def warm_up(self, steps: int) -> float:
        """The first force evaluation (which compiles) and ``steps - 1`` more MD steps; their wall clock in s."""
        raise NotImplementedError

    def _steps(self, n: int) -> list[float]:
        """Advance ``n`` timed steps; each one's end time (``time.perf_counter``), starting from the call."""
        raise NotImplementedError

    def advance(self, n: int) -> None:
        """``n`` timed steps, with the compilations they cause counted against this run."""
        g0, v0 = compile_counts()
        sync(self.device)
        t0 = time.perf_counter()
        marks = self._steps(n)
        self.step_s.extend(np.diff(np.asarray([t0, *marks])).tolist())
        g1, v1 = compile_counts()
        self.graphs_timed += g1 - g0
        self.variants_timed += TRITON_VARIANT_NAMES[v0:v1]
        self.signatures_timed += TRITON_VARIANT_SIGNATURES[v0:v1]

    def breakdown(self, steps: int) -> tuple[list[float], list[float], list[float]]:
        """(neighbour-list calls, model calls, steps) wall clocks over ``steps`` more steps."""
        raise NotImplementedError

    def one_step(self) -> None:
        self._steps(1)


class AseRun(MDRun):
    """ASE VelocityVerlet with metatomic's calculator (its own neighbour lists and Verlet skin)."""

    def __init__(self, pet, atoms, args, device: torch.device):
        from ase import units
        from ase.md.velocitydistribution import Stationary
        from ase.md.verlet import VelocityVerlet
        from metatomic_ase import MetatomicCalculator

        from tcemu.mlip._common import maxwell_boltzmann_momenta

        super().__init__(device, args.log_every)
        self.calc = MetatomicCalculator(pet.export(), device=str(device), do_gradients_with_energy=False,
                                        neighbor_skin=args.skin)
        self.atoms = atoms.copy()
        self.atoms.calc = self.calc
        maxwell_boltzmann_momenta(self.atoms, args.temperature, np.random.default_rng(args.seed))
        Stationary(self.atoms)
        self.dyn = VelocityVerlet(self.atoms, args.dt * units.fs)
        self._marks: list[float] = []

    def warm_up(self, steps: int) -> float:
        t0 = time.perf_counter()
        self.atoms.get_forces()
        self.dyn.run(max(steps - 1, 0))
        elapsed = time.perf_counter() - t0
        self.dyn.nsteps = 0  # the timed steps count from 0; step 0's energies are logged by the first run call
        self.dyn.attach(self._record, interval=self.log_every)
        self.dyn.attach(lambda: self._marks.append(time.perf_counter()), interval=1)
        return elapsed

    def _record(self) -> None:
        self.log.append((self.dyn.nsteps, float(self.atoms.get_potential_energy()),
                         float(self.atoms.get_kinetic_energy())))

    def _steps(self, n: int) -> list[float]:
        self._marks.clear()
        self.dyn.run(n)  # (each step ends when its forces have reached the host)
        return self._marks[-n:]  # (the first call also marks step 0, before any step)

    def breakdown(self, steps: int):
        nl, model, step_times = [], [], []
        with timed(self.calc._nl_calculators, "compute", self.device, nl), \
                timed(self.calc, "calculate", self.device, model):
            for _ in range(steps):
                t = time.perf_counter()
                self.dyn.run(1)
                step_times.append(time.perf_counter() - t)
        return nl, model, step_times


def torchsim_model(pet, device: torch.device):
    """A TorchSim model of PET: metatomic-torchsim's (TorchSim 0.5+), else TorchSim 0.3's MetatomicModel (which
    loads a checkpoint file only: it is made from one, then given this PET)."""
    atomistic = pet.export()
    try:
        from metatomic_torchsim import MetatomicModel

        return MetatomicModel(atomistic, device=device, compute_stress=False)
    except ImportError:
        pass
    from torch_sim.models.metatomic import MetatomicModel

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pet.ckpt"
        torch.save(pet.get_checkpoint(), path)
        model = MetatomicModel(model=str(path), device=device, compute_stress=False)
    model._model = atomistic.to(device)
    model._requested_neighbor_lists = atomistic.requested_neighbor_lists()
    return model


def _torchsim_nl_owner(model):
    """(object, attribute) of the neighbour-list call of TorchSim's metatomic model, for the breakdown:
    metatomic-torchsim 0.1.7's calculator object, an older one's module function, or TorchSim 0.3's vesin call."""
    if hasattr(model, "_nl_calculators"):
        return model._nl_calculators, "compute"
    with contextlib.suppress(ImportError):
        import metatomic_torchsim._model as m

        if hasattr(m, "_compute_requested_neighbors"):
            return m, "_compute_requested_neighbors"
    import vesin.metatomic as v

    return v, "compute_requested_neighbors"


class TorchSimRun(MDRun):
    """TorchSim's NVE (velocity Verlet, ``tcemu.torchsim.nve``) on metatomic-torchsim's model of PET."""

    def __init__(self, pet, atoms, args, device: torch.device):
        super().__init__(device, args.log_every)
        self.model = torchsim_model(pet, device)
        self._args = args
        self._atoms = atoms
        self.nsteps = 0

    def warm_up(self, steps: int) -> float:
        import tcemu.torchsim

        args = self._args
        t0 = time.perf_counter()
        self.state, self.step = tcemu.torchsim.nve(self.model, self._atoms.copy(), dt_fs=args.dt,
                                                   temperature_K=args.temperature, seed=args.seed)
        for _ in range(max(steps - 1, 0)):
            self.state = self.step(self.state)
        sync(self.device)
        elapsed = time.perf_counter() - t0
        self.log.append((0, *self._energies()))
        return elapsed

    def _energies(self) -> tuple[float, float]:
        s = self.state
        kinetic = 0.5 * (s.momenta.double() ** 2 / s.masses.double().unsqueeze(-1)).sum()
        return float(s.energy.double().sum()), float(kinetic)

    def _steps(self, n: int) -> list[float]:
        marks = []
        for _ in range(n):
            self.state = self.step(self.state)
            self.nsteps += 1
            if self.nsteps % self.log_every == 0:
                self.log.append((self.nsteps, *self._energies()))
            sync(self.device)  # each step's end (a synchronisation per step, microseconds against its milliseconds)
            marks.append(time.perf_counter())
        return marks

    def one_step(self) -> None:
        self.state = self.step(self.state)

    def breakdown(self, steps: int):
        nl, model, step_times = [], [], []
        owner, name = _torchsim_nl_owner(self.model)
        with timed(owner, name, self.device, nl), timed(self.model, "forward", self.device, model):
            for _ in range(steps):
                t = time.perf_counter()
                self.state = self.step(self.state)
                sync(self.device)
                step_times.append(time.perf_counter() - t)
        return nl, model, step_times


RUNS: dict[str, Callable[..., MDRun]] = {"ase": AseRun, "torchsim": TorchSimRun}


def take_turns(runs: dict[str, MDRun], steps: int, block: int, failed: Callable[[str, Exception], None]) -> None:
    """``steps`` timed steps of every run: in turns of ``block`` steps each (every run sees the same stretch
    of the host's speed), or with ``block`` 0 each run's steps in one go, one run after the other. A run that
    raises is reported through ``failed`` and leaves the rotation."""
    left = dict.fromkeys(runs, steps)
    while left:
        for name in list(left):
            n = min(block or steps, left[name])
            try:
                runs[name].advance(n)
            except Exception as exc:  # noqa: BLE001 - one failing configuration must not stop the others
                failed(name, exc)
                del left[name]
                continue
            left[name] -= n
            if not left[name]:
                del left[name]
