"""100 % bit-exact on the public hardware data (Khattak & Mikaitis toolbox, bundled in tcemu.numerics.data).

Each case runs through the preset of the instruction the harness issued: WMMA (= ``mma.sync`` blocks,
zero-padded to the instruction's K) for fp16/bf16/tf32, inline-PTX ``mma.sync m16n8k32`` for FP8. The
data's inconsistencies are tested explicitly rather than hidden:

- H100/H200 FP8 -> fp32: the recorded d does not contain c. With the published c the ``mma.sync`` model
  matches no row at all; with c = 0 the native ``wgmma`` model (N=32, F=13, e8m13) matches every row;
  the H100 and H200 d arrays are byte-identical although their c arrays differ.
- L40S is a byte-identical copy of Ada.
- The toolbox's own B200 FP8 setting (one 32-term block, F=25, as tcgen05) fits the B200 mma.sync data
  only partly; the interleaved fp16-path emulation fits all of it.
"""

import numpy as np
import pytest

from tcemu.numerics import block_fma_bits, get_preset, mma
from tcemu.numerics.public_data import load_cases

CASES = load_cases()
BY_KEY = {(c.gpu, c.name): c for c in CASES}


def _pad(x, k):
    return np.pad(x, ((0, 0), (0, -x.shape[1] % k)))


def _model(case, instruction="mma.sync", c=None):
    p = get_preset(case.arch, instruction, case.input_format, case.output_format)
    return block_fma_bits(_pad(case.a, p.k_instr), _pad(case.b, p.k_instr), case.c if c is None else c, p)


def test_bundle_is_complete():
    assert len(CASES) == 48 and all(len(c.d) == 5000 for c in CASES)
    assert {c.gpu for c in CASES} == {"V100", "A100", "A2", "Ada", "L40S", "H100", "H200", "B200"}


@pytest.mark.parametrize("case", [c for c in CASES if c.c_applied], ids=lambda c: f"{c.gpu}-{c.name}")
def test_bit_exact_on_hardware_data(case):
    got = _model(case)
    bad = np.nonzero(got != case.d)[0]
    assert bad.size == 0, (
        f"{case.gpu} {case.name}: {bad.size}/5000 rows differ; first row {bad[0]}: "
        f"model {int(got[bad[0]]):#x}, hardware {int(case.d[bad[0]]):#x}"
    )


@pytest.mark.parametrize("gpu", ["H100", "H200"])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_hopper_fp8_fp32_data_lack_c(gpu, fmt):
    """The inconsistency of caveat (a), shown: 0 % with the published c, 100 % as wgmma with c = 0."""
    case = BY_KEY[gpu, f"{fmt}_fp32"]
    assert not case.c_applied
    with_c = (_model(case) == case.d).mean()
    with_c_wgmma = (_model(case, "wgmma") == case.d).mean()
    without_c_wgmma = (_model(case, "wgmma", c=np.zeros_like(case.c)) == case.d).mean()
    without_c_sync = (_model(case, c=np.zeros_like(case.c)) == case.d).mean()
    print(f"{gpu} {fmt}->fp32: mma.sync with c {with_c:.2%}, wgmma with c {with_c_wgmma:.2%}, "
          f"wgmma c=0 {without_c_wgmma:.2%}, mma.sync c=0 {without_c_sync:.2%}")
    assert with_c == 0.0 and with_c_wgmma < 0.01  # a handful of rows where c is below the e8m13 grid
    assert without_c_wgmma == 1.0
    assert without_c_sync < 0.9  # the 25-bit emulated path does not fit: the data are 13-bit (e8m13)
    assert np.all(case.d & 0x3FF == 0)  # every recorded d has at most 13 fraction bits


