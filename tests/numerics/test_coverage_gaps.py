"""The presets that close coverage gaps against MMA-Sim's lists: c fp16 with fp32 d (V100 and Turing
``mma.m8n8k4 .f32.f16.f16.f16``), FP64 DMMA on sm_120, B200 ``kind::f16`` fp16 x bf16. Each is bit-exact
against the exact oracle on every operand kind, and against hand-derived vectors that tell it from its
neighbours."""

import zlib
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from tcemu.numerics import block_fma_bits, get_preset, list_presets, mma
from tcemu.numerics.coverage import coverage_table
from tcemu.numerics.explain import explain_values
from tcemu.numerics.inputs import KINDS, make_operands
from tcemu.numerics.oracle import oracle_bits

C16_KEYS = [("v100", "mma.sync", "fp16", "fp32.fp16"), ("turing", "mma.m8n8k4", "fp16", "fp32.fp16")]
MIXED_KEYS = [("b200", "tcgen05", "fp16.bf16", "fp32"), ("b200", "tcgen05", "bf16.fp16", "fp32")]
NEW_KEYS = C16_KEYS + MIXED_KEYS + [("sm120", "mma.m8n8k4", "fp64", "fp64")]


def _rng(*parts) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def test_listed_with_sources_and_literature_status():
    rows = {(r.arch, r.instruction, r.input_format, r.output_format): r for r in coverage_table()}
    for key in NEW_KEYS:
        assert key in list_presets()
        assert rows[key].status == "literature" and "MMA-Sim" in rows[key].source
    assert "extrapolated" in rows[MIXED_KEYS[0]].source


@pytest.mark.parametrize("key", C16_KEYS + MIXED_KEYS, ids="-".join)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("variant", ["measured", "mmasim"])
def test_model_equals_oracle(key, kind, variant):
    p = get_preset(*key, variant=variant)
    a, b, c = make_operands(p, 48, 2 * p.k_instr, kind, _rng(key, kind, variant))
    assert c.dtype == (np.uint16 if p.c_input_format else np.uint32)
    got, want = block_fma_bits(a, b, c, p), oracle_bits(a, b, c, p)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"{key} {kind}: row {bad[0]}: model {got[bad[0]]:#x} oracle {want[bad[0]]:#x}"


@pytest.mark.parametrize("key", C16_KEYS, ids="-".join)
@pytest.mark.parametrize("variant", ["measured", "mmasim", "toolbox"])
def test_c_fp16_is_the_fp32_preset_on_c_converted_exactly(key, variant):
    p16 = get_preset(*key, variant=variant)
    p32 = get_preset(*key[:3], "fp32", variant=variant)
    assert replace(p16, c_input_format=None, label=p32.label) == p32
    for kind in ("special", "tiny", "wide"):
        a, b, c = make_operands(p16, 500, 8, kind, _rng(key, variant, kind))
        c32 = c.view(np.float16).astype(np.float32).view(np.uint32)
        assert np.array_equal(block_fma_bits(a, b, c, p16), block_fma_bits(a, b, c32, p32))


def test_c_fp16_hand_vector():
    """a = (1, 0, 0, 0), b = (1, 0, 0, 0), c = -2^-24 (fp16 0x8001, subnormal): the block's grid is 2^(0 - F).
    V100 (F = 23): c truncated toward zero to 0, d = 1 = 0x3F800000. Turing (F = 24): c kept, d = 1 - 2^-24 =
    0x3F7FFFFF."""
    a = np.array([[1, 0, 0, 0]], np.float16)
    b = a.T.copy()
    c = np.array([[-(2.0**-24)]], np.float16)
    assert c.view(np.uint16)[0, 0] == 0x8001
    want = {"v100": 0x3F800000, "turing": 0x3F7FFFFF}
    for (arch, instruction, _, out), bits in zip(C16_KEYS, want.values()):
        d = mma(a, b, c, arch=arch, instruction=instruction, output_format=out)
        assert d.dtype == np.float32 and d.view(np.uint32)[0, 0] == bits
        p = get_preset(arch, instruction, "fp16", out)
        raw = block_fma_bits(a.view(np.uint16), b.T.view(np.uint16).copy(), c.view(np.uint16)[0], p)
        assert raw[0] == bits
        assert oracle_bits(a.view(np.uint16), b.T.view(np.uint16), c.view(np.uint16)[0], p)[0] == bits


