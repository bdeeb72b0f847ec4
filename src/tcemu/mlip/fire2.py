"""FIRE2 geometry optimisation in PyTorch, with the update and defaults of the NVIDIA ALCHEMI Toolkit.

Why our own: ALCHEMI's ``nvalchemi.dynamics.FIRE2`` runs Warp kernels (``nvalchemiops.torch.fire2``),
and warp-lang is too large to carry to the GPU machine; the update is a few lines of tensor algebra.
This module implements the update as ALCHEMI documents it (Guénolé et al. 2020, Comput. Mater. Sci.
175, 109584, with the leapfrog half-step folded into the power), unit masses, per system:

1. ``v_half = v + dt * F`` (not stored; dt is the current timestep)
2. power ``P = v_half . F``, ``vv = v_half . v_half``, ``ff = F . F`` (sums over the system's atoms)
3. ``P > 0``: ``n_inc += 1``, and once ``n_inc > delaystep``: ``dt = min(dtgrow dt, tmax)``,
   ``alpha *= alphashrink``. ``P <= 0``: ``n_inc = 0``, ``alpha = alpha0``, ``dt = max(dtshrink dt, tmin)``.
4. mixing with the *new* alpha: ``v = (1 - alpha) v_half + alpha sqrt(vv / ff) F``
5. step ``dr = dt v`` with the *new* dt; uphill (``P <= 0``): ``dr = -dt v / 2`` and then ``v = 0``
6. clamp: ``s = min(1, maxstep / max_i |dr_i|)``; ``r += s dr``; ``dt *= s``.

Defaults (ALCHEMI's): delaystep 60, dtgrow 1.05, dtshrink 0.75, alphashrink 0.985, alpha0 0.09,
tmax 0.08, tmin 0.005, maxstep 0.1 (Angstrom). ALCHEMI requires ``dt``; we default it to
``tmax / 2`` = 0.04 and say so. These differ from ASE's FIRE2 (dt 0.1, Nmin 20, finc 1.1,
fdec 0.5, astart 0.25, fa 0.99, maxstep 0.2), so step counts differ between the two (docs/mlip.md, "FIRE2").

:class:`FIRE2` wraps the step as an ASE optimizer (``run(fmax, steps)``, ``attach``), so the
relaxation task can use it and ``ase.optimize.FIRE2`` interchangeably.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["AlchemiFIRE2", "FIRE2", "FIRE2Params", "FIRE2State", "fire2_step"]


@dataclass(frozen=True)
class FIRE2Params:
    """FIRE2 hyperparameters, ALCHEMI defaults (``nvalchemi.dynamics.FIRE2``)."""

    delaystep: int = 60  # steps of positive power before dt may grow
    dtgrow: float = 1.05  # dt growth factor
    dtshrink: float = 0.75  # dt shrink factor on an uphill step
    alphashrink: float = 0.985  # alpha decay factor
    alpha0: float = 0.09  # initial (and reset) mixing parameter
    tmax: float = 0.08  # largest dt
    tmin: float = 0.005  # smallest dt
    maxstep: float = 0.1  # largest displacement of any atom per step (Angstrom)

    def __post_init__(self) -> None:
        if not (0 < self.tmin <= self.tmax):
            raise ValueError(f"need 0 < tmin <= tmax, got tmin={self.tmin}, tmax={self.tmax}")
        if not (0 < self.alpha0 < 1):
            raise ValueError(f"alpha0 must be in (0, 1), got {self.alpha0}")
        if self.maxstep <= 0:
            raise ValueError(f"maxstep must be positive, got {self.maxstep}")


@dataclass
class FIRE2State:
    """The mutable per-system state: timestep, mixing parameter, count of consecutive downhill steps."""

    dt: float
    alpha: float
    n_inc: int = 0


def fire2_step(
    positions: Tensor, velocities: Tensor, forces: Tensor, state: FIRE2State, params: FIRE2Params
) -> None:
    """One FIRE2 step for one system, in place on ``positions`` and ``velocities`` (N, 3); unit masses.

    ``forces`` (N, 3) are evaluated at ``positions``. ``state`` is updated in place.
    """
    dt_old = state.dt
    v_half = velocities + dt_old * forces
    power = float((v_half * forces).sum())
    vv = float((v_half * v_half).sum())
    ff = float((forces * forces).sum())
    p = params
    if power > 0.0:
        state.n_inc += 1
        if state.n_inc > p.delaystep:
            state.dt = min(p.dtgrow * state.dt, p.tmax)
            state.alpha = p.alphashrink * state.alpha
    else:
        state.n_inc = 0
        state.alpha = p.alpha0
        state.dt = max(p.dtshrink * state.dt, p.tmin)
    ratio = (vv / ff) ** 0.5 if ff > 0.0 else 0.0
    velocities.copy_((1.0 - state.alpha) * v_half + (state.alpha * ratio) * forces)
    if power > 0.0:
        step = state.dt * velocities
    else:
        step = -0.5 * state.dt * velocities
        velocities.zero_()
    max_norm = float(torch.linalg.vector_norm(step, dim=-1).max()) if len(step) else 0.0
    scale = min(1.0, p.maxstep / max_norm) if max_norm > 0.0 else 1.0
    positions.add_(scale * step)
    state.dt = state.dt * scale


try:
    from ase.optimize.optimize import Optimizer as _Optimizer
except ImportError:  # pragma: no cover
    _Optimizer = object  # type: ignore[assignment,misc]


class FIRE2(_Optimizer):
    """FIRE2 (ALCHEMI update and defaults, unit masses) as an ASE optimizer: ``FIRE2(atoms).run(fmax, steps)``.

    Positions and velocities are kept as float64 torch tensors on the CPU; forces come from the
    atoms' calculator. Constraints are honoured through ASE's ``set_positions``/``get_forces``.
    """

    def __init__(
        self,
        atoms,
        restart: str | None = None,
        logfile: str | None = None,
        trajectory: str | None = None,
        dt: float | None = None,
        params: FIRE2Params | None = None,
        **kwargs,
    ) -> None:
        self.params = params or FIRE2Params(
            **{k: kwargs.pop(k) for k in list(kwargs) if k in FIRE2Params.__dataclass_fields__}
        )
        self.dt0 = float(dt) if dt is not None else self.params.tmax / 2
        super().__init__(atoms, restart, logfile, trajectory, **kwargs)

    def initialize(self) -> None:
        self.state = FIRE2State(dt=self.dt0, alpha=self.params.alpha0)
        self.v: Tensor | None = None

    def todict(self) -> dict:
        return {
            "type": "optimization",
            "optimizer": "FIRE2 (tcemu, ALCHEMI update)",
            "dt": self.dt0,
            **self.params.__dict__,
        }

    def read(self) -> None:  # pragma: no cover - restart files are not supported
        raise NotImplementedError("tcemu FIRE2 does not read restart files")

    def step(self, f: np.ndarray | None = None) -> None:
        forces_np = self.atoms.get_forces() if f is None else f
        forces = torch.as_tensor(np.asarray(forces_np, dtype=np.float64)).reshape(-1, 3)
        positions = torch.as_tensor(self.atoms.get_positions(), dtype=torch.float64).clone()
        if self.v is None:
            self.v = torch.zeros_like(positions)
        fire2_step(positions, self.v, forces, self.state, self.params)
        self.atoms.set_positions(positions.numpy())


class AlchemiFIRE2(FIRE2):
    """ALCHEMI's own FIRE2 kernel (``nvalchemiops.torch.fire2.fire2_step_coord``, Warp) as an ASE optimizer:
    the optimiser of the published PET study, beside :class:`FIRE2` (the same update in PyTorch).

    One system (``batch_idx`` all 0); positions, velocities, dt, alpha and the step counter are tensors on
    ``device`` (CUDA where available: on the CPU Warp runs the threads one after another, and a multi-atom
    system's dt and alpha are updated once per thread instead of once, ``docs/mlip.md``, "FIRE2").
    """

    def __init__(self, atoms, restart: str | None = None, logfile: str | None = None,
                 trajectory: str | None = None, dt: float | None = None, params: FIRE2Params | None = None,
                 device: str | None = None, **kwargs) -> None:
        try:
            from nvalchemiops.torch.fire2 import fire2_step_coord
        except ImportError as exc:
            raise ImportError(f"tcemu: the ALCHEMI FIRE2 needs nvalchemi-toolkit-ops (pip install "
                              f"'tcemu[mlip]'): {exc}") from None
        self._kernel = fire2_step_coord
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        super().__init__(atoms, restart, logfile, trajectory, dt, params, **kwargs)

    def initialize(self) -> None:
        super().initialize()
        f64 = dict(dtype=torch.float64, device=self.device)
        self.t_dt = torch.tensor([self.dt0], **f64)
        self.t_alpha = torch.tensor([self.params.alpha0], **f64)
        self.t_ninc = torch.zeros(1, dtype=torch.int32, device=self.device)
        self.batch = None

    def todict(self) -> dict:
        return {**super().todict(), "optimizer": "FIRE2 (nvalchemiops fire2_step_coord)"}

    def step(self, f: np.ndarray | None = None) -> None:
        forces_np = self.atoms.get_forces() if f is None else f
        f64 = dict(dtype=torch.float64, device=self.device)
        forces = torch.as_tensor(np.asarray(forces_np, dtype=np.float64), **f64).reshape(-1, 3)
        positions = torch.as_tensor(self.atoms.get_positions(), **f64).clone()
        if self.v is None:
            self.v = torch.zeros_like(positions)
            self.batch = torch.zeros(len(positions), dtype=torch.int32, device=self.device)
        p = self.params
        self._kernel(positions, self.v, forces, self.batch, self.t_alpha, self.t_dt, self.t_ninc,
                     delaystep=p.delaystep, dtgrow=p.dtgrow, dtshrink=p.dtshrink, alphashrink=p.alphashrink,
                     alpha0=p.alpha0, tmax=p.tmax, tmin=p.tmin, maxstep=p.maxstep)
        self.state.dt, self.state.alpha = float(self.t_dt[0]), float(self.t_alpha[0])
        self.state.n_inc = int(self.t_ninc[0])
        self.atoms.set_positions(positions.cpu().numpy())
