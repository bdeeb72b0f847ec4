"""The validation suite: run the four checks for every method, decide safe / not safe, write the report.

``run_suite(config, out)`` writes, under ``out``:

- ``mlip_single_point.csv``, ``mlip_energy_curve.csv``, ``mlip_nve.csv``, ``mlip_relax.csv``: long-format results,
- ``*.png``: one figure per check and potential,
- ``verdicts.csv``: ``method, check, value, threshold, verdict, reason`` (one row per method and criterion; the
  verdict is pass, fail, marginal pass, marginal fail or not discriminating, the reason says why not),
- ``report.md``: tables, figures and a verdict per method with its evidence.

Criteria, coverage rule and verdicts: :mod:`tcemu.mlip.criteria`; the text: :mod:`tcemu.mlip.report_text`
(both re-exported here).
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tcemu.emulation.dispatch import every_gemm_emulated
from tcemu.mlip._common import ALL_METHODS, write_csv
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

__all__ = [
    "THRESHOLDS",
    "SuiteConfig",
    "SuiteResult",
    "Verdict",
    "coverage_table",
    "coverage_verdicts",
    "method_status",
    "method_verdicts",
    "run_suite",
    "verdict_table",
    "verdicts",
    "write_report",
    "write_verdicts",
]

@dataclass(frozen=True)
class SuiteConfig:
    """What the suite runs. :meth:`quick` is CPU-sized (minutes); :meth:`full` is the GPU-sized suite of the issue.

    Attributes:
        methods: emulation methods compared with FP32 (FP64 is always the reference).
        single_point: (potential, system) pairs for check 1; systems are names in ``tcemu.mlip.systems.SYSTEMS``.
        floor: how FP32's noise floor is made (``"permute"`` or ``"compile"``).
        curve_potentials: potentials for check 2 (CO on Pt(111)); ``curve_points`` heights from 1.2 to 6.0 A.
        nve_potential, nve_system, nve_ps, nve_timestep_fs: check 3.
        relax_potential, relax_system, relax_repeats, relax_fmax_eV_per_A, relax_max_steps, relax_optimizer: check 4.
        relax_include_fp64: relax with FP64 too, so that the steps criterion knows how far rounding alone moves
            the step count (no steps verdict when FP64 and FP32 differ by more than its margin).
        pet_relax_*: check ``pet_relax``, the published PET study's relaxation: ``pet_relax_potential`` on
            ``pet_relax_system`` with ``pet_relax_optimizer``, ``pet_relax_repeats`` starts rattled by
            ``pet_relax_rattle_A`` (seeds 0, 1, ...); judged by the relaxation criteria, and beside the study in
            the report's last section (``tcemu.mlip.study``).
        device: torch device of every model.
    """

    methods: tuple[str, ...] = ALL_METHODS[1:]
    single_point: tuple[tuple[str, str], ...] = (
        ("pet-distilled", "water_192"), ("pet-distilled-random", "water_192"), ("ani1x", "water_192"))
    floor: str = "permute"
    curve_potentials: tuple[str, ...] = ("pet-distilled", "pet-distilled-random")
    curve_points: int = 60
    nve_potential: str = "ani1x"
    nve_system: str = "water_192"
    nve_ps: float = 0.5
    nve_timestep_fs: float = 0.5
    relax_potential: str = "chgnet"
    relax_system: str = "cantor_539"
    relax_repeats: int = 3
    relax_fmax_eV_per_A: float = 1e-3
    relax_max_steps: int = 500
    relax_optimizer: str = "fire2"
    relax_include_fp64: bool = True
    pet_relax_potential: str = "pet-distilled"
    pet_relax_system: str = "cantor_539"
    pet_relax_optimizer: str = "alchemi-fire2"
    pet_relax_repeats: int = 3
    pet_relax_fmax_eV_per_A: float = 1e-3
    pet_relax_max_steps: int = 1000
    pet_relax_rattle_A: float = 0.01
    device: str = "cpu"
    checks: tuple[str, ...] = ("single_point", "energy_curve", "nve", "relax", "pet_relax")
    name: str = "custom"

    @classmethod
    def quick(cls, **kw) -> SuiteConfig:
        """CPU-sized: the distilled PET (trained weights, ``tcemu.mlip.distilled``), its random-weight twin and
        ANI-1x on the water box, 20-point curves with both PETs, 0.05 ps of ANI-1x NVE
        of an 8-molecule water cluster, and ANI-1x relaxation of one water molecule (to 1e-3 eV/A in at most 300
        steps, one repeat: the CPU backend is deterministic). A water dimer would be a harder test, but with
        ALCHEMI's FIRE2 defaults even FP32 needed 190 to over 300 steps on it, depending on rounding. The PET
        relaxation: the distilled PET on a 27-atom slab of the alloy, tcemu's FIRE2 (ALCHEMI's update; the Warp
        kernel on the CPU updates a multi-atom system's dt per thread) to 0.25 eV/A in at most 20 steps: a check
        that the pipeline runs, not a discriminating one (to 0.1 eV/A every method took 26 steps)."""
        base = cls(
            single_point=(
                ("pet-distilled", "water_192"), ("pet-distilled-random", "water_192"), ("ani1x", "water_192")),
            curve_potentials=("pet-distilled", "pet-distilled-random"),
            curve_points=20,
            nve_potential="ani1x",
            nve_system="water_cluster_24",
            nve_ps=0.05,
            relax_potential="ani1x",
            relax_system="water_cluster_3",
            relax_repeats=1,
            relax_max_steps=300,
            pet_relax_system="cantor_27",
            pet_relax_optimizer="fire2",
            pet_relax_repeats=1,
            pet_relax_fmax_eV_per_A=0.25,
            pet_relax_max_steps=20,
            name="quick",
        )
        return replace(base, **kw)

    @classmethod
    def full(cls, **kw) -> SuiteConfig:
        """The issue's sizes: the distilled PET (trained) and its random twin on the 192-atom box, the distilled
        PET and random PET S on the 17,280-atom supercell, random PET S, S-nn32, M, L on the box (sizes), ANI-1x and
        CHGNet on water; CHGNet and both distilled-architecture PET curves (60 points); ANI-1x NVE of the water box;
        CHGNet FIRE2 relaxation of the 539-atom Cantor slab, 3 repeats, 500 steps; the distilled PET's relaxation
        of that slab with ALCHEMI's FIRE2 kernel, 3 rattled starts, to 1e-3 eV/A in at most 1,000 steps."""
        base = cls(
            single_point=(
                ("pet-distilled", "water_192"),
                ("pet-distilled-random", "water_192"),
                ("pet-distilled", "water_17280"),
                ("pet-s", "water_192"),
                ("ani1x", "water_192"),
                ("pet-s", "water_17280"),
                ("pet-m", "water_192"),
                ("pet-l", "water_192"),
                ("pet-s-nn32", "water_192"),
                ("chgnet", "water_192"),
            ),
            curve_potentials=("chgnet", "pet-distilled", "pet-distilled-random"),
            curve_points=60,
            nve_potential="ani1x",
            nve_system="water_192",
            nve_ps=2.0,
            relax_potential="chgnet",
            relax_system="cantor_539",
            relax_repeats=3,
            relax_max_steps=500,
            name="full",
        )
        return replace(base, **kw)


