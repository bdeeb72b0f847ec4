"""tcemu.lammps: PET tiny emulated with TF32x3 in LAMMPS on 2 MPI ranks (benchmarks/lammps/pet_water.py), each
rank its own atoms and ghosts or every rank the whole system, against the single-process ASE path (tcemu.ase)
and FP32 / FP64, at the packaged water box and after NVE steps."""

import copy
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from _enginetest import FP32_NOISE_FACTOR, assert_fp32_accurate, fp32_ulp

pytest.importorskip("metatomic_ase")
import tcemu.ase  # noqa: E402
import tcemu.lammps  # noqa: E402
from tcemu.mlip import models, systems  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "lammps" / "pet_water.py"
RANKS = 2
#: NVE steps after run 0, and the ghosts' margin beyond the model's reach (Angstrom), per decomposition: the
#: domain runs are short because each rank's ghosts (about 2,900) outnumber the box's 192 atoms
RUNS = {"replicated": (5, 2.0), "domain": (1, 0.5)}


def _mpirun() -> str:
    beside_python = Path(sys.executable).with_name("mpirun")  # the PyPI mpich wheel installs it there
    found = str(beside_python) if beside_python.exists() else shutil.which("mpirun")
    if found is None:
        pytest.skip("no mpirun (benchmarks/lammps/install_lammps.sh installs mpich)")
    return found


@pytest.fixture(scope="module", params=list(RUNS))
def lammps_run(request, tmp_path_factory):
    pytest.importorskip("lammps", reason="LAMMPS's Python module is not installed "
                        "(benchmarks/lammps/install_lammps.sh)")
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (benchmarks/lammps/install_lammps.sh)")
    steps, margin = RUNS[request.param]
    out = tmp_path_factory.mktemp("lammps") / f"{request.param}.npz"
    path = os.pathsep.join([str(ROOT / "src"), *sys.path])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    cmd = [_mpirun(), "-np", str(RANKS), sys.executable, str(SCRIPT), "--shape", "tiny", "--method", "tf32x3",
           "--decomposition", request.param, "--steps", str(steps), "--ghost-margin", str(margin),
           "--out", str(out)]
    done = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {**np.load(out), "steps": steps}


@functools.cache
def _pet():
    return models.build_pet("tiny", atomic_types=[1, 8])


def _calc(method=None, dtype=torch.float32):
    from metatomic_ase import MetatomicCalculator

    calc = MetatomicCalculator(copy.deepcopy(_pet()).to(dtype).export(), device="cpu")
    return tcemu.ase.emulate_calculator(calc, method) if method is not None else calc


def _ase(atoms, method=None, dtype=torch.float32):
    """(energy, forces, stress) of the single-process ASE path: metatomic's calculator (tcemu.ase)."""
    a = atoms.copy()
    a.calc = _calc(method, dtype)
    forces = np.array(a.get_forces(), dtype=np.float64)
    return float(a.get_potential_energy()), forces, a.get_stress(voigt=True)


def _after_steps(run):
    from ase import Atoms

    box = systems.water_box()
    return Atoms(box.get_chemical_symbols(), positions=run["positions"], cell=run["cell"], pbc=True)


def test_both_ranks_owned_atoms_and_evaluated_every_step(lammps_run):
    assert list(lammps_run["rank_devices"]) == ["cpu"] * RANKS
    owned, ghosts = lammps_run["owned"], lammps_run["ghosts"]
    assert len(owned) == RANKS and owned.min() > 0 and owned.sum() == 192
    assert (ghosts.min() > 0) == (str(lammps_run["decomposition"]) == "domain")
    # run 0, the setup of run N, N steps
    assert lammps_run["evaluations"].tolist() == [lammps_run["steps"] + 2] * RANKS


