"""The twin's schedule (tcemu.numerics.schedule): derived from the dispatcher, checked against what the kernels
compile to and against the Triton kernel itself.

* structure: every candidate configuration of every method derives a schedule with each product once per
  K-tile, the launcher's kernel choice and mode, the L0 product placed as the documented mode says;
* the derivation reads the launcher: a changed mode rule changes the schedule;
* offline compiles (no GPU): the instruction and its K per architecture (PTX), and the FP32 opcodes per element
  of C (SASS) equal the schedule's steps (FFMA where the schedule fuses, FMUL and FADD elsewhere);
* ``interpret``: the Triton kernel run under TRITON_INTERPRET=1 with the Tensor Core model in its ``tl.dot``
  gives the twin's bits (without FMA contraction, which the NumPy interpreter does not do), every mode.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest

pytest.importorskip("triton")

from tcemu.emulation.gemm.launch import KERNEL_METHODS, KernelConfig, config_candidates, pick_config  # noqa: E402
from tcemu.emulation.methods import get_method  # noqa: E402
from tcemu.numerics import get_preset  # noqa: E402
from tcemu.numerics.schedule import KERNEL_INSTRUCTION, derive_schedule  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
EM = importlib.import_module("tcemu.emulation.gemm.launch")


def _all_candidates(spec):
    return list(dict.fromkeys(config_candidates(spec, 4096) + config_candidates(spec, 64)))


@pytest.mark.parametrize("method", list(KERNEL_METHODS))
def test_every_candidate_config_derives_a_schedule(method):
    spec = get_method(method)
    elem = 2 if spec.piece_format == "bf16" else 4
    for cfg in _all_candidates(spec):
        for k in (256, 250, 258):
            s = derive_schedule(method, cfg, arch="h200", K=k)
            mmas = [st for st in s.tile if st.op == "mma"]
            assert sorted(st.product for st in mmas) == sorted(spec.products), (cfg, s.tile)
            gluon = cfg.wgmma and method != "bf16x9" and (k * elem) % 16 == 0
            assert (s.kernel != "triton") == gluon, (cfg, k)
            want_mode = 1 if cfg.wgmma else EM._constexprs(spec, cfg, k, False)["MODE"]
            assert s.mode == want_mode, (cfg, k)
            assert s.bk == cfg.bk and s.params.k_instr == (8 if spec.piece_format == "tf32" else 16)
            l0 = next(st for st in mmas if st.product == (0, 0))
            if s.mode == 1:  # the L0 tile from zero; corrections onto their running accumulator c<level>
                assert l0.srcs == ()
                assert all(st.dst == st.srcs[0] == f"c{sum(st.product)}" for st in mmas if st is not l0)
            else:  # the L0 product last, onto the scaled corrections
                assert mmas[-1] is l0 and l0.srcs == ("t",)


def test_default_config_is_the_dispatchers_choice():
    spec = get_method("tf32x3")
    for shape in ((4096, 256, 1024), (4096, 512, 256), (64, 64, 4096)):
        m, n, k = shape
        assert derive_schedule("tf32x3", M=m, N=n, K=k).config == str(pick_config(spec, m, n, k))
    with pytest.raises(ValueError, match="M, N and K"):
        derive_schedule("tf32x3")


def test_schedule_follows_the_launchers_mode_rule(monkeypatch):
    """A change in the launcher's mode rule (emu_mm._constexprs) changes the twin's schedule."""
    before = derive_schedule("bf16x6", "128x64x64w8s3m1p", K=128)
    real = EM._constexprs
    monkeypatch.setattr(EM, "_constexprs", lambda *a, **k: dict(real(*a, **k), MODE=0))
    after = derive_schedule("bf16x6", "128x64x64w8s3m1p", K=128)
    assert before.mode == 1 and after.mode == 0 and before.tile != after.tile


def test_instruction_choice_per_arch():
    assert derive_schedule("tf32x3", "128x128x32w8s3m1p", arch="a100").params == get_preset("a100", "mma.sync", "tf32")
    assert derive_schedule("bf16x9", "128x64x64w8s3m0p", arch="b200").params == get_preset("b200", "tcgen05", "bf16")
    s = derive_schedule("tf32x3", "128x128x32w8s3m1p", arch="h200", instruction="mma.sync")  # a what-if
    assert s.params == get_preset("h200", "mma.sync", "tf32")
    assert derive_schedule("tf32x3", "128x128x32w8s3m1pg", arch="a100", K=256).kernel == "triton"


# The offline compiles need only Triton (its ptxas and cuobjdump ship with it): wherever Triton imports and the
# interpreter is off they run, and a compile that fails is a failure here, never a skip.
needs_compile = pytest.mark.skipif(INTERPRET, reason="TRITON_INTERPRET=1 replaces Triton's compiler (the CPU pass "
                                   "runs these)")


@needs_compile
@pytest.mark.parametrize(("arch", "method"), [(80, "tf32x3"), (80, "bf16x6"), (100, "tf32x3"), (100, "bf16x6")])
def test_kernel_instruction_per_architecture_from_ptx(arch, method):
    """tl.dot's instruction and its K per architecture, read from the PTX, are the twin's (sm_90: below)."""
    from tcemu.numerics.hardware.kernel_sass import kernel_evidence

    cfg = "128x128x32w8s3m1p" if method == "tf32x3" else "128x64x64w8s3m1p"
    ev = kernel_evidence(method, cfg, arch=arch)
    name = {80: "a100", 100: "b200"}[arch]
    s = derive_schedule(method, cfg, arch=name, K=256)
    assert (ev["instruction"], ev["k_instr"]) == (KERNEL_INSTRUCTION[name], s.params.k_instr)


@needs_compile
@pytest.mark.parametrize(("method", "config", "bias"), [
    ("tf32x3", "128x128x32w8s3m1p", True), ("bf16x6", "128x64x64w8s3m1p", False),
    ("bf16x6", "128x64x64w8s3m4p", False), ("bf16x9", "128x64x64w8s3m0p", False),
    ("bf16x6", "128x64x64w8s3m1pg", True),
])
def test_sm90_fp32_opcodes_per_element_equal_the_schedule(method, config, bias):
    """sm_90 SASS of a presplit configuration (the Triton kernel, and the Gluon kernel for pg): wgmma with the
    schedule's K; per element of C each thread holds, FFMA = the fused multiply-adds of the schedule, FMUL = its
    other scalings, FADD = its additions (the loop body counted once)."""
    from tcemu.numerics.hardware.kernel_sass import kernel_evidence

    ev = kernel_evidence(method, config, arch=90, has_bias=bias)
    s = derive_schedule(method, config, arch="h200", K=256, has_bias=bias)
    steps = s.tile + s.epilogue
    want = {"FFMA": sum(st.op == "scale_add" and st.fused for st in steps),
            "FMUL": sum(st.op == "scale" or (st.op == "scale_add" and not st.fused) for st in steps),
            "FADD": sum(st.op in ("add", "bias") or (st.op == "scale_add" and not st.fused) for st in steps)}
    assert (ev["instruction"], ev["k_instr"]) == ("wgmma", s.params.k_instr)
    got = {op: ev[op] / ev["elements_per_thread"] for op in want}
    assert got == want, (got, want)


# ---------------------------------------------------------------------------------------------------------------
# the Triton kernel itself, under the interpreter, with the Tensor Core model in tl.dot
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.interpret
@pytest.mark.parametrize(("method", "config"), [
    ("tf32x3", "32x32x16w4s1m0"), ("tf32x3", "32x32x16w4s1m1"), ("tf32x3", "32x32x16w4s1m1po"),
    ("tf32x3", "32x32x16w4s1m1pg"), ("bf16x3", "32x32x32w4s1m0p"), ("bf16x3", "32x32x32w4s1m1"),
    ("bf16x6", "32x32x32w4s1m0"), ("bf16x6", "32x32x32w4s1m1p"), ("bf16x6", "32x32x32w4s1m4"),
    ("bf16x9", "32x32x32w4s1m0p"),
])
@pytest.mark.parametrize("family", ["normal", "tiny"])
def test_triton_kernel_under_the_interpreter_equals_the_twin(method, config, family):
    """emu_mm's Triton kernel itself (its loop, its order, its register arithmetic, its K tail), with each
    tl.dot computed by the Tensor Core model, gives the twin's bits: the schedule is the kernel's."""
    import torch

    from tcemu.emulation.gemm import emu_mm, split_t
    from tcemu.numerics.emulated import emulated_matmul_bits
    from tcemu.numerics.hardware.interpret_dot import tensor_core_dot

    rng = np.random.default_rng(21)
    m, k, n = 40, 75, 36  # row and column tails, a K tail
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    if family == "tiny":
        a, b = a * 2.0**-100, b * 2.0**-30
    a, b = a.astype(np.float32), b.astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    with tensor_core_dot(get_method(method).piece_format) as dots:
        got = emu_mm(torch.from_numpy(a), split_t(torch.from_numpy(b), method), method,
                     torch.from_numpy(bias), config=KernelConfig.parse(config)).numpy().view(np.uint32)
    assert dots["dots"] > 0
    s = derive_schedule(method, config, arch="h200", K=k, has_bias=True).without_contraction()
    want = emulated_matmul_bits(a, b, method, schedule=s, bias=bias)
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]
