"""emulate_ / restore_ on an MLP and a small transformer: outputs, state dicts, copies, caches, reports."""

import copy
import io
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tcemu
from tcemu import EmulatedLinear
from tcemu.testing import normwise_bound, relative_errors


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 128), nn.SiLU(), nn.Linear(128, 1))


class TinyTransformer(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.embed = nn.Linear(8, d)
        self.layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=128, batch_first=True, dropout=0.0)
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        return self.head(self.layer(self.embed(x))).sum(-1)


def test_emulate_swaps_every_linear_in_place_and_keeps_parameters():
    model = mlp()
    params = {name: p for name, p in model.named_parameters()}
    keys = list(model.state_dict())
    out = tcemu.emulate_(model, "bf16x6")
    assert out is model
    assert all(isinstance(model[i], EmulatedLinear) for i in (0, 2, 4))
    assert list(model.state_dict()) == keys
    for name, p in model.named_parameters():
        assert p is params[name], "parameters are shared, not copied"
    assert "method=bf16x6" in repr(model)


def test_emulated_mlp_matches_fp64_and_restore_gives_plain_linear_back():
    model = mlp()
    x = torch.randn(32, 64)
    ref = copy.deepcopy(model).double()(x.double())
    tcemu.emulate_(model, "tf32x3")
    assert relative_errors(model(x), ref)[0] <= normwise_bound("tf32x3", 128) * 4
    tcemu.restore_(model)
    assert all(type(model[i]) is nn.Linear for i in (0, 2, 4))
    assert "method" not in repr(model)


def test_filter_fn_selects_layers():
    model = mlp()
    tcemu.emulate_(model, "bf16x9", filter_fn=lambda mod, fqn: fqn != "4")
    assert isinstance(model[0], EmulatedLinear) and type(model[4]) is nn.Linear


def test_state_dict_round_trip_deepcopy_and_pickle():
    model = tcemu.emulate_(mlp(), "tf32x3")
    x = torch.randn(8, 64)
    y = model(x)  # fills the weight-piece cache
    sd = model.state_dict()
    assert not any("cache" in k for k in sd)
    fresh = tcemu.emulate_(mlp(seed=1), "tf32x3")
    fresh.load_state_dict(sd)
    assert torch.equal(fresh(x), y)
    clone = copy.deepcopy(model)
    assert torch.equal(clone(x), y) and clone[0].weight is not model[0].weight
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert torch.equal(loaded(x), y) and "method=tf32x3" in repr(loaded)
    assert torch.equal(pickle.loads(pickle.dumps(model))(x), y)
    plain = mlp(seed=2)
    plain.load_state_dict(tcemu.restore_(copy.deepcopy(model)).state_dict())
    assert torch.equal(plain[0].weight, model[0].weight)


def test_weight_pieces_are_recomputed_when_the_weight_changes():
    layer = EmulatedLinear.from_linear(nn.Linear(16, 4), "bf16x6")
    x = torch.randn(3, 16)
    y0 = layer(x)
    with torch.no_grad():
        layer.weight.mul_(2)  # in place: same storage, new version
    y1 = layer(x)
    assert torch.allclose(y1 - layer.bias, 2 * (y0 - layer.bias), rtol=1e-5, atol=1e-6)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(x).sum().backward()
    opt.step()
    ref = torch.nn.functional.linear(x.double(), layer.weight.double(), layer.bias.double())
    assert relative_errors(layer(x), ref)[0] < 1e-6


def test_training_step_runs_and_matches_fp32_closely():
    torch.manual_seed(0)
    model, ref = mlp(), mlp()
    ref.load_state_dict(model.state_dict())
    tcemu.emulate_(model, "bf16x6")
    x, t = torch.randn(16, 64), torch.randn(16, 1)
    for m in (model, ref):
        opt = torch.optim.SGD(m.parameters(), lr=1e-2)
        ((m(x) - t) ** 2).mean().backward()
        opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)


