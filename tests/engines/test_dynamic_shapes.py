"""Dynamic shapes through the emulated ops: a changing row count (PET's pairs in MD) neither recompiles the
graph nor re-tunes a kernel. CPU kernels under TRITON_INTERPRET=1 (``interpret``), PET on the GPU (``gpu``)."""

import importlib

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton", reason="needs the 'triton' extra")

import tcemu  # noqa: E402
from tcemu.emulation.methods import get_method  # noqa: E402

emu_mm_module = importlib.import_module("tcemu.emulation.gemm.launch")


class _Counting:
    """A torch.compile backend that counts the graphs it is given (aot_eager: AOTAutograd with fake tensors)."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        from torch._dynamo.backends.debugging import aot_eager

        self.graphs += 1
        return aot_eager(gm, example_inputs)


@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_kernel_configuration_does_not_depend_on_m_within_a_bucket(method):
    """The tuning key and the static choice see M only through its bucket (M >= 1024 or not)."""
    spec = get_method(method)
    keys = {emu_mm_module._tune_key(spec, m, 256, 512) for m in (1024, 4600, 17280 * 27, 17280 * 31)}
    assert len(keys) == 1
    configs = {str(emu_mm_module.config_candidates(spec, m, 256, 512)[0]) for m in (1024, 4600, 466560)}
    assert len(configs) == 1


@pytest.mark.interpret
def test_emulated_linear_compiled_with_dynamic_shapes_interpret():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.SiLU(), torch.nn.Linear(24, 8))
    tcemu.emulate_(model, "tf32x3", backend="triton")
    backend = _Counting()
    compiled = torch.compile(model, dynamic=True, backend=backend)
    for rows in (20, 33, 47):
        x = torch.randn(rows, 16, requires_grad=True)
        y_c = compiled(x)
        (g_c,) = torch.autograd.grad(y_c.sum(), x)
        y_e = model(x)
        (g_e,) = torch.autograd.grad(y_e.sum(), x)
        assert torch.equal(y_c, y_e) and torch.equal(g_c, g_e)
    assert backend.graphs == 1


@pytest.mark.interpret
def test_emulated_attention_compiled_with_dynamic_shapes_interpret():
    from tcemu.emulation import attention

    backend = _Counting()

    def f(q, k, v, m):
        return attention.scaled_dot_product_attention(q, k, v, m, method="tf32x3", backend="triton")

    compiled = torch.compile(f, dynamic=True, backend=backend)
    gen = torch.Generator().manual_seed(0)
    for length in (9, 13, 17):  # PET: the tokens of an atom are its neighbours (and itself)
        q, k, v = (torch.randn(3, 2, length, 8, generator=gen, requires_grad=True) for _ in range(3))
        m = torch.randn(3, 1, length, length, generator=gen)
        out_c, out_e = compiled(q, k, v, m), f(q, k, v, m)
        assert torch.equal(out_c, out_e)
        assert torch.equal(torch.autograd.grad(out_c.sum(), q)[0], torch.autograd.grad(out_e.sum(), q)[0])
    assert backend.graphs == 1


@pytest.mark.gpu
def test_compiled_emulated_pet_does_not_recompile_as_pairs_change_gpu():
    """PET S's shapes at a small size with the small-shape fallbacks off, so that the emulated GEMM and attention
    kernels run: TF32x3 with the attention emulated, compiled by Inductor with dynamic shapes, through a few
    MD-like steps whose neighbour counts differ; no graph compiled after the first step, forces FP32-accurate."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    pytest.importorskip("metatrain")
    from metatomic_ase import MetatomicCalculator
    from torch._dynamo.utils import counters

    import tcemu
    from tcemu.mlip import models, systems

    with tcemu.config(small_shape_fallback=False, attention_fallback=False):
        torch._dynamo.reset()
        base = models.build_pet("s")
        pet = models.apply_method(models.build_pet("s").cuda(), "tf32x3+attn", attention_filter=models.is_pet_attention_block)
        models.compile_pet_(pet)
        calc = MetatomicCalculator(pet.export(), device="cuda", do_gradients_with_energy=False, neighbor_skin=0.0)
        ref = MetatomicCalculator(base.double().export(), device="cuda", do_gradients_with_energy=False)
        atoms = systems.water_box()
        rng = np.random.default_rng(0)
        graphs = []
        for _ in range(4):
            atoms.positions += rng.normal(scale=0.05, size=atoms.positions.shape)
            a, b = atoms.copy(), atoms.copy()
            a.calc, b.calc = calc, ref
            err = np.linalg.norm(a.get_forces() - b.get_forces(), axis=1).mean()
            assert err < 1e-4
            graphs.append(int(counters["stats"]["unique_graphs"]))
        assert graphs[1:] == graphs[:1] * 3, graphs
