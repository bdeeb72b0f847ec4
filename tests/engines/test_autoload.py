"""tcemu run / TCEMU_FP32_PRECISION: models of a script that never imports tcemu are emulated at their first call."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import tcemu
from tcemu import autoload

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("_md_script.py")
WATER = ROOT / "src" / "tcemu" / "mlip" / "data" / "water_box_192.extxyz"


@pytest.fixture
def hook():
    yield autoload
    autoload.uninstall()


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def test_precision_values():
    assert autoload.parse_precision("tf32x3") == autoload.AutoloadConfig("tf32x3")
    assert autoload.parse_precision(" BF16x6+attn ") == autoload.AutoloadConfig("bf16x6", attention=True)
    for off in (None, "", "ieee", "fp32", "none"):
        assert autoload.parse_precision(off) is None
    for bad in ("tf32x4", "tf32x3+flash", "fp64"):
        with pytest.raises(ValueError, match="TCEMU_FP32_PRECISION=.*choose an emulation method"):
            autoload.parse_precision(bad)


def test_first_call_emulates_the_whole_model(hook):
    x = torch.randn(5, 8)
    explicit = tcemu.emulate_(_mlp(), "tf32x3")
    model = _mlp()
    hook.install("tf32x3")
    y = model(x)
    assert [type(m).__name__ for m in model] == ["EmulatedLinear", "Tanh", "EmulatedLinear"]
    assert torch.equal(y, explicit(x))  # emulated already in the first call, as an explicit swap
    assert hook.reports()[-1][1].emulated_layers == 2


def test_scripts_own_emulation_float64_models_and_plain_code_are_left_alone(hook):
    mine = tcemu.emulate_(_mlp(), "bf16x6")
    f64 = _mlp().double()
    hook.install("tf32x3")
    mine(torch.randn(2, 8))
    f64(torch.randn(2, 8, dtype=torch.float64))
    assert {m.method.name for m in mine if isinstance(m, tcemu.EmulatedLinear)} == {"bf16x6"}
    assert not any(isinstance(m, tcemu.EmulatedLinear) for m in f64)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    assert torch.equal(a @ b, torch.mm(a, b))  # no torch-function mode outside the models


# the hook is a global forward pre-hook until the first call: torch warns that it fires once more under compile
@pytest.mark.filterwarnings("ignore:Using `torch.compile.module.` when there are global hooks on modules:UserWarning")
def test_compiled_model_is_emulated_before_dynamo_traces_it(hook):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    hook.install("tf32x3")
    model = _mlp()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 8)
    y = compiled(x)
    assert isinstance(model[0], tcemu.EmulatedLinear)
    assert torch.equal(y, tcemu.emulate_(_mlp(), "tf32x3")(x))
    assert sum(counters["graph_break"].values()) == 0


def test_interpreter_start_hook_does_nothing_unless_the_variable_is_set(hook, monkeypatch):
    import _tcemu_autoload

    hooks = nn.modules.module._global_forward_pre_hooks
    before = len(hooks)
    monkeypatch.delenv("TCEMU_FP32_PRECISION", raising=False)
    _tcemu_autoload.activate()
    assert len(hooks) == before and hook.installed() is None
    monkeypatch.setenv("TCEMU_FP32_PRECISION", "tf32x3")
    _tcemu_autoload.activate()  # torch is imported: the hand-over hook is registered at once
    assert len(hooks) == before + 1
    model = _mlp()
    model(torch.randn(1, 8))
    assert hook.installed() == autoload.AutoloadConfig("tf32x3") and isinstance(model[0], tcemu.EmulatedLinear)
    assert len(hooks) == before + 1  # the hand-over hook gave its place to tcemu.autoload's


def _run(args, env_extra=None, cwd=ROOT):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TCEMU_")}
    env.update(PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", **(env_extra or {}))
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _pth_python(tmp_path):
    """``python`` whose start processes the packaged tcemu-autoload.pth (as site-packages does for a wheel)."""
    site_dir = tmp_path / "site"
    site_dir.mkdir(exist_ok=True)
    (site_dir / "tcemu-autoload.pth").write_text((ROOT / "src" / "tcemu-autoload.pth").read_text())
    boot = ("import site, sys, runpy; site.addsitedir(sys.argv.pop(1)); sys.argv.pop(0); "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    return [sys.executable, "-c", boot, str(site_dir)]


def test_tcemu_run_and_the_environment_variable_emulate_an_unmodified_md_script(tmp_path):
    """The same ASE MD script (PET through metatomic's calculator) under `tcemu run` and under the variable
    with the interpreter-start hook: the same bits, with the model reported emulated."""
    run = _run([sys.executable, "-m", "tcemu.cli.main", "run", "--method", "tf32x3", "--report", str(SCRIPT),
                str(WATER), "2"])
    var = _run([*_pth_python(tmp_path), str(SCRIPT), str(WATER), "2"],
               {"TCEMU_FP32_PRECISION": "tf32x3", "TCEMU_REPORT": "1"})
    for out in (run, var):
        assert "tcemu autoload (tf32x3): 1 model(s) emulated" in out.stderr
        assert "AtomisticModel: 19 linear layers" in out.stderr
        assert "tcemu imported by the script itself: False" in out.stdout
    assert run.stdout == var.stdout


def test_bad_value_is_a_clear_error(tmp_path):
    """A value that names no method stops the script at its first model call, saying what to set."""
    site_dir = Path(_pth_python(tmp_path)[-1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TCEMU_")}
    env.update(PYTHONPATH=str(ROOT / "src"), TCEMU_FP32_PRECISION="tf32x4")
    code = f"import site; site.addsitedir({str(site_dir)!r}); import torch; torch.nn.Linear(2, 2)(torch.ones(2))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode != 0 and "TCEMU_FP32_PRECISION='tf32x4': choose an emulation method" in out.stderr