def test_transformer_swap_reports_unreachable_attention_and_mode_covers_it():
    torch.manual_seed(0)
    model = TinyTransformer()
    x = torch.randn(2, 5, 8)
    ref = copy.deepcopy(model).double()(x.double())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tcemu.emulate_(model, "tf32x3")
    assert any("MultiheadAttention" in str(w.message) for w in caught)
    unreached = tcemu.unreachable_layers(model)
    assert [u.fqn for u in unreached] == ["layer.self_attn"]
    assert isinstance(model.layer.linear1, EmulatedLinear) and isinstance(model.embed, EmulatedLinear)
    assert type(model.layer.self_attn.out_proj) is not EmulatedLinear  # called functionally: not swapped
    model.eval()
    with tcemu.emulation_mode("tf32x3"):
        out = model(x)
    assert relative_errors(out, ref)[0] < 1e-5


def test_emulation_mode_routes_functional_products():
    calls = []
    orig = tcemu.emulation.mode.matmul

    def spy(*args, **kwargs):
        calls.append(args[2])
        return orig(*args, **kwargs)

    a, b = torch.randn(4, 300), torch.randn(300, 5)
    tcemu.emulation.mode.matmul = spy
    try:
        with tcemu.emulation_mode("bf16x3"):
            c = a @ b
            torch.mm(a, b)
            d = torch.matmul(a.double(), b.double())  # not float32: untouched
    finally:
        tcemu.emulation.mode.matmul = orig
    assert len(calls) == 2 and d.dtype == torch.float64
    err = relative_errors(c, a.double() @ b.double())[0]
    assert 1e-7 < err < normwise_bound("bf16x3", 300)  # bf16x3 accuracy: the mode really emulates


def test_fp64_layers_compute_in_fp64_and_other_dtypes_are_refused():
    model = tcemu.emulate_(mlp(), "tf32x3").double()
    x = torch.randn(3, 64, dtype=torch.float64)
    assert model(x).dtype == torch.float64
    layer = EmulatedLinear(8, 2)
    with pytest.raises(TypeError, match="float32"):
        layer(torch.randn(3, 8, dtype=torch.float16))


def test_emulate_on_a_bare_linear_and_re_emulate_changes_method():
    lin = nn.Linear(4, 2)
    new = tcemu.emulate_(lin, "bf16x9")
    assert isinstance(new, EmulatedLinear) and new.weight is lin.weight
    model = tcemu.emulate_(mlp(), "bf16x9")
    tcemu.emulate_(model, "tf32x3")
    assert model[0].method.name == "tf32x3"


def test_inference_mode_models_and_inputs():
    with torch.inference_mode():
        model = tcemu.emulate_(mlp(), "tf32x3")  # weights created as inference tensors
        x = torch.randn(4, 64)
        y = model(x)
        ref = tcemu.restore_(model)(x)  # plain nn.Linear: inference tensors stay inside inference mode
    assert torch.allclose(y, ref, rtol=1e-5, atol=1e-6)
    model2 = tcemu.emulate_(mlp(), "bf16x6")
    with torch.inference_mode():
        assert model2(torch.randn(3, 64)).shape == (3, 1)


def test_emulated_layers_under_emulation_mode_compile_without_graph_breaks():
    """A swapped model run inside emulation_mode (for its functional products) compiles with fullgraph=True,
    forward and input gradient (as forces), with the eager results. The ops' operand check used to read
    ``tensor.layout``, which Dynamo refuses inside an autograd.Function while a torch-function mode is active:
    the graph broke at every emulated layer."""
    torch._dynamo.reset()
    model = mlp()
    tcemu.emulate_(model, "tf32x3", warn_unreachable=False)
    x = torch.randn(8, 64, requires_grad=True)

    def energy_and_force(fn):
        with tcemu.emulation_mode("tf32x3"):
            e = fn(x).sum()
            (g,) = torch.autograd.grad(e, x)
        return e.detach(), g

    e_eager, g_eager = energy_and_force(model)
    e_comp, g_comp = energy_and_force(torch.compile(model, fullgraph=True))
    torch.testing.assert_close(e_comp, e_eager)
    torch.testing.assert_close(g_comp, g_eager)


