"""tcemu's native library (libtcemu_native.so) against tcemu's Python ops: the same ``tcemu::`` schemas, and the
same bits (forward, backward, double backward) on the CPU in a process where only the native library is loaded;
against FP64 within each method's bound; the loading orders with tcemu's Python."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tcemu
import tcemu.native
from tcemu.emulation.script_ops import OPS
from tcemu.testing import TOP_OF_RANGE_CASES, assert_fp32_faithful, make_inputs

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import _native_cases  # noqa: E402


def _python(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _bits(x):
    return x.view(torch.int64 if x.dtype == torch.float64 else torch.int32) if x.is_floating_point() else x


def _native_results(library: Path, cases: dict, tmp_path: Path, device: str = "cpu", tf32: bool = False) -> dict:
    torch.save(cases, tmp_path / "cases.pt")
    done = subprocess.run([sys.executable, str(HERE / "_native_worker.py"), str(library), str(tmp_path / "cases.pt"),
                           str(tmp_path / "results.pt"), device, str(int(tf32))], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(tmp_path / "results.pt")


def _differences(native: dict, want: dict) -> tuple[int, list[str]]:
    """(tensors compared, what differs) between the native library's results and tcemu's Python ops'."""
    compared, wrong = 0, []
    for name, got in native.items():
        if isinstance(want[name], str) and got == want[name]:
            continue  # the same error (torch's: the double backward of its causal attention)
        if isinstance(want[name], str) or isinstance(got, str):
            wrong.append(f"{name}: Python {want[name] if isinstance(want[name], str) else 'ran'}, native "
                         f"{got if isinstance(got, str) else 'ran'}")
            continue
        if len(got) != len(want[name]):
            wrong.append(f"{name}: {len(got)} results, Python {len(want[name])}")
            continue
        for i, (g, w) in enumerate(zip(got, want[name])):
            if (g is None) != (w is None) or (g is not None and not (
                    g.shape == w.shape and g.dtype == w.dtype and torch.equal(_bits(g), _bits(w)))):
                wrong.append(f"{name}[{i}]: the bits differ")
            compared += g is not None
    return compared, wrong


def test_schemas_are_tcemus(native_library):
    code = ("import json, sys, torch; torch.ops.load_library(sys.argv[1]); "
            "print(json.dumps({n: str(getattr(torch.ops.tcemu, n).default._schema) for n in sys.argv[2:]}))")
    native = json.loads(_python(code, native_library, *[op.name for op in OPS.values()]))
    assert native == {op.name: op.qualified_name.split("::")[0] + "::" + op.schema for op in OPS.values()}


def test_every_case_has_the_bits_of_the_python_ops(native_library, tmp_path):
    """Forward, backward and double backward of every op, Inf/NaN and top-of-range rows included."""
    cases = _native_cases.cases()
    native = _native_results(native_library, cases, tmp_path)
    assert "defined by this library" in native["info"]
    compared, wrong = _differences(native["results"], _native_cases.run_all(cases))
    assert not wrong, wrong
    assert compared > 150


@pytest.mark.gpu
@pytest.mark.parametrize("tf32_allowed", [False, True], ids=["ieee", "tf32-allowed"])
def test_cuda_cases_have_the_bits_of_the_python_ops(native_library, tmp_path, tf32_allowed):
    """On CUDA (the piece products on cuBLAS with TF32 off, whatever the global setting): the bits of tcemu's
    Python ops, every case but method tf32 (cuBLAS's own TF32 there: the native library refuses it, the last test)
    and attention with backend "auto" (tcemu's Python runs its fused kernels or torch's attention there, the native
    library the reference attention). The "auto" products of these small shapes run as SGEMM on both sides (the
    small-shape rule); the ahead-of-time kernels are ``test_native_aot.py``'s."""
    cases = {name: case for name, case in _native_cases.cases().items() if "tf32" not in case["tail"][:2]
             and not (case["op"] == "scaled_dot_product_attention" and case["tail"][-1] != "torch")}
    native = _native_results(native_library, cases, tmp_path, "cuda", tf32_allowed)
    cuda = torch.backends.cuda.matmul
    old = cuda.fp32_precision
    cuda.fp32_precision = "tf32" if tf32_allowed else "ieee"
    try:
        want = _native_cases.run_all(cases, "cuda")
    finally:
        cuda.fp32_precision = old
    compared, wrong = _differences(native["results"], want)
    assert not wrong, wrong
    assert compared > 150


@pytest.mark.gpu
def test_cuda_method_tf32_is_refused(native_library):
    code = """
import sys, torch
torch.ops.load_library(sys.argv[1])
a = torch.randn(4, 4, device="cuda")
try:
    torch.ops.tcemu.matmul(a, a, "tf32", "torch")
except RuntimeError as exc:
    print(str(exc).splitlines()[0])
"""
    line = _python(code, native_library).strip()
    assert "tcemu" in line and "tf32x3" in line, line


