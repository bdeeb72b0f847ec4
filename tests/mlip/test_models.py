"""Potentials: PET random and checkpoints, ANI-1x, CHGNet; FP64 copies, emulation, and clear errors on bad input."""

from pathlib import Path

import numpy as np
import pytest
import torch

from tcemu.emulation.scope import scope_of
from tcemu.mlip import models, systems


def _weights_hash(module) -> float:
    with torch.no_grad():
        return float(sum((p.double() * (i + 1)).sum() for i, p in enumerate(module.parameters())))


def test_pet_random_is_deterministic_and_seeded():
    a, b, c = models.build_pet("tiny", 0), models.build_pet("tiny", 0), models.build_pet("tiny", 1)
    assert _weights_hash(a) == _weights_hash(b) != _weights_hash(c)
    assert all(p.dtype == torch.float32 for p in a.parameters())


@pytest.mark.parametrize("shape,params_M", [("xs", 4.0), ("s", 24.0)])
def test_pet_shapes_have_the_documented_budget(shape, params_M):
    n = sum(p.numel() for p in models.build_pet(shape).parameters()) / 1e6
    assert params_M < n < params_M * 1.15  # docs/mlip.md: S = 25.0 M with the energy head only


def test_fp64_reference_and_fp32_agree_to_fp32_rounding(pet_tiny, water):
    e = {}
    for m in ("fp64", "fp32"):
        a = water.copy()
        a.calc = pet_tiny.calculator(m)
        e[m] = (a.get_potential_energy(), a.get_forces())
    assert next(pet_tiny.calculator("fp64").module.parameters()).dtype == torch.float64
    assert e["fp32"][0] != e["fp64"][0]
    assert abs(e["fp32"][0] - e["fp64"][0]) < 1e-5 * abs(e["fp64"][0]) + 1e-4
    assert np.abs(e["fp32"][1] - e["fp64"][1]).max() < 1e-4


def test_emulation_swaps_every_linear_and_keeps_state_dict(pet_tiny):
    import tcemu

    plain = pet_tiny.module("fp32")
    emu = pet_tiny.module("tf32x3")
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in plain.modules())
    assert n_linear > 10
    assert sum(isinstance(m, tcemu.EmulatedLinear) for m in emu.modules()) == n_linear
    assert list(plain.state_dict()) == list(emu.state_dict())
    assert _weights_hash(plain) == _weights_hash(emu)


def test_pet_checkpoint_written_by_us_gives_the_same_energy(tmp_path, pet_tiny):
    ckpt = tmp_path / "pet-tiny.ckpt"
    torch.save(models.build_pet("tiny", 0).get_checkpoint(), ckpt)
    pot = models.get_potential(str(ckpt))
    a, b = systems.co_on_pt111(), systems.co_on_pt111()
    a.calc, b.calc = pot.calculator("fp32"), pet_tiny.calculator("fp32")
    assert a.get_potential_energy() == b.get_potential_energy()


def test_metatrain_test_checkpoint_loads_and_emulates(small_water):
    import metatrain

    path = Path(metatrain.__file__).parent / "pet" / "tests" / "checkpoints" / "model-v16_trainer-v15.ckpt.gz"
    if not path.is_file():
        pytest.skip("metatrain's test checkpoint is not in this wheel")
    pot = models.pet_checkpoint(path)
    assert pot.elements == frozenset({1, 6, 7, 8})
    e = []
    for m in ("fp64", "tf32x3"):
        a = small_water.copy()
        a.calc = pot.calculator(m)
        e.append(a.get_potential_energy())
    assert np.isfinite(e).all() and e[1] == pytest.approx(e[0], abs=1e-4)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        models.get_potential(str(tmp_path / "pet-mad-s-v1.6.0.ckpt"))


def test_unknown_element_is_a_clear_error(ani):
    a = systems.co_on_pt111()
    a.calc = ani.calculator("fp32")
    with pytest.raises(ValueError, match=r"ani1x does not know element\(s\) Pt; it knows H, C, N, O"):
        a.get_potential_energy()


def test_unknown_method_and_potential_are_clear_errors(pet_tiny):
    with pytest.raises(ValueError, match="unknown method 'tf16'"):
        pet_tiny.calculator("tf16")
    with pytest.raises(ValueError, match="unknown potential"):
        models.get_potential("mace")


