"""Our PyTorch FIRE2 (ALCHEMI update and defaults): hand-checked steps, ASE's FIRE2 as an oracle, and
ALCHEMI's own kernel (nvalchemiops, Warp on the CPU) where it is installed."""

import numpy as np
import pytest
import torch

from tcemu.mlip.fire2 import FIRE2, FIRE2Params, FIRE2State, fire2_step

P = FIRE2Params()


def test_defaults_are_alchemis():
    assert (P.delaystep, P.dtgrow, P.dtshrink, P.alphashrink, P.alpha0, P.tmax, P.tmin, P.maxstep) == (
        60,
        1.05,
        0.75,
        0.985,
        0.09,
        0.08,
        0.005,
        0.1,
    )
    with pytest.raises(ValueError, match="tmin"):
        FIRE2Params(tmin=0.1, tmax=0.05)


def test_first_step_from_rest_is_steepest_descent():
    # v = 0: v_half = dt F, P > 0, alpha and dt unchanged (n_inc = 1 <= delaystep),
    # v = (1 - a) dt F + a |dt F| / |F| F = dt F, dr = dt^2 F.
    r = torch.zeros(2, 3, dtype=torch.float64)
    v = torch.zeros_like(r)
    f = torch.tensor([[0.3, 0.0, 0.0], [0.0, -0.4, 0.1]], dtype=torch.float64)
    s = FIRE2State(dt=0.05, alpha=P.alpha0)
    fire2_step(r, v, f, s, P)
    assert torch.allclose(v, 0.05 * f) and torch.allclose(r, 0.05**2 * f)
    assert (s.dt, s.alpha, s.n_inc) == (0.05, P.alpha0, 1)


def test_uphill_step_backs_off_and_stops():
    # v against F: P <= 0 -> dt *= dtshrink, alpha = alpha0, dr = -dt_new v_mix / 2, v = 0.
    f = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[-2.0, 0.0, 0.0]], dtype=torch.float64)
    r = torch.zeros_like(v)
    s = FIRE2State(dt=0.04, alpha=0.05, n_inc=7)
    v_half = v + 0.04 * f
    v_mix = (1 - P.alpha0) * v_half + P.alpha0 * v_half.norm() / f.norm() * f
    fire2_step(r, v, f, s, P)
    assert s.n_inc == 0 and s.alpha == P.alpha0 and s.dt == pytest.approx(0.03)
    assert torch.allclose(r, -0.5 * 0.03 * v_mix)
    assert torch.count_nonzero(v) == 0