def test_products_are_fp32_faithful_against_fp64(native_library, tmp_path):
    """The native products of random and top-of-range operands, against FP64 within each method's bound."""
    cases, operands = {}, {}
    for m in ("tf32x3", "bf16x3", "bf16x6", "bf16x9"):
        for dist in ("normal", "wide", "tiny", "huge"):
            a, b = make_inputs(24, 40, 16, dist, seed=3)
            cases[f"{m}-{dist}"] = _native_cases._case("matmul", [a, b], (m, "torch"))
            operands[f"{m}-{dist}"] = (a, b, m)
    for i, (a, b, m, _) in enumerate(TOP_OF_RANGE_CASES):
        a, b = torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)
        cases[f"top-{i}"] = _native_cases._case("matmul", [a, b], (m, "torch"))
        operands[f"top-{i}"] = (a, b, m)
    native = _native_results(native_library, cases, tmp_path)["results"]
    for name, (a, b, m) in operands.items():
        assert_fp32_faithful(native[name][0], a, b, m)


def test_refusals_name_tcemu_and_what_to_do(native_library):
    code = """
import sys, torch
torch.ops.load_library(sys.argv[1])
a = torch.randn(3, 3)
for call in (lambda: torch.ops.tcemu.matmul(a, a, "fp16x3", "torch"),
             lambda: torch.ops.tcemu.matmul(a, a, "tf32x3", "cutlass"),
             lambda: torch.ops.tcemu.einsum("ij,jk,kl->il", [a, a, a], None, "tf32x3", "torch")):
    try:
        call()
    except (ValueError, RuntimeError) as exc:
        print(type(exc).__name__, "|", str(exc).splitlines()[0])
"""
    lines = _python(code, native_library).splitlines()
    assert len(lines) == 3 and all("tcemu" in line for line in lines), lines
    assert lines[0].startswith("ValueError") and "fp16x3" in lines[0] and "bf16x9" in lines[0]
    assert lines[1].startswith("ValueError") and "cutlass" in lines[1]
    assert lines[2].startswith("RuntimeError") and "3 operands" in lines[2]


def test_loaded_after_tcemu_it_defines_nothing(native_library):
    """tcemu imported first: its Python ops stay (the coverage meter counts their products)."""
    info = tcemu.native.load(native_library)
    assert "defined before it loaded" in info
    a = torch.randn(8, 8)
    with tcemu.coverage() as cov:
        torch.ops.tcemu.matmul(a, a, "tf32x3", "torch")
    assert cov.flops("emulated") > 0


def test_loaded_before_tcemu_its_kernels_give_way(native_library):
    """The native library first, then ``import tcemu``: the schemas are kept, tcemu's Python kernels run."""
    code = """
import sys, torch
torch.ops.load_library(sys.argv[1])
import tcemu
import tcemu.native
a = torch.randn(8, 8)
with tcemu.coverage() as cov:
    torch.ops.tcemu.linear(a, a, None, "bf16x6", "bf16x6", "torch")
print(cov.flops("emulated") > 0)
"""
    assert _python(code, native_library).strip() == "True"


def test_a_second_copy_of_the_library_defines_nothing(native_library, tmp_path):
    """Two copies loaded (a host's own and one a model's extensions name): the first one's ops serve."""
    copy = tmp_path / "libtcemu_native_copy.so"
    copy.write_bytes(native_library.read_bytes())
    code = """
import sys, torch
torch.ops.load_library(sys.argv[1])
torch.ops.load_library(sys.argv[2])
a = torch.randn(5, 5)
print(torch.equal(torch.ops.tcemu.matmul(a, a, "bf16x9", "torch"), torch.ops.tcemu.matmul(a, a, "bf16x9", "auto")))
"""
    assert _python(code, native_library, copy).strip() == "True"


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(6, 5)
        self.outer = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.inner(x))
        return self.outer(torch.einsum("ij,kj->ik", h, h))


def test_export_script_of_a_scripted_module_runs_where_only_the_library_is(native_library, tmp_path):
    """``export_script`` on a scripted module: the saved code calls tcemu's ops, and a process with only the
    native library loads it and gets the output and input gradient of tcemu's Python path."""
    torch.manual_seed(0)
    path = tmp_path / "net.pt"
    counts = tcemu.native.export_script(torch.jit.script(_Net()), "bf16x6", path)
    assert counts == {"tcemu::linear": 2, "tcemu::einsum": 1}
    x = torch.randn(4, 6)
    torch.save(x, tmp_path / "x.pt")
    code = """
import sys, torch
torch.ops.load_library(sys.argv[1])
net = torch.jit.load(sys.argv[2])
x = torch.load(sys.argv[3]).requires_grad_(True)
y = net(x)
(g,) = torch.autograd.grad(y.sum(), x)
torch.save([y.detach(), g], sys.argv[4])
assert "tcemu" not in sys.modules
"""
    _python(code, native_library, path, tmp_path / "x.pt", tmp_path / "out.pt")
    got = torch.load(tmp_path / "out.pt")
    net = torch.jit.load(str(path))
    xg = x.clone().requires_grad_(True)
    y = net(xg)
    (g,) = torch.autograd.grad(y.sum(), xg)
    assert torch.equal(_bits(got[0]), _bits(y.detach())) and torch.equal(_bits(got[1]), _bits(g))