@dataclass
class SuiteResult:
    """Everything one suite run produced (results per check, verdicts, timings)."""

    config: SuiteConfig
    single_point: list = field(default_factory=list)
    energy_curve: list = field(default_factory=list)
    nve: list = field(default_factory=list)
    relax: list = field(default_factory=list)
    wall_s: dict[str, float] = field(default_factory=dict)
    verdicts: list = field(default_factory=list)
    failures: list = field(default_factory=list)  # (check, case, error) of cases that raised


def _environment() -> dict[str, str]:
    import numpy
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "machine": platform.machine(),
        "cpu": platform.processor() or platform.machine(),
        "threads": str(torch.get_num_threads()),
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["small_shape_fallback"] = "off: every GEMM runs the method"
    for pkg in ("ase", "metatrain", "torchani", "chgnet", "tcemu"):
        try:
            from importlib.metadata import version

            env[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            env[pkg] = "-"
    try:
        import subprocess

        env["git"] = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                check=False,
                cwd=Path(__file__).parent,
            ).stdout.strip()
            or "-"
        )
    except Exception:  # noqa: BLE001
        env["git"] = "-"
    return env


def _failed(res: SuiteResult, log, check: str, case: str, exc: Exception) -> None:
    res.failures.append((check, case, f"{type(exc).__name__}: {exc}"))
    log(f"[{check}] {case} FAILED: {type(exc).__name__}: {exc}")