def test_large_step_is_clamped_and_dt_scaled():
    f = torch.tensor([[100.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    r = torch.zeros_like(f)
    v = torch.tensor([[50.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    s = FIRE2State(dt=0.08, alpha=P.alpha0)
    fire2_step(r, v, f, s, P)
    assert torch.linalg.vector_norm(r, dim=1).max().item() == pytest.approx(P.maxstep)
    assert s.dt < 0.08


def _pt_co(seed=1):
    from ase.build import add_adsorbate, fcc111, molecule
    from ase.calculators.emt import EMT

    slab = fcc111("Pt", (2, 2, 3), vacuum=6.0)
    add_adsorbate(slab, molecule("CO"), 1.9, "ontop", mol_index=1)
    slab.rattle(0.05, seed=seed)
    slab.calc = EMT()
    return slab


def test_matches_ase_fire2_minimum():
    """Different algorithms (ASE's FIRE2 has other defaults), same minimum: energies and geometry agree."""
    from ase.optimize import FIRE2 as AseFIRE2

    a, b = _pt_co(), _pt_co()
    ours = FIRE2(a, logfile=None)
    assert ours.run(fmax=1e-3, steps=1000)
    assert AseFIRE2(b, logfile=None).run(fmax=1e-3, steps=1000)
    assert a.get_potential_energy() == pytest.approx(b.get_potential_energy(), abs=2e-6)
    assert np.abs(a.positions - b.positions).max() < 5e-3
    assert np.linalg.norm(a.get_forces(), axis=1).max() < 1e-3
    assert 50 < ours.get_number_of_steps() < 1000


def _well_forces(r: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Forces of independent anharmonic wells, one per row: E = sum_d k_d x_d^2 / 2 + x_d^4 / 4 + x_0 x_1."""
    f = -(k * r + r**3)
    f[:, 0] -= r[:, 1]
    f[:, 1] -= r[:, 0]
    return f


def test_against_alchemi_kernel_on_cpu():
    """Step for step against nvalchemiops' ``fire2_step_coord`` (the kernel behind nvalchemi.dynamics.FIRE2).

    Each system is one particle in its own anharmonic well (a system per row of ``batch_idx``): on the
    CPU, Warp runs the kernel's threads one after another and a thread that is not a system's first
    re-applies the per-system dt/alpha update already written by the first, so systems spanning
    several threads drift apart from the documented update; one-particle systems avoid that race.
    """
    f2 = pytest.importorskip("nvalchemiops.torch.fire2", reason="nvalchemi-toolkit-ops (Warp) not installed")
    g = torch.Generator().manual_seed(0)
    n = 16
    k = 0.2 + 3.0 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    r0 = 2.0 * torch.rand(n, 3, generator=g, dtype=torch.float64) - 1.0
    r_al, v_al = r0.clone(), torch.zeros_like(r0)
    batch = torch.arange(n, dtype=torch.int32)
    alpha = torch.full((n,), P.alpha0, dtype=torch.float64)
    dt = torch.full((n,), 0.05, dtype=torch.float64)
    n_inc = torch.zeros(n, dtype=torch.int32)
    ours = [
        (r0[i : i + 1].clone(), torch.zeros(1, 3, dtype=torch.float64), FIRE2State(0.05, P.alpha0))
        for i in range(n)
    ]
    uphill = 0
    for _ in range(300):
        f2.fire2_step_coord(r_al, v_al, _well_forces(r_al, k), batch, alpha, dt, n_inc)
        for i, (r, v, st) in enumerate(ours):
            before = st.n_inc
            fire2_step(r, v, _well_forces(r, k[i : i + 1]), st, P)
            uphill += before > 0 and st.n_inc == 0
        assert torch.allclose(torch.cat([o[0] for o in ours]), r_al, atol=1e-12, rtol=1e-12)
        assert torch.allclose(torch.cat([o[1] for o in ours]), v_al, atol=1e-12, rtol=1e-12)
        assert torch.allclose(torch.tensor([o[2].dt for o in ours], dtype=torch.float64), dt, rtol=1e-12)
        assert torch.allclose(
            torch.tensor([o[2].alpha for o in ours], dtype=torch.float64), alpha, rtol=1e-12
        )
    assert uphill > 0  # the uphill branch was exercised
    assert (dt > 0.05).any()  # and dt grew past delaystep


class _Well:
    """An ASE calculator: one anharmonic well per atom, E = sum k x^2 / 2 + x^4 / 4 (no coupling)."""

    def __new__(cls, k):
        from ase.calculators.calculator import Calculator, all_changes

        class Well(Calculator):
            implemented_properties = ["energy", "forces"]

            def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
                super().calculate(atoms, properties, system_changes)
                x = self.atoms.positions
                self.results = {"energy": float((0.5 * k * x**2 + 0.25 * x**4).sum()), "forces": -(k * x + x**3)}

        return Well()


def test_alchemi_fire2_optimizer_follows_ours_on_one_atom():
    """The ASE wrapper of ALCHEMI's kernel: one atom (one Warp thread, no CPU race) takes our FIRE2's steps."""
    pytest.importorskip("nvalchemiops.torch.fire2", reason="nvalchemi-toolkit-ops (Warp) not installed")
    from ase import Atoms

    from tcemu.mlip.fire2 import AlchemiFIRE2

    k = np.array([[0.3, 1.7, 2.9]])
    runs = []
    for opt_cls in (FIRE2, AlchemiFIRE2):
        a = Atoms("H", positions=[[0.9, -0.7, 0.4]])
        a.calc = _Well(k)
        opt = opt_cls(a, logfile=None)
        trace = []
        opt.attach(lambda a=a, t=trace: t.append(a.positions.copy()), interval=1)
        opt.run(fmax=1e-6, steps=150)
        runs.append((np.array(trace), opt.state.dt, opt.state.alpha, opt.get_number_of_steps()))
    (p0, dt0, al0, n0), (p1, dt1, al1, n1) = runs
    assert n0 == n1 and p0.shape == p1.shape
    np.testing.assert_allclose(p1, p0, rtol=0, atol=1e-12)
    assert dt1 == pytest.approx(dt0, rel=1e-12) and al1 == pytest.approx(al0, rel=1e-12)