def test_c_fp16_through_explain_and_an_empty_k():
    """explain reads c in fp16 and shows it converted; with K = 0 (no instruction) D is C in fp32."""
    text = explain_values("1,0,0,0", "1,0,0,0", "-2^-24", get_preset("turing", "mma.m8n8k4", "fp16", "fp32.fp16"))
    assert "c in = 0xB3800000" in text and "result: 0x3F7FFFFF" in text and "(agrees)" in text
    c = np.array([[-(2.0**-24)]], np.float16)
    d = mma(np.zeros((1, 0), np.float16), np.zeros((0, 1), np.float16), c, arch="v100", output_format="fp32.fp16")
    assert d.dtype == np.float32 and d[0, 0] == -(2.0**-24)


def test_c_fp16_refusals():
    fp16_out = get_preset("v100", "mma.sync", "fp16", "fp16")
    assert replace(fp16_out, c_input_format="fp16").c_input_format is None  # c is d's format there
    with pytest.raises(ValueError, match="c_input_format"):
        replace(get_preset("v100", "mma.sync", "fp16", "fp32"), c_input_format="bf16")
    with pytest.raises(ValueError, match="c_input_format"):
        replace(get_preset("h100", "mma.sync", "e4m3", "fp32"), c_input_format="fp16")  # emulated FP8
    with pytest.raises(ValueError, match="fp32.fp16"):
        get_preset("turing", "mma.m16n8k8", "fp16", "fp32.fp16")  # MMA-Sim lists it for m8n8k4 only
    with pytest.raises(ValueError):
        get_preset("a100", "mma.sync", "fp16", "fp32.fp16")


def test_b200_mixed_fp16_bf16_hand_vectors():
    """b is read as bf16: 0x3F80 is 1.0 (1.875 as fp16). One 16-term block, F = 25: a = (1, 2^-13) fp16,
    b = (1, -2^-13) bf16, c = 0: exact 1 - 2^-26 rounds (RZ) to 0x3F7FFFFF; the block truncates -2^-26 on the
    grid 2^-25 to 0, d = 1 = 0x3F800000."""
    p = get_preset("b200", "tcgen05", "fp16.bf16")
    a = np.zeros((1, 16), np.uint16)
    b = np.zeros((1, 16), np.uint16)
    a[0, 0], b[0, 0] = 0x3C00, 0x3F80  # fp16 1.0, bf16 1.0
    c = np.zeros(1, np.uint32)
    assert block_fma_bits(a, b, c, p)[0] == 0x3F800000
    a[0, 1], b[0, 1] = 0x0800, 0xB900  # fp16 2^-13, bf16 -2^-13
    assert block_fma_bits(a, b, c, p)[0] == 0x3F800000 == oracle_bits(a, b, c, p)[0]
    d = mma(a.view(np.float16), b.view(ml_dtypes.bfloat16).T.copy(), np.zeros((1, 1), np.float32),
            arch="b200", instruction="tcgen05")
    assert d.view(np.uint32)[0, 0] == 0x3F800000
    swapped = get_preset("b200", "tcgen05", "bf16.fp16")
    assert block_fma_bits(b, a, c, swapped)[0] == 0x3F800000
    with pytest.raises(ValueError, match="no preset"):
        get_preset("b200", "tcgen05", "fp16.bf16", "fp16")  # fp16 D takes f16 x f16 only (MMA-Sim, PTX)


def test_sm120_fp64_is_the_dmma_chain():
    p = get_preset("sm120", "mma.m8n8k4", "fp64")
    for alias in ("sm_120", "rtx5090", "rtx_blackwell"):
        assert get_preset(alias, "mma", "fp64") == p
    assert replace(p, label="") == replace(get_preset("b200", "mma.m8n8k4", "fp64"), label="")
    with pytest.raises(ValueError, match="shapes"):
        get_preset("sm120", "mma.m16n8k16", "fp64")  # sm_90's shapes: not in MMA-Sim's RTX Blackwell list
    x = np.array([[1.0, 2.0**-60, 0.0, 0.0]])
    d = mma(x, np.array([[1.0], [1.0], [0.0], [0.0]]), np.array([[-1.0]]), arch="sm120")
    # the chain starts from c: fma(1, 1, -1) = 0, then fma(2^-60, 1, 0) = 2^-60 (products summed first would
    # round 1 + 2^-60 to 1 and give 0)
    assert d[0, 0] == 2.0**-60
