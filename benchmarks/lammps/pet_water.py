"""PET (random weights, a tcemu.mlip.models shape) on the packaged 192-atom water box in LAMMPS, emulated by
tcemu, on any number of MPI ranks: LAMMPS's forces come from metatomic's ASE calculator through
tcemu.lammps (fix external), each rank its own atoms (``--decomposition domain``) or the whole system.

    mpirun -np 2 python benchmarks/lammps/pet_water.py --method tf32x3 --decomposition domain --out run.npz

Runs a zero-step ``run`` (the energy, forces and pressure of the box as packaged), then NVE steps of 0.5 fs from
velocities drawn at 300 K, and writes from rank 0 an ``.npz``: the energy and forces (atom-ID order) at step 0
and after the steps, the pressure tensor at step 0 (bar: xx, yy, zz, xy, xz, yz), the positions after the
steps (ASE frame: box origin at 0), the cell, the atoms each rank owned and its ghosts after the steps, the
wall clock per step and the force evaluations per rank; with ``--results CSV`` also the wall clock, the
energies and the atoms and ghosts per rank as a tcemu._results file (the CPU runs:
benchmarks/results/cpu/lammps/).
tests/engines/test_lammps.py runs it on 2 ranks.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np


def _gathered(lmp, name: str) -> np.ndarray:
    n = lmp.get_natoms()
    return np.ctypeslib.as_array(lmp.gather_atoms(name, 1, 3), shape=(3 * n,)).reshape(n, 3).copy()


def _write_results(args, ranks: int, seconds_per_step: float, e0: float, e1: float, owned: list[int],
                   ghosts: list[int]) -> None:
    from tcemu._results import Provenance, case, measurement, write_results

    units = {"seconds_per_step": "s", "energy_step0": "eV", "energy_final": "eV",
             "atoms_per_rank_max": "atoms", "ghosts_per_rank_max": "atoms"}
    values = {"seconds_per_step": seconds_per_step, "energy_step0": e0, "energy_final": e1,
              "atoms_per_rank_max": max(owned), "ghosts_per_rank_max": max(ghosts)}
    where = case(system="water_192", decomposition=args.decomposition, ranks=ranks, steps=args.steps,
                 ghost_margin_A=args.ghost_margin if args.decomposition == "domain" else None,
                 torch_threads=args.threads)
    rows = measurement("lammps_pet_water", f"pet-{args.shape}", args.method, where, values, units)
    write_results(args.results, rows, Provenance.current(device="cpu"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="tiny", help="PET shape (tcemu.mlip.models.PET_SHAPES)")
    parser.add_argument("--method", default="tf32x3", help="emulation method ('fp32': none)")
    parser.add_argument("--decomposition", default="domain", choices=["domain", "replicated"],
                        help="each rank its own atoms and ghosts, or every rank the whole system")
    parser.add_argument("--ghost-margin", type=float, default=2.0,
                        help="Angstrom, with domain: LAMMPS's skin, the ghosts' reach beyond the model's")
    parser.add_argument("--steps", type=int, default=5, help="NVE steps after run 0")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--out", required=True, help="the .npz written by rank 0")
    parser.add_argument("--results", help="also write a tcemu._results CSV here")
    args = parser.parse_args(argv)

    import torch
    from metatomic_ase import MetatomicCalculator
    from mpi4py import MPI

    import tcemu.lammps
    from tcemu.mlip import models, systems

    torch.set_num_threads(args.threads)
    atoms = systems.water_box()
    pet = models.build_pet(args.shape, atomic_types=[1, 8])
    calc = MetatomicCalculator(copy.deepcopy(pet).export(), device="cpu")
    lmp = tcemu.lammps.lammps_from_atoms(atoms, comm=MPI.COMM_WORLD)
    method = None if args.method == "fp32" else args.method
    forces = tcemu.lammps.attach(lmp, calc, method=method, decomposition=args.decomposition,
                                 skin_A=args.ghost_margin)

    lmp.command("run 0")
    e0, f0 = lmp.get_thermo("pe"), _gathered(lmp, "f")
    pressure0 = [lmp.get_thermo(name) for name in ("pxx", "pyy", "pzz", "pxy", "pxz", "pyz")]
    lmp.commands_list(["velocity all create 300.0 4928459 mom yes rot yes dist gaussian",
                       "timestep 0.0005", "fix nve all nve", "thermo 1"])
    start = time.perf_counter()
    lmp.command(f"run {args.steps}")
    seconds_per_step = (time.perf_counter() - start) / max(args.steps, 1)
    e1, f1 = lmp.get_thermo("pe"), _gathered(lmp, "f")
    origin, cell, _ = tcemu.lammps.box(lmp)
    x1 = _gathered(lmp, "x") - origin
    comm = MPI.COMM_WORLD
    owned = comm.gather(lmp.extract_setting("nlocal"), root=0)
    ghosts = comm.gather(lmp.extract_setting("nghost"), root=0)
    evaluations = comm.gather(forces.evaluations, root=0)
    if comm.rank == 0:
        np.savez(args.out, energy0=e0, forces0=f0, pressure0_bar=np.array(pressure0), energy=e1, forces=f1,
                 positions=x1, cell=cell, owned=np.array(owned), ghosts=np.array(ghosts),
                 evaluations=np.array(evaluations),
                 seconds_per_step=seconds_per_step, ranks=comm.size, method=args.method, shape=args.shape,
                 decomposition=args.decomposition)
        if args.results:
            _write_results(args, comm.size, seconds_per_step, e0, e1, owned, ghosts)
        print(f"{args.decomposition}: ranks {comm.size}  owned {owned}  ghosts {ghosts}  "
              f"E0 {e0:.10f}  E{args.steps} {e1:.10f} eV  "
              f"{seconds_per_step * 1e3:.1f} ms/step")
    lmp.close()


if __name__ == "__main__":
    main()
