"""What a suite run is: its configuration (:class:`SuiteConfig`), its results (:class:`SuiteResult`) and the
environment it ran in. The bottom of the report's modules: :mod:`~tcemu.mlip.criteria` judges a ``SuiteResult``,
:mod:`~tcemu.mlip.report_text` and :mod:`~tcemu.mlip.plots` show it, :mod:`~tcemu.mlip.report` runs the suite."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field, replace
from pathlib import Path

from tcemu.mlip._common import ALL_METHODS

__all__ = ["SuiteConfig", "SuiteResult", "environment"]


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
        second_order_potential, second_order_size, second_order_properties: check 5
            (:mod:`tcemu.mlip.tasks.second_order`: ``"quick"`` or ``"full"`` sizes; phonons, vibrations, elastic).
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
    second_order_potential: str = "pet-distilled"
    second_order_size: str = "quick"
    second_order_properties: tuple[str, ...] = ("phonons", "vibrations", "elastic")
    checks: tuple[str, ...] = ("single_point", "energy_curve", "nve", "relax", "second_order", "pet_relax")
    name: str = "custom"

    @classmethod
    def quick(cls, **kw) -> SuiteConfig:
        """CPU-sized: the distilled PET (trained weights, ``tcemu.mlip.distilled``), its random-weight twin and
        ANI-1x on the water box, 20-point curves with both PETs, 0.05 ps of ANI-1x NVE
        of an 8-molecule water cluster, and ANI-1x relaxation of one water molecule (to 1e-3 eV/A in at most 300
        steps, one repeat: the CPU backend is deterministic). A water dimer would be a harder test, but with
        ALCHEMI's FIRE2 defaults even FP32 needed 190 to over 300 steps on it, depending on rounding. Second order:
        the distilled PET's phonons of fcc Pt (2 x 2 x 2 supercell) and its elastic constants; the water molecule's
        vibrations (19 more evaluations per method, about a minute on 2 cores) are left to the full suite. The PET
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
            second_order_size="quick",
            second_order_properties=("phonons", "elastic"),
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
            second_order_size="full",
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
    second_order: list = field(default_factory=list)
    wall_s: dict[str, float] = field(default_factory=dict)
    verdicts: list = field(default_factory=list)
    failures: list = field(default_factory=list)  # (check, case, error) of cases that raised


def environment() -> dict[str, str]:
    """Versions, machine and git commit of this process, for the head of a report."""
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
