"""emulate_ / restore_ change each layer's class in place: every model stays intact.

Aliases, identity, hooks, optimizer references, parametrizations, lazy layers and Linear subclasses; what
cannot be swapped is refused with a message or reported, never skipped silently.
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

import tcemu
from tcemu import EmulatedLinear
from tcemu.emulation.linear import emulate_module_
from tcemu.emulation.ops import GemmConfig

# bf16x3's results differ visibly from FP32's, so a layer that silently stayed FP32 cannot pass for emulated
METHOD = "bf16x3"


def emulated(x, lin):
    """What an emulated layer must return: tcemu.linear with its current parameters (the same code path)."""
    return tcemu.linear(x, lin.weight, lin.bias, METHOD)


class MyLinear(nn.Linear):
    """A subclass that adds a method and does not override forward."""

    def norm(self):
        return self.weight.norm()


class OwnForward(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


class Aliased(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.alias = self.a  # the same layer under a second name
        self.b = MyLinear(8, 4)

    def forward(self, x):
        return self.b(self.alias(self.a(x)))


def _x(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


def test_an_aliased_layer_is_emulated_under_both_names_and_stays_one_module():
    torch.manual_seed(0)
    model = Aliased()
    ids = {name: id(mod) for name, mod in model.named_modules(remove_duplicate=False)}
    x = _x(3, 8)
    tcemu.emulate_(model, METHOD)
    assert model.a is model.alias and isinstance(model.a, EmulatedLinear)
    assert {name: id(mod) for name, mod in model.named_modules(remove_duplicate=False)} == ids
    h = emulated(x, model.a)
    assert torch.equal(model(x), emulated(emulated(h, model.a), model.b))
    tcemu.restore_(model)
    assert model.a is model.alias and type(model.a) is nn.Linear and type(model.b) is MyLinear
    assert {name: id(mod) for name, mod in model.named_modules(remove_duplicate=False)} == ids


def test_a_filter_that_disagrees_between_an_aliased_layers_names_is_refused():
    model = Aliased()
    with pytest.raises(ValueError, match=r"registered as 'a', 'alias'.*make filter_fn agree"):
        tcemu.emulate_(model, METHOD, filter_fn=lambda mod, fqn: fqn != "alias")
    assert type(model.a) is nn.Linear and type(model.b) is MyLinear  # refused before any change
    tcemu.emulate_(model, METHOD, filter_fn=lambda mod, fqn: fqn in ("a", "alias"))
    assert isinstance(model.a, EmulatedLinear) and type(model.b) is MyLinear


def test_a_subclass_keeps_its_class_methods_and_survives_copies_pickles_and_compile():
    torch.manual_seed(0)
    lin = MyLinear(8, 4)
    x = _x(5, 8)
    assert tcemu.emulate_(lin, METHOD) is lin
    assert isinstance(lin, MyLinear) and isinstance(lin, EmulatedLinear)
    assert lin.norm() == lin.weight.norm() and torch.equal(lin(x), emulated(x, lin))
    assert repr(lin).startswith("EmulatedMyLinear(in_features=8") and "method=bf16x3" in repr(lin)
    want = lin(x)
    buf = io.BytesIO()
    torch.save(lin, buf)
    buf.seek(0)
    for other in (copy.deepcopy(lin), pickle.loads(pickle.dumps(lin)), torch.load(buf, weights_only=False)):
        assert type(other) is type(lin) and torch.equal(other(x), want) and other.weight is not lin.weight
    torch._dynamo.reset()
    assert torch.equal(torch.compile(lin, backend="eager", fullgraph=True)(x), want)
    tcemu.restore_(lin)
    assert type(lin) is MyLinear and "method" not in repr(lin) and "gemm_config" not in lin.__dict__


def test_hooks_optimizer_and_state_dict_are_untouched():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    seen = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(type(mod).__name__))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    keys = list(model.state_dict())
    tcemu.emulate_(model, METHOD)
    model(_x(4, 8)).sum().backward()
    before = model[2].weight.detach().clone()
    opt.step()  # the optimizer made before the swap updates the layers' own parameters
    assert seen == ["EmulatedLinear"] and list(model.state_dict()) == keys
    assert not torch.equal(model[2].weight, before)


def test_a_parametrized_linear_is_emulated_and_parametrizations_keep_working():
    """emulate_ on a Linear with a parametrization used to break its forward ('EmulatedLinear' object has no
    attribute 'weight'): torch keeps the weight as a property of a per-module class."""

    class Symmetric(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).T

    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    parametrize.register_parametrization(lin, "weight", Symmetric())
    x = _x(3, 8)
    tcemu.emulate_(lin, METHOD)
    assert isinstance(lin, EmulatedLinear) and parametrize.is_parametrized(lin)
    assert parametrize.type_before_parametrizations(lin) is EmulatedLinear
    assert torch.equal(lin.weight, lin.weight.T) and torch.equal(lin(x), emulated(x, lin))
    assert "method=bf16x3" in repr(lin)
    assert torch.equal(copy.deepcopy(lin)(x), lin(x))
    tcemu.restore_(lin)
    assert parametrize.type_before_parametrizations(lin) is nn.Linear and torch.equal(lin(x), F.linear(x, lin.weight,
                                                                                                       lin.bias))
    tcemu.emulate_(lin, METHOD)
    parametrize.remove_parametrizations(lin, "weight")  # torch restores the class the module had: emulated
    assert type(lin) is EmulatedLinear and isinstance(lin.weight, nn.Parameter)
    assert torch.equal(lin(x), emulated(x, lin))


def test_a_parametrization_added_after_the_swap_is_kept_by_restore():
    torch.manual_seed(0)
    lin = MyLinear(6, 6)
    tcemu.emulate_(lin, METHOD)
    parametrize.register_parametrization(lin, "weight", nn.Identity())
    tcemu.restore_(lin)
    assert parametrize.is_parametrized(lin) and parametrize.type_before_parametrizations(lin) is MyLinear
    parametrize.remove_parametrizations(lin, "weight")
    assert type(lin) is MyLinear


def test_lazy_linear_is_emulated_from_its_first_forward():
    model = nn.Sequential(nn.LazyLinear(4), nn.Tanh())
    tcemu.emulate_(model, METHOD)
    assert "method=bf16x3" in repr(model[0])
    x = _x(3, 8)
    y = model(x)  # materialises the layer; this first forward is emulated already
    lin = model[0]
    assert type(lin) is EmulatedLinear and lin.in_features == 8
    assert torch.equal(y, torch.tanh(emulated(x, lin)))
    assert torch.equal(model(x), y)
    tcemu.restore_(model)
    assert type(lin) is nn.Linear and "cls_to_become" not in lin.__dict__
    lazy = nn.LazyLinear(4)
    tcemu.emulate_(lazy, METHOD)
    tcemu.restore_(lazy)  # before materialisation: a plain lazy layer again
    lazy(x)
    assert type(lazy) is nn.Linear


def test_overriding_subclasses_are_reached_by_their_scope_and_refused_by_the_direct_swap():
    """A Linear subclass with its own forward keeps its class; its products are emulated by the functional scope
    (so it is not unreachable), and the Linear swap alone reports it."""
    model = nn.Sequential(OwnForward(4, 4), nn.Linear(4, 2))
    tcemu.emulate_(model, METHOD, warn_unreachable=False)
    assert type(model[0]) is OwnForward and isinstance(model[1], EmulatedLinear)
    assert tcemu.unreachable_layers(model) == []
    assert [(u.fqn, u.type_name) for u in tcemu.unreachable_layers(model, functional=False)] == [("0", "OwnForward")]
    with tcemu.coverage() as cov:
        model(torch.randn(3, 4))
    assert cov.fraction == 1.0
    with pytest.raises(TypeError, match="overrides nn.Linear.forward.*emulate_functional_"):
        emulate_module_(model[0], GemmConfig.make(METHOD))
    tcemu.restore_(model)
    with pytest.warns(UserWarning, match="OwnForward"):
        tcemu.emulate_(model, METHOD, functional=False)


@pytest.mark.parametrize("func", [tcemu.emulate_, tcemu.restore_])
def test_a_non_module_is_refused(func):
    with pytest.raises(TypeError, match=r"expects an nn\.Module \(the model\), got str"):
        func("a string")


def test_an_unknown_method_changes_nothing():
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="unknown"):
        tcemu.emulate_(model, "tf33x3")
    assert type(model[0]) is nn.Linear


def test_a_0d_input_is_refused_with_the_shape_to_use():
    lin = EmulatedLinear(1, 3)
    with pytest.raises(ValueError, match=r"0-d tensor.*\(\.\.\., 1\)"):
        lin(torch.tensor(1.0))


def test_constructor_and_from_linear_stay_public():
    torch.manual_seed(0)
    lin = EmulatedLinear(8, 4, method=METHOD)
    x = _x(2, 8)
    assert torch.equal(lin(x), emulated(x, lin))
    src = MyLinear(8, 4)
    new = EmulatedLinear.from_linear(src, METHOD)
    assert new is not src and new.weight is src.weight and isinstance(new, MyLinear)
    assert type(src) is MyLinear  # from_linear makes a new module; emulate_ changes the module itself
    assert type(new.to_linear()) is MyLinear
