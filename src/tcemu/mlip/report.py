"""The validation suite: run the five checks for every method, decide safe / not safe, write the report.

``run_suite(config, out)`` writes, under ``out``:

- ``mlip_single_point.csv``, ``mlip_energy_curve.csv``, ``mlip_nve.csv``, ``mlip_relax.csv``,
  ``mlip_second_order.csv``: long-format results,
- ``*.png``: one figure per check and potential,
- ``verdicts.csv``: ``method, check, value, threshold, verdict, reason`` (one row per method and criterion; the
  verdict is pass, fail, marginal pass, marginal fail or not discriminating, the reason says why not),
- ``report.md``: tables, figures and a verdict per method with its evidence.

Configuration and results: :mod:`tcemu.mlip.results`; criteria, coverage rule and verdicts: :mod:`tcemu.mlip.criteria`;
the text: :mod:`tcemu.mlip.report_text` (all re-exported here).
"""

from __future__ import annotations

import time
from pathlib import Path

from tcemu.emulation.dispatch import every_gemm_emulated
from tcemu.mlip._common import write_csv
from tcemu.mlip.criteria import (
    THRESHOLDS,
    Verdict,
    coverage_verdicts,
    method_status,
    method_verdicts,
    verdicts,
)
from tcemu.mlip.report_text import coverage_table, verdict_table, write_report, write_verdicts
from tcemu.mlip.study import suite_section as study_section
from tcemu.mlip.results import SuiteConfig, SuiteResult, environment

__all__ = [
    "THRESHOLDS",
    "SuiteConfig",
    "SuiteResult",
    "Verdict",
    "coverage_table",
    "coverage_verdicts",
    "environment",
    "method_status",
    "method_verdicts",
    "run_suite",
    "verdict_table",
    "verdicts",
    "write_report",
    "write_verdicts",
]

def _failed(res: SuiteResult, log, check: str, case: str, exc: Exception) -> None:
    res.failures.append((check, case, f"{type(exc).__name__}: {exc}"))
    log(f"[{check}] {case} FAILED: {type(exc).__name__}: {exc}")


def run_suite(config: SuiteConfig, out: str | Path, show_progress: bool = True, log=print) -> SuiteResult:
    """Run the checks of ``config``, write CSVs, figures, ``verdicts.csv`` and ``report.md`` under ``out``.

    Every GEMM runs the method (:func:`every_gemm_emulated`), also where the CUDA backend would fall back.
    """
    with every_gemm_emulated():
        return _run_suite(config, out, show_progress, log)


def _relax(res: SuiteResult, out: Path, log, check: str, potential: str, system: str, optimizer: str, repeats: int,
           fmax_eV_per_A: float, max_steps: int, rattle_A: float, methods, pot, show_progress: bool) -> None:
    """One relaxation check (``relax`` or ``pet_relax``): its results into ``res.relax``, figures and the CSV."""
    from tcemu.mlip import systems, tasks
    from tcemu.mlip.plots import save_check_figures

    t0 = time.perf_counter()
    config = res.config
    try:
        kw = {"rattle_A": rattle_A} if rattle_A else {}
        r = tasks.relax_check(pot(potential), systems.build(system), methods, repeats, optimizer, fmax_eV_per_A,
                              max_steps, config.device, include_fp64=config.relax_include_fp64,
                              show_progress=show_progress, **kw)
        res.relax.append(r)
        save_check_figures(r, out, f"relax_{potential}_{system}")
        write_csv([x for r in res.relax for x in r.to_rows()], out / "mlip_relax.csv")
    except Exception as exc:  # noqa: BLE001
        _failed(res, log, "relax", f"{potential}/{system}", exc)
    res.wall_s[check] = time.perf_counter() - t0


