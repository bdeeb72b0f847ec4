"""No verdict without coverage, any calculator (factories, from the CLI too), and the potentials nobody here wrote.

Each model: the products of its runs are >= 99 % emulated, single-pass TF32 visibly changes forces (so the
products were reached), TF32x3 and BF16x6 stay near FP32's error against FP64, and the verdicts of TF32 and
TF32x3 differ as the arithmetic says.
"""

import functools
from pathlib import Path

import numpy as np
import pytest
import torch

from tcemu.cli.main import main
from tcemu.mlip import calculators, models, systems, tasks
from tcemu.mlip.criteria import method_status, verdicts
from tcemu.mlip.report import SuiteConfig, SuiteResult, coverage_table

E3NN_NET = Path(__file__).parents[1] / "emulation" / "e3nn_net.py"
METHODS = ("tf32", "tf32x3", "bf16x6")


def _verdicts(sp):
    res = SuiteResult(SuiteConfig(methods=METHODS), single_point=[sp])
    res.verdicts = verdicts(res)
    return res


def _check_model(sp, force_ratio=10.0):
    """The module docstring's claims on one single point."""
    for m in METHODS:
        assert sp.coverage[m] >= 0.99, (m, sp.coverage)
    fp32 = sp.error("fp32").force_mean_err_eV_per_A
    assert sp.error("tf32").force_mean_err_eV_per_A > force_ratio * max(fp32, sp.floor.force_mean_err_eV_per_A)
    for m in ("tf32x3", "bf16x6"):
        assert sp.floor_multiple(m, "force_mean_err") <= 3 * max(1.0, sp.floor_multiple("fp32", "force_mean_err"))
    res = _verdicts(sp)
    assert method_status(res.verdicts, "tf32") == "not safe"
    return res


@pytest.fixture(scope="module")
def e3nn_potential():
    factory = calculators.load_factory(f"{E3NN_NET}:calculator")
    return calculators.from_factory(factory, name="e3nn-net", elements=(1, 8))


def test_e3nn_network_through_its_ase_calculator(e3nn_potential):
    sp = tasks.single_point(e3nn_potential, systems.water_cluster(4), METHODS, show_progress=False)
    assert sp.coverage["fp32"] == 0.0 and np.isnan(sp.coverage["fp64"])  # FP64 has no float32 products
    res = _check_model(sp)
    assert method_status(res.verdicts, "tf32x3") == "safe" and method_status(res.verdicts, "bf16x6") == "safe"


def test_mace_random_model_through_maces_calculator():
    pot = calculators.from_factory(functools.partial(calculators.mace_random, channels=8, max_ell=1, correlation=2),
                                   name="mace", elements=(1, 8))
    sp = tasks.single_point(pot, systems.water_cluster(16), METHODS, show_progress=False)
    res = _check_model(sp)
    # TF32x3 drops the lo*lo products (2^-22 relative each): in MACE's short sums (K of 3 to 48) that shows
    # above FP32's rounding in the total energy, up to a few floors; its forces are FP32's
    assert all(v.passed for v in res.verdicts if v.method == "tf32x3" and "energy" not in v.check)
    assert method_status(res.verdicts, "bf16x6") == "safe"


@pytest.mark.parametrize("name", ["pet-tiny", "ani1x", "chgnet"])
def test_pet_ani_and_chgnet_runs_are_emulated(name, small_water):
    atoms = small_water.copy()
    if name == "chgnet":
        atoms.center(vacuum=4.0)
        atoms.pbc = True
    sp = tasks.single_point(models.get_potential(name), atoms, ("tf32", "tf32x3"), show_progress=False)
    assert sp.coverage["tf32"] >= 0.99 and sp.coverage["tf32x3"] >= 0.99
    assert sp.error("tf32").force_mean_err_eV_per_A > 10 * sp.error("fp32").force_mean_err_eV_per_A


