"""PET compiled for MD (``compile_pet_``, ``pet(compile=True)``): dynamic shapes, so no recompilation as the
neighbour count changes from step to step; the results stay FP32's."""

import numpy as np
import torch

from tcemu.mlip import models, systems


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def test_compiled_pet_does_not_recompile_when_the_pair_count_changes():
    from metatomic_ase import MetatomicCalculator

    torch._dynamo.reset()
    pet = models.compile_pet_(models.build_pet("tiny"), backend="eager")  # Dynamo's graphs, no code generation
    widths = []
    features = pet.backend.calculate_features

    def spy(batch_data, *args, **kwargs):  # the padded neighbour width PET sees at each step
        widths.append(batch_data["padding_mask"].shape[1])
        return features(batch_data, *args, **kwargs)

    pet.backend.calculate_features = spy
    calc = MetatomicCalculator(pet.export(), device="cpu", do_gradients_with_energy=False, neighbor_skin=0.0)
    ref = MetatomicCalculator(models.build_pet("tiny").export(), device="cpu", do_gradients_with_energy=False)
    atoms = systems.water_cluster(8)
    rng = np.random.default_rng(0)
    graphs = []
    for _ in range(4):
        atoms.positions += rng.normal(scale=0.15, size=atoms.positions.shape)
        a, b = atoms.copy(), atoms.copy()
        a.calc, b.calc = calc, ref
        np.testing.assert_allclose(a.get_forces(), b.get_forces(), atol=1e-5)
        graphs.append(_graphs())
    assert len(set(widths)) >= 2, widths  # the neighbour layout changed width between steps
    assert graphs[0] > 0 and graphs[1:] == graphs[:1] * 3, graphs  # ... and nothing was compiled after step 1


def test_pet_compile_flag_compiles_preprocessing_features_and_prediction():
    pot = models.pet("tiny", compile=True)
    mod = pot.module("fp32")
    pot.wrap(mod, "cpu")
    assert all(name in vars(mod.backend) for name in models.PET_COMPILE_SCOPE)


def test_compiled_emulated_pet_keeps_the_layers_and_attention_blocks_but_not_the_model_scope():
    """``compile_pet_`` removes ``tcemu.emulate_``'s whole-model scope (its mode would wrap the compiled graphs at
    run time) and keeps the swapped layers and the attention blocks' scopes; ``model_scope=True`` keeps it."""
    from tcemu.emulation.linear import EmulatedLinear
    from tcemu.emulation.scope import scope_of

    def build():
        return models.apply_method(models.build_pet("tiny"), "tf32x3+attn", attention_filter=models.is_pet_attention_block)

    pet = models.compile_pet_(build(), backend="eager")
    scoped = [m for m in pet.modules() if scope_of(m) is not None]
    assert any(isinstance(m, EmulatedLinear) for m in pet.modules())
    assert scoped and all(models.is_pet_attention_block(m) for m in scoped)
    whole = models.compile_pet_(build(), backend="eager", model_scope=True)
    assert scope_of(whole) is not None and scope_of(whole).origin == "emulate_"
