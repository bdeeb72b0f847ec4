"""The atoms and ghosts each MPI rank holds under ``tcemu.lammps.attach(..., decomposition="domain")`` for a
PET on water boxes, without running the model: LAMMPS's ghosts reach the model's energy range
(``tcemu.lammps.energy_reach_A``) plus the skin, as ``attach`` sets them, and ``pair_style zero`` stands in for
the model. What a rank's model would evaluate is its atoms plus its ghosts, so this says, on the CPU and in
seconds, whether a domain-decomposed run can divide the work (and fit a GPU) before any GPU time is spent.

    mpirun -np 2 python benchmarks/lammps/domain_ghosts.py --repeats 3x5x6,6x10x12 \\
        --results benchmarks/results/cpu/lammps/domain_ghosts_pet_s_2ranks.csv

``--repeats`` are copies of the packaged 192-atom box along a, b, c (3x5x6: the 17,280-atom box of
``tcemu.mlip.systems.build("water_17280")``; 6x10x12: 138,240 atoms).
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="s", help="PET shape (tcemu.mlip.models.PET_SHAPES)")
    parser.add_argument("--repeats", default="3x5x6,6x10x12", help="copies of the 192-atom box, comma separated")
    parser.add_argument("--skin", type=float, default=2.0, help="LAMMPS's skin (Angstrom), as attach's skin_A")
    parser.add_argument("--results", help="write a tcemu._results CSV here (rank 0)")
    args = parser.parse_args(argv)

    from mpi4py import MPI

    import tcemu.lammps
    from tcemu.mlip import models, systems

    comm = MPI.COMM_WORLD
    reach = tcemu.lammps.energy_reach_A(models.build_pet(args.shape, atomic_types=[1, 8]).export())
    rows = []
    for text in args.repeats.split(","):
        repeat = tuple(int(n) for n in text.split("x"))
        atoms = systems.water_box().repeat(repeat)
        lmp = tcemu.lammps.lammps_from_atoms(atoms, comm=comm)
        lmp.commands_list([f"comm_modify cutoff {reach + args.skin!r}", "pair_style zero 1.0", "pair_coeff * *",
                           f"neighbor {args.skin!r} bin", "run 0"])
        counts = comm.gather((lmp.extract_setting("nlocal"), lmp.extract_setting("nghost")), root=0)
        lmp.close()
        if comm.rank == 0:
            owned, ghosts = zip(*counts)
            print(f"{len(atoms)} atoms (cell {atoms.cell.lengths().round(2).tolist()} A), reach {reach:.1f} + skin "
                  f"{args.skin:.1f} A, {comm.size} ranks: owned {list(owned)}, ghosts {list(ghosts)}", flush=True)
            rows.append((len(atoms), text, max(owned), max(ghosts), max(o + g for o, g in counts)))
    if comm.rank == 0 and args.results:
        from tcemu._results import Provenance, case, measurement, write_results

        units = {"atoms_per_rank_max": "atoms", "ghosts_per_rank_max": "atoms", "evaluated_per_rank_max": "atoms",
                 "reach_A": "A"}
        out = []
        for n_atoms, text, owned, ghosts, evaluated in rows:
            where = case(system=f"water_{n_atoms}", atoms=n_atoms, repeat=text, decomposition="domain",
                         ranks=comm.size, skin_A=args.skin)
            out += measurement("lammps_domain_ghosts", f"pet-{args.shape}", "", where,
                               {"atoms_per_rank_max": owned, "ghosts_per_rank_max": ghosts,
                                "evaluated_per_rank_max": evaluated, "reach_A": reach}, units)
        write_results(args.results, out, Provenance.current(device="cpu"))


if __name__ == "__main__":
    main()