class AttentionBlock(nn.Module):
    """PET-like: projections as nn.Linear, attention and one more product functional."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.qkv, self.out, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x, mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(o.transpose(1, 2).reshape(b, n, d)) + x @ torch.ones(d, d) / d


class BlockModel(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.block = nn.Linear(8, d), AttentionBlock(d)

    def forward(self, x, mask):
        h = self.embed(x)
        return (self.block(h, mask) @ h.transpose(1, 2)).sum()  # this product is outside the block


def _block_inputs(b=3, n=9):
    torch.manual_seed(1)
    return torch.randn(b, n, 8), torch.randn(b, 1, n, n)


def _is_block(mod, fqn):
    return isinstance(mod, AttentionBlock)


def _reference(model, method, x, mask, *, attention=True, matmuls=True):
    """What emulate_functional_ should compute: the block's forward inside the mode, the rest plain."""
    h = model.embed(x)
    with tcemu.emulation_mode(method, attention=attention, matmuls=matmuls):
        y = type(model.block).forward(model.block, h, mask)
    return (y @ h.transpose(1, 2)).sum()


def test_emulate_functional_scopes_the_mode_to_the_selected_modules():
    x, mask = _block_inputs()
    model = BlockModel()
    plain = model(x, mask)
    assert tcemu.emulate_functional_(model, "bf16x3", _is_block) is model
    got = model(x, mask)
    assert torch.equal(got, _reference(model, "bf16x3", x, mask))
    assert not torch.equal(got, plain)  # bf16x3 is visibly not FP32
    whole = BlockModel()
    with tcemu.emulation_mode("bf16x3", attention=True):
        assert not torch.equal(got, whole(x, mask))  # the outer product is left alone, unlike a whole-model mode
    tcemu.emulate_functional_(model, "bf16x3", _is_block, matmuls=False)  # re-scoping replaces the wrapper
    assert torch.equal(model(x, mask), _reference(model, "bf16x3", x, mask, matmuls=False))
    assert not torch.equal(model(x, mask), got)
    tcemu.restore_(model)
    assert "forward" not in model.block.__dict__ and torch.equal(model(x, mask), plain)


def test_emulate_functional_keeps_state_dict_and_survives_deepcopy_and_pickle():
    x, mask = _block_inputs()
    model = BlockModel()
    keys = {k: v.clone() for k, v in model.state_dict().items()}
    tcemu.emulate_functional_(model, "bf16x3", _is_block)
    sd = model.state_dict()
    assert sd.keys() == keys.keys() and all(torch.equal(sd[k], keys[k]) for k in keys)
    want = model(x, mask)
    twin = copy.deepcopy(model)
    assert twin.block.forward.args[0] is twin.block  # bound to the copy, not to the original
    assert torch.equal(twin(x, mask), want)
    with torch.no_grad():
        twin.block.out.bias.add_(1.0)
    assert torch.equal(model(x, mask), want) and not torch.equal(twin(x, mask), want)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert torch.equal(loaded(x, mask), want)
    assert torch.equal(pickle.loads(pickle.dumps(model))(x, mask), want)


def test_emulate_functional_refuses_what_it_cannot_do():
    model = BlockModel()
    with pytest.raises(ValueError, match="selected no module"):
        tcemu.emulate_functional_(model, "tf32x3", lambda m, fqn: False)
    with pytest.raises(ValueError, match="emulate nothing"):
        tcemu.emulate_functional_(model, "tf32x3", _is_block, attention=False, matmuls=False)
    with pytest.raises(ValueError, match="unknown"):
        tcemu.emulate_functional_(model, "tf33x3", _is_block)
    assert all("forward" not in m.__dict__ for m in model.modules())  # nothing changed by the refusals


def test_emulate_functional_compiles_in_one_graph_with_the_eager_results():
    """torch.compile(fullgraph=True) traces through the scoped forward (the mode entered inside the graph):
    one graph, forward and input gradient equal to eager within FP32 reassociation."""
    torch._dynamo.reset()
    x, mask = _block_inputs()
    model = tcemu.emulate_(BlockModel(), "tf32x3", warn_unreachable=False)
    tcemu.emulate_functional_(model, "tf32x3", _is_block)
    graphs = []

    def capture(gm, _example):
        graphs.append(gm)
        return gm.forward

    def energy_and_force(fn):
        xx = x.clone().requires_grad_(True)
        e = fn(xx, mask)
        (g,) = torch.autograd.grad(e, xx)
        return e.detach(), g

    want = energy_and_force(model)
    got = energy_and_force(torch.compile(model, backend=capture, fullgraph=True))
    assert len(graphs) == 1
    code = str(graphs[0].graph)
    assert "scaled_dot_product_attention" not in code, code  # the mode's, not torch's, attention was traced
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