def _run_suite(config: SuiteConfig, out: str | Path, show_progress: bool, log) -> SuiteResult:
    import numpy as np

    from tcemu.mlip import models, systems, tasks
    from tcemu.mlip.plots import save_check_figures
    from tcemu.mlip.tasks.energy_curve import DEFAULT_HEIGHTS_A

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    res = SuiteResult(config)
    methods = list(config.methods)
    cache: dict[str, models.Potential] = {}

    def pot(name: str) -> models.Potential:
        if name not in cache:
            cache[name] = models.get_potential(name)
        return cache[name]

    if "single_point" in config.checks:
        t0 = time.perf_counter()
        for pname, sname in config.single_point:
            log(f"[single point] {pname} on {sname}")
            try:
                r = tasks.single_point(
                    pot(pname),
                    systems.build(sname),
                    methods,
                    config.floor,
                    config.device,
                    show_progress=show_progress,
                )
            except Exception as exc:  # noqa: BLE001 - one failing case must not lose the others
                _failed(res, log, "single_point", f"{pname}/{sname}", exc)
                continue
            res.single_point.append(r)
            save_check_figures(r, out, f"single_point_{pname}_{sname}")
            # written after every case, so that a run stopped early keeps what it measured
            write_csv([x for r in res.single_point for x in r.to_rows()], out / "mlip_single_point.csv")
        res.wall_s["single_point"] = time.perf_counter() - t0
    if "energy_curve" in config.checks:
        t0 = time.perf_counter()
        heights = tuple(np.linspace(DEFAULT_HEIGHTS_A[0], DEFAULT_HEIGHTS_A[-1], config.curve_points))
        for pname in config.curve_potentials:
            log(f"[energy curve] {pname}, CO on Pt(111), {len(heights)} heights")
            try:
                r = tasks.energy_curve(
                    pot(pname), methods, heights, device=config.device, show_progress=show_progress
                )
            except Exception as exc:  # noqa: BLE001
                _failed(res, log, "energy_curve", pname, exc)
                continue
            res.energy_curve.append(r)
            save_check_figures(r, out, f"energy_curve_{pname}")
        write_csv([x for r in res.energy_curve for x in r.to_rows()], out / "mlip_energy_curve.csv")
        res.wall_s["energy_curve"] = time.perf_counter() - t0
    if "nve" in config.checks:
        t0 = time.perf_counter()
        log(
            f"[nve] {config.nve_potential} on {config.nve_system}, {config.nve_ps} ps at {config.nve_timestep_fs} fs"
        )
        try:
            r = tasks.nve_check(
                pot(config.nve_potential),
                systems.build(config.nve_system),
                methods,
                config.nve_ps,
                config.nve_timestep_fs,
                device=config.device,
                show_progress=show_progress,
            )
            res.nve.append(r)
            save_check_figures(r, out, f"nve_{config.nve_potential}_{config.nve_system}")
            write_csv(r.to_rows(), out / "mlip_nve.csv")
        except Exception as exc:  # noqa: BLE001
            _failed(res, log, "nve", f"{config.nve_potential}/{config.nve_system}", exc)
        res.wall_s["nve"] = time.perf_counter() - t0
    if "relax" in config.checks:
        log(f"[relax] {config.relax_potential} on {config.relax_system}, {config.relax_optimizer} to "
            f"{config.relax_fmax_eV_per_A} eV/A, {config.relax_repeats} repeat(s)")
        _relax(res, out, log, "relax", config.relax_potential, config.relax_system, config.relax_optimizer,
               config.relax_repeats, config.relax_fmax_eV_per_A, config.relax_max_steps, 0.0, methods, pot,
               show_progress)
    if "second_order" in config.checks:
        t0 = time.perf_counter()
        pname = config.second_order_potential
        log(f"[second order] {pname}: {', '.join(config.second_order_properties)} ({config.second_order_size})")
        try:
            so_cfg = tasks.SecondOrderConfig.for_size(config.second_order_size,
                                                      properties=tuple(config.second_order_properties))
            for r in tasks.second_order(pot(pname), methods, so_cfg, config.device, show_progress):
                res.second_order.append(r)
                save_check_figures(r, out, f"{r.check}_{pname}_{r.system}")
            write_csv([x for r in res.second_order for x in r.to_rows()], out / "mlip_second_order.csv")
        except Exception as exc:  # noqa: BLE001
            _failed(res, log, "second_order", pname, exc)
        res.wall_s["second_order"] = time.perf_counter() - t0
    if "pet_relax" in config.checks:
        log(f"[pet relax] {config.pet_relax_potential} on {config.pet_relax_system}, {config.pet_relax_optimizer} to "
            f"{config.pet_relax_fmax_eV_per_A} eV/A, {config.pet_relax_repeats} start(s) rattled by "
            f"{config.pet_relax_rattle_A} A")
        _relax(res, out, log, "pet_relax", config.pet_relax_potential, config.pet_relax_system,
               config.pet_relax_optimizer, config.pet_relax_repeats, config.pet_relax_fmax_eV_per_A,
               config.pet_relax_max_steps, config.pet_relax_rattle_A, methods, pot, show_progress)
    res.verdicts = verdicts(res)
    write_verdicts(res, out)
    path = write_report(res, out)
    with Path(path).open("a") as f:  # the NVE drift intervals and the published study beside the suite's results
        f.write("\n" + study_section(res))
    return res

