"""What the C++ host demo (tcemu_host) computes, in Python: the same brute-force neighbor lists in (i, j) order,
the same evaluation options, energy and forces by autograd. Run with tcemu's Python ops (or the native library)
providing the ``tcemu::`` ops; ``write_atoms`` writes the host's input file."""

from __future__ import annotations

import contextlib

import numpy as np
import torch


@contextlib.contextmanager
def deterministic(device: str):
    """torch's deterministic algorithms on CUDA for the scope (what ``tcemu_host --deterministic 1`` sets): PET's
    backward scatters the forces with index_add, whose atomics add in another order at each CUDA run, so its forces
    differ in the last bits between runs of the same FP32 model; bit comparisons need the deterministic kernels."""
    if device != "cuda":
        yield
        return
    was, was_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)


def write_atoms(atoms, path) -> None:
    """The host's ATOMS.txt: the number of atoms, then ``type x y z`` (float32) per atom."""
    positions = np.asarray(atoms.positions, dtype=np.float32)
    lines = [str(len(atoms))] + [f"{z} {x!r} {y!r} {w!r}" for z, (x, y, w) in
                                 zip(atoms.numbers, positions.astype(float).tolist())]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _neighbors(positions: torch.Tensor, cutoff: float, full_list: bool):
    from metatensor.torch import Labels, TensorBlock

    p64 = positions.detach().cpu().double().numpy().astype(np.float32).astype(np.float64)
    n = len(p64)
    pairs = []
    for i in range(n):
        for j in range(0 if full_list else i + 1, n):
            if j == i:
                continue
            d = p64[j] - p64[i]
            if d[0] * d[0] + d[1] * d[1] + d[2] * d[2] < cutoff * cutoff:
                pairs.append((i, j))
    first = torch.tensor([i for i, _ in pairs], dtype=torch.int64, device=positions.device)
    second = torch.tensor([j for _, j in pairs], dtype=torch.int64, device=positions.device)
    samples = torch.tensor([[i, j, 0, 0, 0] for i, j in pairs], dtype=torch.int32).reshape(-1, 5)
    vectors = (positions.index_select(0, second) - positions.index_select(0, first)).reshape(-1, 3, 1)
    dev = positions.device
    return TensorBlock(vectors, Labels(["first_atom", "second_atom", "cell_shift_a", "cell_shift_b", "cell_shift_c"],
                                       samples.to(dev)),
                       [Labels(["xyz"], torch.arange(3, dtype=torch.int32).reshape(3, 1).to(dev))],
                       Labels(["distance"], torch.zeros((1, 1), dtype=torch.int32).to(dev)))


def energy_forces(model, atoms, device: str = "cpu") -> tuple[float, np.ndarray]:
    """The host's energy and forces for ``atoms`` (ase.Atoms, no pbc) with a loaded metatomic model."""
    from metatomic.torch import ModelEvaluationOptions, ModelOutput, System

    model = model.to(device)
    dtype = getattr(torch, model.capabilities().dtype)  # (the host runs float32 models)
    positions = torch.tensor(np.asarray(atoms.positions, dtype=np.float32), device=device).to(dtype)
    positions.requires_grad_(True)
    system = System(torch.tensor(atoms.numbers, dtype=torch.int32, device=device), positions,
                    torch.zeros((3, 3), dtype=dtype, device=device), torch.zeros(3, dtype=torch.bool, device=device))
    for options in model.requested_neighbor_lists():
        system.add_neighbor_list(options, _neighbors(positions, options.engine_cutoff("angstrom"), options.full_list))
    evaluation = ModelEvaluationOptions(length_unit="angstrom",
                                        outputs={"energy": ModelOutput(quantity="energy", unit="eV", per_atom=False)})
    energy = model([system], evaluation, False)["energy"].block_by_id(0).values.sum()
    (grad,) = torch.autograd.grad(energy, positions)
    return float(energy), (-grad).cpu().numpy()
