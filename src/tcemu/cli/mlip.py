"""Physics validation of emulated interatomic potentials: single point, energy curve, NVE, relaxation, report.

Subcommands (each writes long-format CSV and a PNG plot under --out):

  sp      single-point energy/force/stress errors vs FP64 and FP32, with FP32's noise floor
  curve   CO pulled off a Pt(111) top site: smoothness of E_method - E_FP64
  nve     velocity Verlet NVE: drift and fluctuation of the total energy
  relax   FIRE2 relaxation to a tight fmax: steps and lowest fmax, repeated
  report  the whole suite, with verdicts.csv and report.md

Potentials: pet-distilled (trained weights, shipped: distilled from CHGNet, for validation), pet-distilled-random
(its architecture, random weights), pet-tiny, pet-xs, pet-s, pet-s-nn32, pet-m, pet-l (random weights), ani1x,
chgnet, or the path of a PET checkpoint (.ckpt). Systems: water_192, water_17280, water_cluster_<n_atoms> (e.g. water_cluster_24),
pt111_co, cantor_539, or any file ASE can read.

Examples:
  tcemu mlip sp --potential pet-distilled --system water_192 --out out/
  tcemu mlip report --quick --out demo-out/mlip
"""

from __future__ import annotations

import argparse
import sys

METHODS_DEFAULT = "tf32,tf32x3,bf16x3,bf16x6,bf16x9"


def _common(p: argparse.ArgumentParser, potential: str, system: str | None) -> None:
    p.add_argument(
        "--potential", default=potential, help=f"potential name or PET .ckpt path (default {potential})"
    )
    if system is not None:
        p.add_argument("--system", default=system, help=f"system name or structure file (default {system})")
    p.add_argument(
        "--methods", default=METHODS_DEFAULT, help=f"comma-separated methods (default {METHODS_DEFAULT})"
    )
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--out", default="mlip-out", help="output directory for CSV and PNG (default mlip-out)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--compile", action="store_true", help="PET only: run the model under torch.compile")
    _threads(p)


def _threads(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=int,
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
        "--points", type=int, default=60, help="number of heights from 1.2 to 6.0 Angstrom (default 60)"
    )
    p = sub.add_parser("nve", help="NVE velocity Verlet: drift and fluctuation of the total energy")
    _common(p, "ani1x", "water_192")
    p.add_argument("--ps", type=float, default=0.5, help="picoseconds per run (default 0.5)")
    p.add_argument("--timestep-fs", type=float, default=0.5, help="time step in fs (default 0.5)")
    p.add_argument("--temperature", type=float, default=300.0, help="initial temperature in K (default 300)")
    p = sub.add_parser("relax", help="FIRE2 relaxation: steps to converge and lowest fmax")
    _common(p, "chgnet", "cantor_539")
    p.add_argument("--repeats", type=int, default=3, help="relaxations per method (default 3)")
    p.add_argument("--fmax", type=float, default=1e-3, help="target fmax in eV/Angstrom (default 1e-3)")
    p.add_argument("--max-steps", type=int, default=500, help="step limit (default 500)")
    p.add_argument(
        "--optimizer",
        default="fire2",
        choices=["fire2", "ase-fire2"],
        help="fire2: ours, ALCHEMI update and defaults; ase-fire2: ase.optimize.FIRE2",
    )
    p = sub.add_parser("report", help="run the suite; write CSVs, plots, verdicts.csv and report.md")
    p.add_argument("--out", default="mlip-report", help="output directory (default mlip-report)")
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
        "--methods", default=METHODS_DEFAULT, help=f"comma-separated methods (default {METHODS_DEFAULT})"
    )
    p.add_argument(
        "--checks", default="single_point,energy_curve,nve,relax", help="comma-separated checks to run"
    )
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--nve-ps", type=float, default=None, help="override the NVE length (ps)")
    p.add_argument("--relax-repeats", type=int, default=None, help="override the relaxation repeats")
    p.add_argument("--relax-max-steps", type=int, default=None, help="override the relaxation step limit")
    p.add_argument("--curve-points", type=int, default=None, help="override the number of curve heights")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _threads(p)


def _device(arg: str | None) -> str:
    if arg:
        return arg
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _methods(arg: str) -> list[str]:
    from tcemu.mlip.models import check_method

    return [check_method(m.strip()) for m in arg.split(",") if m.strip()]


def _system(name: str):
    from pathlib import Path

    from tcemu.mlip import systems

    if Path(name).is_file():
        from ase.io import read

        atoms = read(name)
        atoms.info.setdefault("name", Path(name).stem)
        return atoms
    return systems.build(name)


def run(args: argparse.Namespace) -> int | None:
    cmd = getattr(args, "mlip_command", None)
    if cmd is None:
        print(__doc__)
        return 1
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
        over = {
            "methods": tuple(methods),
            "device": device,
            "checks": tuple(c.strip() for c in args.checks.split(",") if c.strip()),
        }
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
    pot = models.get_potential(args.potential, compile=args.compile)
    if cmd == "sp":
        atoms = _system(args.system)
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
        import numpy as np

        res = tasks.energy_curve(
            pot, methods, tuple(np.linspace(1.2, 6.0, args.points)), device=device, show_progress=show
        )
        stem = f"energy_curve_{pot.name}"
        for m in res.methods:
            print(f"{m:8s} d2 rms {res.jitter_rms_meV(m):.3e} meV   d2 max {res.jitter_max_meV(m):.3e} meV")
    elif cmd == "nve":
        res = tasks.nve_check(
            pot,
            _system(args.system),
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
            _system(args.system),
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
    stem = stem.replace("/", "_").replace(":", "_")
    csv_path = write_csv(res.to_rows(), out / f"mlip_{stem}.csv")
    pngs = save_check_figures(res, out, stem)
    print(f"wrote {csv_path} and {', '.join(str(p) for p in pngs)}")
    return 0
