"""Check 2, energy curve: CO pulled rigidly off a Pt(111) top site, and how smooth each method's curve is.

The curve itself is the physics (adsorption well, tail to the gas phase). Precision shows up as
*jitter*: ``d(h) = E_method(h) - E_FP64(h)`` should vary slowly with the height ``h``. Its second
difference along the uniform height grid, ``d2_i = d_(i+1) - 2 d_i + d_(i-1)``, removes any smooth
offset or slope and keeps the noise; we report its RMS and maximum (meV). Forces and optimisers
feel this jitter as spurious curvature.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tcemu.mlip._common import coverage_of, coverage_rows, progress, row, system_name, with_reference

__all__ = ["DEFAULT_HEIGHTS_A", "EnergyCurveResult", "HEIGHT_GRIDS", "STUDY_HEIGHTS_A", "energy_curve",
           "second_difference_stats"]

#: The published PET study's scan: 60 heights of C above the top-site Pt, 1.2 to 6.0 Angstrom (steps of
#: 4.8 / 59 = 0.0814 Angstrom, the study's "0.081 A").
STUDY_HEIGHTS_A = tuple(float(h) for h in np.linspace(1.2, 6.0, 60))
#: The default scan: the study's.
DEFAULT_HEIGHTS_A = STUDY_HEIGHTS_A
#: Named height grids (``tcemu mlip curve --grid``).
HEIGHT_GRIDS = {"study": STUDY_HEIGHTS_A}


def second_difference_stats(values: np.ndarray) -> tuple[float, float]:
    """RMS and max |.| of the second difference of a 1-D series (same unit as ``values``)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 3:
        return math.nan, math.nan
    d2 = v[2:] - 2 * v[1:-1] + v[:-2]
    return float(np.sqrt(np.mean(d2**2))), float(np.max(np.abs(d2)))


@dataclass(frozen=True)
class EnergyCurveResult:
    """Check 2 on one potential.

    Attributes:
        potential, system, n_atoms: what was scanned (``system`` names the structure at the first height).
        heights_A: the heights of C above the surface Pt.
        energies_eV: method -> energies along the scan (``"fp64"`` is the reference).
        coverage: share of the float32 contraction FLOPs each method emulated (first height).
    """

    potential: str
    system: str
    n_atoms: int
    heights_A: tuple[float, ...]
    energies_eV: dict[str, tuple[float, ...]]
    coverage: dict[str, float] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        return [m for m in self.energies_eV if m != "fp64"]

    def deviation_meV(self, method: str) -> np.ndarray:
        """``E_method - E_FP64`` along the scan, meV."""
        return 1e3 * (np.asarray(self.energies_eV[method]) - np.asarray(self.energies_eV["fp64"]))

    def jitter_rms_meV(self, method: str) -> float:
        """RMS of the second difference of ``E_method - E_FP64`` along the scan, meV."""
        return second_difference_stats(self.deviation_meV(method))[0]

    def jitter_max_meV(self, method: str) -> float:
        """Max |second difference| of ``E_method - E_FP64`` along the scan, meV."""
        return second_difference_stats(self.deviation_meV(method))[1]

    def to_rows(self) -> list[dict]:
        base = dict(check="energy_curve", potential=self.potential, system=self.system, n_atoms=self.n_atoms)
        rows = []
        for m, es in self.energies_eV.items():
            for h, e in zip(self.heights_A, es):
                rows.append(
                    row(**base, method=m, metric="energy", unit="eV", value=e, x_name="height_A", x_value=h)
                )
        for m in self.methods:
            rows.append(
                row(
                    **base,
                    method=m,
                    reference="fp64",
                    metric="d2_rms",
                    unit="meV",
                    value=self.jitter_rms_meV(m),
                )
            )
            rows.append(
                row(
                    **base,
                    method=m,
                    reference="fp64",
                    metric="d2_max",
                    unit="meV",
                    value=self.jitter_max_meV(m),
                )
            )
            dev = self.deviation_meV(m)
            rows.append(
                row(
                    **base,
                    method=m,
                    reference="fp64",
                    metric="max_abs_dev",
                    unit="meV",
                    value=float(np.abs(dev).max()),
                )
            )
        return rows + coverage_rows(base, self.coverage)


def energy_curve(
    potential,
    methods: list[str] | tuple[str, ...] = ("tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"),
    heights_A: tuple[float, ...] | np.ndarray = DEFAULT_HEIGHTS_A,
    build: Callable | None = None,
    device: str = "cpu",
    show_progress: bool = True,
) -> EnergyCurveResult:
    """Run check 2: energies of ``build(h)`` (default CO on Pt(111), rigid) at each height, for each method.

    Only energies are evaluated (no forces). FP64 and FP32 always run.
    """
    if build is None:
        from tcemu.mlip.systems import co_on_pt111 as build
    heights = [float(h) for h in heights_A]
    structures = [build(h) for h in heights]
    potential.check_atoms(structures[0])
    energies: dict[str, tuple[float, ...]] = {}
    coverage: dict[str, float] = {}
    all_methods = with_reference(methods)
    bar = progress(range(len(all_methods) * len(heights)), f"energy curve {potential.name}", show_progress)
    it = iter(bar)
    for m in all_methods:
        calc = potential.calculator(m, device)
        es = []
        for atoms in structures:
            a = atoms.copy()
            a.calc = calc
            es.append(float(a.get_potential_energy()))
            next(it, None)
        energies[m] = tuple(es)
        coverage[m] = coverage_of(calc)
        del calc
    if hasattr(bar, "close"):
        bar.close()
    return EnergyCurveResult(
        potential=potential.name,
        system=system_name(structures[0]),
        n_atoms=len(structures[0]),
        heights_A=tuple(heights),
        energies_eV=energies,
        coverage=coverage,
    )
