"""The validation suite: run the four checks for every method, decide safe / not safe, write the report.

``run_suite(config, out)`` writes, under ``out``:

- ``mlip_single_point.csv``, ``mlip_energy_curve.csv``, ``mlip_nve.csv``, ``mlip_relax.csv``: long-format results,
- ``*.png``: one figure per check and potential,
- ``verdicts.csv``: ``method, check, value, threshold, verdict`` (one row per method and criterion),
- ``report.md``: tables, figures and a verdict per method with its evidence.

Criteria, coverage rule and verdicts: :mod:`tcemu.mlip.criteria` (re-exported here).
"""

from __future__ import annotations


import csv
import math
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tcemu.emulation.dispatch import every_gemm_emulated
from tcemu.mlip._common import ALL_METHODS, write_csv
from tcemu.mlip.criteria import (
    REFERENCE_METHODS,
    THRESHOLDS,
    Verdict,
    coverage_verdicts,
    method_status,
    method_verdicts,
    verdicts,
)
from tcemu.mlip.distilled import potential_label, potentials_line, weights_comparison

__all__ = ["SuiteConfig", "SuiteResult", "THRESHOLDS", "Verdict", "coverage_table", "coverage_verdicts",
           "method_status", "run_suite", "verdicts", "write_report"]

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
    device: str = "cpu"
    checks: tuple[str, ...] = ("single_point", "energy_curve", "nve", "relax")
    name: str = "custom"

    @classmethod
    def quick(cls, **kw) -> SuiteConfig:
        """CPU-sized: the distilled PET (trained weights, ``tcemu.mlip.distilled``), its random-weight twin and
        ANI-1x on the water box, 20-point curves with both PETs, 0.05 ps of ANI-1x NVE
        of an 8-molecule water cluster, and ANI-1x relaxation of one water molecule (to 1e-3 eV/A in at most 300
        steps, one repeat: the CPU backend is deterministic). A water dimer would be a harder test, but with
        ALCHEMI's FIRE2 defaults even FP32 needed 190 to over 300 steps on it, depending on rounding."""
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
            name="quick",
        )
        return replace(base, **kw)

    @classmethod
    def full(cls, **kw) -> SuiteConfig:
        """The issue's sizes: the distilled PET (trained) and its random twin on the 192-atom box, the distilled
        PET and random PET S on the 17,280-atom supercell, random PET S, S-nn32, M, L on the box (sizes), ANI-1x and
        CHGNet on water; CHGNet and both distilled-architecture PET curves (60 points); ANI-1x NVE of the water box;
        CHGNet FIRE2 relaxation of the 539-atom Cantor slab, 3 repeats, 500 steps."""
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
                show_progress=show_progress,
            )
            res.relax.append(r)
            save_check_figures(r, out, f"relax_{config.relax_potential}_{config.relax_system}")
            write_csv(r.to_rows(), out / "mlip_relax.csv")
        except Exception as exc:  # noqa: BLE001
            _failed(res, log, "relax", f"{config.relax_potential}/{config.relax_system}", exc)
        res.wall_s["relax"] = time.perf_counter() - t0
    res.verdicts = verdicts(res)
    write_verdicts(res, out)
    write_report(res, out)
    return res


