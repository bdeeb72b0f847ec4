# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[mlip]"]
# ///
"""The full-size MLIP validation suite (issue 5) on a GPU: every method against FP64 and FP32.

Compares fp32, tf32, tf32x3, bf16x3, bf16x6 and bf16x9 (tcemu.emulate_, Triton kernels on CUDA)
on the checks of tcemu.mlip: single points of random-weight PET (S, S with 32 neighbours, M, L)
on the 192-atom water box and PET S on the 17,280-atom supercell, ANI-1x and CHGNet on water;
the CO drag curve (60 heights) with CHGNet and PET S; ANI-1x NVE of the water box; CHGNet FIRE2
relaxation of the 539-atom Cantor slab. Writes the suite's files (its long-format CSVs, figures,
verdicts.csv and report.md) to --out, and ``results.csv``: every measured value and every verdict as a
result file (``tcemu._results``: benchmark ``mlip_full``, impl the potential, case the check, system and
reference, :func:`harness_results`, :func:`verdict_results`). Stored runs: ``benchmarks/results/h200/mlip/``.

Usage: python benchmarks/mlip_full.py --out out/mlip_full [--nve-ps 2] [--skip chgnet]

Parallel mode: ``--parallel JOBS --time-limit S`` runs each job in its own process on the same GPU
(under CUDA MPS with ``--mps`` where ``nvidia-cuda-mps-control`` runs), every one stopping at the
same wall-clock deadline, then merges their results into one report. Small models are bound by the
CPU (kernel launches, CHGNet's graph construction), so one process per method uses the host's cores.
Jobs (comma-separated):

- ``nve:<method>``: the NVE run of one method (FP64 and FP32 are jobs too); runs stopped by the
  deadline are cut to the shortest one's length before drift and fluctuation are compared;
- ``relax:<method>:<repeat>``: one relaxation; one stopped by the deadline is reported as interrupted
  (``mlip_relax_interrupted.csv``) and left out of the verdicts;
- ``sp:<potential>:<system>[@<s>]+...``: single points in order, each started only with at least
  ``s`` seconds left (default 0);
- ``curve:<potential>``: the CO-on-Pt(111) energy curve.

Example: ``--parallel nve:fp64,nve:fp32,nve:tf32x3,relax:fp32:0,sp:pet-l:water_192,curve:pet-s
--time-limit 250 --mps``.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from tcemu._results import Provenance, Result, case, measurement, write_results

#: the suite's long rows: what identifies a value besides its potential, method and metric
HARNESS_CASE_FIELDS = ("check", "system", "n_atoms", "reference")
#: the unit of each criterion's value and threshold (``tcemu.mlip.report.verdicts``)
CRITERION_UNITS = {"force_mean_err": "eV/A", "energy_abs_err": "eV", "stress_mean_err": "eV/A^3",
                   "d2_rms": "meV", "abs_drift": "meV/atom/ps", "fluctuation": "meV/atom", "fmax_min": "eV/A",
                   "steps_median": "steps", "energy_dev_vs_fp64": "meV/atom", "not_emulated": "% not emulated",
                   "max_err": "cm^-1 or GPa (the second-order check's own)", "conclusions_changed": "conclusions"}


def harness_results(rows: Iterable[Mapping], benchmark: str = "mlip_full") -> list[Result]:
    """Result rows from the suite's long rows (``tcemu.mlip``'s CSV columns): impl the potential, the case
    ``check;system;n_atoms;reference``, then ``<x_name>=<x_value>`` and ``repeat`` where the row has them."""
    out = []
    for r in rows:
        fields = {k: r[k] for k in HARNESS_CASE_FIELDS}
        if r["x_name"] != "":
            fields[r["x_name"]] = r["x_value"]
        fields["repeat"] = r["repeat"]
        out += measurement(benchmark, r["potential"], r["method"], case(**fields), {r["metric"]: r["value"]},
                           {r["metric"]: r["unit"]})
    return out


def verdict_results(rows: Iterable[Mapping], benchmark: str = "mlip_full") -> list[Result]:
    """Result rows from verdicts (``verdicts.csv``'s columns): ``check:criterion[potential/system]`` becomes
    impl the potential and the case ``check;system;criterion``, with the metrics ``measured``, ``threshold``
    (the criterion's unit) and ``verdict``."""
    out = []
    for r in rows:
        head, _, tag = r["check"].partition("[")
        check, _, criterion = head.partition(":")
        potential, _, system = tag.removesuffix("]").partition("/")
        unit = r.get("unit") or CRITERION_UNITS[criterion]
        where = case(check=check, system=system, criterion=criterion)
        out += measurement(benchmark, potential, r["method"], where,
                           {"measured": r["value"], "threshold": r["threshold"], "verdict": r["verdict"]},
                           {"measured": unit, "threshold": unit, "verdict": "text"})
    return out


def write_suite_results(res, out: Path, provenance: Provenance) -> Path:
    """``out/results.csv``: every value of ``res`` (a ``tcemu.mlip.report.SuiteResult``) and its verdicts."""
    rows = [x for name in ("single_point", "energy_curve", "nve", "relax", "second_order") for r in getattr(res, name)
            for x in r.to_rows()]
    verdicts = [dict(method=v.method, check=v.check, value=v.value, threshold=v.threshold, verdict=v.verdict,
                     unit=v.unit) for v in res.verdicts]
    results = harness_results(rows) + verdict_results(verdicts)
    return write_results(Path(out) / "results.csv", results, provenance)


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/mlip_full", help="directory for the suite's files and results.csv")
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--nve-ps", type=float, default=None, help="NVE length per method (default: the full config's)"
    )
    p.add_argument("--relax-repeats", type=int, default=None)
    p.add_argument(
        "--skip", default="", help="comma-separated potentials to leave out (e.g. chgnet when not installed)"
    )
    p.add_argument("--checks", default="single_point,energy_curve,nve,relax")
    p.add_argument("--no-supercell", action="store_true", help="leave out the 17,280-atom single point")
    p.add_argument(
        "--sp", default=None, help="single-point cases to run, e.g. 'ani1x:water_192,pet-s:water_17280'"
    )
    p.add_argument("--parallel", default=None, help="jobs to run in parallel processes (see the docstring)")
    p.add_argument("--time-limit", type=float, default=250.0, help="parallel mode: wall seconds for the jobs")
    p.add_argument(
        "--grace", type=float, default=25.0, help="parallel mode: seconds past the limit before a kill"
    )
    p.add_argument("--mps", action="store_true", help="parallel mode: start a CUDA MPS daemon for the jobs")
    p.add_argument(
        "--mem-fraction", type=float, default=0.6, help="parallel mode: GPU memory cap of a single-point job"
    )
    p.add_argument(
        "--nve-nice", type=int, default=0, help="parallel mode: nice increment of the NVE jobs"
    )
    p.add_argument("--no-merge", action="store_true", help="parallel mode: leave the results in OUT/parts")
    p.add_argument(
        "--merge-only", action="store_true", help="merge the results in OUT/parts (of one or more runs) only"
    )
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--until", type=float, default=None, help=argparse.SUPPRESS)
    return p, p.parse_args(argv)


def _config(args):
    from tcemu.mlip.report import SuiteConfig

    cfg = SuiteConfig.full(device=args.device, checks=tuple(args.checks.split(",")))
    skip = {s for s in args.skip.split(",") if s}
    sp = tuple(
        c for c in cfg.single_point if c[0] not in skip and not (args.no_supercell and c[1] == "water_17280")
    )
    if args.sp:
        sp = tuple(tuple(c.split(":")) for c in args.sp.split(","))
    over = {"single_point": sp, "curve_potentials": tuple(c for c in cfg.curve_potentials if c not in skip)}
    if args.nve_ps is not None:
        over["nve_ps"] = args.nve_ps
    if args.relax_repeats is not None:
        over["relax_repeats"] = args.relax_repeats
    if cfg.relax_potential in skip:
        over["checks"] = tuple(c for c in cfg.checks if c != "relax")
    return replace(cfg, **over)


def main(argv: list[str] | None = None) -> int:
    p, args = _args(argv)
    cfg = _config(args)
    if args.worker:
        return _worker(args.worker, cfg, Path(args.out), args.until, args.mem_fraction)
    if args.merge_only:
        t0 = time.time()
        pkls = sorted((Path(args.out) / "parts").glob("*.pkl"))
        return _merge(cfg, Path(args.out), pkls, {}, 0.0, lambda s: print(f"[{time.time() - t0:6.1f} s] {s}"))
    if args.parallel:
        return _parallel(args, cfg, argv if argv is not None else sys.argv[1:])
    from tcemu.mlip.report import run_suite, verdict_table

    t0 = time.perf_counter()
    res = run_suite(
        cfg,
        args.out,
        show_progress=False,
        log=lambda s: print(f"[{time.perf_counter() - t0:7.1f} s] {s}", flush=True),
    )
    write_suite_results(res, Path(args.out), Provenance.current(args.device))
    print(verdict_table(res))
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


# ---------------------------------------------------------------------------------------------
# Parallel mode
# ---------------------------------------------------------------------------------------------


def _job_name(job: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", job)


def _save(path: Path, items: list) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(items))
    tmp.replace(path)


def _worker(job: str, cfg, out: Path, until: float | None, mem_fraction: float) -> int:
    """Run one job of the parallel mode; pickle its results to ``out/parts/<job>.pkl`` as they come."""
    import torch

    from tcemu.mlip.report import every_gemm_emulated

    torch.set_num_threads(1)
    until = until if until is not None else time.time() + 1e9
    path = out / "parts" / f"{_job_name(job)}.pkl"
    items: list = []
    t0 = time.time()

    def log(s: str) -> None:
        print(f"[{time.time() - t0:6.1f} s] {job}: {s}", flush=True)

    kind, _, rest = job.partition(":")
    items.append(("env", _worker_environment()))
    items.append(("provenance", Provenance.current(cfg.device)))
    try:
        with every_gemm_emulated():
            _run_job(kind, rest, job, cfg, items, path, until, mem_fraction, log)
    except Exception as exc:  # noqa: BLE001 - recorded, the merge reports it
        import traceback

        traceback.print_exc()
        items.append(("failed", kind, job, f"{type(exc).__name__}: {str(exc)[:300]}"))
    _save(path, items)
    return 0


def _worker_environment() -> dict:
    """The report's environment line as a worker sees it, with the commit of a source snapshot."""
    import tcemu
    from tcemu.mlip.report import _environment

    env = _environment()
    env["threads"] = "1 per process"
    commit = Path(tcemu.__file__).resolve().parents[2] / "COMMIT"
    env["git"] = commit.read_text().strip() if commit.is_file() else env.get("git", "-")
    return env


def _run_job(kind, rest, job, cfg, items, path, until, mem_fraction, log) -> None:
    import numpy as np
    import torch

    from tcemu.mlip import models, systems, tasks
    from tcemu.mlip.tasks.energy_curve import DEFAULT_HEIGHTS_A

    if kind == "nve":
        method = rest
        pot, atoms = models.get_potential(cfg.nve_potential), systems.build(cfg.nve_system)
        steps = int(round(cfg.nve_ps * 1e3 / cfg.nve_timestep_fs))
        calc = pot.calculator(method, cfg.device)
        r = tasks.run_nve(
            atoms, calc, cfg.nve_timestep_fs, steps, method=method, show_progress=False, deadline=until
        )
        items.append(("nve", pot.name, cfg.nve_system, method, r))
        log(f"{r.steps} steps in {r.wall_s:.1f} s ({1e3 * r.wall_s / max(r.steps, 1):.1f} ms/step), "
            f"drift {r.drift_meV_per_atom_per_ps:+.4f} meV/atom/ps")
    elif kind == "relax":
        method, _, rep = rest.partition(":")
        pot, atoms = models.get_potential(cfg.relax_potential), systems.build(cfg.relax_system)
        calc = pot.calculator(method, cfg.device)
        r = tasks.relax(
            atoms, calc, cfg.relax_optimizer, cfg.relax_fmax_eV_per_A, cfg.relax_max_steps,
            method=method, show_progress=False, deadline=until,
        )
        items.append(("relax", pot.name, cfg.relax_system, method, int(rep or 0), r))
        log(f"{r.steps} steps in {r.wall_s:.1f} s, converged {r.converged}, interrupted {r.interrupted}, "
            f"lowest fmax {r.fmax_min_eV_per_A:.3g} eV/A")
    elif kind == "sp":
        if cfg.device.startswith("cuda") and mem_fraction < 1:
            torch.cuda.set_per_process_memory_fraction(mem_fraction)
        for case in rest.split("+"):
            case, _, need = case.partition("@")
            pname, sname = case.split(":")
            left = until - time.time()
            if need and left < float(need):
                items.append(("skipped", "single_point", case, f"{left:.0f} s left, {need} s asked"))
                log(f"{case} skipped ({left:.0f} s left)")
                _save(path, items)
                continue
            ts = time.time()
            try:
                r = tasks.single_point(
                    models.get_potential(pname), systems.build(sname), cfg.methods, cfg.floor,
                    cfg.device, show_progress=False,
                )
                items.append(("single_point", r))
                log(f"{case} done in {time.time() - ts:.1f} s")
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory: keep the other cases
                items.append(("failed", "single_point", case, f"{type(exc).__name__}: {str(exc)[:300]}"))
                log(f"{case} FAILED after {time.time() - ts:.1f} s: {type(exc).__name__}: {str(exc)[:300]}")
                if cfg.device.startswith("cuda"):
                    torch.cuda.empty_cache()
            _save(path, items)
    elif kind == "curve":
        heights = tuple(np.linspace(DEFAULT_HEIGHTS_A[0], DEFAULT_HEIGHTS_A[-1], cfg.curve_points))
        ts = time.time()
        r = tasks.energy_curve(
            models.get_potential(rest), cfg.methods, heights, device=cfg.device, show_progress=False
        )
        items.append(("energy_curve", r))
        log(f"done in {time.time() - ts:.1f} s")
    else:
        raise ValueError(f"unknown job {job!r}")


def _start_mps(log):
    """Start a CUDA MPS control daemon in a private pipe folder; returns its environment, or None."""
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        log("MPS: nvidia-cuda-mps-control not found; the processes share the GPU by time slicing")
        return None
    d = Path(tempfile.mkdtemp(prefix="tcemu-mps-"))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(d / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(d / "log")}
    for v in env.values():
        Path(v).mkdir()
    full = dict(os.environ, **env)
    try:
        subprocess.run([exe, "-d"], env=full, check=True, timeout=20)
        probe = subprocess.run(
            [sys.executable, "-c", "import torch; print(float(torch.ones(4, device='cuda').sum()))"],
            env=full, capture_output=True, text=True, timeout=90,
        )
        ok = probe.returncode == 0 and "4.0" in probe.stdout
    except Exception as exc:  # noqa: BLE001
        ok, probe = False, exc
    if not ok:
        log(f"MPS: the probe failed ({str(getattr(probe, 'stderr', probe))[-300:]}); going on without MPS")
        _stop_mps(env)
        return None
    log(f"MPS: daemon started ({exe}), probe ran")
    return env


def _stop_mps(env) -> None:
    exe = shutil.which("nvidia-cuda-mps-control")
    if env and exe:
        try:
            subprocess.run([exe], input="quit\n", env=dict(os.environ, **env), text=True, timeout=30)
        except Exception:  # noqa: BLE001
            pass


def _parallel(args, cfg, argv: list[str]) -> int:
    t0 = time.time()

    def log(s: str) -> None:
        print(f"[{time.time() - t0:6.1f} s] {s}", flush=True)

    out = Path(args.out)
    (out / "parts").mkdir(parents=True, exist_ok=True)
    mps = _start_mps(log) if args.mps else None
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(mps or {}))
    until = t0 + args.time_limit
    # the workers get the same options, less the parallel ones
    flags = {"--parallel", "--time-limit", "--grace", "--mps", "--out", "--nve-nice", "--no-merge"}
    base, skip = [], flags
    it = iter(argv)
    for a in it:
        key = a.split("=")[0]
        if key in skip:
            if "=" not in a and key not in ("--mps", "--no-merge"):
                next(it, None)
            continue
        base.append(a)
    jobs = [j for j in args.parallel.split(",") if j]
    procs = []
    for job in jobs:
        f = (out / "parts" / f"{_job_name(job)}.log").open("w")
        cmd = [sys.executable, str(Path(__file__).resolve()), *base, "--worker", job, "--out", str(out),
               "--until", f"{until:.3f}"]
        nice = args.nve_nice if job.startswith("nve:") else 0
        pre = (lambda n=nice: os.nice(n)) if nice else None
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, preexec_fn=pre)
        procs.append((job, proc, f))
    log(f"{len(procs)} jobs started, deadline in {args.time_limit:.0f} s ({os.cpu_count()} CPUs)")
    status = {}
    for job, p, f in procs:
        try:
            status[job] = p.wait(timeout=max(1.0, until + args.grace - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            status[job] = "killed"
        f.close()
        log(f"{job}: exit {status[job]}")
    _stop_mps(mps)
    if args.no_merge:
        return 0
    pkls = [out / "parts" / f"{_job_name(job)}.pkl" for job in jobs]
    status = {_job_name(j): s for j, s in status.items()}
    return _merge(cfg, out, pkls, status, time.time() - t0, log, mps is not None)


def _merge(cfg, out: Path, pkls: list[Path], status: dict, wall: float, log, mps: bool = False) -> int:
    """Collect the workers' pickles into one SuiteResult; write CSVs, figures, verdicts.csv and report.md."""
    from tcemu.mlip import systems
    from tcemu.mlip._common import row, with_reference, write_csv
    from tcemu.mlip.plots import save_check_figures
    from tcemu.mlip.report import SuiteResult, verdict_table, verdicts, write_report, write_verdicts
    from tcemu.mlip.tasks import NVECheckResult, RelaxCheckResult

    items = []
    for pk in pkls:
        if pk.is_file():
            items.extend(pickle.loads(pk.read_bytes()))
        else:
            why = f"no result (exit {status.get(pk.stem)})"
            items.append(("failed", pk.stem.split("_")[0], pk.stem, why))
    envs = [x[1] for x in items if x[0] == "env"]
    provs = [x[1] for x in items if x[0] == "provenance"]  # the workers' (the device's), not this process's
    items = [x for x in items if x[0] not in ("env", "provenance")]
    res = SuiteResult(cfg)
    res.single_point = [x[1] for x in items if x[0] == "single_point"]
    res.energy_curve = [x[1] for x in items if x[0] == "energy_curve"]
    res.failures = [(x[1], x[2], x[3]) for x in items if x[0] in ("failed", "skipped")]
    for x in items:
        if x[0] == "skipped":
            log(f"skipped: {x[2]} ({x[3]})")
    order = with_reference(cfg.methods)
    nve = {x[3]: x for x in items if x[0] == "nve"}
    if nve:
        full_rows = []
        for m, x in nve.items():
            full_rows.extend(NVECheckResult(x[1], x[2], x[4].n_atoms, {m: x[4]}).to_rows())
        write_csv(full_rows, out / "mlip_nve_each_full_length.csv")
        if "fp64" in nve and "fp32" in nve:
            n = min(x[4].steps for x in nve.values())
            runs = {m: nve[m][4].truncated(n) for m in order if m in nve}
            x0 = nve["fp64"]
            res.nve.append(NVECheckResult(x0[1], x0[2], x0[4].n_atoms, runs))
            log(f"NVE: compared over the common {n} steps ({n * cfg.nve_timestep_fs * 1e-3:.3g} ps); "
                "each run's own length: " + ", ".join(f"{m} {x[4].steps}" for m, x in nve.items()))
    rel = [x for x in items if x[0] == "relax"]
    if rel:
        done = [x for x in rel if not x[5].interrupted]
        cut = [x for x in rel if x[5].interrupted]
        if cut:
            rows = []
            for x in cut:
                r = x[5]
                base = dict(check="relax", potential=x[1], system=x[2], method=x[3], repeat=x[4])
                rows += [row(**base, metric="steps_done", unit="steps", value=r.steps),
                         row(**base, metric="fmax_min", unit="eV/A", value=r.fmax_min_eV_per_A),
                         row(**base, metric="fmax_final", unit="eV/A", value=r.fmax_final_eV_per_A),
                         row(**base, metric="wall_time", unit="s", value=r.wall_s)]
                rows += [row(**base, metric="fmax", unit="eV/A", value=f, x_name="step", x_value=k)
                         for k, f in enumerate(r.fmax_trace_eV_per_A)]
            write_csv(rows, out / "mlip_relax_interrupted.csv")
            for x in cut:
                r = x[5]
                log(f"relax {x[3]} #{x[4]} interrupted at step {r.steps}, fmax min {r.fmax_min_eV_per_A:.3g}")
        by_m: dict[str, list] = {}
        for x in sorted(done, key=lambda x: x[4]):
            by_m.setdefault(x[3], []).append(x[5])
        if "fp32" in by_m:
            x0 = rel[0]
            n_atoms = len(systems.build(x0[2]))
            res.relax.append(RelaxCheckResult(x0[1], x0[2], n_atoms,
                                              {m: tuple(by_m[m]) for m in order if m in by_m}))
    for name, results in (("single_point", res.single_point), ("energy_curve", res.energy_curve),
                          ("nve", res.nve), ("relax", res.relax)):
        if results:
            write_csv([r for x in results for r in x.to_rows()], out / f"mlip_{name}.csv")
    for r in res.single_point:
        save_check_figures(r, out, f"single_point_{r.potential}_{r.system}")
    for r in res.energy_curve:
        save_check_figures(r, out, f"energy_curve_{r.potential}")
    for r in res.nve:
        save_check_figures(r, out, f"nve_{r.potential}_{r.system}")
    for r in res.relax:
        save_check_figures(r, out, f"relax_{r.potential}_{r.system}")
    if wall:
        res.wall_s["parallel"] = wall
    res.verdicts = verdicts(res)
    write_verdicts(res, out)
    # the workers' environment (the device), not this process's
    write_report(res, out, env=dict(envs[-1]) if envs else None)
    write_suite_results(res, out, provs[-1] if provs else Provenance.current(cfg.device))
    if status:
        with (out / "report.md").open("a") as f:
            f.write(f"\nParallel mode: {len(pkls)} processes on one device (MPS {'on' if mps else 'off'}), "
                    f"{wall:.0f} s wall. Exit status per job: "
                    + ", ".join(f"{j} {s}" for j, s in status.items()) + "\n")
    print(verdict_table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
