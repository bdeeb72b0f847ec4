# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[mlip]"]
# ///
"""The published PET study's protocols on a GPU, at the study's sizes, resumable across calls (issue 43):

1. NVE of the 192-atom water box, 0.5 fs, to ``--nve-ps`` (the study: 30 ps), one process per (potential,
   method) on the one GPU, the same start (seed 0, 300 K) for every method; velocity Verlet on the device
   (``tcemu.mlip.tasks.nve_long``): PET called directly, ``torch.compile``d (``--compile``; eager if that fails),
   other potentials through their ASE calculator; a checkpoint every ``--checkpoint-every`` steps. ANI-1x by
   default: the distilled PET's water collapses within 0.1 ps (O atoms 0.75 A apart, on the CPU, docs/mlip.md);
2. FIRE2 relaxation of the 539-atom Cantor slab with ``pet-distilled`` to 1e-3 eV/A, ALCHEMI's kernel
   (``alchemi-fire2``) and tcemu's FIRE2 (``fire2``), ``--relax-repeats`` rattled starts (0.01 A, seeds 0, 1, ...),
   up to ``--relax-max-steps`` (1,000: the 500-step result is the same run read at step 500);
3. the CO-on-Pt(111) curve on the study's 60 heights with ``pet-distilled``.

Every product runs the method (``tcemu.every_gemm_emulated``: no small-shape SGEMM fallback). All jobs stop at one
deadline (``--time-limit`` less ``--summary-s`` for the summary). Everything lives under ``--out``: NVE
checkpoints (``nve/<potential>/<method>/``), one JSON per finished relaxation, the curve's CSV. A later call with
``--resume-from`` a copy of an earlier ``--out`` (or the same ``--out``) continues the NVE runs from their
checkpoints, skips finished relaxations and the finished curve. The summary (also ``--summary-only``):
``nve_summary.csv`` (drift with its 95 % interval, fluctuation, "differs" / "cannot tell apart" against FP64 and
FP32, over the common length), ``relax_summary.csv``, ``curve_summary.csv``, ``results.csv`` (``tcemu._results``
format with GPU, driver, versions, commit), ``nve_<potential>.png``, ``relax_fmax.png``, and
``study_comparison.md`` (``tcemu.mlip.study``: the study's numbers beside these).

    python benchmarks/nve_long.py --out $OUT/study --time-limit 520 --mps --relax-procs 6      # first call
    python benchmarks/nve_long.py --out $OUT/study --resume-from <copy of it> --time-limit 520 --mps --relax-procs 6

The per-step times are those of processes sharing one GPU and the host's cores: load figures, not speeds.
    python benchmarks/nve_long.py --device cpu --out /tmp/s --nve-ps 0.005 --jobs nve --nve-methods fp32,tf32
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

METHODS = ("fp64", "fp32", "tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9")
#: the relaxations in the order they start: the study's three methods first, ALCHEMI's kernel first
RELAX_PRIORITY = ("fp32", "tf32", "tf32x3", "fp64", "bf16x6", "bf16x9", "bf16x3")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output and checkpoint folder")
    p.add_argument("--resume-from", default=None, help="copy this earlier --out into --out first, then continue")
    p.add_argument("--time-limit", type=float, default=530.0, help="seconds for the whole call (default 530)")
    p.add_argument("--summary-s", type=float, default=60.0, help="seconds kept for the summary (default 60)")
    p.add_argument("--grace", type=float, default=25.0,
                   help="seconds a process may take past the deadline to write its checkpoint (default 25)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--jobs", default="nve,relax,curve", help="which parts run: nve, relax, curve (comma-separated)")
    p.add_argument("--nve-potentials", default="ani1x",
                   help="comma-separated: ani1x (default), pet-distilled (its water MD is not stable: docs/mlip.md)")
    p.add_argument("--nve-methods", default=",".join(METHODS))
    p.add_argument("--nve-ps", type=float, default=30.0)
    p.add_argument("--timestep-fs", type=float, default=0.5)
    p.add_argument("--interval", type=int, default=10, help="steps between energy records (default 10)")
    p.add_argument("--checkpoint-every", type=int, default=1000)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                   help="torch.compile PET (dynamic shapes); falls back to eager if the first step fails")
    p.add_argument("--relax-methods", default=",".join(RELAX_PRIORITY))
    p.add_argument("--relax-optimizers", default="alchemi-fire2,fire2")
    p.add_argument("--relax-repeats", type=int, default=3)
    p.add_argument("--relax-max-steps", type=int, default=1000)
    p.add_argument("--relax-limits", default="500,1000", help="step limits reported (read off the longest run)")
    p.add_argument("--relax-rattle", type=float, default=0.01, help="rattle of repeat i's start, A (seed i)")
    p.add_argument("--relax-system", default="cantor_539")
    p.add_argument("--relax-procs", type=int, default=4, help="relaxation processes (each takes runs in turn)")
    p.add_argument("--curve-methods", default=",".join(METHODS[2:]), help="besides FP64 and FP32")
    p.add_argument("--mps", action="store_true", help="start a CUDA MPS daemon for the processes")
    p.add_argument("--summary-only", action="store_true", help="only summarise what --out holds")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--until", type=float, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------------------------
# workers (each its own process)
# ------------------------------------------------------------------------------------------------------


def _setup(args):
    import torch

    torch.set_num_threads(1)
    from tcemu.emulation.dispatch import every_gemm_emulated

    return every_gemm_emulated()


def worker_nve(args, potential: str, method: str) -> None:
    from tcemu.mlip import models, systems
    from tcemu.mlip.tasks.nve_long import LongNVEConfig, calculator_forces, metatomic_forces, run_long_nve

    atoms = systems.water_box()
    cfg = LongNVEConfig(args.timestep_fs, int(round(args.nve_ps * 1e3 / args.timestep_fs)), args.interval,
                        args.checkpoint_every, 300.0, 0)
    folder = Path(args.out) / "nve" / potential / method
    is_pet = potential.startswith("pet")
    meta = {"potential": potential, "method": method}

    def eager():
        calc = models.get_potential(potential).calculator(method, args.device)
        return metatomic_forces(calc, atoms) if is_pet else calculator_forces(calc, atoms, args.device)

    t0 = time.time()
    if is_pet and args.compile:
        try:
            fn = metatomic_forces(models.get_potential(potential, compile=True).calculator(method, args.device),
                                  atoms)
            print(f"set-up and compilation {time.time() - t0:.1f} s", flush=True)
            s = run_long_nve(atoms, fn, cfg, folder, device=args.device, deadline=args.until,
                             meta={**meta, "compiled": True})
            print(f"{s.steps_done}/{s.steps_target} steps, {1e3 * s.s_per_step:.1f} ms/step, finite {s.finite}",
                  flush=True)
            return
        except Exception as exc:  # noqa: BLE001 - an eager run is slower but the same measurement
            print(f"compiled run failed ({type(exc).__name__}: {str(exc)[:400]}); going on eager from the last "
                  "checkpoint", flush=True)
    fn = eager()
    print(f"set-up {time.time() - t0:.1f} s", flush=True)
    s = run_long_nve(atoms, fn, cfg, folder, device=args.device, deadline=args.until,
                     meta={**meta, "compiled": False})
    print(f"{s.steps_done}/{s.steps_target} steps, {1e3 * s.s_per_step:.1f} ms/step, finite {s.finite}", flush=True)


def _relax_runs(args) -> list[tuple[str, str, int]]:
    methods = [m for m in RELAX_PRIORITY if m in args.relax_methods.split(",")]
    opts = args.relax_optimizers.split(",")
    return [(o, m, r) for m in methods for o in opts for r in range(args.relax_repeats)]


def _relax_file(args, opt: str, method: str, rep: int) -> Path:
    return Path(args.out) / "relax" / opt / method / f"repeat{rep}.json"


def worker_relax(args, index: int, n_procs: int) -> None:
    from tcemu.mlip import models, systems
    from tcemu.mlip.tasks.relax import rattled, relax

    pot = models.get_potential("pet-distilled")
    slab = systems.build(args.relax_system)
    calcs = {}
    for k, (opt, method, rep) in enumerate(_relax_runs(args)):
        path = _relax_file(args, opt, method, rep)
        if k % n_procs != index or path.is_file():
            continue
        if time.time() > args.until - 5:
            break
        if method not in calcs:
            calcs = {method: pot.calculator(method, args.device)}  # one model alive at a time
        r = relax(rattled(slab, args.relax_rattle, rep), calcs[method], opt, 1e-3, args.relax_max_steps,
                  method, show_progress=False, deadline=args.until)
        print(f"{opt} {method} #{rep}: {r.steps} steps, converged {r.converged}, interrupted {r.interrupted}, "
              f"lowest fmax {r.fmax_min_eV_per_A:.3g}, {1e3 * r.s_per_step:.1f} ms/step", flush=True)
        if not r.interrupted:  # an interrupted run starts again in the next call
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({**asdict(r), "rattle_A": args.relax_rattle, "seed": rep}))


def worker_curve(args) -> None:
    from tcemu.mlip import models
    from tcemu.mlip._common import write_csv
    from tcemu.mlip.tasks.energy_curve import STUDY_HEIGHTS_A, energy_curve

    path = Path(args.out) / "curve" / "mlip_energy_curve.csv"
    if path.is_file():
        return
    r = energy_curve(models.get_potential("pet-distilled"), args.curve_methods.split(","), STUDY_HEIGHTS_A,
                     device=args.device, show_progress=False)
    write_csv(r.to_rows(), path)


def run_worker(args) -> None:
    kind, *rest = args.worker.split(":")
    with _setup(args):
        if kind == "nve":
            worker_nve(args, rest[0], rest[1])
        elif kind == "relax":
            worker_relax(args, int(rest[0]), int(rest[1]))
        elif kind == "curve":
            worker_curve(args)
        else:
            raise ValueError(f"unknown worker {args.worker!r}")


# ------------------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------------------


def _jobs(args) -> list[str]:
    parts = args.jobs.split(",")
    jobs = []
    if "nve" in parts:
        jobs += [f"nve:{p}:{m}" for p in args.nve_potentials.split(",") for m in args.nve_methods.split(",")]
    if "curve" in parts:
        jobs.append("curve")
    if "relax" in parts:
        jobs += [f"relax:{i}:{args.relax_procs}" for i in range(args.relax_procs)]
    return jobs


def drive(args, argv: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from mlip_full import _start_mps, _stop_mps

    t0 = time.time()

    def log(s: str) -> None:
        print(f"[{time.time() - t0:6.1f} s] {s}", flush=True)

    out = Path(args.out)
    if args.resume_from and Path(args.resume_from).resolve() != out.resolve():
        shutil.copytree(args.resume_from, out, dirs_exist_ok=True)
        log(f"resumed from {args.resume_from}")
    (out / "logs").mkdir(parents=True, exist_ok=True)
    until = t0 + args.time_limit - args.summary_s
    mps = _start_mps(log) if args.mps and args.device.startswith("cuda") else None
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               TORCHINDUCTOR_COMPILE_THREADS="1", **(mps or {}))
    keep, it = [], iter(argv)
    for a in it:  # the workers get the options, less the driver's own
        key = a.split("=")[0]
        if key in ("--resume-from", "--time-limit", "--summary-s", "--grace", "--mps"):
            if "=" not in a and key != "--mps":
                next(it, None)
            continue
        keep.append(a)
    procs = []
    for job in _jobs(args):
        f = (out / "logs" / f"{job.replace(':', '_')}.log").open("a")
        cmd = [sys.executable, str(Path(__file__).resolve()), *keep, "--worker", job, "--until", f"{until:.3f}"]
        procs.append((job, subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env), f))
    log(f"{len(procs)} processes, deadline in {until - time.time():.0f} s ({os.cpu_count()} CPUs)")
    for job, p, f in procs:
        try:
            code = p.wait(timeout=max(1.0, until + args.grace - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            code = f"killed ({p.wait()})"
        f.close()
        log(f"{job}: exit {code}")
    _stop_mps(mps)
    summarise(args, log)


def summarise(args, log=print) -> None:
    from tcemu.mlip.study import write_summary

    limits = tuple(int(x) for x in args.relax_limits.split(","))
    for path in write_summary(Path(args.out), limits, log=log):
        log(f"wrote {path}")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.worker:
        run_worker(args)
        sys.stdout.flush()
        os._exit(0)  # everything is on disk; skip the interpreter's teardown (Warp, CUDA), slow under load
    elif args.summary_only:
        summarise(args)
    else:
        drive(args, argv)


if __name__ == "__main__":
    main()