def write_verdicts(res: SuiteResult, out: Path) -> None:
    """``out/verdicts.csv``: one row per (method, criterion) with the columns of :meth:`Verdict.row`."""
    with (Path(out) / "verdicts.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["method", "check", "value", "threshold", "verdict"])
        w.writeheader()
        for v in res.verdicts:
            w.writerow(v.row())


def _fmt(x: float) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf (floor 0)"
    return f"{x:.3g}"


def verdict_table(res: SuiteResult) -> str:
    """Markdown table: one row per method, safe / not safe, and the failed criteria."""
    methods = list(dict.fromkeys(v.method for v in res.verdicts))
    mv = method_verdicts(res.verdicts, methods)
    lines = ["| method | verdict | criteria passed | failed criteria |", "|---|---|---|---|"]
    for m in methods:
        _, failed = mv[m]
        n = sum(1 for v in res.verdicts if v.method == m)
        why = "; ".join(f"{v.check} = {_fmt(v.value)} > {_fmt(v.threshold)} {v.unit}" for v in failed) or "-"
        lines.append(f"| {m} | **{method_status(res.verdicts, m)}** | {n - len(failed)}/{n} | {why} |")
    return "\n".join(lines)


def coverage_table(res: SuiteResult) -> str:
    """Markdown table: each case's coverage per method (% of float32 contraction FLOPs emulated)."""
    cases = [(check, r) for check, rs in (("single point", res.single_point), ("energy curve", res.energy_curve),
                                          ("nve", res.nve), ("relax", res.relax)) for r in rs]
    methods = list(dict.fromkeys(m for _, r in cases for m in getattr(r, "coverage", {})
                                 if m not in REFERENCE_METHODS))
    if not cases or not methods:
        return "No coverage was measured."
    lines = ["| check | potential / system | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for check, r in cases:
        cells = [_fmt(100 * r.coverage[m]) + " %" if m in r.coverage else "-" for m in methods]
        lines.append(f"| {check} | {r.potential} / {r.system} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _tf32_statement(res: SuiteResult) -> str:
    vs = [v for v in res.verdicts if v.method == "tf32"]
    if not vs:
        return "Single-pass TF32 was not run."
    failed = [v for v in vs if not v.passed]
    checks = sorted({v.check.split(":")[0] for v in failed})
    if not failed:
        return (
            "Single-pass TF32 passed every criterion in this run: at these sizes its rounding did not show "
            "above FP32's own. Do not read this as FP32 accuracy: see its single-point errors above."
        )
    parts = [f"{v.check} = {_fmt(v.value)} {v.unit} (threshold {_fmt(v.threshold)})" for v in failed]
    return (
        f"Single-pass TF32 is **not safe**: it fails {len(failed)} of {len(vs)} criteria, in the checks "
        f"{', '.join(checks)}: " + "; ".join(parts) + ". TF32 keeps 10 mantissa bits per operand, so each "
        "product carries a relative error near 2^-11 instead of FP32's 2^-24."
    )


def write_report(res: SuiteResult, out: str | Path) -> Path:
    """Write ``out/report.md`` from a finished :class:`SuiteResult`."""
    out = Path(out)
    cfg = res.config
    env = _environment()
    L: list[str] = []
    L.append(f"# tcemu MLIP validation report ({cfg.name} suite)\n")
    L.append("Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()) + "\n")
    L.append(potentials_line([p for p, _ in cfg.single_point] + list(cfg.curve_potentials)) + "\n")
    L.append(
        f"Device: `{cfg.device}`. Methods: fp64 (reference), fp32, {', '.join(cfg.methods)}. "
        f"Wall time per check (s): " + ", ".join(f"{k} {v:.0f}" for k, v in res.wall_s.items()) + "\n"
    )
    L.append("## Verdicts\n")
    L.append(verdict_table(res) + "\n")
    L.append("**Coverage** (share of the float32 contraction FLOPs, forward and backward, that each method's run "
             "emulated, measured by `tcemu.coverage()` on its first calculation; below "
             f"{100 * THRESHOLDS['min_coverage']:.0f} % a method is not validated):\n")
    L.append(coverage_table(res) + "\n")
    if res.failures:
        L.append("**Cases that failed to run** (no verdict from them):\n")
        L.extend(f"- {c} {case}: `{err}`" for c, case, err in res.failures)
        L.append("")
    L.append("**Single-pass TF32.** " + _tf32_statement(res) + "\n")
    L.append(
        "Criteria: each method against what FP32 itself achieves (details in `tcemu.mlip.report`):\n"
        + "\n".join(f"- `{k}` = {v}" for k, v in THRESHOLDS.items())
        + "\n"
    )
    if res.single_point:
        L.append("## 1. Single point\n")
        L.append(
            f"Errors against FP64 (force: mean per-atom |dF|; energy: |dE|; stress: mean |ds|), and as a multiple "
            f"of FP32's noise floor (FP32 vs FP32 with the atoms reordered: `{cfg.floor}`). 'vs FP32' compares "
            "each method with plain FP32: a multiple near 1 means it differs from FP32 no more than FP32 differs "
            "from itself when only the order of its sums changes. A floor of 0 means the reordered FP32 run gave "
            "bit-identical values.\n"
        )
        for sp in res.single_point:
            L.append(f"### {potential_label(sp.potential)} on {sp.system} ({sp.n_atoms} atoms)\n")
            L.append(
                f"Noise floor: force {_fmt(sp.floor.force_mean_err_eV_per_A)} eV/A, energy "
                f"{_fmt(sp.floor.energy_abs_err_eV)} eV, stress {_fmt(sp.floor.stress_mean_err_eV_per_A3)} eV/A^3.\n"
            )
            L.append(
                "| method | force err (eV/A) | x floor | force max (eV/A) | energy err (eV) | x floor | "
                "stress err (eV/A^3) | vs FP32: force (eV/A) | vs FP32: x floor | eval (s) |"
            )
            L.append("|---|---|---|---|---|---|---|---|---|---|")
            for m in sp.methods:
                e = sp.error(m, "fp64")
                vs32 = sp.error(m, "fp32").force_mean_err_eV_per_A if m != "fp32" else 0.0
                vs32_x = sp.floor_multiple(m, "force_mean_err", "fp32") if m != "fp32" else 0.0
                L.append(
                    f"| {m} | {_fmt(e.force_mean_err_eV_per_A)} | {_fmt(sp.floor_multiple(m, 'force_mean_err'))} | "
                    f"{_fmt(e.force_max_err_eV_per_A)} | {_fmt(e.energy_abs_err_eV)} | "
                    f"{_fmt(sp.floor_multiple(m, 'energy_abs_err'))} | {_fmt(e.stress_mean_err_eV_per_A3)} | "
                    f"{_fmt(vs32)} | {_fmt(vs32_x)} | {sp.times_s[m]:.2f} |"
                )
            L.append(f"\n![single point](single_point_{sp.potential}_{sp.system}.png)\n")
    if res.energy_curve:
        L.append("## 2. Energy curve (CO pulled off Pt(111))\n")
        for c in res.energy_curve:
            L.append(
                f"### {potential_label(c.potential)}, {len(c.heights_A)} heights {c.heights_A[0]:.1f}-"
                f"{c.heights_A[-1]:.1f} A\n"
            )
            L.append("| method | d2 RMS (meV) | d2 max (meV) | max abs E - E_FP64 (meV) |")
            L.append("|---|---|---|---|")
            for m in c.methods:
                L.append(
                    f"| {m} | {_fmt(c.jitter_rms_meV(m))} | {_fmt(c.jitter_max_meV(m))} | "
                    f"{_fmt(float(abs(c.deviation_meV(m)).max()))} |"
                )
            L.append(f"\n![energy curve](energy_curve_{c.potential}.png)\n")
    if res.nve:
        L.append("## 3. NVE\n")
        for n in res.nve:
            r0 = n.runs["fp64"]
            L.append(
                f"### {n.potential} on {n.system} ({n.n_atoms} atoms), {r0.steps} steps of {r0.timestep_fs} fs "
                f"({r0.steps * r0.timestep_fs * 1e-3:.3g} ps)\n"
            )
            L.append(
                "| method | drift (meV/atom/ps) | fluctuation (meV/atom) | max dev (meV/atom) | wall (s) |"
            )
            L.append("|---|---|---|---|---|")
            for m, r in n.runs.items():
                L.append(
                    f"| {m} | {r.drift_meV_per_atom_per_ps:+.3g} | {_fmt(r.fluct_meV_per_atom)} | "
                    f"{_fmt(r.max_dev_meV_per_atom)} | {r.wall_s:.0f} |"
                )
            L.append(f"\n![nve](nve_{n.potential}_{n.system}.png)\n")
    if res.relax:
        L.append("## 4. Relaxation\n")
        for rc in res.relax:
            r0 = next(iter(rc.runs.values()))[0]
            L.append(
                f"### {rc.potential} on {rc.system} ({rc.n_atoms} atoms), {r0.optimizer} to "
                f"{r0.fmax_target_eV_per_A} eV/A, limit {r0.max_steps} steps\n"
            )
            L.append("| method | converged | steps (each repeat) | lowest fmax (eV/A) | final energy (eV) |")
            L.append("|---|---|---|---|---|")
            for m, rs in rc.runs.items():
                L.append(
                    f"| {m} | {sum(r.converged for r in rs)}/{len(rs)} | {', '.join(str(r.steps) for r in rs)} | "
                    f"{_fmt(min(r.fmax_min_eV_per_A for r in rs))} | {rs[0].energy_final_eV:.6f} |"
                )
            L.append(f"\n![relax](relax_{rc.potential}_{rc.system}.png)\n")
    if comparison := weights_comparison(res):
        L.append(comparison)
    L.append("## Configuration\n")
    L.append("```\n" + "\n".join(f"{k} = {v}" for k, v in asdict(cfg).items()) + "\n```\n")
    p = out / "report.md"
    p.write_text("\n".join(L))
    return p
