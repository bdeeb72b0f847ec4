"""The public API: mma() shapes, chaining, dtypes, refusals; presets; params override."""

from dataclasses import FrozenInstanceError, replace

import ml_dtypes
import numpy as np
import pytest

from tcemu.numerics import MMAParams, block_fma_bits, get_preset, list_presets, mma
from tcemu.numerics.inputs import make_operands
from tcemu.numerics.inputs_mx import make_scales


def _rand(shape, dtype, rng):
    return rng.standard_normal(shape).astype(dtype)


def test_mma_matches_rows_of_block_fma_bits():
    rng = np.random.default_rng(0)
    a = _rand((16, 32), np.float16, rng)
    b = _rand((32, 8), np.float16, rng)
    c = _rand((16, 8), np.float32, rng)
    d = mma(a, b, c, arch="h100")
    assert d.dtype == np.float32 and d.shape == (16, 8)
    p = get_preset("h100", "mma.sync", "fp16", "fp32")
    rows = block_fma_bits(np.repeat(a.view(np.uint16), 8, axis=0), np.tile(b.view(np.uint16).T, (16, 1)),
                          c.view(np.uint32).reshape(-1), p)
    assert np.array_equal(d.view(np.uint32).reshape(-1), rows)


def test_chaining_equals_two_instructions():
    rng = np.random.default_rng(1)
    a = _rand((4, 32), ml_dtypes.bfloat16, rng)
    b = _rand((32, 3), ml_dtypes.bfloat16, rng)
    c = _rand((4, 3), np.float32, rng)
    for arch in ("a100", "h100", "b200"):
        whole = mma(a, b, c, arch=arch)
        first = mma(a[:, :16], b[:16], c, arch=arch)
        assert np.array_equal(whole.view(np.uint32), mma(a[:, 16:], b[16:], first, arch=arch).view(np.uint32))


def test_batch_broadcast_and_fp16_output():
    rng = np.random.default_rng(2)
    a = _rand((5, 2, 16), np.float16, rng)
    b = _rand((16, 4), np.float16, rng)
    c = _rand((2, 4), np.float16, rng)
    d = mma(a, b, c, arch="a100", output_format="fp16")
    assert d.dtype == np.float16 and d.shape == (5, 2, 4)
    assert np.array_equal(d[3].view(np.uint16), mma(a[3], b, c, arch="a100", output_format="fp16").view(np.uint16))


def test_fp8_and_tf32_inputs():
    rng = np.random.default_rng(3)
    a = _rand((2, 32), ml_dtypes.float8_e4m3fn, rng)
    b = _rand((32, 2), ml_dtypes.float8_e5m2, rng).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    c = np.zeros((2, 2), np.float32)
    for instr in ("mma.sync", "wgmma"):
        assert mma(a, b, c, arch="h200", instruction=instr).shape == (2, 2)
    x = np.array([[np.array(0x3F801800, np.uint32).view(np.float32)] * 8], dtype=np.float32)  # T23
    y = np.ones((8, 1), np.float32)
    d = mma(x, y, np.zeros((1, 1), np.float32), arch="a100", input_format="tf32")
    assert d.view(np.uint32)[0, 0] == 0x41000000  # 8 x 1.0: the low 13 bits of each operand ignored


def test_h200_is_h100():
    assert replace(get_preset("h200", "mma.sync", "fp16", "fp32"), label="") == replace(
        get_preset("h100", "mma.sync", "fp16", "fp32"), label="")


def test_params_override_and_frozen():
    p = get_preset("h100", "mma.sync", "fp16", "fp32")
    with pytest.raises(FrozenInstanceError):
        p.frac_bits = 24  # type: ignore[misc]
    a = np.zeros((1, 16), np.float16)
    a[0, :3] = 2.0**-24
    b = np.array([[1.0], [0.5], [0.5]] + [[0.0]] * 13, np.float16)
    c = np.ones((1, 1), np.float32)
    assert mma(a, b, c, arch="h100").view(np.uint32)[0, 0] == 0x3F800001  # T3, F=25
    assert mma(a, b, c, params=replace(p, frac_bits=24)).view(np.uint32)[0, 0] == 0x3F800000  # as F=24


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(arch="rtx9090"), "valid: .*v100"),
        (dict(arch="v100", input_format="bf16"), "no preset .* v100 .* supports"),
        (dict(arch="a100", instruction="wgmma"), "no preset .*instructions"),
        (dict(arch="h100", instruction="dmma"), "unknown instruction .* valid"),
        (dict(arch="h100", output_format="fp128"), "unknown format"),
        (dict(arch="h100", output_format="fp64"), "no preset .*fp16->fp64"),  # fp64 D: fp64 inputs (DMMA) only
    ],
)
def test_refusals_name_valid_choices(kwargs, match):
    a = np.zeros((2, 16), np.float16)
    b = np.zeros((16, 2), np.float16)
    c = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match=match):
        mma(a, b, c, **kwargs)


