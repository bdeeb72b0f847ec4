"""The CPU twin of the emulated GEMMs (tcemu.numerics.emulated_matmul).

* against its exact rational reference (every instruction chain by the oracle, every FP32 step rounded from
  its exact value), bit for bit, on every kernel mode, several families (normal, tiny, wide, special values);
* against tcemu.emulation's reference and the exact product where every step is exact (small integers);
* against FP64 within the method's rigorous elementwise bound and its normwise error model;
* sensitivity: the FMA contraction, the instruction model and the kernel mode each change some output bits;
* the faster k-major chain of the model against the general block-FMA path.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from tcemu.emulation.reference import mm_reference  # noqa: E402
from tcemu.numerics import get_preset  # noqa: E402
from tcemu.numerics.emulated import emulated_matmul, emulated_matmul_bits, emulated_matmul_reference  # noqa: E402
from tcemu.numerics.model import _chain_blocks, chain_kmajor_bits, table_index  # noqa: E402
from tcemu.numerics.schedule import derive_schedule  # noqa: E402
from tcemu.testing import elementwise_bound, eta_bound, normwise_bound  # noqa: E402

# one configuration per kernel mode and family (the Gluon ones at K with 16-byte rows, so they are eligible)
CONFIGS = [
    ("tf32x3", "128x128x32w8s3m1pg"), ("tf32x3", "64x128x32w4s3m0"), ("tf32x3", "128x128x32w8s3m1tgw"),
    ("bf16x3", "128x128x64w8s3m1"), ("bf16x3", "64x128x64w4s2m0"),
    ("bf16x6", "128x64x64w8s3m1ptgw"), ("bf16x6", "128x64x64w8s3m4p"), ("bf16x6", "64x128x64w4s2m0"),
    ("bf16x9", "128x64x64w8s3m0p"),
]


def _inputs(family: str, m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    if family == "tiny":  # products near and below FP32's normal range: the subnormal roundings
        a, b = a * 2.0**-100, b * 2.0**-30
    elif family == "wide":
        a, b = a * 2.0 ** rng.integers(-40, 40, a.shape), b * 2.0 ** rng.integers(-40, 40, b.shape)
    a, b = a.astype(np.float32), b.astype(np.float32)
    if family == "special":
        a[0, 3], a[1, 5], b[7, 2], a[2, 9] = np.inf, np.nan, -np.inf, 3e38
        b[9, :] = 3e38
    return a, b


@pytest.mark.parametrize(("method", "config"), CONFIGS)
@pytest.mark.parametrize("family", ["normal", "tiny", "special"])
def test_twin_equals_its_exact_reference(method, config, family):
    """Fast twin == exact rational reference, bit for bit (bias on the normal family)."""
    k = {"normal": 70, "tiny": 45, "special": 40}[family]  # K-tile tails, 2-3 K-tiles
    a, b = _inputs(family, 3, k if "g" not in config else 64, 3, seed=zlib.crc32(f"{method}{config}{family}".encode()))
    bias = np.array([0.5, -1.25, 3.0], np.float32) if family == "normal" else None
    fast = emulated_matmul_bits(a, b, method, config=config, bias=bias)
    ref = emulated_matmul_reference(a, b, method, config=config, bias=bias).view(np.uint32)
    assert np.array_equal(fast, ref), np.argwhere(fast != ref)


@pytest.mark.parametrize("arch", ["a100", "h200", "b200"])
@pytest.mark.parametrize(("method", "config"), CONFIGS)
def test_twin_is_exact_where_every_step_is(method, config, arch):
    """Small integers: every piece product and FP32 addition is exact, so the twin, tcemu.emulation's reference
    and the exact product agree, on every architecture's instruction."""
    rng = np.random.default_rng(7)
    a = rng.integers(-8, 9, (33, 96)).astype(np.float32)
    b = rng.integers(-8, 9, (96, 17)).astype(np.float32)
    got = emulated_matmul(a, b, method, config=config, arch=arch)
    ref = mm_reference(torch.from_numpy(a), torch.from_numpy(b), method).numpy()
    assert np.array_equal(got, a.astype(np.float64) @ b)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("method", ["tf32x3", "bf16x3", "bf16x6", "bf16x9"])
@pytest.mark.parametrize("distribution", ["normal", "wide"])
def test_twin_error_within_the_method_bounds(method, distribution):
    """Against FP64: every element within elementwise_bound (rigorous), the normwise error within
    normwise_bound on zero-mean inputs, for the dispatcher's configuration of this shape on the H200."""
    from tcemu.testing import make_inputs

    k = 200
    a, b = (t.numpy() for t in make_inputs(48, k, 40, distribution, seed=3))
    c = emulated_matmul(a, b, method).astype(np.float64)
    c64 = a.astype(np.float64) @ b
    scale = np.abs(a.astype(np.float64)) @ np.abs(b)
    assert np.all(np.abs(c - c64) <= elementwise_bound(method, k) * scale + eta_bound(method, k))
    assert np.linalg.norm(c - c64) / np.linalg.norm(c64) <= normwise_bound(method, k)


