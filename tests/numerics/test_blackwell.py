"""The low-precision presets (FP8/FP6/FP4 pairs, mixed e4m3 x e5m2, block-scaled kinds) bit for bit against the
exact oracles (oracle.py, oracle_blockscale.py), scales at their extremes, hand-computed vectors that decide how
a scale enters, and the listing."""

import zlib
from dataclasses import replace

import numpy as np
import pytest

from tcemu.numerics import MMAParams, block_fma_bits, get_preset, list_presets
from tcemu.numerics.inputs_mx import make_mixed_operands, make_scaled_operands
from tcemu.numerics.oracle import oracle_bits
from tcemu.numerics.oracle_blockscale import oracle_scaled_bits
from tcemu.numerics.presets_blackwell import LOWP_PRESETS

KEYS = sorted(LOWP_PRESETS)
SCALED = [k for k in KEYS if LOWP_PRESETS[k].scale_format]
KINDS = ("normal", "bits", "wide", "cancel", "tiny", "special")
ONE_E4M3, ONE_E2M1 = 0x38, 0x2  # 1.0


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _compare(p, rows, k, kind, rng, what):
    if p.scale_format:
        a, b, c, sa, sb = make_scaled_operands(p, rows, k, kind, rng)
        got, want = block_fma_bits(a, b, c, p, sa, sb), oracle_scaled_bits(a, b, c, p, sa, sb)
    else:
        a, b, c = make_mixed_operands(p, rows, k, kind, rng)
        sa = sb = None
        got, want = block_fma_bits(a, b, c, p), oracle_bits(a, b, c, p)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (
        f"{what}: {bad.size}/{rows} differ; row {bad[0]}: model {int(got[bad[0]]):#x} oracle {int(want[bad[0]]):#x}; "
        f"a={a[bad[0]].tolist()} b={b[bad[0]].tolist()} c={int(c[bad[0]]):#x} "
        f"scales={None if sa is None else (sa[bad[0]].tolist(), sb[bad[0]].tolist())}; {p.describe()}")


@pytest.mark.parametrize("key", KEYS, ids=lambda k: "-".join(k))
def test_model_equals_oracle(key):
    """Every new preset (measured variant) x six input kinds, 6 rows each, two instructions' K."""
    p = get_preset(*key)
    rng = np.random.default_rng(_seed(key))
    for kind in KINDS:
        _compare(p, 6, 2 * p.k_instr, kind, rng, f"{key} {kind}")


_MMASIM_KEYS = SCALED + sorted({(k[0], k[1], k[3]): k for k in KEYS if k not in SCALED}.values())


@pytest.mark.parametrize("key", _MMASIM_KEYS, ids=lambda k: "-".join(k))
def test_model_equals_oracle_mmasim_variant(key):
    """variant="mmasim" (c = 0 at -126; zero factors at exponent -126, as MMA-Sim, except the emulated FP8
    mma.sync, which MMA-Sim does not model): every scaled preset, one per other kind."""
    p = get_preset(*key, variant="mmasim")
    assert p.zero_factor_exp == (None if p.interleave else -126)
    rng = np.random.default_rng(_seed(key, "mmasim"))
    for kind in ("bits", "wide", "tiny", "special"):
        _compare(p, 6, 2 * p.k_instr, kind, rng, f"{key} {kind} mmasim")


