"""tcemu.EmulationConfig: the environment read with one true/false rule, checked fields, ``tcemu.config`` blocks
that nest and stay in their thread, and the settings reaching the code that reads them."""

from __future__ import annotations

import threading

import pytest
import torch

import tcemu
from tcemu.emulation import configuration
from tcemu.emulation.configuration import ENV_VARS, EmulationConfig, env_flag


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", " yes ", "On"])
def test_true_strings(raw):
    assert env_flag("TCEMU_X", False, {"TCEMU_X": raw}) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", " off"])
def test_false_strings(raw):
    assert env_flag("TCEMU_X", True, {"TCEMU_X": raw}) is False


@pytest.mark.parametrize("default", [True, False])
def test_unset_or_empty_is_the_default(default):
    assert env_flag("TCEMU_X", default, {}) is default
    assert env_flag("TCEMU_X", default, {"TCEMU_X": "  "}) is default


@pytest.mark.parametrize("raw", ["2", "enabled", "-1", "y"])
def test_anything_else_is_a_one_line_error_naming_the_variable(raw):
    with pytest.raises(ValueError, match="TCEMU_X=") as err:
        env_flag("TCEMU_X", True, {"TCEMU_X": raw})
    assert "\n" not in str(err.value)


def test_from_env_reads_every_variable_of_the_table():
    env = {"TCEMU_SMALL_SHAPE_FALLBACK": "off", "TCEMU_SMALL_SHAPE_MIN_FLOPS": "4.5e9",
           "TCEMU_ATTENTION_FALLBACK": "0", "TCEMU_FUSED_ATTENTION": "no", "TCEMU_GEMM_AUTOTUNE": "yes",
           "TCEMU_DIRECT_LAUNCH": "off"}
    cfg = EmulationConfig.from_env(env)
    assert (cfg.small_shape_fallback, cfg.small_shape_min_flops, cfg.attention_fallback, cfg.fused_attention,
            cfg.autotune, cfg.direct_launch) == (False, 4.5e9, False, False, True, False)
    assert EmulationConfig.from_env({}) == EmulationConfig()
    assert set(ENV_VARS.values()) <= {f for f in EmulationConfig.__dataclass_fields__}
    assert set(ENV_VARS) >= set(env) | {"TCEMU_GEMM_CONFIG"}


@pytest.mark.parametrize("raw", ["lots", "-1", "inf", "nan"])
def test_a_bad_threshold_names_its_variable(raw):
    with pytest.raises(ValueError, match="TCEMU_SMALL_SHAPE_MIN_FLOPS="):
        EmulationConfig.from_env({"TCEMU_SMALL_SHAPE_MIN_FLOPS": raw})


def test_a_bad_switch_in_the_environment_fails_at_the_first_read(monkeypatch):
    monkeypatch.setenv("TCEMU_GEMM_AUTOTUNE", "sometimes")
    monkeypatch.setattr(configuration, "_process_default", configuration._process_default.__wrapped__)
    with pytest.raises(ValueError, match="TCEMU_GEMM_AUTOTUNE='sometimes'"):
        tcemu.get_config()


@pytest.mark.parametrize("changes, match", [
    ({"method": "tf33x3"}, "tf33x3"), ({"backend": "cuda"}, "unknown backend"),
    ({"attention": "all"}, "attention scope"), ({"small_shape_min_flops": -1.0}, "small_shape_min_flops"),
    ({"autotune": "yes"}, "autotune must be True or False"), ({"grad_weight_method": "fp16"}, "fp16"),
])
def test_bad_fields_are_refused(changes, match):
    with pytest.raises((ValueError, TypeError), match=match):
        EmulationConfig().replace(**changes)


@pytest.mark.parametrize("given", ["bf16x6", 3, {"method": "bf16x6"}])
def test_a_positional_argument_other_than_a_configuration_is_refused_at_once(given):
    with pytest.raises(TypeError, match=r"tcemu.config takes an EmulationConfig or fields by name"):
        with tcemu.config(given):
            pass


@pytest.mark.parametrize("text, value", [("6e9", 6e9), (" 1000 ", 1000.0), ("0", 0.0)])
def test_a_flop_threshold_given_as_a_string_of_a_number_is_that_number(text, value):
    with tcemu.config(small_shape_min_flops=text) as cfg:
        assert cfg.small_shape_min_flops == value and isinstance(cfg.small_shape_min_flops, float)
    assert EmulationConfig(small_shape_min_flops=text).small_shape_min_flops == value