def run_suite(config: SuiteConfig, out: str | Path, show_progress: bool = True, log=print) -> SuiteResult:
    """Run the checks of ``config``, write CSVs, figures, ``verdicts.csv`` and ``report.md`` under ``out``.

    Every GEMM runs the method (:func:`every_gemm_emulated`), also where the CUDA backend would fall back.
    """
    with every_gemm_emulated():
        return _run_suite(config, out, show_progress, log)


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
        t0 = time.perf_counter()
        log(
            f"[relax] {config.relax_potential} on {config.relax_system}, {config.relax_optimizer} to "
            f"{config.relax_fmax_eV_per_A} eV/A, {config.relax_repeats} repeat(s)"
        )
        try:
            r = tasks.relax_check(
                pot(config.relax_potential),
                systems.build(config.relax_system),
                methods,
                config.relax_repeats,
                config.relax_optimizer,
                config.relax_fmax_eV_per_A,
                config.relax_max_steps,
                config.device,
                include_fp64=config.relax_include_fp64,
                show_progress=show_progress,
            )
            res.relax.append(r)
            save_check_figures(r, out, f"relax_{config.relax_potential}_{config.relax_system}")
            write_csv(r.to_rows(), out / "mlip_relax.csv")
        except Exception as exc:  # noqa: BLE001
            _failed(res, log, "relax", f"{config.relax_potential}/{config.relax_system}", exc)
        res.wall_s["relax"] = time.perf_counter() - t0
    if "pet_relax" in config.checks:
        t0 = time.perf_counter()
        pname, sname = config.pet_relax_potential, config.pet_relax_system
        log(f"[pet relax] {pname} on {sname}, {config.pet_relax_optimizer} to {config.pet_relax_fmax_eV_per_A} "
            f"eV/A, {config.pet_relax_repeats} start(s) rattled by {config.pet_relax_rattle_A} A")
        try:
            r = tasks.relax_check(pot(pname), systems.build(sname), methods, config.pet_relax_repeats,
                                  config.pet_relax_optimizer, config.pet_relax_fmax_eV_per_A,
                                  config.pet_relax_max_steps, config.device, include_fp64=config.relax_include_fp64,
                                  show_progress=show_progress, rattle_A=config.pet_relax_rattle_A)
            res.relax.append(r)
            save_check_figures(r, out, f"relax_{pname}_{sname}")
            write_csv([x for r in res.relax for x in r.to_rows()], out / "mlip_relax.csv")
        except Exception as exc:  # noqa: BLE001
            _failed(res, log, "relax", f"{pname}/{sname}", exc)
        res.wall_s["pet_relax"] = time.perf_counter() - t0
    res.verdicts = verdicts(res)
    write_verdicts(res, out)
    path = write_report(res, out)
    with Path(path).open("a") as f:  # the NVE drift intervals and the published study beside the suite's results
        f.write("\n" + study_section(res))
    return res