def test_fma_contraction_and_model_change_bits():
    """Sensitivity: BF16x6's run mode with its final multiply-add unfused, BF16x6 in the tile mode, and TF32x3 on
    a model with F = 24 each give other bits somewhere (so the tests above can fail)."""
    a, b = _inputs("tiny", 64, 128, 64, seed=11)
    sched = derive_schedule("bf16x6", "128x64x64w8s3m1p", K=128)
    fused = emulated_matmul_bits(a, b, "bf16x6", schedule=sched)
    assert np.count_nonzero(fused != emulated_matmul_bits(a, b, "bf16x6", schedule=sched.without_contraction()))
    assert np.count_nonzero(fused != emulated_matmul_bits(a, b, "bf16x6", config="128x64x64w8s3m0p"))
    from dataclasses import replace

    a, b = _inputs("normal", 32, 128, 32, seed=12)
    s = derive_schedule("tf32x3", "128x128x32w8s3m1p", K=128)
    other = replace(s, params=replace(s.params, frac_bits=24))
    assert np.count_nonzero(emulated_matmul_bits(a, b, "tf32x3", schedule=s)
                            != emulated_matmul_bits(a, b, "tf32x3", schedule=other))


def test_twin_refuses_bad_input():
    a = np.ones((4, 8), np.float32)
    with pytest.raises(TypeError, match="float32"):
        emulated_matmul(a.astype(np.float64), a.T, "tf32x3")
    with pytest.raises(ValueError, match=r"\(M, K\)"):
        emulated_matmul(a, a, "tf32x3")
    with pytest.raises(ValueError, match="bias"):
        emulated_matmul(a, a.T, "tf32x3", config="128x128x32w8s3m1p", bias=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="no kernel"):
        emulated_matmul(a, a.T, "fp32", config="128x128x32w8s3m1p")
    with pytest.raises(ValueError, match="no TF32/BF16"):
        emulated_matmul(a, a.T, "tf32x3", config="128x128x32w8s3m1p", arch="v100")


@pytest.mark.parametrize(("arch", "instruction", "fmt"), [
    ("h200", "wgmma", "tf32"), ("h200", "wgmma", "bf16"), ("a100", "mma.sync", "tf32"), ("a100", "mma.sync", "bf16"),
    ("b200", "tcgen05", "bf16"), ("h200", "mma.sync.m16n8k4", "tf32"),
])
def test_fast_chain_equals_the_general_block_path(arch, instruction, fmt):
    """chain_kmajor_bits (c carried as significand and exponent between blocks) == the general path, on normal,
    tiny (subnormal results, c = +-0), wide and random bit patterns (Inf, NaN: the fallback)."""
    from tcemu.numerics.hardware.families import _random_bits

    rng = np.random.default_rng(5)
    p = get_preset(arch, instruction, fmt, "fp32")
    s, k = 6000, 40
    x = rng.standard_normal((k, s)) * 2.0 ** rng.integers(-20, 20, (k, s))
    cases = {
        "normal": (rng.standard_normal((k, s)), rng.standard_normal((k, s)), rng.standard_normal(s)),
        "tiny": (x * 2.0**-90, x[::-1] * 2.0**-40, np.where(rng.random(s) < 0.5, 0.0, -0.0)),
        "wide": (x, x[::-1], rng.standard_normal(s) * 2.0 ** rng.integers(-60, 60, s)),
    }
    for name, (u, v, c) in cases.items():
        ab = [np.asarray(t, np.float32).view(np.uint32) for t in (u, v)]
        cb = np.asarray(c, np.float32).view(np.uint32)
        _check_chain(ab, cb, p, fmt, name)
    ab = [_random_bits((k, s), "fp32", rng, 40) for _ in range(2)]
    _check_chain(ab, _random_bits(s, "fp32", rng, 60), p, fmt, "bits")


def _check_chain(ab, cb, p, fmt, name):
    ai, bi = [table_index(t, "tf32") if fmt == "tf32" else (t >> 16).astype(np.uint16) for t in ab]
    fast = chain_kmajor_bits(ai, bi, cb, p)
    ref = _chain_blocks(ai, bi, cb, p, p.input_format, p.c_format)
    assert np.array_equal(fast, ref), (name, int(np.count_nonzero(fast != ref)))
