"""Physics validation of emulated interatomic potentials: single point, energy curve, NVE, relaxation, report.

Subcommands (each writes long-format CSV and a PNG plot under --out):

  sp      single-point energy/force/stress errors vs FP64 and FP32, with FP32's noise floor
  curve   CO pulled off a Pt(111) top site: smoothness of E_method - E_FP64
  nve     velocity Verlet NVE: drift and fluctuation of the total energy
  relax   FIRE2 relaxation to a tight fmax: steps and lowest fmax, repeated
  second-order  phonons of fcc Pt, water vibrations, elastic constants: errors vs FP64, conclusions changed
  report  the whole suite (also phonons, vibrations, elastic constants), with verdicts.csv and report.md

Potentials: pet-distilled (trained weights, shipped: distilled from CHGNet, for validation), pet-distilled-random
(its architecture, random weights), pet-tiny, pet-xs, pet-s, pet-s-nn32, pet-m, pet-l (random weights), ani1x, chgnet, mace-random,
the path of a PET checkpoint (.ckpt), or any ASE calculator through --calculator module:factory (a factory
called as factory(dtype="float32"|"float64", device=...) that returns the calculator; see
tcemu.mlip.calculators). Systems: water_192, water_17280, water_cluster_<n_atoms> (e.g. water_cluster_24),
pt111_co, cantor_539, or any file ASE can read. Every method's run reports its coverage (the share of its
float32 contraction FLOPs that was emulated).

Examples:
  tcemu mlip sp --potential pet-distilled --system water_192 --out out/
  tcemu mlip report --quick --out demo-out/mlip
  tcemu mlip sp --calculator tcemu.mlip.calculators:mace_random --system water_cluster_24
"""

from __future__ import annotations

import argparse
import sys

from .args import (
    BadArgument,
    at_least,
    bad_argument,
    check_choices,
    csv_list,
    device,
    nonnegative_float,
    output_dir,
    positive_float,
)

METHODS_DEFAULT = "tf32,tf32x3,bf16x3,bf16x6,bf16x9"


def _common(p: argparse.ArgumentParser, potential: str, system: str | None) -> None:
    p.add_argument(
        "--potential", default=potential, help=f"potential name or PET .ckpt path (default {potential})"
    )
    if system is not None:
        p.add_argument("--system", default=system, help=f"system name or structure file (default {system})")
    p.add_argument(
        "--methods", default=METHODS_DEFAULT, type=csv_list,
        help=f"comma-separated methods (default {METHODS_DEFAULT})"
    )
    _calculator(p)
    p.add_argument("--device", default=None, type=device, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--out", default="mlip-out", type=output_dir,
                   help="output directory for CSV and PNG (default mlip-out)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--compile", action="store_true", help="PET only: run the model under torch.compile")
    _threads(p)


def _calculator(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--calculator",
        default=None,
        metavar="MODULE:FACTORY",
        help="any ASE calculator: a factory (package.module:name or file.py:name) called as "
        "factory(dtype='float32'|'float64', device=...) (tcemu.mlip.calculators); replaces --potential",
    )