@pytest.mark.parametrize("given, error, match", [
    ("six", ValueError, "must be a FLOP count"), ("-1", ValueError, ">= 0"), (True, TypeError, "a number"),
    ([6e9], TypeError, "a number"),
])
def test_a_flop_threshold_that_is_not_a_count_is_refused_in_one_line(given, error, match):
    with pytest.raises(error, match=match):
        EmulationConfig(small_shape_min_flops=given)


@pytest.mark.parametrize("bound", ["gamma", "normwise_bound", "elementwise_bound", "eta_bound"])
def test_a_negative_k_has_no_bound(bound):
    from tcemu import testing

    fn = getattr(testing, bound)
    args = (-4,) if bound == "gamma" else ("tf32x3", -4)
    with pytest.raises(ValueError, match="must be >= 0"):
        fn(*args)
    assert fn(*args[:-1], 0) >= 0  # an empty sum: no rounding of its own


def test_unknown_field_is_refused():
    with pytest.raises(TypeError, match="no field small_shape"):
        with tcemu.config(small_shape=False):
            pass


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        tcemu.get_config().autotune = True  # type: ignore[misc]


def test_blocks_nest_and_restore():
    before = tcemu.get_config()
    with tcemu.config(small_shape_fallback=False) as outer:
        assert tcemu.get_config() is outer and not outer.small_shape_fallback
        with tcemu.config(autotune=True) as inner:
            assert not inner.small_shape_fallback and inner.autotune  # inherits the outer block
        assert tcemu.get_config() is outer
        with tcemu.config(EmulationConfig(method="bf16x6")) as whole:  # a whole configuration
            assert whole.method == "bf16x6" and whole.small_shape_fallback
    assert tcemu.get_config() == before


def test_a_block_is_restored_after_an_error():
    before = tcemu.get_config()
    with pytest.raises(RuntimeError):
        with tcemu.config(fused_attention=False):
            raise RuntimeError("boom")
    assert tcemu.get_config() == before


def test_a_block_stays_in_its_thread():
    """An MD loop in one thread does not see the override another thread entered."""
    seen = {}
    entered, checked = threading.Event(), threading.Event()

    def other():
        entered.wait(5)
        seen["other"] = tcemu.get_config().small_shape_fallback
        checked.set()

    t = threading.Thread(target=other)
    t.start()
    with tcemu.config(small_shape_fallback=False):
        entered.set()
        checked.wait(5)
        seen["here"] = tcemu.get_config().small_shape_fallback
    t.join(5)
    assert seen == {"other": True, "here": False}


@pytest.mark.parametrize("op", ["matmul", "linear"])
def test_backward_runs_under_the_forward_configuration(monkeypatch, op):
    """Autograd runs a CUDA backward on its own threads, which do not see the forward thread's override: the
    backward GEMMs still run under the configuration the forward saw (here the backward runs in another thread,
    outside the block, as on CUDA)."""
    from tcemu.emulation import ops

    seen = []
    plain = ops._plain_matmul

    def spy(a, b, cfg):
        seen.append(tcemu.get_config().small_shape_fallback)
        return plain(a, b, cfg)

    monkeypatch.setattr(ops, "_plain_matmul", spy)
    x = torch.randn(5, 8, requires_grad=True)
    w = torch.randn(3, 8, requires_grad=True)
    with tcemu.config(small_shape_fallback=False):
        y = tcemu.matmul(x, w.T) if op == "matmul" else tcemu.linear(x, w)
    t = threading.Thread(target=lambda: y.sum().backward())
    t.start()
    t.join(10)
    assert x.grad is not None and w.grad is not None
    assert seen and all(s is False for s in seen), seen


def test_every_gemm_emulated_switches_both_fallbacks():
    from tcemu.emulation.dispatch import every_gemm_emulated

    with every_gemm_emulated() as cfg:
        assert cfg.small_shape_fallback is False and cfg.attention_fallback is False
        assert tcemu.get_config() is cfg


def test_setting_reads_the_current_block():
    assert configuration.setting("range_fixup") is True
    with tcemu.config(range_fixup=False, small_shape_min_flops=1.0):
        assert configuration.setting("range_fixup") is False
        assert configuration.setting("small_shape_min_flops") == 1.0


def test_moved_module_switches_say_where_they_went():
    gemm = pytest.importorskip("tcemu.emulation.gemm")
    with pytest.raises(AttributeError, match="tcemu.config\\(small_shape_fallback="):
        gemm.SMALL_SHAPE_FALLBACK  # noqa: B018


