"""A small e3nn network (o3.Linear, FullyConnectedTensorProduct, FullyConnectedNet, spherical harmonics), an
energy model with forces by autograd, and an ASE calculator factory for it (the tcemu.mlip factory protocol).

Built with e3nn's defaults, so its generated code is TorchScript-compiled, as a user's model is. Shared by the
emulation tests and the tcemu.mlip tests (``--calculator tests/emulation/e3nn_net.py:calculator``).
"""

import copy
import functools

import torch
from torch import nn

with torch.serialization.safe_globals([slice]):  # e3nn 0.4 loads its constants with torch.load
    from e3nn import nn as enn
    from e3nn import o3
    from e3nn.math import soft_one_hot_linspace

SPECIES = (1, 8)  # H, O
CUTOFF = 4.0


class E3Net(nn.Module):
    """Species embedding -> one equivariant message pass (radial MLP weights per edge) -> scalar energy."""

    def __init__(self, mul: int = 8, lmax: int = 2, n_basis: int = 8):
        super().__init__()
        self.n_basis = n_basis
        self.embed = o3.Linear(f"{len(SPECIES)}x0e", f"{mul}x0e")
        self.sh = o3.SphericalHarmonics(o3.Irreps.spherical_harmonics(lmax), normalize=True, normalization="component")
        hidden = o3.Irreps(f"{mul}x0e + {mul}x1o + {mul}x2e")
        self.tp = o3.FullyConnectedTensorProduct(f"{mul}x0e", self.sh.irreps_out, hidden, shared_weights=False,
                                                 internal_weights=False)
        self.radial = enn.FullyConnectedNet([n_basis, 16, self.tp.weight_numel], act=torch.nn.functional.silu)
        self.mix = o3.Linear(hidden, f"{mul}x0e + {mul}x1o")
        self.square = o3.FullyConnectedTensorProduct(f"{mul}x0e + {mul}x1o", f"{mul}x0e + {mul}x1o", f"{mul}x0e")
        self.out = o3.Linear(f"{mul}x0e", "0e")

    def forward(self, pos: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        n = pos.shape[0]
        with torch.no_grad():
            d = (pos[:, None] - pos[None]).norm(dim=-1)
            src, dst = torch.nonzero((d < CUTOFF) & ~torch.eye(n, dtype=torch.bool, device=pos.device), as_tuple=True)
        vec = pos[dst] - pos[src]
        r = vec.norm(dim=-1)
        basis = soft_one_hot_linspace(r, 0.0, CUTOFF, self.n_basis, basis="smooth_finite", cutoff=True)
        h = self.embed(onehot)
        msg = self.tp(h[src], self.sh(vec), self.radial(basis * self.n_basis**0.5))
        agg = torch.zeros(n, msg.shape[1], dtype=msg.dtype, device=msg.device).index_add(0, dst, msg)
        x = self.mix(agg)
        return self.out(self.square(x, x)).sum()


@functools.lru_cache(maxsize=2)
def _built(seed: int) -> E3Net:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return E3Net().float().eval()


def build(seed: int = 0) -> E3Net:
    """A fresh copy of the network with seeded random weights, float32 (built once: TorchScript takes seconds)."""
    return copy.deepcopy(_built(seed))


def onehot(numbers, dtype=torch.float32, device="cpu") -> torch.Tensor:
    idx = torch.tensor([SPECIES.index(int(z)) for z in numbers], device=device)
    return torch.nn.functional.one_hot(idx, len(SPECIES)).to(dtype)


def energy_and_forces(model: nn.Module, pos: torch.Tensor, numbers) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = next(model.parameters()).dtype
    x = pos.to(dtype).detach().requires_grad_(True)
    e = model(x, onehot(numbers, dtype, x.device))
    (g,) = torch.autograd.grad(e, x)
    return e.detach(), -g


def calculator(dtype: str = "float32", device: str = "cpu", hard_float32: bool = False):
    """The factory protocol: an ASE calculator of a fresh network in ``dtype``. ``hard_float32=True`` makes a
    calculator that builds float32 inputs whatever its model's dtype (as some do): no FP64 reference."""
    from ase.calculators.calculator import Calculator, all_changes

    class E3NetCalculator(Calculator):
        implemented_properties = ["energy", "free_energy", "forces"]

        def __init__(self, model: nn.Module):
            super().__init__()
            self.model = model

        def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
            super().calculate(atoms, properties, system_changes)
            dtype_in = torch.float32 if hard_float32 else next(self.model.parameters()).dtype
            pos = torch.tensor(self.atoms.positions, dtype=dtype_in, device=device, requires_grad=True)
            e = self.model(pos, onehot(self.atoms.numbers, dtype_in, device))
            (g,) = torch.autograd.grad(e, pos)
            self.results = {"energy": float(e), "free_energy": float(e), "forces": -g.double().cpu().numpy()}

    return E3NetCalculator(build().to(device=device, dtype=getattr(torch, dtype)))