def test_ani1x_offline_fp64_and_tf32(ani, small_water):
    res = {}
    for m in ("fp64", "fp32", "tf32"):
        a = small_water.copy()
        a.calc = ani.calculator(m)
        res[m] = a.get_forces()
    err32 = np.abs(res["fp32"] - res["fp64"]).max()
    err_tf32 = np.abs(res["tf32"] - res["fp64"]).max()
    assert err32 < 1e-4
    assert err_tf32 > 10 * err32  # single-pass TF32 is visibly worse than FP32
    assert sum(p.numel() for p in ani.build_module().parameters()) > 2.5e6


def test_chgnet_needs_a_cell_and_runs_in_fp64():
    from ase.build import bulk, molecule

    pot = models.chgnet()
    mol = molecule("CO")
    mol.calc = pot.calculator("fp32")
    with pytest.raises(ValueError, match="periodic model and needs a full 3-D cell"):
        mol.get_potential_energy()
    pt = bulk("Pt", cubic=True)
    pt.rattle(0.05, seed=0)
    out = {}
    for m in ("fp64", "fp32", "tf32x3"):
        a = pt.copy()
        a.calc = pot.calculator(m)
        out[m] = (a.get_potential_energy(), a.get_forces(), a.get_stress())
    assert next(pot.calculator("fp64").module.parameters()).dtype == torch.float64
    assert out["fp32"][0] == pytest.approx(out["fp64"][0], abs=1e-4)
    assert np.abs(out["fp32"][1] - out["fp64"][1]).max() < 1e-4
    assert np.abs(out["tf32x3"][1] - out["fp64"][1]).max() < 1e-4


def test_any_torch_ase_calculator(small_water):
    """from_calculator: torchani's own ASE calculator, handed in as a factory."""
    import torchani.ase

    pot = models.from_calculator(
        "ani-generic",
        lambda: torchani.ase.Calculator(["H", "C", "N", "O"], models.build_ani1x()),
        elements=[1, 6, 7, 8],
    )
    ref = models.ani1x()
    a, b = small_water.copy(), small_water.copy()
    a.calc, b.calc = pot.calculator("tf32x3"), ref.calculator("tf32x3")
    assert np.allclose(a.get_forces(), b.get_forces(), atol=0, rtol=0)
    c = small_water.copy()
    c.calc = pot.calculator("fp64")
    assert abs(c.get_potential_energy() - a.get_potential_energy()) < 0.05



def test_methods_emulate_pets_attention_and_attn_methods_add_the_block_scope(pet_tiny, water):
    """``"bf16x3"``: PET's nn.Linear layers swapped and every functional product, its attention's included,
    emulated (coverage above 99.99 %, attention among the emulated ops). ``"bf16x3+attn"`` also scopes the attention
    blocks on their own (an instance ``forward`` on each AttentionBlock, the MD-step benchmark's configuration):
    the same products, so the same forces. Method names are checked, and a model without attention blocks runs
    the plain method, with a warning."""
    assert models.check_method("BF16x3+attn") == "bf16x3+attn"
    for bad, msg in (("fp32+attn", "emulation methods only"), ("tf32x3+flash", "unknown method"),
                     ("tf32x3+attn+attn", "unknown method")):
        with pytest.raises(ValueError, match=msg):
            models.check_method(bad)
    calc = pet_tiny.calculator("bf16x3+attn")
    blocks = [m for m in calc.module.modules() if type(m).__name__ == "AttentionBlock"]
    assert blocks and all(scope_of(m).origin == "emulate_functional_" for m in blocks)
    forces, calcs = {}, {}
    for m in ("fp64", "bf16x3", "bf16x3+attn"):
        a = water.copy()
        a.calc = calcs[m] = calc if m == "bf16x3+attn" else pet_tiny.calculator(m)
        forces[m] = a.get_forces()
    assert all(scope_of(m).origin == "emulate_" for m in calcs["bf16x3"].module.modules()
               if type(m).__name__ == "AttentionBlock")
    cov = calcs["bf16x3"].coverage
    assert any(r.op == "scaled_dot_product_attention" and r.kind == "emulated" for r in cov.rows)
    # what stays FP32 is metatomic's calculator code outside the model (its strain products for the stress)
    assert cov.fraction > 0.9999 and {r.module for r in cov.rows if r.kind == "fp32"} == {""}
    assert np.array_equal(forces["bf16x3"], forces["bf16x3+attn"])
    err = np.abs(forces["bf16x3"] - forces["fp64"]).max()
    assert 0 < err < 1e-2
    plain = models.Potential(name="lin", build_module=lambda: torch.nn.Linear(3, 1), wrap=lambda mod, device: None)
    with pytest.warns(UserWarning, match="no attention blocks .* runs as 'tf32x3'"):
        lin = plain.module("tf32x3+attn")
    assert type(lin).__name__ == "EmulatedLinear" and lin.method.name == "tf32x3"