def test_hopper_fp8_fp32_d_identical_across_gpus():
    for fmt in ("e4m3", "e5m2"):
        h100, h200 = BY_KEY["H100", f"{fmt}_fp32"], BY_KEY["H200", f"{fmt}_fp32"]
        assert np.array_equal(h100.d, h200.d)
        assert not np.array_equal(h100.c_fp32, h200.c_fp32)
        # while the fp16-output runs of the same inputs differ between the two GPUs, as c does
        assert not np.array_equal(BY_KEY["H100", f"{fmt}_fp16"].d, BY_KEY["H200", f"{fmt}_fp16"].d)


def test_l40s_is_ada():
    for c in CASES:
        if c.gpu == "L40S":
            ada = BY_KEY["Ada", c.name]
            assert all(np.array_equal(getattr(c, f), getattr(ada, f)) for f in ("a", "b", "c", "d"))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_b200_fp8_is_emulated_not_tcgen05(fmt):
    case = BY_KEY["B200", f"{fmt}_fp32"]
    emulated = (_model(case) == case.d).mean()
    one_block = (_model(case, "tcgen05") == case.d).mean()
    print(f"B200 {fmt}->fp32: interleaved emulation {emulated:.2%}, one 32-term block F=25 {one_block:.2%}")
    assert emulated == 1.0 and one_block < 0.8


def test_public_api_on_hardware_rows():
    """mma() on (S, 1, K) @ (S, K, 1) batches reproduces the hardware too (A100 bf16, H100 fp16->fp16)."""
    import ml_dtypes

    for key, dt in ((("A100", "bf16_fp32"), ml_dtypes.bfloat16), (("H100", "fp16_fp16"), np.float16)):
        case = BY_KEY[key]
        a = _pad(case.a, 16).view(dt)[:, None, :]
        b = _pad(case.b, 16).view(dt)[:, :, None]
        out = case.output_format
        c = case.c.view(np.float16 if out == "fp16" else np.float32)[:, None, None]
        d = mma(a, b, c, arch=case.arch, output_format=out)
        assert np.array_equal(d.reshape(-1).view(case.d.dtype), case.d)


def test_data_do_not_reach_the_disputed_floors():
    """Both variants of the disputed c = 0 / c exponent floors fit every consistent case (docs/numerics.md,
    "Public hardware data"): the data have no c = 0 and no product below 2^-126, so only the hardware probe
    can separate them. (Hopper/Blackwell FP8 mma.sync: the toolbox's floors on the measured datapath; its own
    datapath there, one 32-term block, is refuted by these data: test_toolbox_variant.py.)"""
    from dataclasses import replace

    for case in CASES:
        if not case.c_applied:
            continue
        p = get_preset(case.arch, "mma.sync", case.input_format, case.output_format, variant="toolbox")
        default = get_preset(case.arch, "mma.sync", case.input_format, case.output_format)
        if default.interleave is not None:
            p = replace(default, czero_floor=p.czero_floor, c_exp_floor=p.c_exp_floor)
        got = block_fma_bits(_pad(case.a, p.k_instr), _pad(case.b, p.k_instr), case.c, p)
        assert np.array_equal(got, case.d), (case.gpu, case.name)


@pytest.mark.parametrize("case", [c for c in CASES if c.c_applied and c.output_format == "fp32"
                                  and c.input_format in ("fp16", "bf16", "tf32") and c.gpu not in ("A2", "L40S")],
                         ids=lambda c: f"{c.gpu}-{c.name}")
def test_data_discriminate_frac_bits(case):
    """F - 1 and F + 1 each miss a good share of the fp32-output rows: the 100 % above is not a loose fit."""
    from dataclasses import replace

    p = get_preset(case.arch, "mma.sync", case.input_format, case.output_format)
    rates = []
    for f in (p.frac_bits - 1, p.frac_bits + 1):
        q = replace(p, frac_bits=f)
        rates.append((block_fma_bits(_pad(case.a, p.k_instr), _pad(case.b, p.k_instr), case.c, q) == case.d).mean())
    print(f"{case.gpu} {case.name}: F-1 {rates[0]:.2%}, F+1 {rates[1]:.2%}")
    assert max(rates) < 0.97
