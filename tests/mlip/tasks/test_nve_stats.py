"""The drift estimator on synthetic energy series with a known drift: its interval covers the truth at its
confidence, tells a real drift difference apart, and says "cannot tell apart" when there is none."""

import numpy as np
import pytest

from tcemu.mlip.tasks.nve_stats import compare_drifts, drift_estimate, drift_table

N_ATOMS = 192
N_SAMPLES = 2000  # 10 ps recorded every 5 fs
TIME_PS = np.linspace(0.0, 10.0, N_SAMPLES)


def _series(drift_meV_per_atom_per_ps: float, seed: int, sigma_meV: float = 0.05, phi: float = 0.9):
    """Total energy (eV) of 192 atoms: a line plus correlated noise (AR(1), correlation time about 10 samples,
    stationary RMS ``sigma_meV`` per atom) plus an oscillation, as Verlet's energy has."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=N_SAMPLES) * sigma_meV * np.sqrt(1 - phi**2)
    ar = np.empty(N_SAMPLES)
    ar[0] = rng.normal() * sigma_meV
    for i in range(1, N_SAMPLES):
        ar[i] = phi * ar[i - 1] + w[i]
    osc = 0.03 * np.sin(2 * np.pi * TIME_PS / 0.009 + rng.uniform(0, 2 * np.pi))
    e_meV = drift_meV_per_atom_per_ps * TIME_PS + ar + osc
    return -1000.0 + 1e-3 * e_meV * N_ATOMS


def test_exact_line_has_zero_error():
    est = drift_estimate(TIME_PS, 1e-3 * 0.25 * TIME_PS * N_ATOMS, N_ATOMS)
    assert est.drift_meV_per_atom_per_ps == pytest.approx(0.25, rel=1e-12)
    assert est.stderr_meV_per_atom_per_ps == pytest.approx(0.0, abs=1e-12)
    assert est.fluct_meV_per_atom == pytest.approx(0.0, abs=1e-12)
    assert est.n_blocks == 20 and est.samples_per_block == 100 and est.dof == 18


def test_interval_covers_the_true_drift_at_its_confidence():
    truth = 0.1
    covered = [drift_estimate(TIME_PS, _series(truth, seed), N_ATOMS).covers(truth) for seed in range(300)]
    # 95 % intervals: the binomial spread of 300 trials is 1.3 %; a naive per-sample OLS interval (correlated
    # residuals taken as independent) covers far less often
    assert 0.91 <= np.mean(covered) <= 0.99


def test_naive_interval_would_not_cover():
    """What the blocks correct: the per-sample least-squares error is several times too small here."""
    ests = [drift_estimate(TIME_PS, _series(0.1, seed), N_ATOMS) for seed in range(40)]
    spread = np.std([e.drift_meV_per_atom_per_ps for e in ests])
    naive = []
    for seed in range(40):
        e = 1e3 * _series(0.1, seed) / N_ATOMS
        coef, res, *_ = np.polyfit(TIME_PS, e, 1, full=True)
        naive.append(np.sqrt(res[0] / (N_SAMPLES - 2) / np.sum((TIME_PS - TIME_PS.mean()) ** 2)))
    block = np.mean([e.stderr_meV_per_atom_per_ps for e in ests])
    assert np.mean(naive) < 0.5 * spread  # naive: too small
    assert 0.6 * spread < block < 1.6 * spread  # blocks: the real spread of the estimate


def test_a_real_difference_is_told_apart():
    covered = []
    for seed in range(40):
        a = drift_estimate(TIME_PS, _series(0.0, 2 * seed), N_ATOMS)
        b = drift_estimate(TIME_PS, _series(0.015, 2 * seed + 1), N_ATOMS)  # about 6 standard errors apart
        c = compare_drifts(b, a, "tf32", "fp32")
        assert c.verdict == "differs"
        covered.append(c.ci_low <= 0.015 <= c.ci_high)
    assert np.mean(covered) >= 0.85  # the difference's own 95 % interval covers the true difference


def test_equal_drifts_cannot_be_told_apart():
    verdicts = [compare_drifts(drift_estimate(TIME_PS, _series(0.02, 2 * s), N_ATOMS),
                               drift_estimate(TIME_PS, _series(0.02, 2 * s + 1), N_ATOMS)).verdict
                for s in range(150)]
    assert np.mean([v == "cannot tell apart" for v in verdicts]) >= 0.9


def test_random_walk_is_flagged():
    rng = np.random.default_rng(0)
    walk = np.cumsum(rng.normal(size=N_SAMPLES)) * 1e-3 * 0.02 * N_ATOMS
    assert not drift_estimate(TIME_PS, walk, N_ATOMS).blocks_independent
    assert drift_estimate(TIME_PS, _series(0.1, 0), N_ATOMS).blocks_independent


def test_table_cuts_to_the_shortest_run_and_compares():
    series = {"fp64": (TIME_PS, _series(0.0, 1)), "fp32": (TIME_PS, _series(0.0, 2)),
              "tf32": (TIME_PS[:1000], _series(0.3, 3)[:1000])}
    rows = {r["method"]: r for r in drift_table(series, N_ATOMS)}
    assert all(r["duration_ps"] == pytest.approx(TIME_PS[999]) for r in rows.values())
    assert rows["tf32"]["vs_fp64"] == rows["tf32"]["vs_fp32"] == "differs"
    assert "vs_fp64" not in rows["fp64"] and rows["fp32"]["vs_fp64"] in ("differs", "cannot tell apart")


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="tcemu: a drift with an interval needs"):
        drift_estimate(TIME_PS[:5], np.zeros(5), N_ATOMS)
    with pytest.raises(ValueError, match="non-finite"):
        drift_estimate(TIME_PS, np.full(N_SAMPLES, np.nan), N_ATOMS)
    with pytest.raises(ValueError, match="one length"):
        drift_estimate(TIME_PS, np.zeros(3), N_ATOMS)