def _threads(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=at_least(1),
        default=None,
        help="torch CPU threads (default 1 on the CPU: these models are small, and with more threads "
        "OpenMP overhead on a shared machine made ANI-1x up to 100x slower)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="mlip_command", metavar="SUBCOMMAND")
    p = sub.add_parser("sp", help="single-point errors vs FP64/FP32 and FP32's noise floor")
    _common(p, "pet-distilled", "water_192")
    p.add_argument(
        "--floor",
        default="permute",
        choices=["permute", "compile"],
        help="how the FP32 noise floor is made: reordered atoms, or torch.compile (PET)",
    )
    p = sub.add_parser("curve", help="CO pulled off Pt(111): smoothness of E_method - E_FP64")
    _common(p, "pet-distilled", None)
    p.add_argument(
        "--points", type=at_least(3), default=60,
        help="number of heights from 1.2 to 6.0 Angstrom, at least 3 (default 60)"
    )
    p.add_argument("--grid", choices=["study"], default=None,
                   help="a named height grid instead of --points: study = the published PET study's 60 heights, "
                   "1.2-6.0 Angstrom in 0.081 Angstrom steps")
    p = sub.add_parser("nve", help="NVE velocity Verlet: drift and fluctuation of the total energy")
    _common(p, "ani1x", "water_192")
    p.add_argument("--ps", type=positive_float, default=0.5, help="picoseconds per run (default 0.5)")
    p.add_argument("--timestep-fs", type=positive_float, default=0.5, help="time step in fs (default 0.5)")
    p.add_argument("--temperature", type=nonnegative_float, default=300.0,
                   help="initial temperature in K (default 300)")
    p = sub.add_parser("relax", help="FIRE2 relaxation: steps to converge and lowest fmax")
    _common(p, "chgnet", "cantor_539")
    p.add_argument("--repeats", type=at_least(1), default=3, help="relaxations per method (default 3)")
    p.add_argument("--fmax", type=positive_float, default=1e-3, help="target fmax in eV/Angstrom (default 1e-3)")
    p.add_argument("--max-steps", type=at_least(1), default=500, help="step limit (default 500)")
    p.add_argument(
        "--optimizer",
        default="fire2",
        choices=["fire2", "alchemi-fire2", "ase-fire2"],
        help="fire2: ours, ALCHEMI update and defaults; alchemi-fire2: ALCHEMI's kernel (nvalchemiops); "
        "ase-fire2: ase.optimize.FIRE2",
    )
    p = sub.add_parser("second-order", help="phonons, water vibrations, elastic constants: errors vs FP64")
    _common(p, "pet-distilled", None)
    p.add_argument("--size", choices=["quick", "full", "auto"], default="auto",
                   help="quick: CPU-sized; full: 4x4x4 phonon supercell, 8-molecule cluster, 32-atom cell; "
                   "auto (default): full on a CUDA device")
    p.add_argument("--properties", default="phonons,vibrations,elastic", type=csv_list,
                   help="comma-separated properties (default phonons,vibrations,elastic)")
    p = sub.add_parser("report", help="run the suite; write CSVs, plots, verdicts.csv and report.md")
    p.add_argument("--out", default="mlip-report", type=output_dir, help="output directory (default mlip-report)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_const", dest="size", const="quick", help="the CPU-sized suite")
    size.add_argument(
        "--full", action="store_const", dest="size", const="full", help="the full (GPU-sized) suite"
    )
    size.add_argument(
        "--size",
        choices=["quick", "full", "auto"],
        default="auto",
        help="auto (default): full on a CUDA device, quick otherwise",
    )
    p.add_argument(
        "--methods", default=METHODS_DEFAULT, type=csv_list,
        help=f"comma-separated methods (default {METHODS_DEFAULT})"
    )
    p.add_argument(
        "--checks", default="single_point,energy_curve,nve,relax,second_order,pet_relax", type=csv_list,
        help="comma-separated checks to run (second_order: phonons, water vibrations, elastic constants; "
             "pet_relax: the PET study's FIRE2 relaxation)"
    )
    _calculator(p)
    p.add_argument("--device", default=None, type=device, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--nve-ps", type=positive_float, default=None, help="override the NVE length (ps)")
    p.add_argument("--relax-repeats", type=at_least(1), default=None, help="override the relaxation repeats")
    p.add_argument("--relax-max-steps", type=at_least(1), default=None, help="override the relaxation step limit")
    p.add_argument("--curve-points", type=at_least(3), default=None,
                   help="override the number of curve heights (at least 3)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _threads(p)


def _device(arg: str | None) -> str:
    if arg:
        return arg
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _methods(names: list[str]) -> list[str]:
    from tcemu.mlip.models import check_method

    with bad_argument("--methods"):
        return [check_method(m) for m in names]


def _heights(args: argparse.Namespace) -> tuple[float, ...]:
    """The curve's heights: a named grid (``--grid``), else ``--points`` from 1.2 to 6.0 Angstrom."""
    import numpy as np

    from tcemu.mlip.tasks.energy_curve import HEIGHT_GRIDS

    if getattr(args, "grid", None):
        return HEIGHT_GRIDS[args.grid]
    return tuple(float(h) for h in np.linspace(1.2, 6.0, args.points))


def _system(name: str):
    """The structure of ``--system``: a name, or a file ASE can read (refused with the reason otherwise)."""
    from pathlib import Path

    from tcemu.mlip import systems

    if Path(name).is_file():
        from ase.io import read

        try:
            atoms = read(name)
        except KeyError as exc:  # ASE's symbol lookup
            raise BadArgument(f"--system {name}: unknown chemical element {exc.args[0]!r} in the file") from exc
        except UnicodeDecodeError as exc:
            raise BadArgument(f"--system {name}: not a text structure file (a binary file?); give a file ASE can "
                              "read, e.g. .xyz, .extxyz, .cif, POSCAR") from exc
        except Exception as exc:  # noqa: BLE001 - whatever ASE's readers raise for a file they cannot parse
            raise BadArgument(f"--system {name}: ASE cannot read it ({type(exc).__name__}: {exc})") from exc
        if len(atoms) == 0:
            raise BadArgument(f"--system {name}: the file holds no atoms")
        atoms.info.setdefault("name", Path(name).stem)
        return atoms
    with bad_argument("--system"):
        atoms = systems.build(name)
    if len(atoms) == 0:
        raise BadArgument(f"--system {name}: the system has no atoms")
    return atoms


def run(args: argparse.Namespace) -> int | None:
    cmd = getattr(args, "mlip_command", None)
    if cmd is None:
        print(__doc__, file=sys.stderr)
        raise BadArgument("give a subcommand: sp, curve, nve, relax, second-order or report")
    from tcemu.mlip.report import every_gemm_emulated

    with every_gemm_emulated():  # validate the method itself, not the small-shape SGEMM fallback
        return _run(args, cmd)


def _run(args: argparse.Namespace, cmd: str) -> int | None:
    from pathlib import Path

    from tcemu.mlip import models, tasks
    from tcemu.mlip._common import write_csv
    from tcemu.mlip.plots import save_check_figures

    show = not args.no_progress
    device = _device(args.device)
    if args.threads is not None or device == "cpu":
        import torch

        torch.set_num_threads(args.threads or 1)
    methods = _methods(args.methods)
    out = Path(args.out)
    if cmd == "report":
        from tcemu.mlip.report import SuiteConfig, run_suite, verdict_table

        size = args.size or "auto"
        if size == "auto":
            size = "full" if device.startswith("cuda") else "quick"
        cfg = SuiteConfig.quick() if size == "quick" else SuiteConfig.full()
        check_choices("--checks", args.checks, SuiteConfig.checks)
        over = {"methods": tuple(methods), "device": device, "checks": tuple(args.checks)}
        if args.calculator:  # the calculator in every check, on the suite's systems
            spec = args.calculator
            over |= {"single_point": tuple((spec, sys_) for sys_ in dict.fromkeys(s for _, s in cfg.single_point)),
                     "curve_potentials": (spec,), "nve_potential": spec, "relax_potential": spec,
                     "second_order_potential": spec}
        for attr, key in (
            ("nve_ps", "nve_ps"),
            ("relax_repeats", "relax_repeats"),
            ("relax_max_steps", "relax_max_steps"),
            ("curve_points", "curve_points"),
        ):
            if getattr(args, attr) is not None:
                over[key] = getattr(args, attr)
        from dataclasses import replace

        cfg = replace(cfg, **over)
        print(
            f"tcemu mlip report: {cfg.name} suite on {device}, methods {', '.join(cfg.methods)} -> {out}/",
            file=sys.stderr,
        )
        res = run_suite(cfg, out, show_progress=show, log=lambda s: print(s, file=sys.stderr))
        print(verdict_table(res))
        print(f"\nreport: {out / 'report.md'}   verdicts: {out / 'verdicts.csv'}")
        return 0
    name = args.calculator or args.potential
    with bad_argument("--calculator" if args.calculator else "--potential"):
        try:
            pot = models.get_potential(name, compile=args.compile)
        except (ImportError, BadArgument, ValueError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001 - a file that is not a checkpoint fails in torch.load or metatrain
            if args.calculator or not Path(args.potential).is_file():
                raise
            raise BadArgument(f"--potential {args.potential}: cannot load it as a PET checkpoint "
                              f"({type(exc).__name__}: {exc})") from exc
    if args.compile and (args.calculator or args.potential.lower() in models.POTENTIALS):
        raise BadArgument(f"--compile runs PET models under torch.compile; {name} is not one")
    if cmd == "second-order":
        return _second_order(args, pot, methods, device, show, out)
    if cmd == "curve":
        from tcemu.mlip.systems import co_on_pt111

        atoms = co_on_pt111()
    else:
        atoms = _system(args.system)
    with bad_argument(f"--potential {name} on --system {getattr(args, 'system', 'pt111_co')}"):
        pot.check_atoms(atoms)  # before any computation
    if cmd == "sp":
        res = tasks.single_point(pot, atoms, methods, args.floor, device, show_progress=show)
        stem = f"single_point_{pot.name}_{res.system}"
        w = max(8, *(len(m) for m in res.methods))
        print(f"{'method':{w}s} {'force err vs FP64':>18s} {'x floor':>8s} {'energy err (eV)':>16s}")
        for m in res.methods:
            e = res.error(m)
            print(
                f"{m:{w}s} {e.force_mean_err_eV_per_A:18.3e} {res.floor_multiple(m):8.3g} {e.energy_abs_err_eV:16.3e}"
            )
    elif cmd == "curve":
        res = tasks.energy_curve(
            pot, methods, _heights(args), device=device, show_progress=show
        )
        stem = f"energy_curve_{pot.name}"
        for m in res.methods:
            print(f"{m:8s} d2 rms {res.jitter_rms_meV(m):.3e} meV   d2 max {res.jitter_max_meV(m):.3e} meV")
    elif cmd == "nve":
        res = tasks.nve_check(
            pot,
            atoms,
            methods,
            args.ps,
            args.timestep_fs,
            args.temperature,
            device=device,
            show_progress=show,
        )
        stem = f"nve_{pot.name}_{res.system}"
        for m, r in res.runs.items():
            print(
                f"{m:8s} drift {r.drift_meV_per_atom_per_ps:+.3e} meV/atom/ps   fluct {r.fluct_meV_per_atom:.3e} meV/atom"
            )
    elif cmd == "relax":
        res = tasks.relax_check(
            pot,
            atoms,
            methods,
            args.repeats,
            args.optimizer,
            args.fmax,
            args.max_steps,
            device,
            show_progress=show,
        )
        stem = f"relax_{pot.name}_{res.system}"
        for m, rs in res.runs.items():
            print(
                f"{m:8s} steps {[r.steps for r in rs]}  converged {[r.converged for r in rs]}  "
                f"lowest fmax {min(r.fmax_min_eV_per_A for r in rs):.3e} eV/A"
            )
    else:  # pragma: no cover
        raise ValueError(cmd)
    print("coverage (% of float32 contraction FLOPs emulated): "
          + ", ".join(f"{m} {100 * c:.2f}" for m, c in res.coverage.items() if m not in ("fp64", "fp32")))
    stem = stem.replace("/", "_").replace(":", "_")
    csv_path = write_csv(res.to_rows(), out / f"mlip_{stem}.csv")
    pngs = save_check_figures(res, out, stem)
    print(f"wrote {csv_path} and {', '.join(str(p) for p in pngs)}")
    return 0


def _second_order(args: argparse.Namespace, pot, methods: list[str], device: str, show: bool, out) -> int:
    """``tcemu mlip second-order``: each property's largest error vs FP64 and conclusions changed, CSV and PNGs."""
    from tcemu.mlip._common import write_csv
    from tcemu.mlip.criteria import conclusion_changes, second_order_threshold
    from tcemu.mlip.plots import save_check_figures
    from tcemu.mlip.tasks.second_order import SecondOrderConfig, second_order, water

    check_choices("--properties", args.properties, ("phonons", "vibrations", "elastic"))
    size = args.size if args.size != "auto" else ("full" if device.startswith("cuda") else "quick")
    cfg = SecondOrderConfig.for_size(size, properties=tuple(dict.fromkeys(args.properties)))
    from ase.build import bulk

    with bad_argument(f"--potential {pot.name}"):  # before any computation
        if {"phonons", "elastic"} & set(cfg.properties):
            pot.check_atoms(bulk(cfg.element, "fcc", a=cfg.a_guess_A))
        if "vibrations" in cfg.properties:
            pot.check_atoms(water(cfg.water_molecules))
    results = second_order(pot, methods, cfg, device, show_progress=show)
    for r in results:
        print(f"{r.check} ({r.system}, threshold {second_order_threshold(r):.3g} {r.unit}, FP32's floor "
              f"{r.floor():.3g}):")
        for m in r.methods:
            changed, resolved = conclusion_changes(r, m)
            print(f"  {m:8s} largest error {r.max_error(m):.3e} {r.unit}   conclusions changed {changed} of "
                  f"{resolved}   coverage {100 * r.coverage.get(m, float('nan')):.2f} %")
    name = pot.name.replace("/", "_").replace(":", "_")
    csv_path = write_csv([x for r in results for x in r.to_rows()], out / f"mlip_second_order_{name}.csv")
    pngs = [p for r in results for p in save_check_figures(r, out, f"{r.check}_{name}_{r.system}")]
    print(f"wrote {csv_path} and {', '.join(str(p) for p in pngs)}")
    return 0
