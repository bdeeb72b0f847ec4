"""The fast vectorised model equals the exact rational oracle, bit for bit, on random and adversarial inputs.

Every preset (and both variants of the disputed fields) x every input kind of tcemu.numerics.inputs, fixed
seeds in the test ids; plus random what-if parameter sets. A sensitivity test shows that the comparison
can fail: the oracle with F+1 (or the other c = 0 floor) disagrees with the model on these inputs.
"""

import zlib
from dataclasses import replace

import numpy as np
import pytest

from tcemu.numerics import MMAParams, Rounding, block_fma_bits, get_preset
from tcemu.numerics.inputs import KINDS, make_operands
from tcemu.numerics.oracle import oracle_bits
from tcemu.numerics.presets import PRESETS

KEYS = sorted(PRESETS)


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _compare(p, a, b, c, what):
    got = block_fma_bits(a, b, c, p)
    want = oracle_bits(a, b, c, p)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (
        f"{what}: {bad.size}/{len(c)} differ; row {bad[0]}: model {int(got[bad[0]]):#x} oracle {int(want[bad[0]]):#x}; "
        f"a={a[bad[0]].tolist()} b={b[bad[0]].tolist()} c={int(c[bad[0]]):#x}; {p.describe()}"
    )


@pytest.mark.parametrize("key", KEYS, ids=lambda k: "-".join(k))
@pytest.mark.parametrize("kind", KINDS)
def test_model_equals_oracle(key, kind):
    p = PRESETS[key]
    rng = np.random.default_rng(_seed(key, kind))
    a, b, c = make_operands(p, 40, 2 * p.k_instr, kind, rng)
    _compare(p, a, b, c, f"{key} {kind}")


@pytest.mark.parametrize("key", KEYS, ids=lambda k: "-".join(k))
@pytest.mark.parametrize("kind", ["tiny", "cancel"])
def test_model_equals_oracle_toolbox_variant(key, kind):
    p = get_preset(key[0], key[1], key[2], key[3], variant="toolbox")
    rng = np.random.default_rng(_seed(key, kind, "toolbox"))
    a, b, c = make_operands(p, 40, 2 * p.k_instr, kind, rng)
    _compare(p, a, b, c, f"{key} {kind} toolbox")


@pytest.mark.parametrize("seed", range(24))
def test_what_if_params(seed):
    """Random parameter sets (N, F, rounding, floors, overflow, output) against the oracle."""
    rng = np.random.default_rng(seed)
    fin = ["fp16", "bf16", "tf32", "e4m3", "e5m2"][seed % 5]
    out = ["fp32", "fp16", "e8m13"][seed % 3]
    n = int(rng.choice([1, 2, 3, 4, 8, 16, 32]))
    k_instr = n * int(rng.integers(1, 3))
    p = MMAParams(
        input_format=fin, output_format=out, k_instr=k_instr, n_fma=n, frac_bits=int(rng.integers(3, 30)),
        output_rounding=list(Rounding)[int(rng.integers(0, 6))],
        czero_floor=[None, -126, -133, -14, -20][int(rng.integers(0, 5))],
        c_exp_floor=[None, -126, -14][int(rng.integers(0, 3))],
        overflow=["inf", "ieee"][int(rng.integers(0, 2))],
    )
    for kind in KINDS:
        a, b, c = make_operands(p, 25, 2 * k_instr, kind, rng)
        _compare(p, a, b, c, f"seed {seed} {kind}")


@pytest.mark.parametrize("seed", range(4))
def test_what_if_emulation(seed):
    rng = np.random.default_rng(100 + seed)
    base = get_preset("h100", "mma.sync", ["e4m3", "e5m2"][seed % 2], ["fp32", "fp16"][seed // 2])
    p = replace(base, frac_bits=int(rng.integers(10, 28)), n_fma=int(rng.choice([4, 8, 16])),
                interleave=((0, 2), (1, 3)) if seed % 2 else ((0, 1), (2, 3)),
                c_add_rounding=[Rounding.RNE, Rounding.RZ][seed % 2])
    for kind in KINDS:
        a, b, c = make_operands(p, 25, 64, kind, rng)
        _compare(p, a, b, c, f"emulation seed {seed} {kind}")


@pytest.mark.parametrize("key", [("a100", "mma.sync", "bf16", "fp32"), ("h100", "mma.sync", "fp16", "fp32"),
                                 ("h100", "wgmma", "e4m3", "fp32"), ("v100", "mma.sync", "fp16", "fp16")],
                         ids=lambda k: "-".join(k))
def test_comparison_can_fail(key):
    """Perturbed oracles disagree with the model on the adversarial inputs (the tests have teeth)."""
    p = PRESETS[key]
    rng = np.random.default_rng(_seed(key, "teeth"))
    a, b, c = make_operands(p, 200, 2 * p.k_instr, "wide", rng, spread=6)
    got = block_fma_bits(a, b, c, p)
    if p.output_format != "fp16":  # fp16 output hides F on random data; T25-T27 probe it
        assert np.any(oracle_bits(a, b, c, replace(p, frac_bits=p.frac_bits + 1)) != got)
    assert np.any(oracle_bits(a, b, c, replace(p, n_fma=p.n_fma * 2, k_instr=p.k_instr * 2)) != got)
    other = Rounding.RNE if p.output_rounding is Rounding.RZ else Rounding.RZ
    assert np.any(oracle_bits(a, b, c, replace(p, output_rounding=other)) != got)
    if p.input_format in ("bf16", "tf32"):  # fp16 and fp8 products never reach the fp32 subnormal range
        ta, tb, tc = make_operands(p, 300, p.k_instr, "tiny", rng)
        gt = block_fma_bits(ta, tb, tc, p)
        assert np.any(oracle_bits(ta, tb, tc, replace(p, czero_floor=-133)) != gt)


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    given = None

if given is not None:
    _HYP_KEYS = [("v100", "mma.sync", "fp16", "fp16"), ("a100", "mma.sync", "bf16", "fp32"),
                 ("h100", "mma.sync", "tf32", "fp32"), ("h100", "mma.sync", "e5m2", "fp32"),
                 ("h100", "wgmma", "e4m3", "fp32"), ("b200", "tcgen05", "e4m3", "fp16")]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
    @given(data=st.data(), key=st.sampled_from(_HYP_KEYS))
    def test_hypothesis_bit_patterns(data, key):
        """Arbitrary bit patterns (hypothesis shrinks any counterexample to a minimal one)."""
        p = PRESETS[key]
        from tcemu.numerics.formats import get_format

        fin, fc = get_format(p.input_format), get_format(p.c_format)
        k = p.k_instr
        word = st.integers(0, (1 << fin.width) - 1).map(lambda x: x << fin.container_shift)
        a = np.array([data.draw(st.lists(word, min_size=k, max_size=k))], dtype=fin.container_dtype)
        b = np.array([data.draw(st.lists(word, min_size=k, max_size=k))], dtype=fin.container_dtype)
        c = np.array([data.draw(st.integers(0, (1 << fc.width) - 1))], dtype=fc.container_dtype)
        _compare(p, a, b, c, f"hypothesis {key}")