@pytest.mark.parametrize("where", ["packaged box", "after the NVE steps"])
def test_two_ranks_match_the_ase_path_within_fp32_noise(lammps_run, where):
    first = where == "packaged box"
    atoms = systems.water_box() if first else _after_steps(lammps_run)
    e_lmp = float(lammps_run["energy0" if first else "energy"])
    f_lmp = lammps_run["forces0" if first else "forces"]
    e_emu, f_emu, _ = _ase(atoms, "tf32x3")
    e32, f32, _ = _ase(atoms)
    e64, f64, _ = _ase(atoms, dtype=torch.float64)
    assert_fp32_accurate(e_lmp, f_lmp, e32, f32, e64, f64)
    e_noise = max(abs(e32 - e64), fp32_ulp(e64))
    f_noise = float(np.linalg.norm(f32 - f64, axis=1).mean())
    assert abs(e_lmp - e_emu) <= 2 * FP32_NOISE_FACTOR * e_noise  # both carry their own rounding
    assert float(np.linalg.norm(f_lmp - f_emu, axis=1).mean()) <= 2 * FP32_NOISE_FACTOR * f_noise


def test_pressure_comes_from_the_model(lammps_run):
    from ase.units import bar

    _, _, stress = _ase(systems.water_box(), "tf32x3")
    lammps_order = stress[[0, 1, 2, 5, 4, 3]]  # ASE's Voigt (xx yy zz yz xz xy) as LAMMPS's xx yy zz xy xz yz
    # run 0 starts from rest: the pressure is the virial's alone
    np.testing.assert_allclose(lammps_run["pressure0_bar"], -lammps_order / bar, rtol=1e-5,
                               atol=1e-5 * np.abs(stress).max() / bar)


def _energy_of_atom(calc, atoms, index):
    from metatensor.torch import Labels
    from metatomic.torch import ModelOutput

    selected = Labels(["system", "atom"], torch.tensor([[0, index]], dtype=torch.int32))
    out = calc.run_model(atoms, {"energy": ModelOutput(unit="eV", sample_kind="system")}, selected)
    return float(out["energy"].block().values.sum())


def _cluster_around(atoms, index, radius):
    """The atoms (periodic images included) within ``radius`` of atom ``index``, as a non-periodic system with
    that atom first."""
    from ase import Atoms

    cells = np.array([(i, j, k) for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)])
    shifts = cells @ atoms.cell.array
    images = (atoms.positions[None, :, :] + shifts[:, None, :]).reshape(-1, 3)
    numbers = np.tile(atoms.numbers, len(shifts))
    distance = np.linalg.norm(images - atoms.positions[index], axis=1)
    order = np.argsort(distance, kind="stable")
    keep = order[distance[order] <= radius]
    return Atoms(numbers=numbers[keep], positions=images[keep])


def test_an_atoms_pet_energy_reaches_one_cutoff_beyond_the_interaction_range():
    """The domain decomposition's ghosts: an atom's PET energy (adaptive cutoffs) computed from the atoms
    within metatrain's interaction_range differs from the periodic box's; within energy_reach_A it agrees."""
    calc = _calc()
    model = calc._model
    box = systems.water_box()
    stated, reach = model.capabilities().interaction_range, tcemu.lammps.energy_reach_A(model)
    assert reach == stated + model.module.cutoff
    misses, agrees = [], []
    for index in range(0, 192, 48):
        periodic = _energy_of_atom(calc, box, index)
        misses.append(abs(_energy_of_atom(calc, _cluster_around(box, index, stated + 0.5), 0) - periodic))
        agrees.append(abs(_energy_of_atom(calc, _cluster_around(box, index, reach + 0.5), 0) - periodic))
    assert max(agrees) <= 1e-5 and max(misses) > 100 * max(max(agrees), 1e-7), (misses, agrees)


def _failing_on_call(n):
    """An ASE Lennard-Jones calculator whose ``n``-th force evaluation raises (and a count of its calls)."""
    from ase.calculators.lj import LennardJones

    class Failing(LennardJones):
        calls = 0

        def calculate(self, *args, **kwargs):
            Failing.calls += 1
            if Failing.calls == n:
                raise RuntimeError("out of memory (a test's failure)")
            super().calculate(*args, **kwargs)

    return Failing(sigma=0.8, epsilon=1e-3, rc=4.0)  # gentle on water: no atom flies off in 20 steps


