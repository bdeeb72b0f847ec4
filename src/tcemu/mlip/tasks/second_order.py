"""Check 5, second-order properties: phonons of a crystal, vibrations of a molecule, elastic constants.

Each is a finite difference of forces or stresses, so rounding in the forces is divided by the step: where
single-pass TF32 is known to break. Every method computes the same property of the same structure (relaxed, or at
the zero-pressure lattice constant, with FP64), and is compared with FP64 beside FP32 and FP32's noise floor (FP32
with the atoms in another order, results mapped back):

- ``phonons``: fcc Pt (bulk; the distilled PET knows Pt(111) slabs) by ASE's :class:`~ase.phonons.Phonons` (finite
  displacements, acoustic sum rule), frequencies along a band path from Gamma; beside them, the Gamma frequencies
  without the sum rule, where forces that do not sum to zero would show as spurious acoustic modes (a model whose
  forces are edge gradients, as PET's, sums them to zero up to rounding);
- ``vibrations``: a water molecule (or cluster), ASE's :class:`~ase.vibrations.Vibrations`, the 3N - 6 modes;
- ``elastic``: C11, C12, C44 of the cubic cell from stress-strain central differences (one combined normal and
  shear strain, two stress evaluations), and the quantities whose sign is a physical conclusion: C11 - C12,
  C11 + 2 C12 (Born stability), C12 - C44 (the Cauchy pressure).

Frequencies come from the mass-weighted force constants (Hessian or dynamical matrix) diagonalised here; each
method's modes are matched to FP64's by their eigenvectors, so values[method][i] is the frequency of FP64's mode i
and an exchanged order of two modes shows. Negative frequencies are imaginary modes.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from tcemu.mlip._common import coverage_of, coverage_rows, progress, row, with_reference

__all__ = ["FLOOR", "SIZES", "SecondOrderConfig", "SecondOrderResult", "elastic", "lattice_constant", "phonons",
           "second_order", "vibrations"]

#: The noise floor's name in a result: FP32 with the atoms permuted.
FLOOR = "fp32-permute"
#: Sizes of :meth:`SecondOrderConfig.for_size`.
SIZES = ("quick", "full")


@dataclass(frozen=True)
class SecondOrderConfig:
    """What check 5 computes. :meth:`quick` is CPU-sized (seconds per method), :meth:`full` the GPU size.

    Attributes:
        element, a_guess_A: the fcc crystal and a start for its zero-pressure lattice constant (found in FP64).
        supercell: phonon supercell, repeats of the one-atom primitive cell; displacement_A: the step of the
            phonons and vibrations; band_path, band_points: the q path (from Gamma) and its number of points.
        water_molecules: 1 (one H2O) or n (the n molecules of the water box nearest its centre), relaxed in FP64
            with BFGS to relax_fmax_eV_per_A (at most relax_steps steps; the lowest fmax reached is kept).
        strain: the elastic strain step (central differences); elastic_repeat: repeats of the 4-atom cubic cell.
        seed: the floor's permutation.
    """

    element: str = "Pt"
    a_guess_A: float = 3.92
    supercell: int = 3
    displacement_A: float = 0.01
    band_path: str = "GXWKGL"
    band_points: int = 30
    water_molecules: int = 1
    relax_fmax_eV_per_A: float = 1e-4
    relax_steps: int = 40
    strain: float = 0.01
    elastic_repeat: int = 1
    seed: int = 0
    properties: tuple[str, ...] = ("phonons", "vibrations", "elastic")

    @classmethod
    def quick(cls, **kw) -> SecondOrderConfig:
        """CPU-sized: 2 x 2 x 2 phonon supercell (8 atoms), 12 q points, one H2O, the 4-atom cubic cell."""
        return replace(cls(supercell=2, band_points=12, water_molecules=1, elastic_repeat=1), **kw)

    @classmethod
    def full(cls, **kw) -> SecondOrderConfig:
        """GPU-sized: 4 x 4 x 4 supercell (64 atoms), 100 q points along GXWKGLUWLK, an 8-molecule water cluster
        (24 atoms), the cubic cell repeated 2 x 2 x 2 (32 atoms)."""
        return replace(cls(supercell=4, band_path="GXWKGLUWLK", band_points=100, water_molecules=8,
                           relax_steps=300, elastic_repeat=2), **kw)

    @classmethod
    def for_size(cls, size: str, **kw) -> SecondOrderConfig:
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
        return cls.quick(**kw) if size == "quick" else cls.full(**kw)


@dataclass(frozen=True)
class SecondOrderResult:
    """One second-order property of one potential and structure, for every method.

    Attributes:
        check: ``"phonons"``, ``"vibrations"`` or ``"elastic"``.
        unit: of the values (``cm^-1`` or ``GPa``); labels: what each value is (``"X b2"``: branch 2 at X).
        values: per method (``fp64``, ``fp32``, :data:`FLOOR`, the emulation methods) the values in FP64's order.
        ordered: whether the order of the values is a physical conclusion (mode frequencies), besides their signs.
        gamma_raw_cm1: phonons only: the Gamma frequencies without the acoustic sum rule, per method.
        times_s: wall time of each method's finite differences; coverage: share of float32 FLOPs emulated.
        info: numbers of the structure (``a_A``: the lattice constant; ``fmax_eV_per_A``: the FP64 relaxation's).
    """

    check: str
    potential: str
    system: str
    n_atoms: int
    unit: str
    labels: tuple[str, ...]
    values: dict[str, tuple[float, ...]]
    ordered: bool
    gamma_raw_cm1: dict[str, tuple[float, ...]] = field(default_factory=dict)
    times_s: dict[str, float] = field(default_factory=dict)
    coverage: dict[str, float] = field(default_factory=dict)
    info: dict[str, float] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        """Every method but the FP64 reference and the floor."""
        return [m for m in self.values if m not in ("fp64", FLOOR)]

    @property
    def n_branches(self) -> int:
        """Values per q point (phonons: labels ``"<q> b<i>"``, q-major); 1 for other properties."""
        if self.check != "phonons" or not self.labels:
            return 1
        q0 = self.labels[0].split(" b")[0]
        return next((i for i, lab in enumerate(self.labels) if lab.split(" b")[0] != q0), len(self.labels))

    def errors(self, method: str, reference: str = "fp64") -> np.ndarray:
        """|value(method) - value(reference)| for each value."""
        return np.abs(np.asarray(self.values[method]) - np.asarray(self.values[reference]))

    def max_error(self, method: str, reference: str = "fp64") -> float:
        return float(self.errors(method, reference).max()) if self.labels else math.nan

    def floor(self) -> float:
        """FP32's noise floor: the largest difference between FP32 with the atoms permuted and FP32."""
        return self.max_error(FLOOR, "fp32") if FLOOR in self.values else math.nan

    def imaginary(self, method: str, below: float = 0.0) -> int:
        """Number of imaginary modes, values below ``-below`` (frequencies only; elastic values have no modes)."""
        return int(sum(v < -below for v in self.values[method])) if self.unit == "cm^-1" else 0

    def to_rows(self) -> list[dict]:
        base = dict(check=self.check, potential=self.potential, system=self.system, n_atoms=self.n_atoms)
        rows = []
        for m, vs in self.values.items():
            rows += [row(**base, method=m, metric="value", unit=self.unit, value=v, x_name="mode", x_value=lab)
                     for lab, v in zip(self.labels, vs)]
            if m != "fp64":
                ref = "fp32" if m == FLOOR else "fp64"
                rows.append(row(**base, method=m, reference=ref, metric="max_err", unit=self.unit,
                                value=self.max_error(m, ref)))
        for m, vs in self.gamma_raw_cm1.items():
            rows += [row(**base, method=m, metric="gamma_no_asr", unit="cm^-1", value=v, x_name="branch", x_value=i)
                     for i, v in enumerate(vs)]
        rows += [row(**base, method=m, metric="wall_time", unit="s", value=t) for m, t in self.times_s.items()]
        rows += [row(**base, metric=k, value=v, unit=_info_unit(k)) for k, v in self.info.items()]
        return rows + coverage_rows(base, self.coverage)


def _info_unit(name: str) -> str:
    """The unit of a setup value, from its name's suffix (``a_A``, ``fmax_eV_per_A``; a strain is a ratio)."""
    for suffix, unit in (("_eV_per_A", "eV/A"), ("_A", "A")):
        if name.endswith(suffix):
            return unit
    return "1"


# ---------------------------------------------------------------------------------------------
# The floor's calculator, frequencies from force constants, mode matching
# ---------------------------------------------------------------------------------------------


def _permuted(calc, seed: int):
    """An ASE calculator that evaluates the atoms in a seeded order with ``calc`` and maps the forces back."""
    from ase.calculators.calculator import Calculator, all_changes

    class Permuted(Calculator):
        implemented_properties = ["energy", "free_energy", "forces", "stress"]

        def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
            super().calculate(atoms, properties, system_changes)
            order = np.random.default_rng(seed).permutation(len(self.atoms))
            a = self.atoms[order]
            a.calc = calc
            f = np.empty((len(order), 3))
            f[order] = a.get_forces()
            self.results = {"energy": a.get_potential_energy(), "forces": f}
            self.results["free_energy"] = self.results["energy"]
            if self.atoms.pbc.all():
                self.results["stress"] = a.get_stress()

    return Permuted()


def _to_cm1(eigenvalues_eV_per_A2_amu: np.ndarray) -> np.ndarray:
    """Frequencies in cm^-1 of eigenvalues of a mass-weighted force-constant matrix; negative: imaginary."""
    from ase import units

    lam = np.asarray(eigenvalues_eV_per_A2_amu, dtype=np.float64)
    hbar_omega_eV = units._hbar * 1e10 / math.sqrt(units._e * units._amu) * np.sqrt(np.abs(lam))
    return np.sign(lam) * hbar_omega_eV / units.invcm


def _match(u_ref: np.ndarray, u: np.ndarray) -> np.ndarray:
    """For each reference mode (column of ``u_ref``), the column of ``u`` it overlaps most (a permutation)."""
    from scipy.optimize import linear_sum_assignment

    _, cols = linear_sum_assignment(-np.abs(u_ref.conj().T @ u) ** 2)
    return cols


def _eig(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lam, u = np.linalg.eigh(matrix)
    return _to_cm1(lam), u


# ---------------------------------------------------------------------------------------------
# Structures
# ---------------------------------------------------------------------------------------------


def lattice_constant(potential, element: str = "Pt", a_guess_A: float = 3.92, device: str = "cpu") -> float:
    """The fcc lattice constant where FP64's pressure is zero (secant steps on the one-atom cell, to 1e-6 A,
    within 20 % of ``a_guess_A``)."""
    from ase.build import bulk

    calc = potential.calculator("fp64", device)

    def pressure(a: float) -> float:
        atoms = bulk(element, "fcc", a=a)
        atoms.calc = calc
        return -float(np.mean(atoms.get_stress()[:3]))

    lo, hi = 0.8 * a_guess_A, 1.2 * a_guess_A  # a model without a minimum there (random weights) stops at a bound
    a0, a1 = a_guess_A, a_guess_A * 1.01
    p0, p1 = pressure(a0), pressure(a1)
    for _ in range(20):
        if abs(a1 - a0) < 1e-6 or p1 == p0:
            break
        a0, a1, p0 = a1, min(hi, max(lo, a1 - p1 * (a1 - a0) / (p1 - p0))), p1
        p1 = pressure(a1)
    return float(a1)


def water(n_molecules: int = 1):
    """One H2O (ASE's geometry, in vacuum) or the ``n_molecules`` water-box molecules nearest its centre."""
    from ase.build import molecule

    from tcemu.mlip.systems import water_cluster

    if n_molecules == 1:
        atoms = molecule("H2O")
        atoms.center(vacuum=6.0)
        atoms.info = {"name": "water_3"}
        return atoms
    return water_cluster(n_molecules)


# ---------------------------------------------------------------------------------------------
# The three properties: each prepared once (in FP64), then measured with every method's calculator
# ---------------------------------------------------------------------------------------------


def _relaxed_water(potential, cfg: SecondOrderConfig, device: str):
    """Water relaxed with FP64 (BFGS), the geometry of the lowest fmax reached. PET is not rotation-invariant by
    construction, so a free molecule feels a small torque and the relaxation may stop above the target fmax."""
    from ase.optimize import BFGS

    atoms = water(cfg.water_molecules)
    potential.check_atoms(atoms)
    atoms.calc = potential.calculator("fp64", device)
    best = [math.inf, atoms.positions.copy()]

    def keep() -> None:
        fmax = float(np.linalg.norm(atoms.get_forces(), axis=1).max())
        if fmax < best[0]:
            best[:] = [fmax, atoms.positions.copy()]

    opt = BFGS(atoms, logfile=None)
    opt.attach(keep, interval=1)
    opt.run(fmax=cfg.relax_fmax_eV_per_A, steps=cfg.relax_steps)
    atoms.positions = best[1]
    atoms.calc = None
    return atoms, best[0]


def _phonon_modes(prim, path, cfg: SecondOrderConfig, calc):
    """(frequency, eigenvectors) at each q of ``path`` with the acoustic sum rule, and the Gamma frequencies
    without it."""
    from ase.phonons import Phonons

    n = cfg.supercell
    with tempfile.TemporaryDirectory() as tmp:
        ph = Phonons(prim, calc, supercell=(n, n, n), delta=cfg.displacement_A, name=str(Path(tmp) / "ph"))
        ph.run()
        ph.read(acoustic=False, symmetrize=0)
        raw = tuple(float(x) for x in _eig(ph.compute_dynamical_matrix(np.zeros(3), ph.D_N))[0])
        ph.read(acoustic=True)
        return [_eig(ph.compute_dynamical_matrix(q, ph.D_N)) for q in path.kpts], raw


def _vibration_modes(atoms, cfg: SecondOrderConfig, calc):
    """(frequencies, eigenvectors) of the mass-weighted Hessian from ASE's Vibrations."""
    from ase.vibrations import Vibrations

    a = atoms.copy()
    a.calc = calc
    with tempfile.TemporaryDirectory() as tmp:
        vib = Vibrations(a, delta=cfg.displacement_A, nfree=2, name=str(Path(tmp) / "vib"))
        vib.run()
        hessian = vib.get_vibrations().get_hessian_2d()
    weight = np.repeat(a.get_masses() ** -0.5, 3)
    return _eig(weight[:, None] * hessian * weight[None, :])


#: The elastic values: the constants, then the quantities whose sign is a conclusion (Born stability, Cauchy).
ELASTIC_LABELS = ("C11", "C12", "C44", "C11-C12", "C11+2C12", "C12-C44")


def _elastic_constants(cell, cfg: SecondOrderConfig, calc) -> tuple[float, ...]:
    """:data:`ELASTIC_LABELS` (GPa) from two stress evaluations, strain +-e of e_xx = e and the engineering shear
    e_yz: by cubic symmetry sigma_xx = C11 e, sigma_yy = sigma_zz = C12 e, sigma_yz = C44 e at first order, and
    the central difference removes the second (an fcc crystal has no internal relaxation under these strains)."""
    from ase import units

    e = cfg.strain
    eps = np.zeros((3, 3))
    eps[0, 0], eps[1, 2], eps[2, 1] = e, e / 2, e / 2
    s = {}
    for sign in (1, -1):
        strained = cell.copy()
        strained.set_cell(cell.cell.array @ (np.eye(3) + sign * eps), scale_atoms=True)
        strained.calc = calc
        s[sign] = strained.get_stress() / units.GPa  # Voigt xx yy zz yz xz xy
    d = (s[1] - s[-1]) / (2 * e)
    c11, c12, c44 = d[0], (d[1] + d[2]) / 2, d[3]
    return tuple(float(x) for x in (c11, c12, c44, c11 - c12, c11 + 2 * c12, c12 - c44))


def _q_names(path) -> list[str]:
    """Each q point's name: the special point it is (G for Gamma), or q<index>."""
    names = []
    for k, q in enumerate(path.kpts):
        hit = [n for n, s in path.special_points.items() if n in path.path and np.allclose(q, s, atol=1e-9)]
        names.append(hit[0] if hit else f"q{k}")
    return names


def second_order(potential, methods=("tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"),
                 config: SecondOrderConfig | str = "quick", device: str = "cpu",
                 show_progress: bool = True) -> tuple[SecondOrderResult, ...]:
    """Check 5: the properties of ``config`` (a :class:`SecondOrderConfig` or ``"quick"`` / ``"full"``), each
    method's calculator built once for all of them."""
    from ase.build import bulk

    cfg = SecondOrderConfig.for_size(config) if isinstance(config, str) else config
    unknown = set(cfg.properties) - {"phonons", "vibrations", "elastic"}
    if unknown:
        raise ValueError(f"unknown properties {sorted(unknown)}; choose from phonons, vibrations, elastic")
    props = cfg.properties
    a = lattice_constant(potential, cfg.element, cfg.a_guess_A, device) if {"phonons", "elastic"} & set(props) else 0
    prim = bulk(cfg.element, "fcc", a=a) if a else None
    cell = bulk(cfg.element, "fcc", a=a, cubic=True).repeat(cfg.elastic_repeat) if a else None
    path = prim.cell.bandpath(cfg.band_path, npoints=cfg.band_points) if a else None
    mol, fmax = _relaxed_water(potential, cfg, device) if "vibrations" in props else (None, math.nan)
    for structure in (prim, mol):
        if structure is not None:
            potential.check_atoms(structure)
    measured: dict[str, dict] = {p: {} for p in props}
    raw, times, coverage = {}, {p: {} for p in props}, {}
    for m in progress(with_reference(methods) + [FLOOR], f"second order {potential.name}", show_progress):
        inner = potential.calculator("fp32" if m == FLOOR else m, device)
        calc = _permuted(inner, cfg.seed) if m == FLOOR else inner
        for p in props:
            t0 = time.perf_counter()
            if p == "phonons":
                measured[p][m], raw[m] = _phonon_modes(prim, path, cfg, calc)
            elif p == "vibrations":
                measured[p][m] = _vibration_modes(mol, cfg, calc)
            else:
                measured[p][m] = _elastic_constants(cell, cfg, calc)
            times[p][m] = time.perf_counter() - t0
        if m != FLOOR:
            coverage[m] = coverage_of(inner)
    out = []
    for p in props:
        if p == "phonons":
            ref = measured[p]["fp64"]
            values = {m: tuple(float(x) for (w, u), (_, u64) in zip(modes, ref) for x in w[_match(u64, u)])
                      for m, modes in measured[p].items()}
            names, n = _q_names(path), cfg.supercell
            labels = tuple(f"{names[k]} b{i}" for k in range(len(path.kpts)) for i in range(3 * len(prim)))
            size = n ** 3 * len(prim)
            out.append(SecondOrderResult(p, potential.name, f"{cfg.element.lower()}_fcc_{size}", size, "cm^-1",
                                         labels, values, True, raw, times[p], coverage,
                                         {"a_A": a, "displacement_A": cfg.displacement_A}))
        elif p == "vibrations":
            w64, u64 = measured[p]["fp64"]
            # FP64's 3N - 6 modes of largest |frequency|: the other six move the molecules rigidly
            keep = np.sort(np.argsort(np.abs(w64))[6:])
            values = {m: tuple(float(x) for x in w[_match(u64[:, keep], u)]) for m, (w, u) in measured[p].items()}
            labels = tuple(f"mode {i}" for i in range(len(keep)))
            out.append(SecondOrderResult(p, potential.name, mol.info["name"], len(mol), "cm^-1", labels, values,
                                         True, {}, times[p], coverage,
                                         {"fmax_eV_per_A": fmax, "displacement_A": cfg.displacement_A}))
        else:
            out.append(SecondOrderResult(p, potential.name, f"{cfg.element.lower()}_fcc_{len(cell)}", len(cell),
                                         "GPa", ELASTIC_LABELS, dict(measured[p]), False, {}, times[p], coverage,
                                         {"a_A": a, "strain": cfg.strain}))
    return tuple(out)


def phonons(potential, methods=("tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"),
            config: SecondOrderConfig | None = None, device: str = "cpu",
            show_progress: bool = True) -> SecondOrderResult:
    """Phonons of the fcc crystal: frequencies (cm^-1) along ``config.band_path`` (Gamma first) per method."""
    cfg = replace(config or SecondOrderConfig.quick(), properties=("phonons",))
    return second_order(potential, methods, cfg, device, show_progress)[0]


def vibrations(potential, methods=("tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"),
               config: SecondOrderConfig | None = None, device: str = "cpu",
               show_progress: bool = True) -> SecondOrderResult:
    """Vibrations of water relaxed in FP64: the 3N - 6 frequencies (cm^-1) per method, in FP64's modes' order."""
    cfg = replace(config or SecondOrderConfig.quick(), properties=("vibrations",))
    return second_order(potential, methods, cfg, device, show_progress)[0]


def elastic(potential, methods=("tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"),
            config: SecondOrderConfig | None = None, device: str = "cpu",
            show_progress: bool = True) -> SecondOrderResult:
    """C11, C12, C44 (GPa) of the cubic cell at FP64's zero-pressure lattice constant, and the quantities whose
    sign is a conclusion (:data:`ELASTIC_LABELS`)."""
    cfg = replace(config or SecondOrderConfig.quick(), properties=("elastic",))
    return second_order(potential, methods, cfg, device, show_progress)[0]