@pytest.mark.parametrize("seed", range(8))
def test_what_if_scaled_params(seed):
    """Random block-scaled what-ifs: N, F, block, product or chunk mode, outputs, floors, zero-factor rule."""
    rng = np.random.default_rng(1000 + seed)
    chunk = seed % 2 == 1
    fa, fb = ("e2m1", "e2m1") if chunk else tuple(rng.choice(["e4m3", "e5m2", "e2m3", "e3m2", "e2m1"], 2))
    block = int(rng.choice([16, 32]))
    out = ["fp32", "fp16", "e8m13"][seed % 3]
    n = int(rng.choice([16, 32, 64])) if chunk else int(rng.choice([4, 8, 16, 32]))
    p = MMAParams(fa, out, max(n, block), n, int(rng.integers(20, 40) if chunk else rng.integers(3, 30)),
                  input_format_b=fb, scale_format="ue4m3" if chunk and seed % 4 == 1 else "ue8m0", scale_block=block,
                  scale_chunk=16 if chunk else 0, czero_floor=[None, -126, -133][seed % 3],
                  zero_factor_exp=[None, -126][seed // 4 % 2], output_rounding=["rz", "rne", "ru"][seed % 3])
    for kind in KINDS:
        _compare(p, 8, 2 * p.k_instr, kind, rng, f"what-if {seed} {kind}")


def _scaled(p, a_vals, b_vals, c, sa, sb):
    """One dot product of a block-scaled preset: model bits, checked equal to the oracle's."""
    a, b = np.array([a_vals], np.uint8), np.array([b_vals], np.uint8)
    cb = np.array([c], np.uint32)
    sa, sb = np.array([sa], np.uint8), np.array([sb], np.uint8)
    got = int(block_fma_bits(a, b, cb, p, sa, sb)[0])
    assert got == int(oracle_scaled_bits(a, b, cb, p, sa, sb)[0])
    return got


def _f32(x: float) -> int:
    return int(np.array([x], np.float32).view(np.uint32)[0])


@pytest.mark.parametrize("arch,instr", [("b200", "tcgen05.mxf8f6f4"), ("sm120", "mma.sync.mxf8f6f4")])
def test_ue8m0_extremes(arch, instr):
    """ue8m0 at 2^-127 (0x00) and 2^127 (0xFE), NaN (0xFF): scale exponents join each product's exponent."""
    p = get_preset(arch, instr, "e4m3")
    one = [ONE_E4M3] + [0] * 31
    assert _scaled(p, one, one, 0, [254], [254]) == 0x7F800000  # 2^254 > fp32 max: Inf (overflow="inf")
    assert _scaled(p, one, one, 0, [0], [254]) == 0x3F800000  # 2^-127 x 2^127 = 1
    assert _scaled(p, one, one, 0, [0], [0]) == 0  # 2^-254: below the c = 0 floor's grid, +0
    assert _scaled(p, one, one, 0, [127 - 73], [127 - 73]) == 0x00000008  # 2^-146 = 8 x 2^-149: subnormal, kept
    assert _scaled(p, [0] * 32, [0] * 32, 0x3F800000, [255], [127]) == 0x7FFFFFFF  # NaN scale: 0 x NaN = NaN
    assert _scaled(p, one, one, 0x3F800000, [127], [255]) == 0x7FFFFFFF


@pytest.mark.parametrize("arch,instr", [("b200", "tcgen05.mxf8f6f4"), ("sm120", "mma.sync.mxf8f6f4")])
def test_mx_scaled_products_align_against_c(arch, instr):
    """Products 1 and -1 at scale 2^20 cancel, but their scaled exponent 20 is the block's E_max, and c = 2^-6
    falls below the grid 2^(20-25): d = +0. At scale 2^18 (grid 2^-7) c survives. (Were the scale applied after
    the block's own sum, c would always survive.)"""
    p = get_preset(arch, instr, "e4m3")
    a = [ONE_E4M3, ONE_E4M3 | 0x80] + [0] * 30  # 1, -1
    b = [ONE_E4M3, ONE_E4M3] + [0] * 30
    assert _scaled(p, a, b, _f32(2.0**-6), [127 + 20], [127]) == 0
    assert _scaled(p, a, b, _f32(2.0**-6), [127 + 9], [127 + 9]) == _f32(2.0**-6)


@pytest.mark.parametrize("arch,instr", [("b200", "tcgen05.mxf4nvf4"), ("sm120", "mma.sync.mxf4nvf4")])
def test_nvf4_chunks_are_aligned_at_their_scale_exponent(arch, instr):
    """kind::mxf4nvf4 (MMA-Sim): each 16-product chunk sum, times the scale significands, is aligned at the sum of
    the two scales' exponents with F = 35. Hand-computed (docs/numerics.md, "Block scaling")."""
    p = get_preset(arch, instr, "e2m1:ue8m0x16")
    six, m6, half = 0x7, 0xF, 0x1  # 6, -6, 0.5
    # chunk 0: 6 x 6 = 36 at scale 1; c = -36 (exponent 5); chunk 1: 0.5 x 0.5 x 2^-13 x 2^-13 = 2^-28.
    # E_max = 5, grid 2^-30: 2^-28 survives with F = 35 (not with F = 25, grid 2^-20)
    a = [six] + [0] * 15 + [half] + [0] * 47
    assert _scaled(p, a, a, _f32(-36.0), [127, 114, 127, 127], [127, 114, 127, 127]) == _f32(2.0**-28)
    assert _scaled(replace(p, frac_bits=25), a, a, _f32(-36.0), [127, 114, 127, 127], [127, 114, 127, 127]) == 0
    # chunk 0: 36 - 36 + 0.25 = 0.25, aligned at its scales' exponent 0 (not at 2^-2); c = -0.25;
    # chunk 1: 0.25 x 2^-17 x 2^-17 = 2^-36 < grid 2^-35: cut, d = +0 (aligned at -2 it would be kept)
    a = [six, m6, half] + [0] * 13 + [half] + [0] * 47
    b = [six, six, half] + [0] * 13 + [half] + [0] * 47
    assert _scaled(p, a, b, _f32(-0.25), [127, 110, 127, 127], [127, 110, 127, 127]) == 0


def test_nvf4_ue4m3_significands_zero_and_nan():
    p = get_preset("b200", "tcgen05.mxf4nvf4", "e2m1:ue4m3x16")
    one = [0x2] + [0] * 63  # e2m1 1.0
    s1 = 0x38  # ue4m3 1.0
    assert _scaled(p, one, one, 0, [0x3C, s1, s1, s1], [0x3E, s1, s1, s1]) == _f32(1.5 * 1.75)
    assert _scaled(p, one, one, 0, [0xBC, s1, s1, s1], [0x3E, s1, s1, s1]) == _f32(1.5 * 1.75)  # sign ignored
    assert _scaled(p, one, one, _f32(1.0), [0x00, s1, s1, s1], [0x3E, s1, s1, s1]) == _f32(1.0)  # zero scale
    assert _scaled(p, one, one, _f32(1.0), [s1, s1, s1, 0x7F], [s1] * 4) == 0x7FFFFFFF  # NaN scale
    assert _scaled(p, one, one, _f32(1.0), [s1] * 4, [s1, 0xFF, s1, s1]) == 0x7FFFFFFF
    assert _scaled(p, one, one, 0x7F800000, [s1] * 4, [s1] * 4) == 0x7F800000  # Inf c


def test_mixed_formats_decode_b_in_its_own_format():
    """e4m3 max (448) x e5m2 max (57344) = 49 * 2^19: b read as e5m2 (as e4m3, 0x7B would be 352)."""
    for key in [("ada", "mma.sync", "e4m3.e5m2", "fp32"), ("h100", "wgmma", "e4m3.e5m2", "fp32"),
                ("h100", "mma.sync", "e4m3.e5m2", "fp32"), ("b200", "tcgen05", "e4m3.e5m2", "fp32"),
                ("sm120", "mma.sync", "e4m3.e5m2", "fp32")]:
        p = get_preset(*key)
        a, b = np.zeros((1, 32), np.uint8), np.zeros((1, 32), np.uint8)
        a[0, 3], b[0, 3] = 0x7E, 0x7B
        c = np.zeros(1, np.uint32)
        assert int(block_fma_bits(a, b, c, p)[0]) == _f32(448.0 * 57344.0) == int(oracle_bits(a, b, c, p)[0]), key
    with pytest.raises(ValueError, match="below 2\\*\\*4"):
        block_fma_bits(np.full((1, 32), 0x10, np.uint8), np.zeros((1, 32), np.uint8), np.zeros(1, np.uint32),
                       get_preset("b200", "tcgen05", "e2m1"))


def test_comparison_can_fail():
    """The oracles with another zero-factor rule, F or scale mode disagree with the model (the tests have teeth)."""
    rng = np.random.default_rng(7)
    p = get_preset("b200", "tcgen05.mxf8f6f4", "e4m3.e2m1")
    a, b, c, sa, sb = make_scaled_operands(p, 300, 32, "wide", rng, scale_kind="wide")
    got = block_fma_bits(a, b, c, p, sa, sb)
    assert np.any(oracle_scaled_bits(a, b, c, replace(p, frac_bits=24), sa, sb) != got)
    q = get_preset("b200", "tcgen05.mxf4nvf4", "e2m1:ue8m0x16")
    a, b, c, sa, sb = make_scaled_operands(q, 300, 64, "normal", rng, scale_kind="wide")
    got = block_fma_bits(a, b, c, q, sa, sb)
    assert np.any(oracle_scaled_bits(a, b, c, replace(q, frac_bits=25), sa, sb) != got)
    assert np.any(oracle_scaled_bits(a, b, c, replace(q, zero_factor_exp=-126), sa, sb) != got)
    assert np.any(oracle_scaled_bits(a, b, c, replace(q, scale_chunk=0, frac_bits=25, scale_format="ue8m0"),
                                     sa, sb) != got)


@pytest.mark.parametrize("arch,instr", [("b200", "tcgen05.mxf8f6f4"), ("sm120", "mma.sync.mxf8f6f4")])
def test_zero_factor_rule_under_large_scales(arch, instr):
    """The open question of issue 45 grows with scales: a = 0 against b = 6 (e2m1 max) at scales 2^127 x 2^127.
    tcemu's default: a zero product takes no part, d = c = 1. MMA-Sim (variant="mmasim"): the zero counts at
    exponent -126, so E_max = -126 + 2 + 254 = 130 and c = 1 falls below the grid 2^105: d = +0."""
    a = [0] * 32
    b = [0x7] + [0] * 31
    assert _scaled(get_preset(arch, instr, "e2m1"), a, b, _f32(1.0), [254], [254]) == _f32(1.0)
    assert _scaled(get_preset(arch, instr, "e2m1", variant="mmasim"), a, b, _f32(1.0), [254], [254]) == 0
    assert _scaled(get_preset(arch, instr, "e2m1", variant="mmasim"), a, b, _f32(1.0), [127], [127]) == _f32(1.0)


def test_listing_shows_them_with_sources():
    keys = set(list_presets())
    want = {("b200", "tcgen05", "e2m1", "fp32"), ("b200", "tcgen05", "e2m3.e3m2", "fp16"),
            ("b200", "tcgen05.mxf8f6f4", "e5m2.e2m1:ue8m0x32", "fp32"),
            ("b200", "tcgen05.mxf4nvf4", "e2m1:ue4m3x16", "fp32"),
            ("b200", "tcgen05.mxf4nvf4", "e2m1:ue8m0x32", "fp32"),
            ("sm120", "mma.sync.mxf4nvf4", "e2m1:ue4m3x16", "fp32"), ("sm120", "mma.sync", "e3m2.e4m3", "fp32"),
            ("ada", "mma.sync", "e4m3.e5m2", "fp16"), ("h100", "wgmma", "e5m2.e4m3", "fp32"),
            ("h200", "wgmma", "e5m2.e4m3", "fp32")}
    assert want <= keys
    pairs = {k[2] for k in keys if k[:2] == ("b200", "tcgen05.mxf8f6f4")}
    assert len(pairs) == 25  # every a x b of e4m3, e5m2, e2m3, e3m2, e2m1
    for key in KEYS:
        p = get_preset(*key)
        assert "literature-based" in p.sources and "unmeasured for this kind" in p.sources and p.label
        assert ("MMA-Sim" in p.sources or "cutlass" in p.sources), key
    assert "extrapolated" in get_preset("b200", "tcgen05", "e2m3").sources
    # input spellings: a tuple, a pair, the kind's default scale
    assert get_preset("b200", "tcgen05", ("e4m3", "e5m2")) == get_preset("b200", "tcgen05", "e4m3.e5m2")
    assert get_preset("b200", "tcgen05.kind::mxf8f6f4", "e4m3").scale_format == "ue8m0"
    assert get_preset("b200", "tcgen05.mxf4", "e2m1:ue8m0x32").scale_chunk == 16
    with pytest.raises(ValueError, match="supports"):
        get_preset("b200", "tcgen05.mxf4nvf4", "e2m1:ue4m3x32")
    with pytest.raises(ValueError, match="scale is <format>x<block>"):
        get_preset("b200", "tcgen05.mxf4nvf4", "e2m1:ue4m3")


def test_scaled_model_refuses_missing_or_misshapen_scales():
    p = get_preset("b200", "tcgen05.mxf8f6f4", "e4m3")
    a = np.zeros((2, 32), np.uint8)
    c = np.zeros(2, np.uint32)
    with pytest.raises(ValueError, match="pass scale_a and scale_b"):
        block_fma_bits(a, a, c, p)
    with pytest.raises(ValueError, match="of shape"):
        block_fma_bits(a, a, c, p, np.zeros((2, 2), np.uint8), np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match="no block scaling"):
        block_fma_bits(a, a, c, get_preset("b200", "tcgen05", "e4m3"), np.zeros((2, 1), np.uint8), None)
    with pytest.raises(ValueError, match="powers of two"):
        replace(p, scale_format="ue4m3")
    with pytest.raises(ValueError, match="e2m1 x e2m1 only"):
        replace(p, scale_chunk=16)


def test_mma_api_block_scaled_and_fp4_dtypes():
    """mma() with float4/float6 dtypes and scale bits: the same bits as block_fma_bits on the rows and columns."""
    import ml_dtypes

    from tcemu.numerics import mma
    from tcemu.numerics.formats_mx import mx_quantize

    rng = np.random.default_rng(5)
    ea, sa = mx_quantize(rng.standard_normal((2, 3, 128)), "e2m1", "ue4m3", 16)  # batch 2, M 3, K 128
    eb, sb = mx_quantize(rng.standard_normal((2, 128)), "e2m1", "ue4m3", 16)  # N 2 (as rows), K 128
    c = rng.standard_normal((2, 3, 2)).astype(np.float32)
    a = ea.view(ml_dtypes.float4_e2m1fn)
    b = np.swapaxes(eb.view(ml_dtypes.float4_e2m1fn), -1, -2)
    d = mma(a, b, c, arch="b200", instruction="tcgen05.mxf4nvf4", input_format="e2m1:ue4m3x16",
            scale_a=sa, scale_b=sb.T)
    p = get_preset("b200", "tcgen05.mxf4nvf4", "e2m1:ue4m3x16")
    for i in range(2):
        for m in range(3):
            for n in range(2):
                want = block_fma_bits(ea[i, m][None], eb[n][None], c[i, m, n:n + 1].view(np.uint32), p,
                                      sa[i, m][None], sb[n][None])
                assert d[i, m, n].view(np.uint32) == want[0]
    with pytest.raises(ValueError, match="pass scale_a"):
        mma(a, b, c, arch="b200", instruction="tcgen05.mxf4nvf4", input_format="e2m1:ue4m3x16")
    with pytest.raises(ValueError, match="not block-scaled"):
        mma(a, b, c, arch="b200", instruction="tcgen05", scale_a=sa, scale_b=sb.T)
    d32 = mma(a[..., :32], b[..., :32, :], c, arch="sm120")  # unscaled e2m1 mma.sync m16n8k32
    assert d32.dtype == np.float32 and d32.shape == (2, 3, 2)


@pytest.mark.parametrize("arch,f,n", [("ada", 13, 16), ("sm120", 25, 16)])
def test_fp8_m16n8k16_is_one_block(arch, f, n):
    """mma.m16n8k16 with FP8 operands (sm_89+; MMA-Sim lists it for Ada and RTX Blackwell): one block of 16; the
    emulated Hopper path has only m16n8k32."""
    for fin in ("e4m3", "e5m2.e4m3"):
        p = get_preset(arch, "mma.sync.m16n8k16", fin, "fp32")
        assert (p.k_instr, p.n_fma, p.frac_bits) == (16, n, f)
    with pytest.raises(ValueError, match=r"valid K: \(32,\)"):
        get_preset("h100", "mma.sync.m16n8k16", "e4m3", "fp32")
