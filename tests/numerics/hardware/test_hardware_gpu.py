"""GPU tests of the runners (skipped without CUDA, nvcc and an sm_90 device): the intended SASS instruction,
fragment layouts on small integers, and a sample of the stored H200 replay set against this GPU."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _runner():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    try:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        if torch.cuda.get_device_capability() != (9, 0):
            pytest.skip("the runners need an sm_90 (Hopper) GPU")
    except ImportError:
        pytest.skip("torch not installed (used only to detect the GPU)")
    from tcemu.numerics.hardware.runner import Runner

    return Runner()


@pytest.fixture(scope="module")
def runner():
    return _runner()


def test_sass_has_the_intended_instructions(runner):
    res = runner.check_sass()
    if not res or all(not v["opcodes"] for v in res.values()):
        pytest.skip("cuobjdump not available")
    assert all(v["ok"] for v in res.values()), res


def test_fragment_layouts(runner):
    from tcemu.numerics.hardware.smoke import check_layouts

    res = check_layouts(runner, ntiles=8)
    assert all(v["ok"] for v in res.values()), res


def test_this_gpu_reproduces_h200_replay_samples(runner):
    """Hopper should give the H200's bits on the stored samples (probe groups, chain length 1)."""
    from tcemu.numerics.hardware.cases import get_case
    from tcemu.numerics.hardware.probe_vectors import Vector, pack_diagonal
    from tcemu.numerics.hardware.replay import load_replay

    groups = load_replay()
    for key in ("mma.k16.bf16.fp32__probe_czero", "wgmma.k16.fp16.fp16__probe_czero", "mma.k32.e4m3.fp32__normal"):
        g = groups[key]
        case = get_case(key.split("__")[0])
        vecs = [Vector("", "", list(map(int, a)), list(map(int, b)), int(c)) for a, b, c in zip(g["a"], g["b"], g["c"])]
        a, b, c, where = pack_diagonal(case, vecs, 1)
        d = runner.run(case, a[:, 0], b[:, 0], c)
        got = np.array([d[t, i, i] for t, i in where])
        assert np.array_equal(got.astype(np.uint64), g["d"].astype(np.uint64)), key


def test_zero_products_left_out_on_this_gpu(runner):
    """Every zero-factor probe vector (c = 0 and tiny c, every sm_90a format) gives the default presets' bits:
    zero products take no part in E_max (docs/hardware/h100-zero-factor.json, h100-zero-factor-tiny-c.json)."""
    from tcemu.numerics.hardware.zero_factor import settle

    report = settle(runner)
    assert all(r["mismatches_excluded"] == 0 for r in report["cases"]), report["verdict"]
    assert report["verdict"].startswith("zero products are left out of E_max")
