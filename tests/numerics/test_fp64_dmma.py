"""FP64 DMMA (a chain of IEEE fp64 FMAs in k order) and the Turing presets: hand vectors from the definitions,
special values, the mma API, names, and the float64 fast path against its exact fallback on the boundary of its
safe window. (Random and adversarial inputs against the oracle: tests/numerics/test_schemes.py.)
"""

import zlib

import numpy as np
import pytest

from tcemu.numerics import block_fma_bits, get_preset, list_presets, mma
from tcemu.numerics.inputs import KINDS, make_operands
from tcemu.numerics.model_fma import FMAChain, fma64, fma64_exact_scalar
from tcemu.numerics.oracle import oracle_bits

DEFAULT_NAN64 = 0xFFF8000000000000  # an invalid operation's NaN on the H100 (docs/hardware/h100-dmma.json)


def _dmma(a, b, c, arch="a100", instruction="mma", variant="measured"):
    p = get_preset(arch, instruction, "fp64", "fp64", variant=variant)
    k = p.k_instr
    ab = np.array([list(a) + [0.0] * (k - len(a))], np.float64).view(np.uint64)
    bb = np.array([list(b) + [0.0] * (k - len(b))], np.float64).view(np.uint64)
    cb = np.array([c], np.float64).view(np.uint64)
    got = int(block_fma_bits(ab, bb, cb, p)[0])
    assert got == int(oracle_bits(ab, bb, cb, p)[0])
    return got


def _b(x: float) -> int:
    return int(np.array([x], np.float64).view(np.uint64)[0])


def test_fused_not_two_roundings():
    """(1 + 2^-30)(1 - 2^-30) - 1 = -2^-60 exactly; a rounded product first would give 0."""
    assert _dmma([1 + 2.0**-30], [1 - 2.0**-30], -1.0) == _b(-(2.0**-60))


def test_increasing_k_order():
    """Products 1, 2^53, -2^53 in k order: 1 + 2^53 rounds to 2^53 (tie to even), then 0; the order 2^53, -2^53, 1
    gives 1."""
    assert _dmma([1.0, 2.0**53, -(2.0**53)], [1.0, 1.0, 1.0], 0.0) == _b(0.0)
    assert _dmma([2.0**53, -(2.0**53), 1.0], [1.0, 1.0, 1.0], 0.0) == _b(1.0)


def test_no_intermediate_overflow_and_gradual_underflow():
    """2^1000 x 2^24 - 2^1023 = 2^1023 (2^1024 exceeds the range only as an intermediate); 2^-537 x 2^-537 = 2^-1074,
    the smallest subnormal; 2^-538 x 2^-537 is a tie at half of it and rounds to +0."""
    assert _dmma([2.0**1000], [2.0**24], -(2.0**1023)) == _b(2.0**1023)
    assert _dmma([2.0**-537], [2.0**-537], 0.0) == 1
    assert _dmma([2.0**-538], [2.0**-537], 0.0) == 0
    assert _dmma([2.0**1000], [2.0**24], 0.0) == _b(np.inf)


def test_special_values_and_zero_signs():
    assert _dmma([np.inf], [0.0], 0.0) == DEFAULT_NAN64
    assert _dmma([np.inf, 1.0], [1.0, -np.inf], 0.0) == DEFAULT_NAN64
    assert _dmma([np.nan], [1.0], 0.0) == 0x7FF8000000000000
    assert _dmma([1.0], [1.0], -np.inf) == _b(-np.inf)
    assert _dmma([-0.0] * 4, [1.0] * 4, -0.0) == _b(-0.0)  # -0 + -0 = -0 at every step
    assert _dmma([-0.0, -0.0, 0.0, -0.0], [1.0] * 4, -0.0) == _b(0.0)  # -0 + +0 = +0, then +0 + -0 = +0
    assert _dmma([1.0], [1.0], -1.0) == _b(0.0)  # exact cancellation: +0


