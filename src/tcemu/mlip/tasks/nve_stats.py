"""NVE statistics: the total energy's drift with a confidence interval, and whether two drifts differ.

A least-squares slope through every recorded energy has a standard error that assumes independent residuals;
the total energy of velocity Verlet is not: it oscillates with the fastest bond (about 9 fs for O-H) and wanders
on longer times, so the naive error is too small by the square root of the correlation time in samples. Here the
series is cut into ``n_blocks`` contiguous blocks of equal length, and the line is fitted to the block means
(block time, block energy). Blocks much longer than the correlation time have nearly independent means, so the
scatter of the block means about the line gives an honest standard error, with a Student t interval on
``n_blocks - 2`` degrees of freedom (Flyvbjerg and Petersen 1989 for the block idea). The lag-1
autocorrelation of the block residuals is reported beside it: near 0 the blocks are independent; close to 1
(a random walk, or a trend that is not a line) the interval is too narrow, and :attr:`DriftEstimate.blocks_independent`
says so.

Two drifts are compared by their difference and its interval (Welch's degrees of freedom). Runs of different
methods from the same start stay correlated while their trajectories agree; treating them as independent, as
here, widens the interval of the difference, so "differs" is a conservative statement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DriftComparison",
    "DriftEstimate",
    "MIN_BLOCKS",
    "compare_drifts",
    "drift_estimate",
    "drift_table",
]

#: fewest blocks a drift is estimated from (a line through 3 points leaves 1 degree of freedom)
MIN_BLOCKS = 4
#: lag-1 autocorrelation of the block residuals above which the blocks are not taken as independent. For
#: independent blocks its estimate has a spread of about 1/sqrt(n_blocks) (0.22 with 20 blocks)
BLOCK_CORRELATION_LIMIT = 0.5


def _t_quantile(confidence: float, dof: float) -> float:
    from scipy.stats import t as student_t

    return float(student_t.ppf(0.5 + confidence / 2, dof))


@dataclass(frozen=True)
class DriftEstimate:
    """A drift of the total energy per atom and its confidence interval.

    Attributes:
        drift_meV_per_atom_per_ps: slope of the line through the block means.
        stderr_meV_per_atom_per_ps: its standard error from the block means' scatter about the line.
        ci_low, ci_high: the ``confidence`` interval (Student t, ``n_blocks - 2`` degrees of freedom).
        fluct_meV_per_atom: RMS of every sample about the line (the fluctuation).
        n_blocks, samples_per_block: how the series was cut.
        block_lag1: lag-1 autocorrelation of the block residuals (near 0: independent blocks).
        duration_ps: time from the first to the last sample.
    """

    drift_meV_per_atom_per_ps: float
    stderr_meV_per_atom_per_ps: float
    ci_low: float
    ci_high: float
    confidence: float
    fluct_meV_per_atom: float
    n_blocks: int
    samples_per_block: int
    block_lag1: float
    duration_ps: float

    @property
    def dof(self) -> int:
        return self.n_blocks - 2

    @property
    def blocks_independent(self) -> bool:
        """Whether the block residuals look uncorrelated, so that the interval can be trusted."""
        return not (self.block_lag1 > BLOCK_CORRELATION_LIMIT)

    def covers(self, value: float) -> bool:
        return self.ci_low <= value <= self.ci_high

    def text(self) -> str:
        return (f"{self.drift_meV_per_atom_per_ps:+.4g} meV/atom/ps ({100 * self.confidence:.0f} % CI "
                f"{self.ci_low:+.3g} to {self.ci_high:+.3g})")


def drift_estimate(time_ps, etot_eV, n_atoms: int, n_blocks: int = 20, confidence: float = 0.95) -> DriftEstimate:
    """The drift of ``etot_eV`` (eV, total) along ``time_ps`` (ps) per atom, with its ``confidence`` interval.

    The series is cut into ``n_blocks`` blocks of equal sample count (the last samples that do not fill a block
    are left out of the blocks, not of the fluctuation); fewer blocks when the series is short, at least
    :data:`MIN_BLOCKS` of at least 2 samples each, else ``ValueError``.
    """
    t = np.asarray(time_ps, dtype=np.float64)
    e = 1e3 * np.asarray(etot_eV, dtype=np.float64) / n_atoms
    if t.shape != e.shape or t.ndim != 1:
        raise ValueError(f"tcemu: time and energy must be 1-D series of one length, got {t.shape} and {e.shape}")
    if not (0 < confidence < 1):
        raise ValueError(f"tcemu: confidence must be in (0, 1), got {confidence}")
    n_blocks = min(int(n_blocks), t.size // 2)
    if n_blocks < MIN_BLOCKS:
        raise ValueError(f"tcemu: a drift with an interval needs at least {2 * MIN_BLOCKS} samples "
                         f"({MIN_BLOCKS} blocks of 2), got {t.size}; record the energy more often or run longer")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(e))):
        raise ValueError("tcemu: the energy series has non-finite values (the run blew up); no drift to estimate")
    per = t.size // n_blocks
    tb = t[: per * n_blocks].reshape(n_blocks, per).mean(axis=1)
    eb = e[: per * n_blocks].reshape(n_blocks, per).mean(axis=1)
    tc = tb - tb.mean()
    sxx = float(np.sum(tc**2))
    if sxx <= 0:
        raise ValueError("tcemu: the time series does not advance; no drift to estimate")
    slope = float(np.sum(tc * (eb - eb.mean())) / sxx)
    resid_b = eb - (eb.mean() + slope * tc)
    dof = n_blocks - 2
    stderr = math.sqrt(float(np.sum(resid_b**2)) / dof / sxx)
    half = _t_quantile(confidence, dof) * stderr
    denom = float(np.sum(resid_b**2))
    lag1 = float(np.sum(resid_b[1:] * resid_b[:-1]) / denom) if denom > 0 else 0.0
    intercept = eb.mean() - slope * tb.mean()
    fluct = float(np.sqrt(np.mean((e - (intercept + slope * t)) ** 2)))
    return DriftEstimate(slope, stderr, slope - half, slope + half, confidence, fluct, n_blocks, per, lag1,
                         float(t[-1] - t[0]))


@dataclass(frozen=True)
class DriftComparison:
    """The difference of two drifts (``a - b``) and its interval; ``differs`` when the interval excludes 0."""

    a: str
    b: str
    difference: float
    stderr: float
    ci_low: float
    ci_high: float
    dof: float

    @property
    def differs(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0

    @property
    def verdict(self) -> str:
        return "differs" if self.differs else "cannot tell apart"


def compare_drifts(a: DriftEstimate, b: DriftEstimate, name_a: str = "a", name_b: str = "b") -> DriftComparison:
    """Whether drift ``a`` differs from drift ``b`` beyond their intervals (at ``a``'s confidence).

    The standard error of the difference adds both variances (independent runs); the degrees of freedom are
    Welch-Satterthwaite's.
    """
    va, vb = a.stderr_meV_per_atom_per_ps**2, b.stderr_meV_per_atom_per_ps**2
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / a.dof + vb**2 / b.dof) if va + vb > 0 else float(min(a.dof, b.dof))
    d = a.drift_meV_per_atom_per_ps - b.drift_meV_per_atom_per_ps
    half = _t_quantile(a.confidence, dof) * se
    return DriftComparison(name_a, name_b, d, se, d - half, d + half, dof)


def drift_table(series: dict[str, tuple], n_atoms: int, references: tuple[str, ...] = ("fp64", "fp32"),
                n_blocks: int = 20, confidence: float = 0.95) -> list[dict]:
    """One row per method of ``series`` (method -> (time_ps, etot_eV)): its drift, interval, fluctuation, and
    against each reference present the difference, its interval and ``differs`` / ``cannot tell apart``.

    All series are cut to the shortest one's duration first, so that the methods are compared over one time.
    """
    t_end = min(float(np.asarray(t)[-1]) for t, _ in series.values())
    est = {}
    for m, (t, e) in series.items():
        t = np.asarray(t, dtype=np.float64)
        keep = t <= t_end + 1e-12
        est[m] = drift_estimate(t[keep], np.asarray(e)[keep], n_atoms, n_blocks, confidence)
    rows = []
    for m, d in est.items():
        r = {"method": m, "duration_ps": d.duration_ps, "drift_meV_per_atom_per_ps": d.drift_meV_per_atom_per_ps,
             "stderr": d.stderr_meV_per_atom_per_ps, "ci_low": d.ci_low, "ci_high": d.ci_high,
             "fluct_meV_per_atom": d.fluct_meV_per_atom, "n_blocks": d.n_blocks, "block_lag1": d.block_lag1,
             "blocks_independent": d.blocks_independent}
        for ref in references:
            if ref in est and ref != m:
                c = compare_drifts(d, est[ref], m, ref)
                r[f"vs_{ref}_difference"] = c.difference
                r[f"vs_{ref}_ci_low"] = c.ci_low
                r[f"vs_{ref}_ci_high"] = c.ci_high
                r[f"vs_{ref}"] = c.verdict
        rows.append(r)
    return rows