def test_fused_attention_off_runs_the_reference(monkeypatch):
    """``fused_attention=False``: ``backend="auto"`` never reaches the fused op (it would run under the
    interpreter here), so no kernel is asked for."""
    from tcemu.emulation import attention

    def refuse(*args, **kwargs):
        raise AssertionError("the fused kernels were asked for")

    monkeypatch.setattr(attention, "_fused_unsupported", refuse)
    q = torch.randn(1, 2, 5, 4)
    with tcemu.config(fused_attention=False):
        out = tcemu.scaled_dot_product_attention(q, q, q, method="tf32x3")
    assert torch.equal(out, attention.sdpa_reference(q, q, q, method="tf32x3"))


def test_the_report_switch_of_the_autoload_hook_follows_the_same_rule(monkeypatch):
    from tcemu import autoload

    monkeypatch.setenv("TCEMU_FP32_PRECISION", "tf32x3")
    monkeypatch.setenv("TCEMU_REPORT", "maybe")
    with pytest.raises(ValueError, match="TCEMU_REPORT='maybe'"):
        autoload.install_from_environment()


def test_the_backend_hands_the_spec_to_the_launch(monkeypatch):
    """Eager products reach the launchers with the MethodSpec the backend resolved (no name is looked up again
    on the way; the torch ops, whose schema carries a name, are for torch.compile)."""
    pytest.importorskip("triton")
    from tcemu.emulation.gemm import TritonBackend, triton_backend
    from tcemu.emulation.methods import METHODS

    seen = []

    def split(b, spec):
        seen.append(("split", spec))
        return tuple(torch.zeros(b.shape[1], b.shape[0]) for _ in range(spec.n_pieces))

    def gemm(a, pieces, spec, bias=None, **kwargs):
        seen.append(("gemm", spec))
        return torch.zeros(a.shape[0], pieces[0].shape[0])

    monkeypatch.setattr(triton_backend, "_split_t", split)
    monkeypatch.setattr(triton_backend, "_emu_mm", gemm)
    spec = METHODS["tf32x3"]
    TritonBackend().linear(torch.randn(4, 3), torch.randn(5, 3), None, spec, None)
    assert seen == [("split", spec), ("gemm", spec)]
    assert all(s is spec for _, s in seen)


@pytest.mark.parametrize(("text", "method", "attention"), [
    ("tf32x3", "tf32x3", "none"), ("BF16x6+attn", "bf16x6", "blocks"), ("tf32x3+attn-step", "tf32x3", "step")])
def test_the_method_string_of_the_command_line(text, method, attention):
    cfg = tcemu.EmulationConfig.from_method_string(text)
    assert (cfg.method, cfg.attention) == (method, attention)
    assert cfg.method_string == text.lower()
    assert tcemu.EmulationConfig.from_method_string(cfg.method_string) == cfg


@pytest.mark.parametrize(("text", "match"), [
    ("tf32x3+att", "unknown suffix"), ("fp32+attn", "emulation methods only"), ("tf33x3", "tf33x3"),
    ("tf32x3+attn+attn", "unknown suffix")])
def test_a_bad_method_string_is_refused(text, match):
    with pytest.raises(ValueError, match=match):
        tcemu.EmulationConfig.from_method_string(text)


def test_a_potential_takes_the_configuration_or_its_string():
    from torch import nn

    from tcemu.mlip import models

    layer = models.apply_method(nn.Linear(3, 2), tcemu.EmulationConfig(method="bf16x6", backend="torch"))
    assert layer.gemm_config.forward.name == "bf16x6" and layer.gemm_config.backend == "torch"
    assert models.check_method("TF32x3+attn") == "tf32x3+attn"
    with pytest.raises(ValueError, match="attention in its attention blocks"):
        models.apply_method(nn.Linear(3, 2), tcemu.EmulationConfig(attention="step"))


def test_the_range_cost_benchmark_switches_the_check_on_top_of_its_settings():
    """benchmarks/gemm_range_cost.py flips range_fixup many times in a run; its other settings stay."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gemm_range_cost.py"
    spec = importlib.util.spec_from_file_location("gemm_range_cost", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    before = tcemu.get_config()
    try:
        bench._SETTINGS.enter_context(tcemu.config(small_shape_fallback=False))
        for on in (False, True, False):
            bench.set_check(on)
            assert (tcemu.get_config().range_fixup, tcemu.get_config().small_shape_fallback) == (on, False)
    finally:
        bench._CHECK.close()
        bench._SETTINGS.close()
    assert tcemu.get_config() == before