def test_float64_path_equals_exact_fallback_on_its_window():
    """The float64 FMA path against the exact rational FMA on operands at and beside the window's edges."""
    rng = np.random.default_rng(5)
    n = 20000
    sig = lambda: 1 + rng.integers(0, 1 << 52, n) * 2.0**-52  # noqa: E731
    ea = rng.choice([-400, -399, 0, 399, 400], n)
    eb = rng.choice([-400, -399, -1, 1, 399, 400], n)
    a = np.ldexp(sig(), ea) * rng.choice([-1, 1], n)
    b = np.ldexp(sig(), eb) * rng.choice([-1, 1], n)
    near_cancel = -a * b * (1 + rng.integers(-4, 5, n) * 2.0**-52)
    c = np.where(rng.random(n) < 0.5, near_cancel, np.ldexp(sig(), rng.integers(-1074, 800, n)))
    got = fma64(a, b, c)
    want = np.array([fma64_exact_scalar(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())])
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


@pytest.mark.parametrize("arch,instruction,k", [("a100", "mma", 4), ("a100", "mma.m8n8k4", 4), ("ada", "mma", 4),
                                                ("h100", "mma.m16n8k16", 16), ("h200", "mma.m16n8k8", 8),
                                                ("sm_90", "mma.sync.m16n8k4", 4), ("b200", "mma.m8n8k4", 4)])
def test_dmma_names(arch, instruction, k):
    p = get_preset(arch, instruction, "fp64")
    assert (p.k_instr, p.output_format, p.scheme.kind) == (k, "fp64", "fma_chain")
    assert "PTX ISA" in p.sources and "MMA-Sim" in p.sources


def test_dmma_refusals():
    with pytest.raises(ValueError, match="fp64 mma on a100 has shapes"):
        get_preset("a100", "mma.m16n8k16", "fp64")
    with pytest.raises(ValueError, match="returns fp64"):
        get_preset("h100", "mma", "fp64", "fp32")
    with pytest.raises(ValueError):
        get_preset("v100", "mma", "fp64", "fp64")
    with pytest.raises(ValueError, match="not a multiple"):
        mma(np.ones((2, 6)), np.ones((6, 2)), np.zeros((2, 2)), arch="a100")


def test_mma_api_fp64():
    rng = np.random.default_rng(1)
    a, b, c = rng.standard_normal((4, 16)), rng.standard_normal((16, 3)), rng.standard_normal((4, 3))
    d = mma(a, b, c, arch="h100", instruction="mma.m16n8k16")
    d4 = mma(a, b, c, arch="a100")  # four chained m8n8k4: the same chain
    assert d.dtype == np.float64 and np.array_equal(d, d4)
    bound = 16 * 2.0**-53 * (np.abs(a) @ np.abs(b) + np.abs(c))  # one rounding per FMA
    assert np.all(np.abs(d - (a @ b + c)) <= bound)


# ---- Turing (sm_75): the block-FMA model, N = K of the instruction, F = 24
def test_turing_presets():
    p = get_preset("turing", "mma", "fp16", "fp32")
    assert (p.k_instr, p.n_fma, p.frac_bits, p.czero_floor) == (8, 8, 24, -126)
    assert get_preset("sm_75", "mma.m8n8k4", "fp16", "fp16").n_fma == 4
    assert get_preset("t4", "mma.sync.m16n8k8").label == "turing mma.m16n8k8 fp16->fp32"
    assert ("turing", "mma.m8n8k4", "fp16", "fp32") in list_presets()
    with pytest.raises(ValueError, match="fp16"):
        get_preset("turing", "mma", "bf16")


def test_turing_one_block_of_eight_f24():
    """c = 1 and eight products 2^-25: one block of 8 with F = 24 truncates each to 0 (1.0); V100's N = 4, F = 23
    gives 1.0 too, but 2^-24 x 8 = 2^-21 survives on Turing (F = 24: each kept) and not on V100 (F = 23)."""
    p = get_preset("turing", "mma", "fp16", "fp32")
    a = np.full((1, 8), np.float16(2.0**-12)).view(np.uint16)
    b = np.full((1, 8), np.float16(2.0**-12)).view(np.uint16)
    c = np.array([1.0], np.float32).view(np.uint32)
    assert block_fma_bits(a, b, c, p).view(np.float32)[0] == 1 + 2.0**-21
    b13 = np.full((1, 8), np.float16(2.0**-13)).view(np.uint16)
    assert block_fma_bits(a, b13, c, p).view(np.float32)[0] == 1.0


