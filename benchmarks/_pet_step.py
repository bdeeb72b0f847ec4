"""The PET energy+forces step of ``benchmarks/md_step.py`` and ``benchmarks/md_step_host_profile.py``: a system
with its neighbour pairs fixed (``prepare_inputs``), forces by autograd (``energy_and_forces``), PET's backend
compiled per scope (``compile_backend``), the step's timing (``time_steps``) and the share of its GPU time in
GEMM kernels (``gemm_share``)."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import torch


def impl_of(method: str) -> str:
    """Whose GEMMs a configuration runs: torch's (FP32, cuBLAS TF32) or tcemu's (the split methods)."""
    return "torch" if method in ("fp32", "tf32") else "tcemu"


# GPU kernels counted as GEMM work: cuBLAS/CUTLASS GEMMs and GEMVs (PET's one-output energy heads are nn.Linear
# layers that cuBLAS runs as GEMVs in FP32; some stored CSVs predate counting them), Triton and
# Inductor matmul templates, and tcemu's emulated GEMM and split kernels (the split is part of what an emulated
# GEMM costs). Not counted: attention (CUTLASS "fmha" kernels: not nn.Linear, left in FP32 by emulate_) and
# Inductor's fused kernels, whose names list the ops they follow ("triton_poi_fused_..._emu_mm_...").
GEMM_KERNEL_MARKERS = (
    "gemm", "gemv", "xmma", "_emu_mm_kernel", "_emu_mm_wgmma_kernel", "_emu_mm_wgmma_ws_kernel", "cutlass", "_mm_kernel",
    "matmul", "_split_t_kernel", "triton_tem_",
)
NOT_GEMM_MARKERS = ("fmha", "triton_poi_", "triton_per_", "triton_red_")


def is_gemm_kernel(name: str) -> bool:
    """Whether a profiled GPU kernel is GEMM work (see ``GEMM_KERNEL_MARKERS``)."""
    key = name.lower()
    return any(m in key for m in GEMM_KERNEL_MARKERS) and not any(m in key for m in NOT_GEMM_MARKERS)


@dataclass
class StepInputs:
    """A system with its neighbour pairs fixed; vectors are recomputed from the positions each step."""

    types: torch.Tensor
    positions: torch.Tensor
    cell: torch.Tensor
    pbc: torch.Tensor
    neighbor_lists: list  # (options, samples Labels, components, properties, i, j, shifts)
    nl_build_ms: float


def _add_requested_neighbor_lists(system, atomistic_model) -> None:
    """Compute the neighbour lists the model requests with vesin (no skin) and store them in ``system``."""
    try:
        from vesin.metatomic import neighbor_lists_for_model
    except ImportError:  # vesin before neighbor_lists_for_model: its former one-call form
        from vesin.metatomic import compute_requested_neighbors

        compute_requested_neighbors([system], "angstrom", atomistic_model, skin=0.0)
        return
    for calculator in neighbor_lists_for_model("angstrom", atomistic_model, skin=0.0):
        calculator.add_neighbor_list([system])


def prepare_inputs(atoms, atomistic_model, device: torch.device, dtype: torch.dtype) -> StepInputs:
    """Build the neighbour lists the model asks for (vesin, no skin) once, and keep their pairs on the device."""
    from metatomic.torch import System

    types = torch.tensor(atoms.numbers, dtype=torch.int32)
    positions = torch.tensor(atoms.positions, dtype=dtype)
    cell = torch.tensor(atoms.cell.array, dtype=dtype)
    pbc = torch.tensor(atoms.pbc)
    system = System(types, positions, cell, pbc)
    t0 = time.perf_counter()
    _add_requested_neighbor_lists(system, atomistic_model)
    nl_ms = (time.perf_counter() - t0) * 1e3
    lists = []
    for options in atomistic_model.requested_neighbor_lists():
        block = system.get_neighbor_list(options)
        samples = block.samples.to(device)
        values = samples.values
        lists.append((options, samples, [c.to(device) for c in block.components], block.properties.to(device),
                      values[:, 0].long(), values[:, 1].long(), values[:, 2:5].to(dtype)))
    return StepInputs(types.to(device), positions.to(device), cell.to(device), pbc.to(device), lists, nl_ms)


def make_system(inp: StepInputs, positions: torch.Tensor):
    """A metatomic System whose neighbour vectors are differentiable functions of ``positions``."""
    from metatensor.torch import TensorBlock
    from metatomic.torch import System

    system = System(inp.types, positions, inp.cell.to(positions.dtype), inp.pbc)
    cell = inp.cell.to(positions.dtype)
    for options, samples, components, properties, i, j, shifts in inp.neighbor_lists:
        vectors = positions[j] - positions[i] + shifts.to(positions.dtype) @ cell
        system.add_neighbor_list(options, TensorBlock(vectors.reshape(-1, 3, 1), samples, components, properties))
    return system


def energy_and_forces(atomistic_model, inp: StepInputs, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    from metatomic.torch import ModelEvaluationOptions, ModelOutput

    positions = inp.positions.to(dtype).detach().requires_grad_(True)
    system = make_system(inp, positions)
    options = ModelEvaluationOptions(length_unit="angstrom",
                                     outputs={"energy": ModelOutput(unit="eV", sample_kind="system")})
    out = atomistic_model([system], options, check_consistency=False)
    energy = out["energy"].block().values.sum()
    (grad,) = torch.autograd.grad(energy, positions)
    return energy.detach(), -grad


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(fn, device: torch.device, warmup: int, repeats: int) -> tuple[float, float, float]:
    """(median, p20, p80) milliseconds of ``fn()`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else [times[0]] * 9
    return statistics.median(times), q[1], q[7]


def gemm_share(fn, device: torch.device) -> tuple[float, float, str]:
    """(fraction of GPU kernel time in GEMM kernels, GEMM milliseconds, top-kernel table) over one step."""
    if device.type != "cuda":
        return math.nan, math.nan, ""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync(device)
    total = gemm = 0.0
    kernels = []
    for evt in prof.key_averages():
        if evt.device_type is not None and "CUDA" not in str(evt.device_type):
            continue
        t = getattr(evt, "self_device_time_total", None) or getattr(evt, "self_cuda_time_total", 0.0)
        if not t:
            continue
        total += t
        is_gemm = is_gemm_kernel(evt.key)
        gemm += t if is_gemm else 0.0
        kernels.append((t, evt.count, is_gemm, evt.key))
    kernels.sort(reverse=True)
    lines = [f"GPU kernel time {total / 1e3:.3f} ms, GEMM {gemm / 1e3:.3f} ms ({gemm / max(total, 1e-9):.1%})",
             "   ms  share  calls gemm kernel"]
    lines += [f"{t / 1e3:7.3f} {t / max(total, 1e-9):6.1%} {n:6d} {'*' if g else ' ':4s} {k[:150]}"
              for t, n, g, k in kernels[:40]]
    return (gemm / total if total else math.nan), gemm / 1e3, "\n".join(lines)


#: What ``torch.compile`` covers (``--compile-scope``): PET's feature and prediction methods (``backend``), or
#: these and its structure preprocessing (``full``: edge vectors, cutoffs, the padded neighbour layout). The
#: preprocessing's gathers have backward passes with many repeated indices (the padded slots of PET's
#: neighbour layout all point at edge 0); eager PyTorch runs them with its sorting index backward.
COMPILE_SCOPES = {"backend": ("calculate_features", "predict"),
                  "full": ("preprocess", "calculate_features", "predict")}


def compile_backend(pet, graphs: bool = False, scope: str = "backend") -> None:
    """torch.compile the PET backend's methods of ``scope`` (static shapes), as metatrain allows since PR
    #1180; ``graphs``: with ``mode="reduce-overhead"`` (Inductor's CUDA graphs)."""
    backend = pet.backend
    kw = {"mode": "reduce-overhead"} if graphs else {}
    for name in COMPILE_SCOPES[scope]:
        setattr(backend, name, torch.compile(getattr(backend, name), dynamic=False, **kw))


def cudagraph_skips() -> int:
    """Inductor's count of CUDA-graph skips so far in this process (-1 where torch names the counter otherwise)."""
    try:
        from torch._dynamo.utils import counters

        return int(sum(counters["inductor"].get(k, 0) for k in ("cudagraph_skips",)))
    except Exception:  # noqa: BLE001 - a counter renamed in another torch: not fatal
        return -1


def free(device: torch.device) -> None:
    """Drop compiled graphs (and their CUDA-graph memory pools) between configurations."""
    import gc

    try:
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001
        pass
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
