"""TorchScript modules emulated on a CUDA device with the Triton kernels: a scripted model's output, forces and
double-backward gradients equal the eager emulated model's bit for bit (TorchScript's graph optimizations off,
whose fusions change the other ops' bits of plain and emulated models alike), and from the optimized runs on
they stay FP32-accurate against FP64."""

import pytest
import torch

import tcemu
from tcemu.emulation.script import rewritten_ops
from test_torchscript import _model, _run, _script, _x

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _kernels_only():
    """Every product through the method's Triton kernels: no small-shape SGEMM, no small-batch attention."""
    return tcemu.config(small_shape_fallback=False, attention_fallback=False)


@pytest.mark.parametrize("method", ["tf32x3", "bf16x6", "bf16x3"])
def test_scripted_equals_eager_on_cuda_with_the_triton_kernels(method):
    x = _x().cuda()
    eager = tcemu.emulate_(_model().cuda(), method, backend="triton")
    scripted = tcemu.emulate_(_script(_model().cuda()), method, backend="triton")
    assert rewritten_ops(scripted)["tcemu::linear"] == 2
    with _kernels_only():
        want = _run(eager, x)
        # TorchScript's graph optimizations off from the first call, as in the CPU tests: its own autodiff of the
        # other ops changes their bits (plain models' too; the next test checks the optimized runs against FP64)
        with torch.jit.optimized_execution(False), tcemu.coverage() as cov:
            first = _run(scripted, x)
        again = _run(scripted, x)  # the executor keeps the graph of its first call
    assert cov.flops("fallback") == 0 and cov.fraction == 1.0, cov.table()
    for got in (first, again):
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_scripted_optimized_runs_stay_fp32_accurate_on_cuda():
    x = _x().cuda()
    g64 = _run(_model().double().cuda(), x.double(), double=False)[1]

    def err(model):
        return (_run(model, x, double=False)[1].double() - g64).abs().mean().item()

    plain = _script(_model().cuda())  # IEEE FP32 GEMMs (torch's default: TF32 off)
    ref = max(err(plain) for _ in range(3))
    scripted = tcemu.emulate_(_script(_model().cuda()), "tf32x3", backend="triton")
    with _kernels_only():
        errs = [err(scripted) for _ in range(3)]  # the profiling run, then TorchScript's optimized graphs
    assert max(errs) <= 3 * max(ref, 1e-7), (errs, ref)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_exported_pet_on_cuda_equals_the_eager_emulated_pet(tmp_path):
    """metatomic's .pt file loaded on the GPU (MetatomicCalculator(path, device="cuda")): the same bits as the
    eager emulated PET through the Triton kernels (GEMMs and fused attention), with deterministic scatters."""
    pytest.importorskip("metatrain")
    import copy

    import numpy as np
    from metatomic_ase import MetatomicCalculator

    import tcemu.ase
    from tcemu.mlip import models, systems

    built = models.build_pet("tiny")
    path = str(tmp_path / "pet.pt")
    copy.deepcopy(built).export().save(path)
    atoms = systems.water_cluster(16)

    def ef(calc):
        calc.reset()
        a = atoms.copy()
        a.calc = calc
        return a.get_potential_energy(), np.asarray(a.get_forces())

    scripted = tcemu.ase.emulate_calculator(MetatomicCalculator(path, device="cuda"), "tf32x3", backend="triton")
    eager = tcemu.ase.emulate_calculator(MetatomicCalculator(copy.deepcopy(built).export(), device="cuda"),
                                         "tf32x3", backend="triton")
    # torch's deterministic algorithms: PET's backward scatters the forces with index_add, whose CUDA atomics add in
    # another order at each run (plain FP32 PET's forces too differ in their last bits between runs without them)
    was, was_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with _kernels_only():
            want = ef(eager)
            with tcemu.coverage() as cov:
                first = ef(scripted)
            with torch.jit.optimized_execution(False):
                again = ef(scripted)
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
    assert cov.fraction > 0.999 and cov.flops("fallback") == 0, cov.table()
    for got in (first, again):
        assert got[0] == want[0] and np.array_equal(got[1], want[1])