def test_a_failing_evaluation_stops_the_run_with_its_message():
    """A force evaluation that raises inside LAMMPS's callback (which LAMMPS would otherwise survive, running on
    with forces the model did not compute) stops the run at that step, and the ``run`` command raises it."""
    pytest.importorskip("lammps", reason="LAMMPS's Python module is not installed "
                        "(benchmarks/lammps/install_lammps.sh)")
    atoms = systems.water_box()
    calc = _failing_on_call(3)
    lmp = tcemu.lammps.lammps_from_atoms(atoms)
    forces = tcemu.lammps.attach(lmp, calc, decomposition="replicated")
    lmp.commands_list(["timestep 0.0005", "fix nve all nve"])
    with pytest.raises(Exception, match=r"Fix halt condition for fix-id tcemu_failed met"):
        lmp.command("run 20")
    assert isinstance(forces.failure, RuntimeError) and forces.evaluations == 2
    assert type(calc).calls == 3  # not called again after the failure
    assert lmp.extract_global("ntimestep") == 2  # the run stopped at the failing step (setup, 1, 2), not after 20
    lmp.close()


def test_domain_decomposition_warns_when_ghosts_outnumber_the_atoms():
    """One rank of the 192-atom box with PET tiny's 10 A reach: about 2,900 ghosts beside 192 atoms, which the
    model computes too; the first evaluation says so (with the counts and the replicated alternative)."""
    pytest.importorskip("lammps", reason="LAMMPS's Python module is not installed "
                        "(benchmarks/lammps/install_lammps.sh)")
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (benchmarks/lammps/install_lammps.sh)")
    from mpi4py import MPI

    lmp = tcemu.lammps.lammps_from_atoms(systems.water_box(), comm=MPI.COMM_WORLD)
    forces = tcemu.lammps.attach(lmp, _calc(), decomposition="domain", skin_A=0.5)
    with pytest.warns(UserWarning, match=r"gives a rank \d+ ghosts beside its 192 atoms .*'replicated'"):
        lmp.command("run 0")
    assert forces.evaluations == 1 and forces.failure is None
    assert lmp.extract_setting("nghost") > tcemu.lammps.DOMAIN_GHOSTS_PER_ATOM_WARNING * 192
    lmp.close()


class _NodeComm:
    """A stand-in for an MPI communicator whose shared-memory split gives this rank local rank ``local``."""

    def __init__(self, local: int) -> None:
        self.local, self.freed = local, False

    def Split_type(self, split_type):  # noqa: N802 - mpi4py's name
        return self

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's name
        return self.local

    def Free(self) -> None:  # noqa: N802 - mpi4py's name
        self.freed = True


def test_rank_device_spreads_a_hosts_ranks_over_its_gpus(monkeypatch):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (benchmarks/lammps/install_lammps.sh)")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    comms = [_NodeComm(local) for local in range(5)]
    assert [tcemu.lammps.rank_device(c) for c in comms] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
    assert all(c.freed for c in comms)
    assert tcemu.lammps.rank_device(_NodeComm(3), "cuda:1") == "cuda:1"  # a named device is every rank's
    assert tcemu.lammps.rank_device(None, "cpu") == "cpu"


def test_rank_device_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        tcemu.lammps.rank_device(_NodeComm(0), tcemu.lammps.PER_RANK_GPU)


def test_rank_device_over_real_mpi_ranks(tmp_path):
    """Three ranks of one host on two (pretended) GPUs: MPI's shared-memory split numbers them 0, 1, 2."""
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (benchmarks/lammps/install_lammps.sh)")
    script = tmp_path / "rank_device.py"
    script.write_text("import torch\n"
                      "torch.cuda.device_count = lambda: 2\n"
                      "from mpi4py import MPI\n"
                      "import tcemu.lammps\n"
                      "device = tcemu.lammps.rank_device(MPI.COMM_WORLD)\n"
                      "devices = MPI.COMM_WORLD.gather(device, root=0)\n"
                      "if MPI.COMM_WORLD.rank == 0:\n"
                      "    print(','.join(devices))\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
    done = subprocess.run([_mpirun(), "-np", "3", sys.executable, str(script)], check=False, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "cuda:0,cuda:1,cuda:0"