@pytest.mark.parametrize("out", ["fp32", "fp16"])
@pytest.mark.parametrize("kind", KINDS)
def test_turing_model_equals_oracle(out, kind):
    for ins in ("mma.m16n8k8", "mma.m8n8k4"):
        p = get_preset("turing", ins, "fp16", out)
        rng = np.random.default_rng(zlib.crc32(f"{ins}{out}{kind}".encode()))
        a, b, c = make_operands(p, 40, 2 * p.k_instr, kind, rng)
        assert np.array_equal(block_fma_bits(a, b, c, p), oracle_bits(a, b, c, p))


def _f(bits: int) -> float:
    return float(np.array([bits], np.uint64).view(np.float64)[0])


def test_nan_operands_propagate_quieted_with_their_payload():
    """The H100's DMMA NaN bits (docs/hardware/h100-dmma.json): a NaN operand's payload and sign kept, a signalling
    NaN quieted, a NaN sum carried along the chain, Inf x 0 and Inf - Inf the default NaN 0xFFF8000000000000."""
    snan, qnan_neg = 0x7FF0000000000001, 0xFFF80000DEADBEEF
    assert _dmma([_f(snan)], [1.0], 0.0) == 0x7FF8000000000001
    assert _dmma([1.0], [_f(qnan_neg)], 0.0) == qnan_neg
    assert _dmma([1.0, 2.0], [1.0, 3.0], _f(qnan_neg)) == qnan_neg  # c's NaN through every step
    # the H100's order among NaNs in one FMA (h100-dmma.json, inputs "nan_priority"): b, then the sum, then a
    assert _dmma([np.inf, _f(snan)], [0.0, 1.0], 0.0) == DEFAULT_NAN64  # the sum's NaN before a's
    assert _dmma([_f(snan)], [_f(qnan_neg)], 0.0) == qnan_neg  # b's before a's
    assert _dmma([1.0], [_f(snan)], _f(qnan_neg)) == 0x7FF8000000000001  # b's before the sum's
    assert _dmma([_f(snan)], [1.0], _f(qnan_neg)) == qnan_neg  # the sum's before a's
    assert _dmma([np.inf, 1.0], [0.0, 1.0], 5.0) == DEFAULT_NAN64  # the invalid step's NaN carried on
    assert _dmma([np.inf], [2.0], -np.inf) == DEFAULT_NAN64
    assert _dmma([np.inf], [-2.0], -np.inf) == _b(-np.inf)


def test_mmasim_variant_keeps_mmasims_nan_order():
    """``variant="mmasim"``: MMA-Sim's host fma (glibc ``fma``, x86's FMA instruction) takes b's NaN, then a's, then
    the running sum's, each quieted (what ``libm.fma`` returned on the x86-64 host of the stored runs)."""
    snan, qnan_neg = 0x7FF0000000000001, 0xFFF80000DEADBEEF
    p = get_preset("h100", "mma", "fp64", "fp64", variant="mmasim")
    a = np.array([[_f(snan)] + [0.0] * 3], np.float64).view(np.uint64)
    b = np.array([[_f(qnan_neg)] + [0.0] * 3], np.float64).view(np.uint64)
    c = np.array([0.0], np.float64).view(np.uint64)
    assert int(block_fma_bits(a, b, c, p)[0]) == int(oracle_bits(a, b, c, p)[0]) == qnan_neg  # b's before a's
    assert _dmma([_f(snan)], [1.0], _f(qnan_neg), arch="h100", variant="mmasim") == 0x7FF8000000000001  # a's, sum's
    assert _dmma([1.0], [_f(snan)], _f(qnan_neg), arch="h100", variant="mmasim") == 0x7FF8000000000001  # b's, sum's
    assert _dmma([np.inf], [0.0], 1.0, arch="h100", variant="mmasim") == DEFAULT_NAN64
    with pytest.raises(ValueError, match="nan_order"):
        FMAChain(nan_bits=DEFAULT_NAN64, nan_rule="propagate", nan_order="abc").check(p)
