"""PET (random weights, a tcemu.mlip.models shape) on a water box in LAMMPS (the packaged 192 atoms, or a
``tcemu.mlip.systems.build`` name such as ``water_17280``), emulated by tcemu, on any number of MPI ranks, on the
CPU or a GPU (every rank on ``--device``): LAMMPS's forces come from metatomic's ASE calculator through
tcemu.lammps (fix external), each rank its own atoms (``--decomposition domain``) or the whole system.

    mpirun -np 2 python benchmarks/lammps/pet_water.py --method tf32x3 --decomposition domain --out run.npz
    mpirun -np 2 python benchmarks/lammps/pet_water.py --device cuda --shape s --system water_17280 \
        --method tf32x3+attn --warmup 10 --steps 300 --out gpu.npz --results gpu.csv

Runs a zero-step ``run`` (the energy, forces and pressure of the box as packaged), then NVE steps of 0.5 fs from
velocities drawn at 300 K: ``--warmup`` steps (untimed: the first calls compile kernels), then ``--steps``
timed ones, the total energy logged every ``--log-every`` steps. Writes from rank 0 an ``.npz``: the energy and
forces (atom-ID order) at step 0 and after the steps, the pressure tensor at step 0 (bar: xx, yy, zz, xy, xz,
yz), the positions after the steps (ASE frame: box origin at 0), the cell, the atoms each rank owned and its
ghosts after the steps, the wall clock per timed step, the logged total energies and the force evaluations per
rank; with ``--results CSV`` also the wall clock, the energies, the drift of the total energy (a straight-line
fit over the timed steps, meV per atom per ps) and the atoms and ghosts per rank as a tcemu._results file (the
CPU runs: benchmarks/results/cpu/lammps/, the H200's: benchmarks/results/h200/lammps/).
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


def drift_meV_per_atom_ps(steps: np.ndarray, etotal: np.ndarray, n_atoms: int, timestep_ps: float) -> float:
    """The slope of a straight line fitted to the total energy (eV) against time, in meV per atom per ps."""
    if len(steps) < 2:
        return float("nan")
    slope = np.polyfit(np.asarray(steps, float) * timestep_ps, np.asarray(etotal, float), 1)[0]
    return float(slope * 1e3 / n_atoms)


def _write_results(args, system: str, n_atoms: int, ranks: int, seconds_per_step: float, e0: float, e1: float,
                   drift: float, owned: list[int], ghosts: list[int], devices: list[str]) -> None:
    from tcemu._results import Provenance, case, measurement, write_results

    units = {"seconds_per_step": "s", "energy_step0": "eV", "energy_final": "eV",
             "drift_meV_per_atom_ps": "meV/atom/ps",
             "atoms_per_rank_max": "atoms", "ghosts_per_rank_max": "atoms"}
    values = {"seconds_per_step": seconds_per_step, "energy_step0": e0, "energy_final": e1,
              "drift_meV_per_atom_ps": drift, "atoms_per_rank_max": max(owned),
              "ghosts_per_rank_max": max(ghosts)}
    where = case(system=system, atoms=n_atoms, decomposition=args.decomposition, ranks=ranks, steps=args.steps,
                 warmup=args.warmup, ghost_margin_A=args.ghost_margin if args.decomposition == "domain" else None,
                 gpus=len({d for d in devices if d.startswith("cuda")}) or None,
                 torch_threads=args.threads)
    rows = measurement("lammps_pet_water", f"pet-{args.shape}", args.method, where, values, units)
    write_results(args.results, rows, Provenance.current(device=args.device))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="tiny", help="PET shape (tcemu.mlip.models.PET_SHAPES)")
    parser.add_argument("--method", default="tf32x3", help="emulation method ('fp32': none)")
    parser.add_argument("--decomposition", default="domain", choices=["domain", "replicated"],
                        help="each rank its own atoms and ghosts, or every rank the whole system")
    parser.add_argument("--ghost-margin", type=float, default=2.0,
                        help="Angstrom, with domain: LAMMPS's skin, the ghosts' reach beyond the model's")
    parser.add_argument("--system", default="water_192", help="tcemu.mlip.systems.build name (a water box)")
    parser.add_argument("--device", default="cpu",
                        help="torch device of every rank's model (cpu, cuda, cuda:1), or cuda:per-rank: the ranks "
                             "of a host spread over its GPUs (tcemu.lammps.rank_device)")
    parser.add_argument("--warmup", type=int, default=0, help="untimed NVE steps before the timed ones")
    parser.add_argument("--steps", type=int, default=5, help="timed NVE steps after run 0 (and the warm-up)")
    parser.add_argument("--log-every", type=int, default=10, help="steps between total-energy records")
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
    atoms = systems.water_box() if args.system == "water_192" else systems.build(args.system)
    pet = models.build_pet(args.shape, atomic_types=[1, 8])
    device = tcemu.lammps.rank_device(MPI.COMM_WORLD, args.device)
    calc = MetatomicCalculator(copy.deepcopy(pet).export(), device=device)
    lmp = tcemu.lammps.lammps_from_atoms(atoms, comm=MPI.COMM_WORLD)
    method = None if args.method == "fp32" else args.method
    forces = tcemu.lammps.attach(lmp, calc, method=method, decomposition=args.decomposition,
                                 skin_A=args.ghost_margin)

    lmp.command("run 0")
    e0, f0 = lmp.get_thermo("pe"), _gathered(lmp, "f")
    pressure0 = [lmp.get_thermo(name) for name in ("pxx", "pyy", "pzz", "pxy", "pxz", "pyz")]
    timestep_ps = 0.0005
    lmp.commands_list(["velocity all create 300.0 4928459 mom yes rot yes dist gaussian",
                       f"timestep {timestep_ps}", "fix nve all nve", f"thermo {args.log_every}"])
    if args.warmup:
        lmp.command(f"run {args.warmup}")
    log = f"{args.out}.etotal.txt"  # LAMMPS's fix print (rank 0): step and total energy every log_every steps
    lmp.commands_list(["reset_timestep 0", "variable tcemu_etotal equal etotal",
                       f'fix tcemu_log all print {args.log_every} "$(step) ${{tcemu_etotal}}" file {log} '
                       f'screen no title "# step etotal"'])
    start = time.perf_counter()
    lmp.command(f"run {args.steps}")
    seconds_per_step = (time.perf_counter() - start) / max(args.steps, 1)
    lmp.command("unfix tcemu_log")
    steps_logged, etotal = np.zeros(0), np.zeros(0)
    if MPI.COMM_WORLD.rank == 0:
        logged = np.loadtxt(log, comments="#", ndmin=2)
        steps_logged, etotal = logged[:, 0], logged[:, 1]
    drift = drift_meV_per_atom_ps(steps_logged, etotal, len(atoms), timestep_ps)
    e1, f1 = lmp.get_thermo("pe"), _gathered(lmp, "f")
    origin, cell, _ = tcemu.lammps.box(lmp)
    x1 = _gathered(lmp, "x") - origin
    comm = MPI.COMM_WORLD
    owned = comm.gather(lmp.extract_setting("nlocal"), root=0)
    ghosts = comm.gather(lmp.extract_setting("nghost"), root=0)
    evaluations = comm.gather(forces.evaluations, root=0)
    devices = comm.gather(device, root=0)
    if comm.rank == 0:
        np.savez(args.out, energy0=e0, forces0=f0, pressure0_bar=np.array(pressure0), energy=e1, forces=f1,
                 positions=x1, cell=cell, owned=np.array(owned), ghosts=np.array(ghosts),
                 evaluations=np.array(evaluations), steps_logged=steps_logged, etotal=etotal, drift=drift,
                 seconds_per_step=seconds_per_step, ranks=comm.size, method=args.method, shape=args.shape,
                 decomposition=args.decomposition, system=args.system, device=args.device,
                 rank_devices=np.array(devices))
        if args.results:
            _write_results(args, args.system, len(atoms), comm.size, seconds_per_step, e0, e1, drift, owned,
                           ghosts, devices)
        print(f"{args.decomposition}: ranks {comm.size} on {devices}  owned {owned}  ghosts {ghosts}  "
              f"E0 {e0:.10f}  E{args.steps} {e1:.10f} eV  "
              f"{seconds_per_step * 1e3:.1f} ms/step  drift {drift:.3g} meV/atom/ps")
    lmp.close()


if __name__ == "__main__":
    main()
