"""Hand-made check results for the verdict and plot tests (no model runs)."""

import numpy as np

from tcemu.mlip.tasks.nve import NVECheckResult, NVEResult, fit_drift
from tcemu.mlip.tasks.relax import RelaxCheckResult, RelaxResult


def nve_run(method, t_ps, etot_eV, n_atoms=24, dt=0.5):
    t, e = np.asarray(t_ps), np.asarray(etot_eV)
    drift, fluct, maxdev = fit_drift(t, e, n_atoms)
    steps = round(float(t[-1]) * 1e3 / dt)
    return NVEResult(method, n_atoms, dt, steps, tuple(t), tuple(e), tuple(e), tuple(0 * t), drift, fluct, maxdev,
                     1.0, True)


def nve_check(t_ps, energies):
    """A check from per-method total energies (eV) at times ``t_ps``."""
    return NVECheckResult("ani1x", "water_cluster_24", 24, {m: nve_run(m, t_ps, e) for m, e in energies.items()})


def relax_run(method, steps, converged=True, limit=300):
    fmin = 9.9e-4 if converged else 3e-3
    return RelaxResult(method, "fire2", 1e-3, limit, steps, converged, fmin, fmin, -1.0, (0.1, fmin), 1.0)


def relax_check(steps: dict, converged: dict | None = None):
    converged = converged or {}
    return RelaxCheckResult("ani1x", "water_cluster_3", 3,
                            {m: (relax_run(m, s, converged.get(m, True)),) for m, s in steps.items()})