class _Scripted(torch.nn.Module):
    """An energy model whose products run inside a custom op (a library's own compiled code, as in a TorchScript
    model that calls one): no emulation reaches them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        _opaque_op()
        self.net = torch.jit.script(_OpaqueNet())

    def forward(self, pos):
        d = (pos[:, None] - pos[None]).norm(dim=-1)
        return self.net(d[d > 0][:, None]).sum()


class _OpaqueNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(1, 64))
        self.w2 = torch.nn.Parameter(torch.randn(64, 1) / 8)

    def forward(self, x):
        return torch.ops.tcemu_test_verdicts.mm(torch.tanh(torch.ops.tcemu_test_verdicts.mm(x, self.w1)), self.w2)


_LIB = []


def _mm_as_compiled_code(a, b):
    with torch._C.DisableTorchFunction():  # as C++ code: no torch-function mode sees its product
        return torch.mm(a, b)


def _opaque_op():
    """``tcemu_test_verdicts::mm``: a custom op with autograd (its products run inside it, as aten mm calls)."""
    if _LIB:
        return
    lib = torch.library.Library("tcemu_test_verdicts", "FRAGMENT")  # noqa: TOR901
    lib.define("mm(Tensor a, Tensor b) -> Tensor")
    lib.impl("mm", _mm_as_compiled_code, "CompositeImplicitAutograd")
    _LIB.append(lib)


def _scripted_calculator(dtype="float32"):
    from ase.calculators.calculator import Calculator, all_changes

    class C(Calculator):
        implemented_properties = ["energy", "free_energy", "forces"]

        def __init__(self):
            super().__init__()
            self.model = _Scripted().to(getattr(torch, dtype))

        def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
            super().calculate(atoms, properties, system_changes)
            pos = torch.tensor(self.atoms.positions, dtype=getattr(torch, dtype), requires_grad=True)
            e = self.model(pos)
            (g,) = torch.autograd.grad(e, pos)
            self.results = {"energy": float(e.detach()), "free_energy": float(e.detach()), "forces": -g.double().numpy()}

    return C()


def test_a_run_that_emulated_nothing_is_not_validated_never_safe(tmp_path):
    """The issue's failure: nothing emulated, so every method returned FP32's numbers and passed. Now the
    coverage says 0 % and the verdict is 'not validated', in the table, verdicts.csv and report.md."""
    pot = calculators.from_factory(_scripted_calculator, name="scripted")
    with pytest.warns(UserWarning, match="tcemu.emulate_: not reached: net \\(_OpaqueNet\\): custom op tcemu_test_verdicts::mm"):
        sp = tasks.single_point(pot, systems.water_cluster(3), ("tf32", "tf32x3"), show_progress=False)
    assert sp.coverage["tf32"] == 0.0 and sp.energies_eV["tf32"] == sp.energies_eV["fp32"]
    res = _verdicts(sp)
    assert all(v.passed for v in res.verdicts if ":not_emulated[" not in v.check)  # it looks perfect...
    assert method_status(res.verdicts, "tf32") == "not validated: 0 % emulated"  # ...and is not validated
    assert "| tf32 | **not validated: 0 % emulated**" in _report(res, tmp_path)
    assert "0 %" in coverage_table(res)


def _report(res, out):
    from tcemu.mlip.report import write_report, write_verdicts

    write_verdicts(res, out)
    assert "single_point:not_emulated[scripted/" in (out / "verdicts.csv").read_text()
    return write_report(res, out).read_text()


def test_an_fp64_copy_fed_float32_inputs_is_refused_not_compared_with(e3nn_potential):
    factory = calculators.load_factory(f"{E3NN_NET}:calculator")
    pot = calculators.from_factory(functools.partial(factory, hard_float32=True), name="hard32")
    a = systems.water_cluster(2)
    a.calc = pot.calculator("fp64")
    with pytest.raises(ValueError, match="no FP64 reference"):
        a.get_forces()
    # the same calculator without a dtype argument: the model is converted with .double(), the inputs read it
    plain = calculators.from_calculator("e3nn-plain", lambda: factory("float32"))
    b = systems.water_cluster(2)
    b.calc = plain.calculator("fp64")
    assert np.isfinite(b.get_forces()).all() and b.calc.coverage.flops("other_dtype") > 0


def test_factory_specs_and_their_errors(tmp_path):
    assert calculators.load_factory("tcemu.mlip.calculators:mace_random") is calculators.mace_random
    for spec, msg in (("nocolon", "expected module:factory"), ("no_such_module_x:f", "cannot import"),
                      ("tcemu.mlip.calculators:nope", "no callable 'nope'"), (f"{tmp_path}/x.py:f", "no file")):
        with pytest.raises((ValueError, FileNotFoundError), match=msg):
            calculators.load_factory(spec)
    bad = tmp_path / "not_pet.pth"
    torch.save({"state_dict": {}}, bad)
    with pytest.raises(ValueError, match="not a metatrain"):
        models.get_potential(str(bad))


def test_cli_takes_a_calculator_factory_and_reports_coverage(tmp_path, capsys):
    rc = main(["mlip", "sp", "--calculator", f"{E3NN_NET}:calculator", "--system", "water_cluster_6",
               "--methods", "tf32,tf32x3", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "coverage (% of float32 contraction FLOPs emulated): tf32 100.00, tf32x3 100.00" in out
    rows = (next(tmp_path.glob("mlip_single_point_*.csv"))).read_text()
    assert ",coverage,fraction emulated," in rows
    bad = tmp_path / "not_pet.pth"
    torch.save({"state_dict": {}}, bad)
    assert main(["mlip", "sp", "--potential", str(bad), "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "not a metatrain (PET) checkpoint" in err[0] and "--calculator" in err[0]