def test_refusals_shapes_and_values():
    c = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match="not a multiple of the instruction's K=16"):
        mma(np.zeros((2, 8), np.float16), np.zeros((8, 2), np.float16), c, arch="h100")
    with pytest.raises(ValueError, match="shapes do not match"):
        mma(np.zeros((2, 16), np.float16), np.zeros((32, 2), np.float16), c, arch="h100")
    with pytest.raises(ValueError, match="cannot infer the input format"):
        mma(np.zeros((2, 16), np.float32), np.zeros((16, 2), np.float32), c, arch="h100")
    with pytest.raises(ValueError, match="not exactly representable in fp16"):
        mma(np.full((2, 16), 0.1, np.float32), np.zeros((16, 2), np.float32), c, arch="h100", input_format="fp16")
    with pytest.raises(ValueError, match="fp16"):
        mma(np.zeros((2, 16), np.float16), np.zeros((16, 2), np.float16), np.full((2, 2), 0.1, np.float32),
            arch="h100", output_format="fp16")


def test_operands_of_two_formats():
    """fp16 A with bf16 B was accepted silently (B's values were read as fp16): a pair without a preset is refused;
    e4m3 x e5m2, which the instructions take, runs as the mixed preset (b read as e5m2)."""
    c = np.zeros((2, 2), np.float32)
    a16, b16 = np.ones((2, 16), np.float16), np.ones((16, 2), np.float16)
    with pytest.raises(ValueError, match=r"no preset for arch=h100, instruction=mma.sync, fp16.bf16->fp32"):
        mma(a16, b16.astype(ml_dtypes.bfloat16), c, arch="h100")
    a8 = np.full((2, 32), 448.0).astype(ml_dtypes.float8_e4m3fn)
    b8 = np.full((32, 2), 57344.0).astype(ml_dtypes.float8_e5m2)
    for instr in ("mma.sync", "wgmma"):
        d = mma(a8, b8, c, arch="h100", instruction=instr)
        p = get_preset("h100", instr, "e4m3.e5m2")
        want = block_fma_bits(np.full((4, 32), 0x7E, np.uint8), np.full((4, 32), 0x7B, np.uint8),
                              np.zeros(4, np.uint32), p)
        assert np.array_equal(d.view(np.uint32).ravel(), want) and np.all(d > 0)
    with pytest.raises(ValueError, match=r"a has dtype float16 \(fp16\) but its input format is bf16"):
        mma(a16, b16, c, arch="h100", input_format="bf16")
    # float32 values of the format stay accepted (the documented way to pass tf32, and fp16 values too)
    assert np.array_equal(mma(a16, b16.astype(np.float32), c, arch="h100"), mma(a16, b16, c, arch="h100"))


@pytest.mark.parametrize("arch, fmt, dtype, out", [("h100", "fp16", np.float16, "fp32"), ("a100", "bf16", None, "fp32"),
                                                   ("h100", "fp16", np.float16, "fp16"), ("h200", "tf32", np.float32, "fp32")])
def test_k_zero_runs_no_instruction_so_d_is_c(arch, fmt, dtype, out):
    """K = 0 raised numpy's reshape error; no instruction runs, so D = C bit for bit (batch broadcast too)."""
    dtype = dtype or ml_dtypes.bfloat16
    c_dtype = np.float16 if out == "fp16" else np.float32
    c = np.array([[1.5, -0.0], [np.inf, 2.0**-20]], c_dtype)
    d = mma(np.zeros((3, 2, 0), dtype), np.zeros((0, 2), dtype), c, arch=arch, input_format=fmt, output_format=out)
    assert d.shape == (3, 2, 2) and d.dtype == c_dtype
    assert all(np.array_equal(d[i].view(np.uint16 if out == "fp16" else np.uint32),
                              c.view(np.uint16 if out == "fp16" else np.uint32)) for i in range(3))


def test_params_validation():
    with pytest.raises(ValueError, match="frac_bits"):
        MMAParams("fp16", "fp32", 16, 16, 40)
    with pytest.raises(ValueError, match="input_format"):
        MMAParams("fp64", "fp32", 16, 16, 25)
    with pytest.raises(ValueError, match="interleave"):
        MMAParams("fp16", "fp32", 16, 16, 25, interleave=((0, 1), (2, 3)))


def test_every_preset_runs_and_has_sources():
    rng = np.random.default_rng(4)
    for key in list_presets():
        p = get_preset(*key)
        assert p.sources and p.label
        a, b, c = make_operands(p, 8, p.k_instr, "normal", rng)
        scales = make_scales(p, 8, p.k_instr, "normal", rng) if p.scale_format else (None, None)
        assert block_fma_bits(a, b, c, p, *scales).shape == (8,)


def test_shorter_mma_shapes_chain_as_separate_instructions():
    """h100 m16n8k8: K=16 runs as two chained 8-product instructions (two RZ roundings), m16n8k16 as one
    block; the T4-style vector tells them apart (a[k] = 2^-23 at k = 9 survives only in one block)."""
    p8 = get_preset("h100", "mma.sync.m16n8k8", "fp16", "fp32")
    p16 = get_preset("h100", "mma.sync", "fp16", "fp32")
    assert (p8.k_instr, p8.n_fma, p16.k_instr, p16.n_fma) == (8, 8, 16, 16)
    a = np.zeros((1, 16), np.float16)
    a[0, 0], a[0, 9] = 1.0, 2.0**-23
    b = np.ones((16, 1), np.float16)
    c = np.array([[1 + 2.0**-23]], np.float32)
    assert mma(a, b, c, arch="h100").view(np.uint32)[0, 0] == 0x40000001
    assert mma(a, b, c, arch="h100", instruction="mma.sync.m16n8k8").view(np.uint32)[0, 0] == 0x40000000
    with pytest.raises(ValueError, match="valid K"):
        get_preset("h100", "mma.sync.m16n8k4", "fp16", "fp32")
